"""What XLA's simplifiers remove before buffers are assigned, as the memory estimate
models it (``simplified``), against XLA's ``memory_analysis()``."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import shardc.compiler as sc
from shardc.compiler.cost.platforms import CPU, predicting_for
from shardc.compiler.explain.liveness import LivenessWalker
from shardc.compiler.explain.simplified import simplified_graph, splat_value, sunk
from shardc.compiler.propagation.values import ModuleValues


def _scanned_zeros(g):
    # an L-BFGS first step: a scan reading an all-zero history it closes over
    history = jnp.zeros((10, 64, 32))

    def body(r, i):
        return r - jnp.vdot(history[i], r) * history[i] + 1.0, None
    return jax.lax.scan(body, g, jnp.arange(10))[0]


def _net(fun, *args):
    lowered = sc.jit(fun).lower(*args)
    estimate = lowered.memory_estimate()
    stats = jax.jit(fun).lower(*args).compile().memory_analysis()
    return estimate.compare(stats)["net"], (estimate.temp_bytes, stats.temp_size_in_bytes)


def test_a_zero_broadcast_a_loop_reads_is_computed_in_its_body():
    # XLA's body computes the zeros (its slices of them fold to a broadcast): no
    # 80 KiB history outside the loop (the estimate held it: 4.3x XLA's net bytes)
    ratio, temps = _net(_scanned_zeros, jnp.ones((64, 32)))
    assert abs(ratio - 1) <= 0.05, temps


def test_the_sunk_broadcast_leaves_the_loop_and_its_carry():
    lowered = sc.jit(_scanned_zeros).lower(jnp.ones((64, 32)))
    graph = ModuleValues(lowered.module.operation, missing_as_replicated=True).graph
    view = sunk(graph)
    broadcasts = [op for op, name in enumerate(graph.op_name)
                  if name == "stablehlo.broadcast_in_dim" and graph.op_parent[op] >= 0
                  and graph.op_name[graph.op_parent[op]] == "func.func"
                  and graph.value_shape[graph.op_results[op][0]] == (10, 64, 32)]
    assert len(broadcasts) == 1
    history = graph.op_results[broadcasts[0]][0]
    assert any(graph.op_name[user] == "stablehlo.while" for user, _ in graph.uses[history])
    assert view.uses[history] == []
    assert all(broadcasts[0] not in ops for blocks in view.op_blocks for _, ops in blocks)


def test_a_constant_carried_unchanged_is_the_broadcast_its_later_readers_read():
    # the loop's unchanged carry is gone: the update after the loop writes the
    # broadcast straight into its output (the estimate held a 64 KiB carry: 1.99x)
    def fun(g, v):
        twos = jnp.full((256, 64), 2.0)

        def body(carry, i):
            r, z = carry
            return (r + z[i] * v, z), None
        (r, z), _ = jax.lax.scan(body, (g, twos), jnp.arange(8))
        return r, z.at[3].set(r)
    ratio, temps = _net(fun, jnp.ones((64,)), jnp.ones((64,)))
    assert abs(ratio - 1) <= 0.05, temps


# a lookup table of lines across a 42-cell board (each a cell's index)
_LINES = np.arange(69 * 4, dtype=np.int32).reshape(69, 4) % 42


def _play_either(boards, step):
    # each board's table is picked by a test of its own between two equal tables
    def body(i, b):
        pick = (b.sum(axis=1) > 0)[:, None, None]
        table = jnp.where(pick, _LINES, _LINES.copy())
        lines = jax.vmap(lambda row, idx: row[idx])(b, table)
        won = (lines == 1).all(axis=2).any(axis=1)
        return jnp.where(won[:, None], 0, b + step) % 3
    return jax.lax.fori_loop(0, 5, body, boards)


def test_a_select_of_equal_constants_is_one_value():
    # XLA's CSE makes the two tables one constant and the select of it from itself
    # that constant: the lookup's indices are loop-invariant, concatenated with their
    # batch iota before the loop (``hoisted``; s32[8,69,4,2] per device carried).
    # Read as a select of two values, the estimate had no such buffer (0.22x XLA's net).
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    s = NamedSharding(mesh, P("data"))
    boards = jnp.zeros((64, 42), jnp.int32)
    lowered = sc.jit(_play_either, in_shardings=(s, s)).lower(boards, boards)
    graph = ModuleValues(lowered.module.operation, missing_as_replicated=True).graph
    view = simplified_graph(graph)
    tables = [op for op, name in enumerate(graph.op_name) if name == "stablehlo.select"
              and graph.value_shape[graph.op_results[op][0]] == (64, 69, 4)]
    # the table's select goes; jax's select of the negative indices' wrapped ones stays
    assert len(tables) == 2
    assert [op for op in tables if op in set(_ops_of(view))] == tables[1:]
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    assert abs(estimate.compare(stats)["net"] - 1) <= 0.05, (
        estimate.temp_bytes, stats.temp_size_in_bytes)


def test_a_select_of_different_constants_stays():
    def pick(p):
        return jnp.where(p, jnp.asarray(_LINES), jnp.asarray(_LINES + 1))
    lowered = sc.jit(pick).lower(jnp.ones((69, 4), bool))
    graph = ModuleValues(lowered.module.operation, missing_as_replicated=True).graph
    selects = [op for op, name in enumerate(graph.op_name) if name == "stablehlo.select"]
    assert selects and set(selects) <= set(_ops_of(simplified_graph(graph)))


def _ops_of(graph):
    # every op listed in some block of ``graph``
    return [op for blocks in graph.op_blocks for _, ops in blocks for op in ops]


def _unit_contraction(x, w):
    h = jax.lax.dot_general(x, w, (((1,), (0,)), ((), ())))  # contracts one size-1 dim
    return jnp.exp(h).sum(1)


def test_a_dot_contracting_unit_dimensions_is_a_multiply():
    # XLA drops the unit dimensions (``RemoveDegenerateDimensionFromDot``), leaving an
    # outer product it writes as a multiply fused into the reduction: no temporaries;
    # read as a dot, the estimate held its 512 KiB result (129x XLA's net bytes)
    args = (jnp.ones((256, 1)), jnp.ones((1, 512)))
    ratio, temps = _net(_unit_contraction, *args)
    assert abs(ratio - 1) <= 0.05, temps
    graph = ModuleValues(sc.jit(_unit_contraction).lower(*args).module.operation,
                         missing_as_replicated=True).graph
    assert "stablehlo.dot_general" in graph.op_name
    assert "stablehlo.dot_general" not in simplified_graph(graph).op_name


def _pairwise_kernel(x, y):
    # a kernel of scalar points: each pair's distances summed over no axis
    def k(a, b):
        squared, absolute = jnp.sum(jnp.square(a - b)), jnp.sum(jnp.abs(a - b))
        return jnp.exp(-0.5 * squared) + (1 + absolute) * jnp.exp(-absolute)
    gram = jax.vmap(lambda a: jax.vmap(lambda b: k(a, b))(y))(x)
    return jnp.linalg.cholesky(gram + jnp.eye(x.shape[0]))


def test_a_reduce_of_no_element_is_a_reshape():
    # jax sums a 0-d value with a reduce over no dimension; XLA's simplifier makes it a
    # reshape of its operand (``HandleReduce``), fused into the kernel's exp: read as a
    # reduce, each 16 KiB distance matrix was a buffer (1.49x XLA's net bytes)
    args = (jnp.linspace(0, 1, 64), jnp.linspace(0, 2, 64))
    ratio, temps = _net(_pairwise_kernel, *args)
    assert abs(ratio - 1) <= 0.05, temps
    graph = ModuleValues(sc.jit(_pairwise_kernel).lower(*args).module.operation,
                         missing_as_replicated=True).graph
    view = simplified_graph(graph)
    reduces = [op for op, name in enumerate(graph.op_name) if name == "stablehlo.reduce"]
    assert len(reduces) == 2
    assert all(view.op_name[op] == "stablehlo.reshape" and len(view.op_operands[op]) == 1
               and view.op_blocks[op] == [] for op in reduces)


def _two_histories(x, w):
    # an L-BFGS-like pair of solves, each history its first update written into zeros
    def solve(r):
        history = jnp.zeros((16, 64, 32)).at[0].set(jnp.tanh(r @ w))

        def body(i, carry):
            h, r = carry
            r = jnp.tanh(r @ w) + jnp.sum(h, axis=0)
            return h.at[i % 16].set(r), r
        return jax.lax.fori_loop(1, 6, body, (history, r))
    h1, r1 = solve(x)
    h2, r2 = solve(r1 + jnp.sum(h1, axis=0))
    return jnp.sum(h2, axis=0) + r2


def test_an_update_written_into_zeros_is_a_pad_where_it_runs():
    # XLA's simplifier makes ``zeros.at[0].set(u)`` a pad of ``u`` (a fusion written
    # where the scatter runs): each 128 KiB history lives from its solve on, the two
    # apart; read as zeros made first thing and updated in place, both were live
    # from the start (1.87x XLA's net bytes)
    args = (jnp.ones((64, 32)), jnp.ones((32, 32)) * 0.01)
    ratio, temps = _net(_two_histories, *args)
    assert abs(ratio - 1) <= 0.10, temps
    values = ModuleValues(sc.jit(_two_histories).lower(*args).module.operation,
                          missing_as_replicated=True)
    with predicting_for(CPU):
        walker = LivenessWalker(values)
    graph = walker.graph
    scatters = [op for op, name in enumerate(graph.op_name) if name == "stablehlo.scatter"]
    # the two writes into zeros are pads; the loop bodies' writes into the carry are not
    assert sum(map(walker.padded, scatters)) == 2 < len(scatters)


def _layers(x, w):
    # the branch a case must not hold: two activations live across its dots
    h = jnp.tanh(x @ w)
    return jnp.tanh(h @ w) @ w + h


def _graph_and_view(fun, *args):
    """``fun``'s lowered graph and its simplified view."""
    graph = ModuleValues(sc.jit(fun).lower(*args).module.operation,
                         missing_as_replicated=True).graph
    return graph, simplified_graph(graph)


