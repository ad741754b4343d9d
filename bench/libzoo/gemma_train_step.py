"""A Gemma 3 model of Gemma's own library (``gemma``), trained the way its users fine-tune.

``gm.nn.Transformer`` built from a ``gm.nn.config.TransformerConfig`` at a
small size (Gemma 3's layer pattern of sliding-window and global attention,
grouped-query attention, QK norm, post-attention and post-MLP norms, tied
embeddings), its parameters initialised by ``model.init`` (no checkpoint) in
float32. The step runs the forward pass on a batch of token ids, a next-token
cross-entropy from ``optax`` and an ``optax.adamw`` update; parameters and
optimizer state are FSDP (the first dimension divisible by ``data`` over
``data``) x tensor parallel (the last dimension divisible by ``model`` over
``model``), tokens over ``data``. Registered only where ``gemma`` is installed
(the ``gemma`` extra: it brings kauldron and tensorflow).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from gemma import gm
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "gemma_train_step"
SIZES = {
    "small": dict(batch=8, seq=16, vocab=128, embed=32, hidden=64, heads=4, kv_heads=2,
                  head_dim=8, layers=2),
    "large": dict(batch=16, seq=256, vocab=4096, embed=512, hidden=2048, heads=8, kv_heads=2,
                  head_dim=64, layers=6),
}  # fmt: skip
LEARNING_RATE = 1e-3
MESH_SHAPE = {"data": 4, "model": 2}


def make_model(dims: dict) -> gm.nn.Transformer:
    attention = gm.nn.AttentionType
    pattern = (attention.LOCAL_SLIDING, attention.GLOBAL)
    config = gm.nn.config.TransformerConfig(
        num_embed=dims["vocab"], embed_dim=dims["embed"], hidden_dim=dims["hidden"],
        num_heads=dims["heads"], head_dim=dims["head_dim"], num_kv_heads=dims["kv_heads"],
        final_logit_softcap=None, use_post_attn_norm=True, use_post_ffw_norm=True,
        use_qk_norm=True, attention_types=(pattern * dims["layers"])[:dims["layers"]],
        sliding_window_size=dims["seq"] // 2, transpose_gating_einsum=True,
    )  # fmt: skip
    return gm.nn.Transformer(config=config, dtype=jnp.float32)


def spec_of(shape: tuple[int, ...]) -> P:
    """FSDP over ``data`` on the first dimension, tensor parallel over ``model`` on the last."""
    if len(shape) < 2:
        return P()
    spec = [None] * len(shape)
    if shape[-1] % MESH_SHAPE["model"] == 0:
        spec[-1] = "model"
    if shape[0] % MESH_SHAPE["data"] == 0:
        spec[0] = "data"
    return P(*spec)


def make_train_step(model: gm.nn.Transformer, optimizer):
    def loss_fn(params, tokens):
        logits = model.apply({"params": params}, tokens[:, :-1]).logits
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh(tuple(MESH_SHAPE.values()), tuple(MESH_SHAPE))
    model = make_model(dims)
    tokens = RandomArrays(seed=59).integers(dims["vocab"], (dims["batch"], dims["seq"] + 1))
    params = model.init(jax.random.key(0), jnp.asarray(tokens[:, :-1]))["params"]
    optimizer = optax.adamw(LEARNING_RATE, weight_decay=0.01)
    opt_state = optimizer.init(params)
    param_shardings, opt_shardings = (
        jax.tree.map(lambda leaf: NamedSharding(mesh, spec_of(leaf.shape)), tree)
        for tree in (params, opt_state))  # fmt: skip
    token_sharding = NamedSharding(mesh, P("data"))
    args = (jax.device_put(params, param_shardings), jax.device_put(opt_state, opt_shardings),
            jax.device_put(tokens, token_sharding))  # fmt: skip
    return Program(
        name=NAME,
        description=f"gemma gm.nn.Transformer ({dims['layers']} layers, local + global attention,"
        " GQA, QK norm) init from config, forward + optax adamw, FSDP x TP",
        fun=make_train_step(model, optimizer),
        args=args,
        in_shardings=(param_shardings, opt_shardings, token_sharding),
        out_shardings=(param_shardings, opt_shardings, NamedSharding(mesh, P())),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
