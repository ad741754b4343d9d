"""Loops and conditionals reach XLA in a form it accepts, and give what ``jax.jit`` gives.

XLA's conversion simplifies a loop before it reads the loop's sharding: it
folds ``k + 0`` to ``k``, merges equal constants, and then drops every carry
the body returns unchanged, keeping the sharding as it was. A per-carry
sharding then no longer matches the loop ("has 13 leaf nodes while this
sharding has 16") and XLA fails or aborts the process. The form shardc hands
XLA (``module_for_xla``) says each carry's sharding with closed constraints
instead, and ``check_xla_form`` refuses, as an ``InternalError`` naming the
op, a module XLA could abort on. Every output is blocked on before the next
call (2 cores: overlapping collective programs can stall).
"""

import pathlib

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxlib.mlir import ir

from shardc.compiler import jit
from shardc.dialects import jax_private, make_context
from shardc.dialects.errors import InternalError
from shardc.dialects.sdy import SHARDING_ATTR
from shardc.dialects.xla_form import check_xla_form, module_for_xla
from shardc.runtime import collectives

RTOL, ATOL = 1e-5, 1e-5  # float32 sums in a different order across shards
LIT_PROGRAM = pathlib.Path(__file__).parents[2] / "lit" / "passes" / "xla_form.mlir"


@pytest.fixture(scope="module", params=[AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
def mesh(request):
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(request.param,) * 2)


def put(mesh, value, spec):
    return jax.device_put(value, NamedSharding(mesh, spec))


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def check_both_reject(fun, *args):
    """``fun`` is refused by jax.jit; shardc refuses it with the same error class."""
    with pytest.raises(Exception) as theirs:
        jax.jit(fun)(*args)
    with pytest.raises(type(theirs.value)):
        jit(fun)(*args)


def check_like_jax(fun, *args):
    """``fun`` through shardc and through jax.jit: equal values, equivalent shardings."""
    ours = jax.block_until_ready(jit(fun)(*args))
    theirs = jax.block_until_ready(jax.jit(fun)(*args))
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL)
        assert a.sharding.is_equivalent_to(b.sharding, b.ndim), (a.sharding, b.sharding)
    return ours


# ------------------------------------------------------------------ diffrax solves
def _solve(solver, saveat=None):
    def solve(y0, w):
        term = diffrax.ODETerm(lambda t, y, a: jnp.tanh(y @ a))
        return diffrax.diffeqsolve(term, solver, t0=0.0, t1=1.0, dt0=0.1, y0=y0, args=w,
                                   saveat=saveat or diffrax.SaveAt(t1=True)).ys
    return solve


@pytest.mark.parametrize("solver", [diffrax.Tsit5(), diffrax.Euler()], ids=["tsit5", "euler"])
@pytest.mark.parametrize("sharded", [True, False], ids=["sharded", "unsharded"])
def test_diffrax_solve(mesh, solver, sharded):
    # The reported program: XLA's conversion dropped carries of the solver's loop
    # whose updates fold away (a step counter + 0) and aborted on its sharding.
    if sharded:
        y0, w = put(mesh, rand(16, 8), P("x", "y")), put(mesh, rand(8, 8) * 0.1, P(None, "y"))
    else:
        y0, w = jnp.asarray(rand(16, 8)), jnp.asarray(rand(8, 8) * 0.1)
    if sharded and mesh.axis_types[0] == AxisType.Explicit and isinstance(solver, diffrax.Tsit5):
        check_both_reject(_solve(solver), y0, w)  # Tsit5's scatter of an Explicit state
        return
    check_like_jax(_solve(solver), y0, w)


def test_diffrax_solve_saving_at_times(mesh):
    y0, w = put(mesh, rand(16, 8), P("x", "y")), put(mesh, rand(8, 8) * 0.1, P(None, "y"))
    solve = _solve(diffrax.Tsit5(), diffrax.SaveAt(ts=jnp.linspace(0.0, 1.0, 5)))
    if mesh.axis_types[0] == AxisType.Explicit:
        check_both_reject(solve, y0, w)  # the save's scatter of an Explicit state
        return
    ys = check_like_jax(solve, y0, w)
    assert ys.shape == (5, 16, 8)