def _cond_on_a_constant(x, w):
    # a case on a constant: its cheap branch runs
    return jax.lax.cond(True, lambda x, w: x * 2.0, _layers, x, w)


def test_a_case_on_a_constant_is_the_branch_it_selects():
    # XLA's conditional simplifier inlines the selected branch: nothing of the other
    # is in its module (temp 0 bytes); the estimate walked both branches and held the
    # unselected one's activations (2.2x XLA's net bytes)
    args = (jnp.ones((256, 128)), jnp.ones((128, 128)))
    ratio, temps = _net(_cond_on_a_constant, *args)
    assert abs(ratio - 1) <= 0.05, temps
    graph, view = _graph_and_view(_cond_on_a_constant, *args)
    case = graph.op_name.index("stablehlo.case")
    assert len(graph.op_blocks[case]) == 2 and len(view.op_blocks[case]) == 1
    # the branch lax.cond runs for True is the second one (index 1)
    assert view.op_blocks[case][0] == graph.op_blocks[case][1]
    branch = view.op_blocks[case][0][1]
    assert any(graph.op_name[op] == "stablehlo.multiply" for op in branch)


def _cond_on_an_inlined_flag(x, w):
    # the first case is on a constant; the flag its selected branch returns is an
    # ``and`` of a false constant, which XLA folds once it has inlined that branch
    def checked(x):
        return jnp.logical_and(False, x.sum() > 0)

    flag = jax.lax.cond(True, checked, lambda x: x.sum() > 0, x)
    return jax.lax.cond(flag, _layers, lambda x, w: x * 3.0, x, w)


def test_a_case_on_a_flag_an_inlined_branch_folds_is_the_branch_it_selects():
    # XLA folds the second case's index after inlining the first case and inlines the
    # second too (temp 0 bytes); the estimate walked both of its branches and held
    # the unselected one's activations
    args = (jnp.ones((256, 128)), jnp.ones((128, 128)))
    ratio, temps = _net(_cond_on_an_inlined_flag, *args)
    assert abs(ratio - 1) <= 0.05, temps
    graph, view = _graph_and_view(_cond_on_an_inlined_flag, *args)
    cases = [op for op, name in enumerate(graph.op_name) if name == "stablehlo.case"]
    assert len(cases) == 2 and all(len(graph.op_blocks[op]) == 2 for op in cases)
    # each is left with its selected branch: True's (index 1), then False's (index 0)
    assert [view.op_blocks[op][0] for op in cases] == \
        [graph.op_blocks[cases[0]][1], graph.op_blocks[cases[1]][0]]
    index = view.op_operands[cases[1]][0]
    assert splat_value(view, index) == 0 and splat_value(graph, index) is None

