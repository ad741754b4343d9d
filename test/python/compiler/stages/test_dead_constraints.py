"""Dead sharding constraints: erased before propagation, as XLA erases them, so a
constraint nothing reads in a loop body or a cond branch shards nothing (jax.jit's
results and output shardings)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxlib.mlir import ir

from shardc.compiler import jit
from shardc.compiler.stages.dead_constraints import constraints_of, erase_dead_constraints
from shardc.dialects import make_context


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))


def _assert_like_jax_jit(fun, args, mesh):
    want = jax.jit(fun)(*args)
    got = jit(fun, mesh=mesh)(*args)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
        assert g.sharding.is_equivalent_to(w.sharding, g.ndim), (g.sharding, w.sharding)


def test_dead_constraint_on_an_invariant_carry_shards_nothing(mesh):
    def loop(a, n):
        def body(carry):
            i, c, p = carry
            lax.with_sharding_constraint(p, NamedSharding(mesh, P("x")))  # result unused
            return i + 1, c + 1, p
        return lax.while_loop(lambda carry: carry[0] < n, body, (0, a, a))

    _assert_like_jax_jit(loop, (jnp.arange(32.0).reshape(8, 4), 3), mesh)


def test_dead_replicated_constraint_leaves_the_slice_its_sharding(mesh):
    # The differential's program: a slice carried unchanged through a loop whose body
    # constrains it (unused) to P(); the loop's other carry comes out concatenated with
    # a P(None, 'x') argument, which shards the slice too under jax.jit.
    def program(a0, a1, a2):
        v0 = lax.slice_in_dim(a0, 0, 1, 1, axis=0)
        count = jnp.sum(a1) % 4

        def body(carry):
            i, c, k, p = carry
            lax.with_sharding_constraint(p, NamedSharding(mesh, P()))  # result unused
            return i + 1, jnp.tanh(jnp.tanh(c)), k + 0, p

        v1 = lax.while_loop(lambda carry: carry[0] < count, body,
                            (jnp.int32(0), v0, jnp.int32(0), v0))[1]
        return jnp.concatenate([v1, a2], axis=1), v0

    a2 = jax.device_put(jnp.arange(16.0).reshape(1, 8, 2), NamedSharding(mesh, P(None, "x")))
    args = (jnp.arange(32.0).reshape(2, 8, 2) / 32, jnp.ones((2,), jnp.int32), a2)
    _assert_like_jax_jit(program, args, mesh)


def test_a_used_constraint_still_constrains(mesh):
    def loop(a, n):
        def body(carry):
            i, c, p = carry
            q = lax.with_sharding_constraint(p, NamedSharding(mesh, P("x")))
            return i + 1, c + q, p
        return lax.while_loop(lambda carry: carry[0] < n, body, (0, a, a))

    _assert_like_jax_jit(loop, (jnp.arange(32.0).reshape(8, 4), 3), mesh)


def test_dead_constraint_on_a_value_computed_in_a_scan(mesh):
    def scanned(a):
        def step(c, _):
            lax.with_sharding_constraint(jnp.sin(c), NamedSharding(mesh, P(None, "x")))  # unused
            return c * 0.5 + 1, None
        return lax.scan(step, a, length=3)[0]

    a = jax.device_put(jnp.arange(32.0).reshape(8, 4), NamedSharding(mesh, P("x")))
    _assert_like_jax_jit(scanned, (a,), mesh)


CHAIN = """
sdy.mesh @mesh = <["x"=8]>
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = sdy.sharding_constraint %arg0 <@mesh, [{"x"}]> : tensor<8xf32>
  %1 = stablehlo.negate %0 : tensor<8xf32>
  %2 = sdy.sharding_constraint %1 <@mesh, [{}]> : tensor<8xf32>
  %3 = sdy.sharding_constraint %arg0 <@mesh, [{}]> : tensor<8xf32>
  return %3 : tensor<8xf32>
}
"""


def test_a_chain_feeding_only_a_dead_constraint_goes_with_it():
    module = ir.Module.parse(CHAIN, make_context())
    with module.context:
        assert erase_dead_constraints(constraints_of(module.operation)) == 3
    ops = [op.name for op in module.body.operations[1].regions[0].blocks[0].operations]
    assert ops == ["sdy.sharding_constraint", "func.return"]