def test_grad_through_diffrax_solve(mesh):
    y0, w = put(mesh, rand(16, 8), P("x", "y")), put(mesh, rand(8, 8) * 0.1, P(None, "y"))
    solve = _solve(diffrax.Euler())
    loss_grad = jax.grad(lambda y0, w: jnp.sum(solve(y0, w) ** 2), argnums=(0, 1))
    if mesh.axis_types[0] == AxisType.Explicit:
        check_both_reject(loss_grad, y0, w)  # the checkpoints' scatter of an Explicit state
        return
    check_like_jax(loss_grad, y0, w)


def test_hlo_of_a_lowered_solve(mesh):
    # Lowered.as_text("hlo") and cost_analysis() convert the module with XLA too:
    # they aborted the process on the loop's sharding as compile did.
    y0, w = put(mesh, rand(16, 8), P("x", "y")), put(mesh, rand(8, 8) * 0.1, P(None, "y"))
    lowered = jit(_solve(diffrax.Euler())).lower(y0, w)
    assert " while(" in lowered.as_text("hlo")
    assert lowered.cost_analysis()["flops"] > 0


# ------------------------------------------------------------------ lax loops and conditionals
def test_while_loop_with_pass_through_and_foldable_carries(mesh):
    x, w = put(mesh, rand(16, 8), P("x", "y")), put(mesh, rand(8, 8), P(None, "y"))

    def f(x, w):
        def body(carry):
            i, a, b, k, z = carry
            # b passes through, k + 0 and a fresh zero fold to pass-throughs in XLA.
            return i + 1, jnp.tanh(a @ w), b, k + 0, jnp.zeros((), jnp.int32)
        return jax.lax.while_loop(lambda c: c[0] < 3, body,
                                  (0, x, x * 2, 0, jnp.zeros((), jnp.int32)))

    check_like_jax(f, x, w)


def test_fori_loop_over_closed_over_sharded_weights(mesh):
    x, w = put(mesh, rand(16, 8), P("x", "y")), put(mesh, rand(8, 8), P(None, "y"))
    b = put(mesh, rand(16, 8), P("x"))

    def f(x, w):
        return jax.lax.fori_loop(0, 4, lambda i, a: jnp.tanh(a @ w + b) + 0 * i, x)

    check_like_jax(f, x, w)


def test_scan_carrying_unchanged_state(mesh):
    xs, h = put(mesh, rand(3, 16, 8), P(None, "x")), put(mesh, rand(16, 8), P("x", "y"))

    def f(xs, h):
        def step(carry, x):
            state, fixed, count = carry
            return (jnp.tanh(state + x * fixed), fixed, count + 0), state.sum()
        return jax.lax.scan(step, (h, h * 0.5, jnp.int32(0)), xs)

    check_like_jax(f, xs, h)


