"""Gradients of weights read inside loops, through shardc's jit: the shardings XLA's own
Shardy gives them under jax.jit. XLA propagates the module it converted to HLO and
back: every block in HLO's post-order, a loop's invariant carries read as captures
after its operands, a commutative op's constant operand last, each value's uses in
the order that import creates them (``stages.hlo_order``, ``stages.constants_last``).
Propagation settles conflicts by op and use order, so jax's own order gave some of
these gradients the other dimension. The numbers are jax.jit's too."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit

pytestmark = pytest.mark.skipif(len(jax.devices()) < 8, reason="needs 8 devices")

def _mesh(shape=(4, 2)):
    return jax.make_mesh(shape, ("data", "model"), axis_types=(AxisType.Auto,) * 2)

def _step(order):
    # A weight next to an elementwise term, in either order (diffrax's Hamiltonian step
    # is the first).
    if order == "dot_first":
        return lambda q, c, k: q + 0.1 * (-q @ c - k * jnp.sin(q))
    return lambda q, c, k: q + 0.1 * (jnp.cos(q) * k - jnp.tanh(q) @ c.T)

def _stepped(kind, order):
    step = _step(order)

    def loss(c, k, y0):
        if kind == "scan":
            y, _ = jax.lax.scan(lambda q, _: (step(q, c, k), None), y0, None, length=3)
        else:
            y = jax.lax.fori_loop(0, 3, lambda i, q: step(q, c, k), y0)
        return jnp.sum(y ** 2)
    return jax.grad(loss, argnums=(0, 1, 2))

def _backward_by_hand(c, k, y0):
    # The backward loop's shape, written as a while loop: a weight-shaped sum of q^T.g.
    def body(carry):
        i, q, acc = carry
        g = 0.1 * (q @ c.T - k * jnp.cos(q))
        return i + 1, q + g, acc + (g.T @ q).T
    return jax.lax.while_loop(lambda carry: carry[0] < 3, body,
                              (0, y0, jnp.zeros(c.shape)))[1:]

def _rnn(c, k, y0):
    def body(h, x):
        h = jnp.tanh(h @ c + x * k) * jnp.cos(h)
        return h, h.sum(1)
    h, ys = jax.lax.scan(body, y0, jnp.stack([y0, 2 * y0]))
    return jnp.sum(h ** 2) + jnp.sum(ys)

def _remat(c, k, y0):
    @jax.checkpoint
    def body(h, _):
        return h + 0.1 * (-h @ c - k * jnp.sin(h)), None
    h, _ = jax.lax.scan(body, y0, None, length=3)
    return jnp.sum(h ** 2)

def _cond_in_scan(c, k, y0):
    def body(h, i):
        h = jax.lax.cond(i % 2 == 0, lambda h: h @ c - k * jnp.sin(h),
                         lambda h: h * k + jnp.cos(h) @ c.T, h)
        return h, None
    h, _ = jax.lax.scan(body, y0, jnp.arange(4))
    return jnp.sum(h ** 2)

PROGRAMS = {
    **{f"{kind}_{order}": _stepped(kind, order)
       for kind in ("scan", "fori") for order in ("dot_first", "elem_first")},
    "while_by_hand": _backward_by_hand,
    "rnn": jax.grad(_rnn, argnums=(0, 1)),
    "remat": jax.grad(_remat, argnums=(0, 1)),
    "cond_in_scan": jax.grad(_cond_in_scan, argnums=(0, 1)),
}

def _arguments(mesh, weight_spec):
    c = jax.device_put(0.1 * jax.random.normal(jax.random.key(1), (8, 8)),
                       NamedSharding(mesh, weight_spec))
    k = jnp.linspace(0.5, 1.0, 8)
    y0 = jax.device_put(jax.random.normal(jax.random.key(2), (16, 8)),
                        NamedSharding(mesh, P("data")))
    return c, k, y0

def _check(program, args, route):
    theirs = jax.tree.leaves(jax.jit(program)(*args))
    ours = jax.tree.leaves(jit(program, propagation=route)(*args))
    assert [x.sharding.spec for x in ours] == [x.sharding.spec for x in theirs]
    for got, want in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)

@pytest.mark.parametrize("weight_spec", [P(None, "model"), P("model", None)],
                         ids=["columns", "rows"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_weight_gradient_sharded_as_jax(name, weight_spec):
    _check(PROGRAMS[name], _arguments(_mesh(), weight_spec), "shardy")

@pytest.mark.parametrize("name", ["scan_dot_first", "fori_elem_first"])
def test_cost_aware_route_and_other_mesh(name):
    _check(PROGRAMS[name], _arguments(_mesh((2, 4)), P("model", None)), "cost-aware")

def test_repro_gradient_is_sharded_on_its_rows():
    # What XLA's Shardy decides for diffrax's scanned step (measured under jax.jit): the
    # backward loop's q^T.g reaches the weight's rows through q.
    mesh = _mesh()
    c = jax.device_put(0.01 * jnp.eye(4), NamedSharding(mesh, P(None, "model")))
    y0 = jax.device_put(jax.random.normal(jax.random.key(0), (8, 4)),
                        NamedSharding(mesh, P("data")))
    step = _step("dot_first")
    loss = lambda c, k, y0: jnp.sum(jax.lax.scan(  # noqa: E731
        lambda q, _: (step(q, c, k), None), y0, None, length=3)[0] ** 2)
    g = jit(jax.grad(loss))(c, jnp.full((4,), 0.7), y0)
    assert g.sharding.spec == P("model")
