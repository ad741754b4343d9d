"""A model typed with jaxtyping: ``Float[Array, "batch features"]`` checked under ``jaxtyped``.

Every function carries jaxtyping annotations of its arrays' dtypes and named
dimensions, and checks them as jaxtyping documents for code without a runtime
type checker: ``@jaxtyped(typechecker=None)`` opens one dimension memo per
call, and ``isinstance(x, Float[Array, "batch features"])`` inside it binds
``batch`` / ``features`` on first use and checks every later array against
them (shapes are static, so the checks run at trace time under ``jax.jit``).
The program: an attention-pooled classifier (queries ``Float[Array, "heads
features"]``, keys/values from the tokens ``Float[Array, "batch seq
features"]``), its cross-entropy against ``Int[Array, "batch"]`` labels, and
the gradient; the batch is split over ``data``, the heads over ``model``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Float, Int, PyTree, jaxtyped

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "jaxtyping_mlp"
SIZES = {
    "small": dict(batch=16, seq=8, features=32, heads=4, classes=8),
    "large": dict(batch=256, seq=64, features=512, heads=16, classes=64),
}
PARAM_SPECS = {"queries": P("model", None), "keys": P(None, None), "out": P("model", None, None)}


@jaxtyped(typechecker=None)
def attention_pool(
    queries: Float[Array, "heads features"], keys: Float[Array, "features features"],
    tokens: Float[Array, "batch seq features"],
) -> Float[Array, "batch heads features"]:  # fmt: skip
    assert isinstance(queries, Float[Array, "heads features"])
    assert isinstance(tokens, Float[Array, "batch seq features"])
    scores = jnp.einsum("hf,bsf->bhs", queries, tokens @ keys)
    assert isinstance(scores, Float[Array, "batch heads seq"])
    pooled = jnp.einsum("bhs,bsf->bhf", jax.nn.softmax(scores, axis=-1), tokens)
    assert isinstance(pooled, Float[Array, "batch heads features"])
    return pooled


@jaxtyped(typechecker=None)
def logits_of(params: PyTree[Float[Array, "..."]],
              tokens: Float[Array, "batch seq features"]) -> Float[Array, "batch classes"]:
    assert isinstance(params["out"], Float[Array, "heads features classes"])
    pooled = attention_pool(params["queries"], params["keys"], tokens)
    logits = jnp.einsum("bhf,hfc->bc", pooled, params["out"])
    assert isinstance(logits, Float[Array, "batch classes"])
    return logits


@jaxtyped(typechecker=None)
def loss_fn(params: PyTree[Float[Array, "..."]], tokens: Float[Array, "batch seq features"],
            labels: Int[Array, " batch"]) -> Float[Array, ""]:  # fmt: skip
    assert isinstance(labels, Int[Array, " batch"])
    logits = logits_of(params, tokens)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def step(params, tokens, labels):
    return jax.value_and_grad(loss_fn)(params, tokens, labels)


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=49)
    features, heads = dims["features"], dims["heads"]
    params = {
        "queries": rand.normal((heads, features)), "keys": rand.weight((features, features)),
        "out": rand.weight((heads, features, dims["classes"])),
    }  # fmt: skip
    tokens = rand.normal((dims["batch"], dims["seq"], features))
    labels = rand.integers(dims["classes"], (dims["batch"],))
    in_shardings = shardings(mesh, (PARAM_SPECS, P("data"), P("data")))
    return Program(
        name=NAME,
        description="jaxtyping-annotated attention-pooled classifier, Float/Int[Array, ...] "
        "checked under jaxtyped at trace time, value_and_grad",
        fun=step,
        args=place((params, tokens, labels), in_shardings),
        in_shardings=in_shardings,
        out_shardings=None,
        mesh=mesh,
    )
