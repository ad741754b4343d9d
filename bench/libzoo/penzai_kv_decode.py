"""penzai's KV-cached sampling mode: a prompt prefilled, then tokens decoded greedily.

The llama-like transformer of ``penzai_llamalike`` (without a layer stack)
is converted by ``penzai.models.transformer.sampling_mode.
KVCachingTransformerLM.from_uncached`` (every attention layer swapped for a
``pz.nn.KVCachingAttention`` holding key / value caches in
``pz.StateVariable``s, plus the cache end index and the tokens seen so
far). ``pz.unbind_variables(..., freeze=True)`` splits it into a stateless
model and the frozen parameters and states, placed by their axis names
(``batch`` over ``data``, ``heads`` / ``neurons`` / ``vocabulary`` over
``model``). The jitted function binds them back (``unfreeze_as_copy``),
prefills the prompt, decodes a few tokens greedily (each step a
``dynamic_update_slice`` into every cache at a traced index) and returns the
tokens and the new frozen states, as penzai's decoding loop runs the model.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from penzai import pz
from penzai.models.transformer import sampling_mode
from penzai.models.transformer.variants import llamalike_common
from penzai.toolshed import sharding_util

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "penzai_kv_decode"
SIZES = {
    "small": dict(batch=8, prompt=6, cache=12, decode=3, vocab=64, embedding=32, kv_heads=2,
                  heads_per_kv=2, projection=8, mlp=64, blocks=2),
    "large": dict(batch=16, prompt=64, cache=128, decode=16, vocab=2048, embedding=256,
                  kv_heads=4, heads_per_kv=2, projection=32, mlp=1024, blocks=4),
}  # fmt: skip
AXIS_TO_MESH = {"batch": "data", "heads": "model", "neurons": "model", "vocabulary": "model"}


def config(dims) -> llamalike_common.LlamalikeTransformerConfig:
    return llamalike_common.LlamalikeTransformerConfig(
        num_kv_heads=dims["kv_heads"], query_head_multiplier=dims["heads_per_kv"],
        embedding_dim=dims["embedding"], projection_dim=dims["projection"],
        mlp_hidden_dim=dims["mlp"], num_decoder_blocks=dims["blocks"],
        vocab_size=dims["vocab"], mlp_variant="swiglu", tie_embedder_and_logits=True,
    )  # fmt: skip


def make_decode(stateless_sampler, steps: int):
    def decode(variables, prompt):
        sampler = pz.bind_variables(stateless_sampler, variables, unfreeze_as_copy=True)
        log_probs = sampler(pz.nx.wrap(prompt).tag("batch", "seq"))
        token = pz.nx.nmap(jnp.argmax)(log_probs[{"seq": -1}].untag("vocabulary"))
        tokens = [token]
        for _ in range(steps - 1):
            log_probs = sampler(token[{"seq": None}]).untag("seq").squeeze(0)
            token = pz.nx.nmap(jnp.argmax)(log_probs.untag("vocabulary"))
            tokens.append(token)
        _, new_variables = pz.unbind_variables(sampler, freeze=True)
        return pz.nx.stack(tokens, "seq").unwrap("batch", "seq"), new_variables

    return decode


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    model = llamalike_common.build_llamalike_transformer(config(dims),
                                                         init_base_rng=jax.random.key(4))
    sampler = sampling_mode.KVCachingTransformerLM.from_uncached(
        model, cache_len=dims["cache"], batch_axes={"batch": dims["batch"]})
    stateless_sampler, variables = pz.unbind_variables(sampler, freeze=True)
    # The cache end index is a plain integer: replicated.
    replicated = NamedSharding(mesh, P())
    variable_shardings = jax.tree.map(
        lambda sharding: replicated if sharding is None else sharding,
        sharding_util.name_to_name_sharding(variables, mesh, AXIS_TO_MESH,
                                            ignore_unnamed_arrays=True),
        is_leaf=lambda leaf: leaf is None)  # fmt: skip
    variables = jax.device_put(variables, variable_shardings)
    prompt_sharding = NamedSharding(mesh, P("data"))
    prompt = jax.device_put(
        RandomArrays(seed=103).integers(dims["vocab"], (dims["batch"], dims["prompt"])) + 1,
        prompt_sharding)  # fmt: skip
    return Program(
        name=NAME,
        description="penzai KVCachingTransformerLM.from_uncached (llamalike): prefill + greedy"
        " decode steps, frozen StateVariables in and out, name_to_name_sharding",
        fun=make_decode(stateless_sampler, dims["decode"]),
        args=(variables, prompt),
        in_shardings=(variable_shardings, prompt_sharding),
        out_shardings=None,
        mesh=mesh,
    )
