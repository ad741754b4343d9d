"""XLA's loop-invariant code motion as the memory estimate models it (``hoisted``): ops
of a while body computed from loop-invariant values only run once before the loop and
their buffers are carried through it, against XLA's ``memory_analysis()``."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import shardc.compiler as sc
from shardc.compiler.explain.hoisted import hoisted_graph, invariant_indices
from shardc.compiler.explain.liveness import LivenessWalker
from shardc.compiler.propagation.values import ModuleValues


def _solve(a, b, steps=5, scale=0.5):
    # a Sinkhorn-like loop reading a kernel computed from loop-invariant inputs
    def body(i, u):
        k = jnp.exp(-(a @ b.T))
        return jnp.log(k @ (k.T @ jnp.exp(u))) * scale
    return jax.lax.fori_loop(0, steps, body, jnp.zeros(a.shape[0]))


def _two_solves(x, y, z):
    return _solve(x, y).sum() + _solve(x, z).sum()


def _nested(x, y):
    # the kernel is invariant in both loops: hoisted out of the inner one, then the outer
    def outer(j, v):
        return _solve(x, y, 3) + v
    return jax.lax.fori_loop(0, 4, outer, jnp.zeros(x.shape[0])).sum()


def _lower(fun, args):
    # the contracted dimension split: each kernel is a partial sum all-reduced
    mesh = jax.make_mesh((2, 4), ("data", "model"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)
    s = NamedSharding(mesh, P(None, "model"))
    return sc.jit(fun, in_shardings=(s,) * len(args)).lower(*args)


def _lower_rows_split(fun):
    # x's rows split over "data", y replicated: no partial sums, nothing all-reduced
    mesh = jax.make_mesh((2, 4), ("data", "model"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)
    shardings = (NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P()))
    return sc.jit(fun, in_shardings=shardings).lower(jnp.ones((256, 64)), jnp.ones((64, 64)))


def _net_ratio(lowered):
    """The estimate's net bytes / XLA's, and both temporaries."""
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    return estimate.compare(stats)["net"], (estimate.temp_bytes, stats.temp_size_in_bytes)


def _loops(graph):
    return [op for op, name in enumerate(graph.op_name) if name == "stablehlo.while"]


def _depth(graph, op):
    found = 0
    while graph.op_parent[op] >= 0:
        op, found = graph.op_parent[op], found + 1
    return found


def _body_names(graph, loop):
    return [graph.op_name[op] for op in graph.op_blocks[loop][1][1]]


def test_invariant_dots_are_hoisted_and_carried_through_their_loops():
    # XLA computes each loop's kernel (the dot, its negation and exponential) once
    # before the loop and carries it: two kernels live from the top of the program, not
    # one kernel per iteration inside each body (0.62x XLA's net bytes).
    args = (jnp.ones((128, 16)), jnp.ones((96, 16)), jnp.ones((64, 16)))
    lowered = _lower(_two_solves, args)
    ratio, temps = _net_ratio(lowered)
    assert abs(ratio - 1) <= 0.05, temps


def test_hoisting_leaves_variant_ops_and_transposes_read_by_them():
    args = (jnp.ones((128, 16)), jnp.ones((96, 16)), jnp.ones((64, 16)))
    graph = ModuleValues(_lower(_two_solves, args).module.operation,
                         missing_as_replicated=True).graph
    hoisted = hoisted_graph(graph)
    for loop in _loops(graph):
        before, after = _body_names(graph, loop), _body_names(hoisted, loop)
        assert before.count("stablehlo.dot_general") == 3
        # the kernel's dot, negation and exponential leave; its transpose stays with
        # the dot reading it and the iteration's value (XLA hoists no transpose alone)
        assert after.count("stablehlo.dot_general") == 2
        assert "stablehlo.negate" not in after and after.count("stablehlo.exponential") == 1
        assert after.count("stablehlo.transpose") == before.count("stablehlo.transpose") - 1
        parent = hoisted.op_parent[loop]
        listed = [op for _, ops in hoisted.op_blocks[parent] for op in ops]
        moved = set(graph.op_blocks[loop][1][1]) - set(hoisted.op_blocks[loop][1][1])
        # listed right before the loop, reading nothing the body defines
        at = listed.index(loop)
        assert set(listed[at - len(moved):at]) == moved
        assert all(hoisted.op_parent[op] == parent for op in moved)


def _selected_solve(a, b):
    # the body reads ``b`` selected from itself by a loop-variant predicate (what a
    # vmapped cond passing an operand through both branches lowers to)
    def body(i, u):
        picked = jax.lax.select(jnp.broadcast_to(u.sum() > 0, b.shape), b, b)
        k = jnp.exp(-(a @ picked.T))
        return jnp.log(k @ (k.T @ jnp.exp(u))) * 0.5
    return jax.lax.fori_loop(0, 5, body, jnp.zeros(a.shape[0]))


def test_equal_hoisted_dots_all_reduced_apart_are_two_buffers():
    # Both loops hoist the same dot of the same values; its partial sums are
    # all-reduced by two all-reduces with channels of their own, which XLA's CSE never
    # merges: two kernels, not one (merged, 0.51x XLA's net bytes).
    def same_kernel(x, y):
        a, b = x * 2, y * 2
        return _solve(a, b).sum() + _solve(a, b, scale=0.25).sum()

    lowered = _lower(same_kernel, (jnp.ones((128, 16)), jnp.ones((96, 16))))
    ratio, temps = _net_ratio(lowered)
    assert abs(ratio - 1) <= 0.05, temps


def test_a_select_of_one_value_is_that_value():
    # XLA's algebraic simplifier reads select(p, b, b) as b: the kernels are invariant
    # and hoisted (ott's batched Sinkhorn solves); read as a select they stayed in the
    # bodies (0.62x XLA's net bytes).
    def two_solves(x, y, z):
        return _selected_solve(x, y).sum() + _selected_solve(x, z).sum()

    args = (jnp.ones((128, 16)), jnp.ones((96, 16)), jnp.ones((64, 16)))
    lowered = _lower(two_solves, args)
    ratio, temps = _net_ratio(lowered)
    assert abs(ratio - 1) <= 0.05, temps


def test_nested_loops_hoist_level_by_level():
    args = (jnp.ones((128, 16)), jnp.ones((96, 16)))
    lowered = _lower(_nested, args)
    graph = ModuleValues(lowered.module.operation, missing_as_replicated=True).graph
    hoisted = hoisted_graph(graph)
    outer, inner = sorted(_loops(graph), key=lambda op: _depth(graph, op))
    dots = [op for op in range(len(graph.ops)) if graph.op_name[op] == "stablehlo.dot_general"]
    # the kernel's dot ends in the block holding the outer loop
    assert sum(hoisted.op_parent[op] == hoisted.op_parent[outer] for op in dots) == 1
    # (as close before hoisting, 1.006x: the hoisted view keeps it there)
    ratio, temps = _net_ratio(lowered)
    assert abs(ratio - 1) <= 0.10, temps


def test_a_loop_without_invariants_is_left_whole():
    def scan(x):
        def body(i, u):
            return jnp.tanh(u @ u.T) @ u
        return jax.lax.fori_loop(0, 3, body, x).sum()
    graph = ModuleValues(_lower(scan, (jnp.ones((16, 16)),)).module.operation,
                         missing_as_replicated=True).graph
    assert hoisted_graph(graph) is graph


def test_ops_of_constants_stay_and_equal_hoisted_ops_merge():
    # XLA folds ops of constants (the square of a broadcast zero: a broadcast of a
    # folded constant, not hoisted alone) and merges equal hoisted ops (CSE): two
    # identity matrices built in the body are one carried buffer (optimistix's
    # Levenberg-Marquardt step: four identity matrices hoisted, 1.14x XLA's net bytes).
    def fit(w, v):
        def body(i, u):
            decay = jnp.square(jnp.zeros_like(u))
            return (u @ jnp.eye(16)) * 0.5 + (u @ jnp.eye(16)) * 0.25 + decay + v
        return jax.lax.fori_loop(0, 4, body, w).sum()

    lowered = _lower(fit, (jnp.ones((16, 16)), jnp.ones((16, 16))))
    graph = ModuleValues(lowered.module.operation, missing_as_replicated=True).graph
    hoisted = hoisted_graph(graph)
    (loop,) = _loops(graph)
    moved = set(graph.op_blocks[loop][1][1]) - set(hoisted.op_blocks[loop][1][1])
    assert "chlo.square" not in {graph.op_name[op] for op in moved}
    compares = [op for op in moved if graph.op_name[op] == "stablehlo.compare"]
    # XLA's loop carries one identity matrix (f32[16,4] per device) besides ``v``
    listed = {op for _, ops in hoisted.op_blocks[hoisted.op_parent[loop]] for op in ops}
    assert len(compares) == 2 and len(listed.intersection(compares)) == 1


def _powers(a, b):
    # an inner loop of loop-invariant values only
    return jax.lax.fori_loop(0, 3, lambda i, m: jnp.tanh(m @ b.T) @ b, a)


def _two_inner_loops(x, y):
    def body(i, u):
        return u * 0.5 + (_powers(x, y) * u[:, None]).sum(1) + (_powers(x, y) * 2.0).sum(1)
    return jax.lax.fori_loop(0, 4, body, jnp.zeros(x.shape[0])).sum()


def _inner_loop_parents(lowered):
    graph = ModuleValues(lowered.module.operation, missing_as_replicated=True).graph
    hoisted = hoisted_graph(graph)
    outer, *inner = sorted(_loops(graph), key=lambda op: _depth(graph, op))
    return hoisted, outer, inner


def test_invariant_inner_loops_are_hoisted_apart_when_all_reduced():
    # XLA hoists a loop of invariant values out of the loop holding it, as any op: both
    # inner loops run once before the outer one and their results are carried. Their
    # bodies all-reduce a partial sum, each with a channel of its own, so CSE keeps
    # both loops (left in the body, 0.92x XLA's net bytes; merged, 0.91x).
    lowered = _lower(_two_inner_loops, (jnp.ones((256, 64)), jnp.ones((64, 64))))
    hoisted, outer, inner = _inner_loop_parents(lowered)
    assert [hoisted.op_parent[op] for op in inner] == [hoisted.op_parent[outer]] * 2
    ratio, temps = _net_ratio(lowered)
    assert abs(ratio - 1) <= 0.05, temps


def test_equal_hoisted_loops_merge():
    # Without a collective in them the two hoisted inner loops are equal and XLA's CSE
    # keeps one (two while loops in its program: the outer and one inner).
    lowered = _lower_rows_split(_two_inner_loops)
    hoisted, outer, inner = _inner_loop_parents(lowered)
    listed = {op for _, ops in hoisted.op_blocks[hoisted.op_parent[outer]] for op in ops}
    assert len(listed.intersection(inner)) == 1
    compiled = lowered.compile()
    assert compiled.as_text().count(" while(") == 2
    ratio, temps = _net_ratio(lowered)
    assert abs(ratio - 1) <= 0.05, temps


def _counted_powers(a, b):
    # an inner loop of loop-invariant values with a second carry nothing reads after it
    def step(i, carry):
        m, s = carry
        return jnp.tanh(m @ b.T) @ b + 0.01 * s, s + jnp.sin(m)
    return jax.lax.fori_loop(0, 3, step, (a, a))


def _unread_inner_result(x, y):
    def body(i, u):
        m, _ = _counted_powers(x, y)
        t1 = jnp.tanh(m @ y.T)
        t2 = jnp.tanh(t1 @ y)
        t3 = jnp.tanh(t2 @ y.T)
        t4 = t3 @ y
        return u * 0.5 + (t1 * t2 * t3 * t4 * u[:, None]).sum(1)
    return jax.lax.fori_loop(0, 4, body, jnp.zeros(x.shape[0])).sum()


def test_hoisted_loops_unread_results_die_before_the_loop():
    # The hoisted inner loop's second result is read by nothing: it dies once the
    # inner loop has run, before the outer one. Shardy's edges on the inner loop's
    # results leave the body with it (no op of XLA's); left in the body they read
    # the result there and it was carried through the outer loop (1.18x XLA's net
    # bytes, the outer body's peak holding it).
    lowered = _lower_rows_split(_unread_inner_result)
    hoisted, outer, inner = _inner_loop_parents(lowered)
    (loop,) = inner
    readers = {use for r in hoisted.op_results[loop] for use, _ in hoisted.uses[r]}
    assert {hoisted.op_parent[op] for op in readers} == {hoisted.op_parent[loop]}
    ratio, temps = _net_ratio(lowered)
    assert abs(ratio - 1) <= 0.05, temps


# a lookup table of lines across a 42-cell board (each a cell's index)
_LINES = np.arange(69 * 4, dtype=np.int32).reshape(69, 4) % 42


def _lines_won(boards, table):
    # each board reads its own table: a gather with batching dimensions
    lines = jax.vmap(lambda row, idx: row[idx])(boards, table)
    return (lines == 1).all(axis=2).any(axis=1)


def _play(boards, step):
    def body(i, b):
        table = jnp.broadcast_to(_LINES, (b.shape[0], *_LINES.shape))
        return jnp.where(_lines_won(b, table)[:, None], 0, b + step) % 3
    return jax.lax.fori_loop(0, 5, body, boards)


def _play_alone(boards):
    def body(i, b):
        table = jnp.broadcast_to(_LINES, (b.shape[0], *_LINES.shape))
        return jnp.where(_lines_won(b, table)[:, None], 0, b + 1) % 3
    return jax.lax.fori_loop(0, 5, body, boards)


def _lower_boards(fun, count):
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    s = NamedSharding(mesh, P("data"))
    boards = jnp.zeros((64, 42), jnp.int32)
    return sc.jit(fun, in_shardings=(s,) * count).lower(*(boards,) * count)


def test_a_batched_gathers_invariant_indices_are_concatenated_before_the_loop():
    # XLA's normalizer reads the vmapped lookup's indices with an iota of the batch
    # before them (s32[8,69,4,2] per device), a concatenate its loop-invariant code
    # motion hoists while the gather stays: carried through the loop, 17664 bytes
    # (the estimate had none: 0.04x XLA's temporaries).
    lowered = _lower_boards(_play, 2)
    graph = LivenessWalker(ModuleValues(lowered.module.operation,
                                        missing_as_replicated=True)).graph
    found = invariant_indices(graph)
    assert [graph.op_name[op] for op in found] == ["stablehlo.gather"]
    assert [graph.op_name[loop] for loop in found.values()] == ["stablehlo.while"]
    ratio, temps = _net_ratio(lowered)
    assert abs(ratio - 1) <= 0.05, temps


def test_a_loop_reading_only_constants_from_outside_is_left_whole():
    # No carry is returned unchanged and the body reads nothing but constants from
    # outside the loop, which XLA sinks into the body: it finds no invariant carry and
    # hoists nothing, the concatenate fused with the gather (XLA's temporaries 720
    # bytes; the constants counted as invariant values, the estimate held the hoisted
    # lookup, 3.6x XLA's net bytes).
    lowered = _lower_boards(_play_alone, 1)
    graph = ModuleValues(lowered.module.operation, missing_as_replicated=True).graph
    assert not invariant_indices(hoisted_graph(graph))
    ratio, temps = _net_ratio(lowered)
    assert abs(ratio - 1) <= 0.05, temps
