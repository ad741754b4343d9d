"""A haiku transformer LM whose blocks are stacked by ``hk.experimental.layer_stack``.

``hk.transform`` over a pre-LN decoder: an ``hk.Embed`` table and a learned position table, then
``hk.experimental.layer_stack(layers)(hk.remat(block))`` (the blocks' parameters stacked along a
leading layer axis and run by a ``lax.scan`` of rematerialised blocks: ``hk.LayerNorm``,
``hk.MultiHeadAttention`` under a causal mask, a GELU MLP of ``hk.Linear``), a final LayerNorm
and the vocabulary projection. One ``optax.adamw`` step on the next-token loss, parameters and
optimizer state donated. Parameters are placed by their haiku module path: every weight made
by ``hk.Linear`` (the attention projections, both MLP layers, the vocabulary projection; the
stacked blocks' biases, two-dimensional once stacked, too) splits its last axis over ``model``,
the rest is replicated; the token batch over ``data`` of a 2x4 mesh.
"""

from __future__ import annotations

import haiku as hk
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "haiku_layer_stack"
SIZES = {
    "small": dict(batch=8, seq=16, vocab=64, d=32, heads=4, layers=3),
    "large": dict(batch=32, seq=128, vocab=4096, d=256, heads=8, layers=6),
}
# The haiku modules (hk.Linear's, by name) whose weights split their last axis over "model".
MODEL_SHARDED = ("query", "key", "value", "linear")


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 4), ("data", "model"))
    d, seq = dims["d"], dims["seq"]

    def block(h):
        a = hk.LayerNorm(-1, create_scale=True, create_offset=True)(h)
        causal = jnp.tril(jnp.ones((1, 1, seq, seq), bool))
        attention = hk.MultiHeadAttention(dims["heads"], d // dims["heads"],
                                          w_init=hk.initializers.VarianceScaling(1.0))  # fmt: skip
        h = h + attention(a, a, a, mask=causal)
        m = hk.LayerNorm(-1, create_scale=True, create_offset=True)(h)
        return h + hk.Linear(d)(jax.nn.gelu(hk.Linear(4 * d)(m)))

    def forward(tokens):
        positions = hk.get_parameter("positions", (seq, d), init=hk.initializers.TruncatedNormal(0.02))
        h = hk.Embed(dims["vocab"], d)(tokens) + positions
        h = hk.experimental.layer_stack(dims["layers"])(hk.remat(block))(h)
        return hk.Linear(dims["vocab"])(hk.LayerNorm(-1, create_scale=True, create_offset=True)(h))

    model = hk.without_apply_rng(hk.transform(forward))
    tokens = RandomArrays(seed=1501).integers(dims["vocab"], (dims["batch"], seq))
    params = model.init(jax.random.key(0), tokens)
    optimizer = optax.adamw(1e-3, weight_decay=0.01)

    def placement(path, leaf):
        name = "/".join(str(getattr(key, "key", key)) for key in path) + "/"
        if leaf.ndim >= 2 and any(module in name for module in MODEL_SHARDED):
            return NamedSharding(mesh, P(*([None] * (leaf.ndim - 1)), "model"))
        return NamedSharding(mesh, P())

    param_shardings = jax.tree_util.tree_map_with_path(placement, params)
    params = jax.device_put(params, param_shardings)
    # The step count is placed replicated with the rest (optax makes it on one device).
    opt_state = optimizer.init(params)
    opt_shardings = jax.tree.map(
        lambda a: a.sharding if len(a.sharding.device_set) > 1 else NamedSharding(mesh, P()), opt_state)
    opt_state = jax.device_put(opt_state, opt_shardings)
    batch = NamedSharding(mesh, P("data"))

    def train_step(params, opt_state, tokens):
        def loss_fn(params):
            logits = model.apply(params, tokens)[:, :-1]
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return Program(
        name=NAME,
        description="haiku layer_stack(remat(block)) transformer LM, adamw, donated state, 2x4",
        fun=train_step,
        args=(params, opt_state, jax.device_put(tokens, batch)),
        in_shardings=(param_shardings, opt_shardings, batch),
        out_shardings=(param_shardings, opt_shardings, NamedSharding(mesh, P())),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
