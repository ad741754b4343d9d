"""penzai's Llama-like builder configured like Gemma 2, its blocks in a ``LayerStack``.

Sliding-window causal attention (``AttentionTypeSlidingWindowCausal``; a layer
stack takes one type for every layer), post-attention and post-FFW norms,
attention-logit and final-logit soft caps, a geglu MLP and tied embeddings,
the blocks stacked by ``use_layer_stack=True`` (a scan); parameters unbound
(``pz.unbind_params``) and sharded by axis name with
``sharding_util.name_to_name_sharding`` (``embedding`` over ``fsdp``,
``neurons`` / ``heads`` over ``model``), the batch over ``data`` (mesh
2x2x2); one ``optax.chain(clip_by_global_norm, adam)`` step on a named
cross entropy, state donated.
"""

from __future__ import annotations

import jax
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from penzai import pz
from penzai.models.transformer.variants import llamalike_common as lc
from penzai.toolshed import sharding_util

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "penzai_gemma2_stack"
SIZES = {
    "small": dict(batch=4, seq=8, vocab=64, d=32, heads=4, kv=2, mlp=64, layers=2, window=4),
    "large": dict(
        batch=16, seq=128, vocab=1024, d=256, heads=8, kv=4, mlp=1024, layers=4, window=32
    ),
}
AXES = {"embedding": "fsdp", "neurons": "model", "heads": "model", "batch": "data"}


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((2, 2, 2), ("data", "fsdp", "model"))
    config = lc.LlamalikeTransformerConfig(
        num_kv_heads=d["kv"],
        query_head_multiplier=d["heads"] // d["kv"],
        embedding_dim=d["d"],
        projection_dim=d["d"] // d["heads"],
        mlp_hidden_dim=d["mlp"],
        num_decoder_blocks=d["layers"],
        vocab_size=d["vocab"],
        mlp_variant="geglu_approx",
        tie_embedder_and_logits=True,
        attention_type=lc.AttentionTypeSlidingWindowCausal(d["window"]),
        use_post_attn_norm=True,
        use_post_ffw_norm=True,
        final_logit_softcap=30.0,
        attn_logits_soft_cap=50.0,
        use_layer_stack=True,
    )
    model = lc.build_llamalike_transformer(config, init_base_rng=jax.random.key(11))
    stateless, params = pz.unbind_params(model, freeze=True)
    p_sh = sharding_util.name_to_name_sharding(params, mesh, AXES)
    params = jax.device_put(params, p_sh)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
    opt_state = tx.init(params)
    rep = NamedSharding(mesh, P())
    o_sh = optax.tree_map_params(
        tx,
        lambda _, s: s,
        opt_state,
        p_sh,
        transform_non_params=lambda _: rep,
        is_leaf=lambda l: isinstance(l, NamedSharding),
    )
    opt_state = jax.device_put(opt_state, o_sh)
    t_sh = NamedSharding(mesh, P("data"))
    tokens = jax.device_put(
        RandomArrays(seed=1113).integers(d["vocab"], (d["batch"], d["seq"] + 1)), t_sh
    )

    def train_step(params, opt_state, tokens):
        def loss_fn(params):
            model = pz.bind_variables(stateless, params)
            named = pz.nx.wrap(tokens).tag("batch", "seq")
            inputs, targets = named[{"seq": pz.slice[:-1]}], named[{"seq": pz.slice[1:]}]
            logits = model(inputs)
            log_probs = pz.nx.nmap(jax.nn.log_softmax)(logits.untag("vocabulary")).tag("vocabulary")
            return -log_probs[{"vocabulary": targets}].unwrap("batch", "seq").mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return Program(
        name=NAME,
        description="penzai Gemma-2-like llamalike (sliding/global attention, softcaps, LayerStack scan), named sharding 2x2x2",
        fun=train_step,
        args=(params, opt_state, tokens),
        in_shardings=(p_sh, o_sh, t_sh),
        out_shardings=(p_sh, o_sh, rep),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