def test_scan_of_checkpointed_softplus_layers_saving_dots():
    """``jax.checkpoint`` with a policy puts an ``optimization_barrier`` of values
    sharded apart (a scalar among them) in the backward loop; softplus's ``x - 0``
    folds into one of its results in XLA's conversion (the barrier then sharded
    as one value: "Number of tile assignment dimensions ... different than the
    input rank"). Auto axes: where they are explicit, the layer's result is sharded
    unlike its carry and jax refuses the scan."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    ws, x = put(mesh, rand(4, 32, 32) * 0.2, P(None, "x", "y")), put(mesh, rand(16, 32), P("x"))

    def layer(h, w):
        h = jax.nn.softplus(h @ w)
        return h, jnp.mean(h)

    def loss(ws, x):
        saving = jax.checkpoint(layer, policy=jax.checkpoint_policies.dots_saveable)
        h, means = jax.lax.scan(saving, x, ws)
        return jnp.mean(h**2) + jnp.sum(means)

    check_like_jax(jax.value_and_grad(loss), ws, x)


def test_cond_with_unused_operand(mesh):
    x, w = put(mesh, rand(16, 8), P("x", "y")), put(mesh, rand(8, 8), P(None, "y"))
    for sign in (1.0, -1.0):
        check_like_jax(lambda x, w: jax.lax.cond(jnp.sum(x) * sign > 0, lambda a, b: a @ b,
                                                 lambda a, b: a * 2, x, w), x, w)


def test_switch_over_closed_over_sharded_values(mesh):
    x, w = put(mesh, rand(16, 8), P("x", "y")), put(mesh, rand(8, 8), P(None, "y"))
    for index in range(3):
        def f(x, w, index=index):
            branches = [lambda a: a @ w, lambda a: a + w[0], lambda a: a]
            return jax.lax.switch(jnp.int32(index) + 0 * jnp.sum(x).astype(jnp.int32), branches, x)
        check_like_jax(f, x, w)


def test_cond_inside_while_loop(mesh):
    x, w = put(mesh, rand(16, 8), P("x", "y")), put(mesh, rand(8, 8), P(None, "y"))

    def f(x, w):
        def body(i, carry):
            a, unchanged = carry
            a = jax.lax.cond(i % 2 == 0, lambda v: v @ w, lambda v: jnp.tanh(v), a)
            return a, unchanged
        return jax.lax.fori_loop(0, 3, body, (x, w))

    check_like_jax(f, x, w)


def test_cond_results_of_other_ranks_read_by_a_foldable_add():
    """A ``cond`` returning a sharded vector, a scalar and a matrix, its vector read by
    ``zeros + v``: XLA's conversion folds the add into the case's result and moved the
    add's one sharding onto the three-result case ("Number of tile assignment dimensions
    ... is different than the input rank" for the scalar). Each use of a result now reads
    it through a constraint to the case's sharding of it; the run equals jax.jit's.
    (optimistix's IndirectLevenbergMarquardt, whose error check is such a cond.)"""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    x, w = put(mesh, rand(16), P("x")), put(mesh, rand(8, 8), P(None, "y"))

    def f(x, w, s):
        a = jnp.sin(x)
        r = jax.lax.cond(s > 0, lambda: (a, jnp.sum(a), w),
                         lambda: (a * 2, jnp.float32(1.0), w * 2))
        return jnp.zeros_like(a) + r[0], r[1], r[2]

    for s in (1.0, -1.0):
        check_like_jax(f, x, w, jnp.float32(s))


def test_loop_result_read_by_a_chain_of_identities():
    """A loop result read by ``r + zeros`` and that by ``select(True, zeros, .) + s``: XLA's
    conversion folds the whole chain into the loop's result and moved the last op's one
    sharding onto the loop, every carry then sharded alike ("Number of tile assignment
    dimensions ... is different than the input rank" for a scalar carry). Every op the
    chain could fold through loses its sharding, not only the loop's direct readers.
    (diffrax's ShARK solve on a VirtualBrownianTree, whose inner loop's state is read so.)"""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    x = put(mesh, rand(16, 8), P("x"))

    def f(x):
        k, r = jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, jnp.tanh(c[1])),
                                  (jnp.int32(0), x))
        zeros = jnp.zeros_like(x)
        s = jnp.where(jnp.bool_(True), zeros, x)
        return k, (r + zeros) + s
    check_like_jax(f, x)


def test_checkpointed_fsdp_blocks_compile_to_jax_jit_collectives():
    """jax.checkpoint'd FSDP blocks (weights over both axes, a norm scale and biases
    beside them) between a replicated layer and a head: the backward pass's
    ``optimization_barrier`` holds values of several ranks. Constraints on its
    results to their operands' shardings were extra seeds of XLA's propagation:
    the recomputed blocks gathered their weights where jax.jit gathers the
    activations (AG 53248 vs 44928, A2A 3072 vs 6144). The barrier's sharding and
    those of the ops that could fold into its results are dropped instead."""
    mesh = jax.make_mesh((4, 2), ("fsdp", "model"), axis_types=(AxisType.Auto,) * 2)
    blocks = [(put(mesh, rand(32, 64, seed=3 * i) * 0.1, P("fsdp", "model")),
               put(mesh, rand(64, 32, seed=3 * i + 1) * 0.1, P("model", "fsdp")),
               put(mesh, np.ones(32, np.float32), P()), put(mesh, np.zeros(64, np.float32), P()),
               put(mesh, np.zeros(32, np.float32), P())) for i in range(3)]
    first, head = put(mesh, rand(32, 32, seed=9) * 0.1, P()), put(mesh, rand(32, 8, seed=10) * 0.1,
                                                                 P("fsdp", None))
    x, y = put(mesh, rand(16, 32, seed=11), P("fsdp")), put(mesh, rand(16, 8, seed=12), P("fsdp"))

    def block(p, x):
        w1, w2, scale, b1, b2 = p
        h = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * scale
        return x + (jax.nn.relu(h @ w1 + b1) @ w2 + b2)

    def loss(blocks, head, x, y):
        x = x @ first
        for p in blocks:
            x = jax.checkpoint(block)(p, x)
        return jnp.mean((x @ head - y) ** 2)

    grads = jax.grad(loss, argnums=(0, 1))
    check_like_jax(grads, blocks, head, x, y)

    def by_kind(compiled):
        found = collectives.summarize(collectives.find_collectives(compiled.as_text()))
        return {kind: s.bytes_per_device for kind, s in found.items() if s.bytes_per_device}
    assert by_kind(jit(grads).lower(blocks, head, x, y).compile()) == by_kind(
        jax.jit(grads).lower(blocks, head, x, y).compile())


