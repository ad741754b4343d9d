"""An embedding lookup whose gradient is a scatter-add, under sort, cumsum and argmax heads.

Token ids (batch x sequence, split over ``data``) index an embedding table whose
vocabulary is split over ``model``: the forward pass is a gather, the table's
gradient a scatter-add. On top: a causal running mean over the sequence
(``jnp.cumsum``), a linear classifier, the cross-entropy, and a margin term
between the two largest logits taken from ``jnp.sort``; the step returns the
loss, the gradients (``has_aux`` carries the logits out) and the
``jnp.argmax`` predictions. On a (data, model) mesh of 4 x 2.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "embedding_heads"
SIZES = {
    "small": dict(batch=8, seq=16, vocab=128, features=16, classes=8),
    "large": dict(batch=64, seq=256, vocab=32768, features=256, classes=64),
}
MARGIN_WEIGHT = 0.1
PARAM_SPECS = {"table": P("model", None), "proj": P()}


def step(params: dict, tokens: jax.Array, labels: jax.Array):
    def loss_fn(params):
        x = params["table"][tokens]  # gather; its transpose is a scatter-add
        seq = x.shape[1]
        running_mean = jnp.cumsum(x, axis=1) / jnp.arange(1, seq + 1, dtype=x.dtype)[:, None]
        logits = running_mean @ params["proj"]
        ranked = jnp.sort(logits, axis=-1)
        margin = (ranked[..., -1] - ranked[..., -2]).mean()
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return loss - MARGIN_WEIGHT * margin, logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return loss, grads, jnp.argmax(logits, axis=-1)


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=37)
    params = {
        "table": rand.normal((dims["vocab"], dims["features"])),
        "proj": rand.weight((dims["features"], dims["classes"])),
    }
    tokens = rand.integers(dims["vocab"], (dims["batch"], dims["seq"]))
    labels = rand.integers(dims["classes"], (dims["batch"], dims["seq"]))
    in_shardings = shardings(mesh, (PARAM_SPECS, P("data"), P("data")))
    return Program(
        name=NAME,
        description="embedding gather (scatter-add gradient), cumsum running mean, sort margin, "
        "argmax predictions",
        fun=step,
        args=place((params, tokens, labels), in_shardings),
        in_shardings=in_shardings,
        out_shardings=None,
        mesh=mesh,
    )
