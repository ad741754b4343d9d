"""AUTO's activation constraints: chosen on dots' results, written as jax writes them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bench import auto_search as auto_bench
from bench.auto_programs import PROGRAMS, layout_for
from shardc.compiler import AUTO, jit
from shardc.compiler.auto import modelled_step
from shardc.compiler.auto.activations import (
    Constrained,
    anchors,
    chosen_constraints,
    cotangents,
    open_marks,
    stream_starts,
)
from shardc.compiler.auto.candidates import (
    activation_candidates,
    activation_seed,
    is_residual,
    model_width,
    projects_weight,
    starts_stream,
    structure_groups,
    structured_seeds,
    tensor_sharding,
    weight_roles,
    window_dims,
)
from shardc.compiler.auto.evaluate import Evaluator
from shardc.compiler.auto.report import partition_spec
from shardc.compiler.auto.search import make_groups
from shardc.compiler.cost.platforms import hardware


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def _mlp(w1, w2, x):
    return jnp.sum(jnp.tanh(x @ w1) @ w2)


def _args():
    rng = np.random.default_rng(0)
    return (rng.normal(size=(32, 64)).astype(np.float32) / 8,
            rng.normal(size=(64, 32)).astype(np.float32) / 8,
            rng.normal(size=(16, 32)).astype(np.float32))


def test_anchors_are_the_dots_whose_leading_dimension_is_a_batch():
    step = jax.grad(_mlp, argnums=(0, 1))
    closed = jax.make_jaxpr(step)(*_args())
    found = anchors(closed)
    names = [closed.jaxpr.eqns[i].primitive.name for i in found]
    shapes = [closed.jaxpr.eqns[i].outvars[0].aval.shape for i in found]
    # x @ w1 and tanh(.) @ w2 forward, the cotangent of tanh(.) backward: batch 16
    # leading; the weights' gradients (32, 64) and (64, 32) are not activations.
    assert set(names) == {"dot_general"}
    assert all(shape[0] == 16 for shape in shapes)
    assert (16, 64) in shapes and (16, 32) in shapes


def test_constrained_function_is_jax_jit_with_the_constraint_written(mesh):
    args = _args()
    closed = jax.make_jaxpr(_mlp)(*args)
    first = anchors(closed)[0]
    sharding = NamedSharding(mesh, P("data", "model"))
    constrained = Constrained(_mlp, (), (), chosen_constraints({first: sharding}))
    assert constrained.__name__ == "_mlp"

    def by_hand(w1, w2, x):
        h = jax.lax.with_sharding_constraint(x @ w1, sharding)
        return jnp.sum(jnp.tanh(h) @ w2)

    lowered = jit(constrained, mesh=mesh).lower(*args)
    want = jax.jit(by_hand).lower(*args)
    assert 'sdy.sharding_constraint' in jax.jit(constrained).lower(*args).as_text()
    np.testing.assert_allclose(np.asarray(lowered.compile()(*args)),
                               np.asarray(jax.jit(by_hand)(*args)), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(jax.jit(constrained)(*args)),
                               np.asarray(jax.jit(_mlp)(*args)), rtol=1e-5)
    # The same program as the constraint written by hand: same collectives.
    assert lowered.compile().as_text().count("all-reduce") == want.compile().as_text().count(
        "all-reduce")


def test_a_closed_mark_prices_as_the_constraint_written_by_hand(mesh):
    # The search closes an open mark in the store; the program it returns carries a
    # closed with_sharding_constraint: both must be the same state.
    args = _args()
    closed = jax.make_jaxpr(_mlp)(*args)
    first = anchors(closed)[0]
    spec = (("data",), ("model",))
    marked = Constrained(_mlp, (), (), open_marks(mesh, {first}))
    evaluator = Evaluator(jit(marked, mesh=mesh).trace(*args).lower(propagate=False).module,
                          hardware("cpu"))
    assert len(evaluator.marks) == 1
    mark = len(evaluator.arguments)
    sharding = tensor_sharding(evaluator.mesh, spec, dict(mesh.shape))
    searched = evaluator({mark: sharding})[0]
    written = Constrained(_mlp, (), (), chosen_constraints(
        {first: NamedSharding(mesh, P("data", "model"))}))
    module = jit(written, mesh=mesh).trace(*args).lower(propagate=False).module
    assert searched.seconds == modelled_step(module).seconds
    assert searched.comm_bytes == modelled_step(module).comm_bytes
    # An open mark alone is the program as written.
    unmarked = jit(_mlp, mesh=mesh).trace(*args).lower(propagate=False).module
    assert evaluator({})[0].seconds == modelled_step(unmarked).seconds


def _two_branches(wk, wu, wo, x):
    # jax writes x @ wk first; XLA's post-order (the order the search's module is
    # propagated in) reaches the sum's first operand, y's dots, before it.
    k = x @ wk
    y = jnp.tanh(x @ wu) @ wo
    return jnp.sum(y * y) + jnp.sum(jnp.tanh(k))


@pytest.mark.parametrize("read", ["shared", "copy"])
def test_marks_closed_apart_price_as_the_constraints_written_at_their_anchors(mesh, read):
    # A state's k-th mark is the k-th anchor's constraint in the program AUTO returns,
    # though the search's module puts the marks in XLA's order: the state's step and
    # memory are the returned program's. The marks had been taken in XLA's order,
    # so each anchor took another's constraint (a PaLM-like step's MLP result closed
    # to the residual stream's unsharded features: the program AUTO returned
    # gathered its weight whole, 26% over the memory its search had judged).
    rng = np.random.default_rng(0)
    args = tuple(rng.normal(size=shape).astype(np.float32)
                 for shape in ((32, 8), (32, 64), (64, 32), (16, 32)))
    closed = jax.make_jaxpr(_two_branches)(*args)
    points = anchors(closed)
    marked = Constrained(_two_branches, (), (), open_marks(mesh, set(points)))
    evaluator = Evaluator(jit(marked, mesh=mesh).trace(*args).lower(propagate=False).module,
                          hardware("cpu"))
    graph = evaluator.read.graph
    shapes = [tuple(closed.jaxpr.eqns[i].outvars[0].aval.shape) for i in points]
    assert len(set(shapes)) == 3
    assert [graph.value_shape[m] for m in evaluator.marks] == shapes
    assert sorted(evaluator.marks, key=graph.value_def.__getitem__) != evaluator.marks
    if read == "copy":  # the path of a module the shared read cannot stand for
        evaluator.read.usable = False
    specs = [(("data", "model"), ()), (("data",), ("model",)), (("data",), ())]
    state = {len(evaluator.arguments) + k: tensor_sharding(evaluator.mesh, spec, dict(mesh.shape))
             for k, spec in enumerate(specs)}
    searched, values = evaluator(state)
    written = Constrained(_two_branches, (), (), chosen_constraints(
        {i: NamedSharding(mesh, partition_spec(spec)) for i, spec in zip(points, specs)}))
    lowered = jit(written, mesh=mesh).trace(*args).lower()
    timed = lowered.step_time(platform="cpu")
    assert searched.seconds == pytest.approx(timed.total_s, rel=1e-9)
    assert searched.comm_bytes == timed.bytes
    assert evaluator.memory(values) == lowered.memory_estimate(platform="cpu").net_bytes


def test_activation_candidates_keep_the_batch_on_the_data_axes():
    axes = [("data", 2), ("model", 4)]
    found = activation_candidates((8, 64, 128), axes)
    assert found[0] is None  # unconstrained first
    assert (("data",), None, None) in found  # MaxText's: the rest left to the weights
    assert (("data",), (), ()) in found
    assert (("data",), (), ("model",)) in found
    assert (("data", "model"), (), ()) in found
    assert activation_seed((8, 64, 128), axes, True, residual=True) == (("data",), (), ())
    assert activation_seed((8, 64, 128), axes, True, residual=False) == (("data",), None, None)
    assert activation_seed((8, 64, 128), axes, False, residual=False) == (
        ("data", "model"), None, None)
    assert activation_seed((3, 64), axes, True, residual=False) is None


def _expert_like_state(mesh, program):
    """The search's evaluator of ``program`` (every argument AUTO, activations marked)
    and its FSDP x tensor parallel seed with activations constrained."""
    step, args = PROGRAMS[program].make(layout_for(mesh, "dp"), "small")
    return _seeded(mesh, step, args)


def _seeded(mesh, step, args):
    """``_expert_like_state`` of ``step`` on ``args``: the seed ``Search._seed`` prices."""
    args = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), args)
    marked = Constrained(step, (), (), lambda index, aval: None)
    points = anchors(marked.jaxpr(*args)[0])
    marked.sharding_at = open_marks(mesh, set(points))
    lowered = jit(marked, mesh=mesh).trace(*args).lower(propagate=False)
    evaluator = Evaluator(lowered.module, hardware("cpu"), mesh)
    assert len(evaluator.marks) == len(points)
    axes = list(mesh.shape.items())
    reader = evaluator.reader()
    positions = list(range(len(evaluator.arguments)))
    names = [str(p) for p in positions]
    weights = make_groups(evaluator, positions, names, axes,
                          structure_groups(reader, evaluator.arguments))
    marks = [len(evaluator.arguments) + k for k in range(len(points))]
    activations = make_groups(evaluator, marks, [str(m) for m in marks], axes,
                              structure_groups(reader, evaluator.marks), activation=True)
    shapes = [g.shape for g in weights]
    updated = [g.updated for g in weights]
    windows = [window_dims(reader, evaluator.value_at(g.positions[0])) for g in weights]
    width = model_width(shapes, updated, windows)
    weight_values = {evaluator.value_at(p) for g in weights if g.updated for p in g.positions}
    roles = [weight_roles(reader, evaluator.value_at(g.positions[0]), width,
                          frozenset(weight_values)) for g in weights]
    _, specs = structured_seeds(shapes, updated, axes, roles, windows)[3]  # FSDP x TP
    assignment = {}
    for group, spec in zip(weights, specs):
        for position in group.positions:
            assignment[position] = tensor_sharding(evaluator.mesh, spec, dict(axes))
    for group in activations:
        value = evaluator.value_at(group.positions[0])
        if projects_weight(reader, value, weight_values) or starts_stream(reader, value):
            spec = activation_seed(group.shape, axes, True, is_residual(reader, value),
                                   group.image)
            for position in group.positions:
                assignment[position] = tensor_sharding(evaluator.mesh, spec, dict(axes))
    return evaluator, assignment, weights


def test_the_expert_state_is_a_seed_of_the_search(mesh):
    # MaxText's FSDP x tensor parallel with its activation constraints (the benchmark's
    # expert) is reachable: the seed with activations constrained prices as the
    # expert's own program, and without them (weights alone) it does not.
    evaluator, assignment, weights = _expert_like_state(mesh, "llama")
    step, args = PROGRAMS["llama"].make(layout_for(mesh, "expert"), "small")
    expert = modelled_step(jit(step).trace(*args).lower(propagate=False).module)
    seeded = evaluator(assignment)[0]
    assert seeded.seconds == pytest.approx(expert.seconds, rel=1e-9)
    assert seeded.comm_bytes == expert.comm_bytes
    weights_only = {p: s for p, s in assignment.items() if p < len(evaluator.arguments)}
    assert evaluator(weights_only)[0].comm_bytes != expert.comm_bytes


def test_square_weights_alternate_as_megatron_writes_them(mesh):
    # wq, wk, wv contract the embedding (tensor parallel on their heads); wo projects
    # back to the residual stream (tensor parallel on what it contracts).
    evaluator, _, weights = _expert_like_state(mesh, "llama")
    reader = evaluator.reader()
    width = model_width([g.shape for g in weights], [g.updated for g in weights])
    roles = {}
    for group in weights:
        if group.shape == (width, width):
            value = evaluator.value_at(group.positions[0])
            roles[group.positions[0]] = weight_roles(reader, value, width)
    assert sorted(roles.values()) == [(0, 1), (0, 1), (1, 0)]


def _gelu_block(w1, w2, x):
    return jnp.sum((x + jax.nn.gelu(x @ w1) @ w2) ** 2)


def test_a_gelus_own_add_is_no_residual_stream(mesh):
    # Tanh-approximated GELU (jax.nn.gelu's default) adds 0.044715 x**3 to its x: a GELU
    # MLP's hidden units are not added to the residual stream (their textbook constraint
    # leaves them to tensor parallelism, as MaxText's does), its output is. Read as a
    # residual add, the hidden units had been constrained unsharded, gathered whole.
    w1, w2, x = _args()
    step = jax.grad(_gelu_block, argnums=(0, 1))
    marked = Constrained(step, (), (), lambda index, aval: None)
    points = anchors(marked.jaxpr(w1, w2, x)[0])
    marked.sharding_at = open_marks(mesh, set(points))
    lowered = jit(marked, mesh=mesh).trace(w1, w2, x).lower(propagate=False)
    evaluator = Evaluator(lowered.module, hardware("cpu"), mesh)
    reader = evaluator.reader()
    weights = {evaluator.value_at(0), evaluator.value_at(1)}
    marks = [evaluator.value_at(len(evaluator.arguments) + k)
             for k in range(len(evaluator.marks))]

    def residual(shape, forward):
        return [is_residual(reader, v) for v in marks
                if tuple(reader.graph.value_shape[v]) == shape and (
                    not forward or projects_weight(reader, v, weights))]

    hidden = residual((16, 64), forward=True)  # x @ w1, into the GELU
    assert hidden and not any(hidden)
    assert any(residual((16, 32), forward=False))  # gelu(x @ w1) @ w2, added to x


def test_auto_searches_activations_and_runs_as_jax_jit_given_its_constraints(mesh):
    # Every AUTO choice, activations included, is an ordinary program: jax.jit of the
    # function with the chosen constraints written in computes the same numbers and
    # gives the same output shardings.
    args = auto_bench.mlp_case(layers=2, d=64, hidden=256, batch=32).args
    step = auto_bench.mlp_step
    lowered = jit(step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(*args)
    report = lowered.auto_report()
    activations = [c for c in report.choices if c.arguments[0].startswith("activation of")]
    assert activations  # the dots' results were searched
    chosen = {int(name.rsplit(" ", 1)[1]): NamedSharding(mesh, c.chosen)
              for c in activations if c.chosen is not None for name in c.arguments}
    written = Constrained(step, (), (), chosen_constraints(chosen))
    want = jax.jit(written, in_shardings=lowered.in_shardings[0],
                   out_shardings=lowered.out_shardings)
    got = lowered.compile()(*args)
    expected = want(*args)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        assert a.sharding.is_equivalent_to(b.sharding, a.ndim)


def _attention_like(wq, wk, wo, x, pin=lambda k, v: v):
    # q and k read the same x (as a layer's q, k and v do); y reads neither.
    q = pin(0, x @ wq)
    k = pin(1, x @ wk)
    y = pin(2, (jnp.tanh(q) * k) @ wo)
    return jnp.sum(jnp.tanh(y) ** 2)


def _attention_args():
    rng = np.random.default_rng(0)
    return [rng.normal(size=s).astype(np.float32) / 8
            for s in ((32, 64), (32, 64), (64, 32), (16, 32))]


def _jax_cotangent(mesh, which, spec):
    """(forward anchor, cotangent) as equation indices of the unconstrained gradient's
    jaxpr, found by jax itself: with_sharding_constraint written on value ``which``
    in the loss constrains its result and, transposed, its cotangent."""
    def pinned(*a):
        return _attention_like(*a, pin=lambda k, v: jax.lax.with_sharding_constraint(
            v, spec) if k == which else v)
    with jax.set_mesh(mesh):
        eqns = jax.make_jaxpr(jax.grad(pinned, argnums=(0, 1, 2)))(*_attention_args()).eqns
    made = {v: k for k, e in enumerate(eqns) for v in e.outvars}
    pins = [k for k, e in enumerate(eqns) if e.primitive.name == "sharding_constraint"]
    assert len(pins) == 2
    # less the pins before it: the index in the jaxpr written without them
    return tuple(made[eqns[p].invars[0]] - sum(q < made[eqns[p].invars[0]] for q in pins)
                 for p in pins)


def test_a_constraints_cotangent_is_the_one_jax_constrains(mesh):
    # with_sharding_constraint in a differentiated loss pins the value and its
    # cotangent; AUTO constrains the differentiated program, so it must find each
    # anchor's cotangent itself, q's and k's apart though both meet x's gradient dots.
    step = jax.grad(_attention_like, argnums=(0, 1, 2))
    closed = jax.make_jaxpr(step)(*_attention_args())
    owner = cotangents(closed, anchors(closed))
    expected = dict(reversed(_jax_cotangent(mesh, which, P("data"))) for which in range(3))
    assert owner == expected
    # Both constrained is jax's constraint written in the loss: the same program.
    forward, cotangent = _jax_cotangent(mesh, 0, P("data", "model"))
    sharding = NamedSharding(mesh, P("data", "model"))
    written = Constrained(step, (), (), chosen_constraints({forward: sharding,
                                                             cotangent: sharding}))

    def by_hand(*a):
        return _attention_like(*a, pin=lambda k, v: jax.lax.with_sharding_constraint(
            v, sharding) if k == 0 else v)

    args = _attention_args()
    ours = jit(written, mesh=mesh).trace(*args).lower()
    jaxs = jit(jax.grad(by_hand, argnums=(0, 1, 2)), mesh=mesh).trace(*args).lower()
    assert ours.as_text().count("sdy.sharding_constraint") == 2
    assert jaxs.as_text().count("sdy.sharding_constraint") == 2
    assert ours.step_time(platform="cpu").total_s == pytest.approx(
        jaxs.step_time(platform="cpu").total_s, rel=1e-9)
    ours, jaxs = ours.compile().as_text(), jaxs.compile().as_text()
    for collective in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        assert ours.count(collective) == jaxs.count(collective), collective


def test_auto_constrains_an_anchor_and_its_cotangent_as_one_choice(mesh):
    # The search's activation group of each anchor holds its cotangent: one choice
    # constrains both, and the program AUTO returns writes it on both.
    step = jax.grad(_attention_like, argnums=(0, 1, 2))
    args = _attention_args()
    lowered = jit(step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(*args)
    choices = [set(c.arguments) for c in lowered.auto_report().choices
               if c.arguments[0].startswith("activation of")]
    for which in range(3):
        forward, cotangent = _jax_cotangent(mesh, which, P("data"))
        group = next(c for c in choices if f"activation of equation {forward}" in c)
        assert f"activation of equation {cotangent}" in group


def _speech_encoder(params, batch):
    """Convolved mel frames plus learned positions start the residual stream of a
    transformer-like block (a speech encoder's front end)."""
    frames, targets = batch
    x = jax.lax.conv_general_dilated(frames, params["conv"], (1,), "SAME",
                                     dimension_numbers=("NWC", "WIO", "NWC"))
    x = jax.nn.gelu(x) + params["pos"]
    x = x + jax.nn.gelu(x @ params["w1"]) @ params["w2"]
    return jnp.mean((x @ params["head"] - targets) ** 2)


def _speech_args():
    rng = np.random.default_rng(0)
    shapes = {"conv": (3, 16, 64), "pos": (32, 64), "w1": (64, 256), "w2": (256, 64),
              "head": (64, 64)}
    params = {k: rng.normal(size=v).astype(np.float32) / 8 for k, v in shapes.items()}
    batch = (rng.normal(size=(8, 32, 16)).astype(np.float32),
             rng.normal(size=(8, 32, 64)).astype(np.float32))
    return params, batch


def _speech_step(params, batch):
    value, grads = jax.value_and_grad(_speech_encoder)(params, batch)
    return jax.tree.map(lambda w, g: w - 1e-3 * g, params, grads), value


def test_a_residual_streams_first_sum_is_an_anchor_seeded_as_maxtext_pins_it():
    # The sum that starts the stream (features plus a position table) is added as it is
    # to the block's projection; no dot or convolution computes it, and the sums after
    # it add a dot's result. Unconstrained, it takes the position table's FSDP axes on
    # its embedding beside the batch and the block's residual add gathers it (a speech
    # encoder on 4x2: AUTO's best textbook state 1.19x MaxText's modelled step).
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    closed = jax.make_jaxpr(_speech_step)(*_speech_args())
    starts = stream_starts(closed)
    assert len(starts) == 1
    (start,) = starts
    assert closed.jaxpr.eqns[start].primitive.name == "add"
    assert closed.jaxpr.eqns[start].outvars[0].aval.shape == (8, 32, 64)
    assert start in anchors(closed)

    evaluator, assignment, _ = _seeded(mesh, _speech_step, _speech_args())
    reader = evaluator.reader()
    marks = range(len(evaluator.arguments), len(evaluator.arguments) + len(evaluator.marks))
    (sum_mark,) = [m for m in marks if starts_stream(reader, evaluator.value_at(m))]
    # MaxText's constraint: the batch on the data axis, the embedding whole.
    assert evaluator.mesh is not None
    pinned = evaluator(assignment)[0]
    unpinned = evaluator({p: s for p, s in assignment.items() if p != sum_mark})[0]
    assert assignment[sum_mark] == tensor_sharding(
        evaluator.mesh, (("data",), (), ()), dict(mesh.shape))
    assert pinned.seconds < unpinned.seconds
    assert pinned.comm_bytes < unpinned.comm_bytes
