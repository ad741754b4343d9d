"""A pipeline-parallel train step: ``jax.shard_map`` stages, ``lax.ppermute`` between them.

On a (stage, data) mesh of 4 x 2 each ``stage`` group of devices holds one
layer. Inside ``jax.shard_map`` a ``lax.scan`` over clock ticks runs the GPipe
schedule: stage 0 reads the next microbatch, every stage applies its layer,
and the activations move one stage on with a circular ``lax.ppermute``; the
last stage writes finished microbatches (``dynamic_update_slice``) and a
``psum`` over ``stage`` hands them to everyone. Around the ``shard_map`` an
input and an output projection are ordinary sharded ops. The step takes
``jax.value_and_grad`` of a squared error through all of it (the transpose of
``ppermute`` runs the schedule backwards) and returns the loss and the
SGD-updated parameters.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "pipeline_shard_map"
SIZES = {
    "small": dict(batch=32, features=16, microbatches=4),
    "large": dict(batch=512, features=512, microbatches=16),
}
STAGES = 4
LEARNING_RATE = 0.1
PARAM_SPECS = {"w_in": P(), "stage_w": P("stage"), "stage_b": P("stage"), "w_out": P()}


def run_stages(stage_w: jax.Array, stage_b: jax.Array, micro: jax.Array) -> jax.Array:
    """Per device: this stage's layer (``stage_w`` (1, F, F), ``stage_b`` (1, F)) and
    every microbatch's local rows (``micro`` (M, rows, F))."""
    stage = lax.axis_index("stage")
    count = micro.shape[0]
    ring = [(i, (i + 1) % STAGES) for i in range(STAGES)]

    def tick(carry, t):
        state, outputs = carry
        feed = lax.dynamic_index_in_dim(micro, jnp.minimum(t, count - 1), keepdims=False)
        out = jnp.tanh(jnp.where(stage == 0, feed, state) @ stage_w[0] + stage_b[0])
        finished = t - (STAGES - 1)  # the microbatch leaving the last stage at this tick
        written = lax.dynamic_update_index_in_dim(outputs, out, jnp.maximum(finished, 0), 0)
        outputs = jnp.where((stage == STAGES - 1) & (finished >= 0), written, outputs)
        return (lax.ppermute(out, "stage", ring), outputs), None

    # The carry varies over `stage` (each stage holds different activations).
    start = lax.pcast((jnp.zeros_like(micro[0]), jnp.zeros_like(micro)), "stage", to="varying")
    (_, outputs), _ = lax.scan(tick, start, jnp.arange(count + STAGES - 1))
    return lax.psum(jnp.where(stage == STAGES - 1, outputs, 0.0), "stage")


def forward(params: dict, x: jax.Array, mesh: Mesh, microbatches: int) -> jax.Array:
    batch, features = x.shape
    h = jnp.tanh(x @ params["w_in"])
    # Row r = j * microbatches + m goes to microbatch m, so the `data` split of
    # the batch stays a split of each microbatch's rows.
    micro = h.reshape(batch // microbatches, microbatches, features).swapaxes(0, 1)
    staged = jax.shard_map(
        run_stages, mesh=mesh,
        in_specs=(P("stage"), P("stage"), P(None, "data")), out_specs=P(None, "data"),
    )(params["stage_w"], params["stage_b"], micro)  # fmt: skip
    return staged.swapaxes(0, 1).reshape(batch, features) @ params["w_out"]


def train_step(params: dict, x: jax.Array, target: jax.Array, mesh: Mesh, microbatches: int):
    def loss_fn(params):
        return jnp.mean((forward(params, x, mesh, microbatches) - target) ** 2)

    value, grads = jax.value_and_grad(loss_fn)(params)
    return value, jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((STAGES, 2), ("stage", "data"))
    rand = RandomArrays(seed=36)
    features = dims["features"]
    params = {
        "w_in": rand.weight((features, features)),
        "stage_w": rand.normal((STAGES, features, features), features**-0.5),
        "stage_b": rand.normal((STAGES, features), 0.1),
        "w_out": rand.weight((features, features)),
    }
    x = rand.normal((dims["batch"], features))
    target = rand.normal((dims["batch"], features))
    in_shardings = shardings(mesh, (PARAM_SPECS, P("data"), P("data")))
    return Program(
        name=NAME,
        description=f"{STAGES}-stage GPipe train step: shard_map + scan over ticks, circular "
        "ppermute, psum out",
        fun=functools.partial(train_step, mesh=mesh, microbatches=dims["microbatches"]),
        args=place((params, x, target), in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, (P(), PARAM_SPECS)),
        mesh=mesh,
    )