# ------------------------------------------------------------------ the form and its check
def _lit_program(name):
    """The function ``name`` of the lit test's input, alone in a module."""
    text = LIT_PROGRAM.read_text()
    for part in text.split("// -----"):
        if f"@{name}(" in part:
            body = "\n".join(line for line in part.splitlines()
                             if not line.lstrip().startswith("//"))
            return ir.Module.parse(body.replace(f"@{name}(", "@main("))
    raise KeyError(name)


def test_xla_converts_the_form_of_the_reduced_loop():
    # XLA's own conversion (an oracle here, never a product path) keeps every
    # carry of the form shardc hands it; it rejected the loop with its sharding.
    with make_context():
        module = _lit_program("loop_with_foldable_and_pass_through_carries")
        with pytest.raises(Exception, match="leaf nodes while this sharding has"):
            jax_private.xla_computation(module)
        hlo = jax_private.hlo_text(jax_private.xla_computation(module_for_xla(module)),
                                   debug_info=False)
    assert " while(" in hlo


def test_check_refuses_a_loop_sharding_xla_could_outlive():
    with make_context():
        module = _lit_program("loop_with_foldable_and_pass_through_carries")
        with pytest.raises(InternalError, match="'stablehlo.while' op carries a per-value") as info:
            check_xla_form(module.operation)
    assert info.value.op == "stablehlo.while"


def test_check_refuses_sharding_counts_that_do_not_match_results():
    with make_context() as context:
        module = _lit_program("case_with_free_variables")
        case = next(op for op in module.body.operations[1].regions[0].blocks[0].operations
                    if op.operation.name == "stablehlo.case")
        case.attributes[SHARDING_ATTR] = ir.Attribute.parse(
            '#sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>, <@mesh, []>]>', context)
        with pytest.raises(InternalError, match="stablehlo.case.*2 shardings vs 1 values") as info:
            check_xla_form(module.operation)
    assert info.value.op == "stablehlo.case"


def test_case_branches_returning_other_shardings_compile_as_jax_jit():
    """A gradient through ``cond`` whose branches end in differently sharded ops (an add,
    a dot): XLA's verifier rejected the exported module ("Inconsistent conditional
    sharding among instructions"); each branch now returns through a constraint to the
    case's sharding, and the run equals jax.jit's (values and result sharding)."""
    import test_property_jax_programs as differential
    from fuzz.jax_programs import Arg, Program, Step

    tanh = ("tanh",)
    program = Program(
        mesh_shape=(2, 4),
        args=(Arg(shape=(2, 8), dtype="f32", spec=None, placement=None),
              Arg(shape=(2,), dtype="i32", spec=None, placement=None),
              Arg(shape=(8, 8), dtype="f32", spec=None, placement=P("x", "y"))),
        steps=(Step("unary", ("a0",), tanh),
               Step("fori", ("v0", "a1"), (0, 0, (Step("unary", (0,), tanh),) * 3)),
               Step("cond", ("a0", "a0", "a2"),
                    (-0.625, (Step("unary", (0,), tanh), Step("matmul", (0, 1), ())),
                     (Step("unary", (0,), tanh),) * 3)),
               Step("unary", ("v2",), tanh), Step("unary", ("a0",), tanh),
               Step("unary", ("a0",), tanh)),
        outputs=("v2",), mode="grad", wrt=(0,), out_specs=None, out_prefix=False,
        in_form="none", data_seed=0)
    mesh = program.make_mesh()
    fun, args = program.build(mesh), program.arguments(mesh)
    differential.compare(program, differential.run_shardc(program, mesh, fun, args),
                         differential.run_jax_jit(program, mesh, fun, args), "shardc")


