"""penzai's GPT-NeoX transformer, built by its model builder, differentiated by axis name.

``gpt_neox.build_gpt_neox_transformer`` from a small ``GPTNeoXTransformerConfig``
(rotary embedding on part of each head, gelu MLP, blocks unstacked), its
parameters unbound (``pz.unbind_params(freeze=True)``) and placed by
``sharding_util.name_to_name_sharding``: ``embedding`` and the token batch over
``fsdp``, ``neurons`` and ``heads`` over ``model`` (4x2 mesh). The step is a
gradient-accumulation micro-step: a next-token loss on named arrays
(``pz.nx.wrap(...).tag``, ``nmap(jax.nn.log_softmax)``) and its gradient by
``jax.value_and_grad``, the gradients returned in the parameters' shardings.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from penzai import pz
from penzai.models.transformer.variants import gpt_neox
from penzai.toolshed import sharding_util

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "penzai_gpt_neox_grad"
SIZES = {
    "small": dict(batch=4, seq=8, vocab=64, d=32, heads=4, mlp=64, layers=2),
    "large": dict(batch=16, seq=128, vocab=1024, d=256, heads=8, mlp=1024, layers=4),
}
AXES = {"embedding": "fsdp", "neurons": "model", "heads": "model", "batch": "fsdp"}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("fsdp", "model"))
    head_dim = dims["d"] // dims["heads"]
    config = gpt_neox.GPTNeoXTransformerConfig(
        num_attention_heads=dims["heads"], embedding_dim=dims["d"], projection_dim=head_dim,
        mlp_hidden_dim=dims["mlp"], num_decoder_blocks=dims["layers"], vocab_size=dims["vocab"],
        activation_fn="gelu_approx", rope_subset_size=head_dim // 2, rope_wavelength=10000.0,
        layernorm_epsilon=1e-5, parameter_dtype=jnp.float32, activation_dtype=jnp.float32,
    )  # fmt: skip
    model = gpt_neox.build_gpt_neox_transformer(config, init_base_rng=jax.random.key(11))
    stateless, params = pz.unbind_params(model, freeze=True)
    param_shardings = sharding_util.name_to_name_sharding(params, mesh, AXES)
    params = jax.device_put(params, param_shardings)
    tokens_sharding = NamedSharding(mesh, P("fsdp"))
    tokens = RandomArrays(seed=212).integers(dims["vocab"], (dims["batch"], dims["seq"] + 1))
    tokens = jax.device_put(tokens, tokens_sharding)

    def grad_step(params, tokens):
        def loss_fn(params):
            model = pz.bind_variables(stateless, params)
            named = pz.nx.wrap(tokens).tag("batch", "seq")
            inputs, targets = named[{"seq": pz.slice[:-1]}], named[{"seq": pz.slice[1:]}]
            logits = model(inputs)
            log_probs = pz.nx.nmap(jax.nn.log_softmax)(logits.untag("vocabulary"))
            picked = log_probs.tag("vocabulary")[{"vocabulary": targets}]
            return -picked.unwrap("batch", "seq").mean()

        return jax.value_and_grad(loss_fn)(params)

    return Program(
        name=NAME,
        description="penzai GPT-NeoX from its builder, name_to_name_sharding (embedding and "
        "batch on fsdp, neurons and heads on model; 4x2), value_and_grad",
        fun=grad_step,
        args=(params, tokens),
        in_shardings=(param_shardings, tokens_sharding),
        out_shardings=(NamedSharding(mesh, P()), param_shardings),
        mesh=mesh,
    )