# ------------------------------------------------------- folded transpose round trips
def test_householder_factors_read_back_through_two_transposes():
    """``jnp.linalg.qr(mode="raw")`` returns a LAPACK ``geqrf``'s factors transposed, and
    a solver reading them transposes back (optimistix's Levenberg-Marquardt through
    lineax's QR): XLA folds the two transposes into the custom call's first result and
    moved the outer one's sharding onto the two-result call ("Number of tile
    assignment dimensions ... is different than the input rank"). The pair is folded
    in the copy for XLA, and the run equals jax.jit's. (An Explicit mesh refuses the
    factorisation of a matrix sharded along its rows.)"""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    x = put(mesh, rand(16, 10, 2), P("x", "y"))

    def f(x):
        h, tau = jnp.linalg.qr(x, mode="raw")
        return jnp.swapaxes(h, -1, -2) * 2, tau

    check_like_jax(f, x)


def test_optimistix_least_squares_gradient():
    optx = pytest.importorskip("optimistix")
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    xs = put(mesh, np.random.default_rng(1).uniform(0, 2, (16, 8)).astype(np.float32),
             P("x", "y"))
    ys = put(mesh, 2 * np.exp(-0.7 * np.asarray(xs)).astype(np.float32), P("x", "y"))

    def loss(params, xs, ys):
        def residuals(theta, data):
            x, y = data
            return theta[0] * jnp.exp(-theta[1] * x) - y

        def fit(x, y):
            solver = optx.LevenbergMarquardt(rtol=1e-5, atol=1e-5)
            return optx.least_squares(residuals, solver, params, args=(x, y), max_steps=32,
                                      throw=False).value
        return jnp.sum(jax.vmap(fit)(xs, ys) ** 2)

    check_like_jax(jax.value_and_grad(loss), jnp.array([1.0, 0.5]), xs, ys)


@pytest.mark.parametrize("callback", [
    lambda f, out, x: jax.pure_callback(f, out, x),
    lambda f, out, x: io_callback(f, out, x, ordered=True),
], ids=["pure", "io_ordered"])
def test_case_of_host_callbacks_runs_as_jax_jit(callback):
    """A ``cond`` whose branches call back to the host: the case's results are placed
    on one device (a maximal mesh), which no closed constraint can say of an array, so
    the branches return them unconstrained (XLA's verifier rejected the constraint:
    "a maximal sharding can only have a sharding with rank 0"); the run equals jax.jit's."""
    def f(pred, x):
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return jax.lax.cond(pred, lambda v: callback(lambda a: a + 1.0, out, v),
                            lambda v: callback(lambda a: a - 1.0, out, v), x)

    x = jnp.arange(4.0)
    for pred in (True, False):
        ours, theirs = jit(f)(pred, x), jax.jit(f)(pred, x)
        jax.effects_barrier()
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_scanned_blocks_before_a_norm_compile_as_jax_jit():
    # The reported program (a flax remat_scan MLP on a batch over two axes): the
    # loop's carries said again as constraints reordered XLA's propagation after
    # the loop, the final norm's batch dimension taking both axes where jax.jit's
    # kept one per dimension (other all-gathers and all-to-alls, other bits).
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "model"), axis_types=(AxisType.Auto,) * 3)

    def norm(x, scale):
        mean = x.mean(-1, keepdims=True)
        var = jnp.square(x).mean(-1, keepdims=True) - jnp.square(mean)
        return (x - mean) * jax.lax.rsqrt(var + 1e-6) * scale

    def loss(params, x, y):
        def block(h, w):
            return h + jax.nn.gelu(norm(h, 1.0) @ w[0]) @ w[1], None
        h, _ = jax.lax.scan(jax.checkpoint(block), x @ params["w_in"],
                            (params["up"], params["down"]))
        return jnp.mean((norm(h, params["scale"]) @ params["head"] - y) ** 2)

    def step(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"w_in": put(mesh, rand(24, 32), P(None, "fsdp")),
              "up": put(mesh, rand(4, 32, 64, seed=1) * 0.1, P(None, "fsdp", "model")),
              "down": put(mesh, rand(4, 64, 32, seed=2) * 0.1, P(None, "model", "fsdp")),
              "scale": put(mesh, np.ones(32, np.float32), P()),
              "head": put(mesh, rand(32, 10, seed=3), P())}
    x = put(mesh, rand(16, 24, seed=4), P(("data", "fsdp")))
    y = put(mesh, rand(16, 10, seed=5), P(("data", "fsdp")))
    theirs = jax.jit(step).lower(params, x, y).compile()
    ours = jit(step).lower(params, x, y).compile()
    assert (collectives.summarize(collectives.find_collectives(ours.as_text()))
            == collectives.summarize(collectives.find_collectives(theirs.as_text())))
    for want, got in zip(jax.tree.leaves(theirs(params, x, y)), jax.tree.leaves(ours(params, x, y))):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
