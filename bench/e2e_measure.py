"""Measure one benchmark program compiled by ``jax.jit`` and by shardc, side by side.

Both routes get the same function, the same placed arguments and the same
shardings, in the same process; optionally a third, shardc with
``propagation="cost-aware"`` (``COST_AWARE``). ``build`` lowers and compiles one
route and times both stages; the ``*_of`` functions read one figure from the
compiled programs; ``compare`` puts it all into one ``Comparison`` row. Every
figure is taken identically on every route:

* numerics: ``max |shardc - jax|`` over every output element, and that
  divided by ``max |jax|`` of the same output (the worst output counts);
* output shardings: the compiled programs' output shardings, leaf by leaf,
  with ``Sharding.is_equivalent_to``;
* communication: ``shardc.runtime.collectives`` on both partitioned HLO
  texts. Bytes are per device and static: a collective inside a loop body
  (``lax.scan``) counts once, not once per iteration;
* memory per device: ``argument + output + temp - alias`` bytes of XLA's
  ``CompiledMemoryStats`` (one SPMD partition = one device);
* time: median seconds to lower and to compile over fresh functions (so no
  trace or compile cache is shared between routes or repeats), after one
  untimed lowering per route that warms jax's own caches, and the median
  microseconds per call of the jitted function, dispatch included, from
  rounds of calls that alternate between the routes (jax.jit and shardc only,
  unless ``time_routes`` names more).

A program with ``donate_argnums`` is jitted with them on every route, and every
call gets fresh copies of its donated arguments (placed like the originals,
outside any timing), since a call consumes what it was donated. A program with
``mesh_context`` is lowered, compiled and run inside ``jax.set_mesh(mesh)``.
``compare(..., check_determinism=True)`` also runs jax.jit's program twice and
records whether its results are bitwise equal run to run, and whether each
shardc route's results are bitwise equal to jax.jit's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

from bench.models.program import Program
from shardc.compiler import jit as shardc_jit
from shardc.runtime import collectives

ROUTES = ("jax", "shardc")
COST_AWARE = "cost-aware"  # the optional third route
# shardc's routes and the propagation strategy each lowers with.
PROPAGATION = {"shardc": "shardy", COST_AWARE: "cost-aware"}


@dataclasses.dataclass
class Build:
    """One route's compiled program and how long lowering and compiling took."""

    route: str
    # jax.stages.Compiled or shardc.runtime.Compiled (same inspection API), or a library's
    # stage wrapping one (``stage`` finds it).
    compiled: Any
    lower_seconds: float
    compile_seconds: float
    # The cost-aware route's search (``Lowered.cost_aware_resolution``); None on the others.
    resolution: Any = None
    # The lowered program (shardc's ``Lowered`` or jax's, out of a library's wrapper), for
    # predictions made before compiling.
    lowered: Any = None


@dataclasses.dataclass
class Comparison:
    """Everything measured for one program; ``*_ratio`` is shardc / jax.jit.

    The ``cost_aware_*`` fields are filled by ``compare(..., cost_aware=True)``;
    that route's bytes, memory and times are then under ``"cost-aware"`` in the
    per-route dicts.
    """

    name: str
    description: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    output_shardings_match: bool | None = None
    mismatched_outputs: list[str] = dataclasses.field(default_factory=list)
    collectives: dict[str, dict[str, dict[str, int]]] = dataclasses.field(default_factory=dict)
    collective_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    collective_bytes_ratio: float | None = None
    memory_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    memory_ratio: float | None = None
    lower_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    lower_ratio: float | None = None
    compile_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    compile_ratio: float | None = None
    call_microseconds: dict[str, float] = dataclasses.field(default_factory=dict)
    call_ratio: float | None = None
    cost_aware_max_rel_error: float | None = None  # against jax.jit
    cost_aware_bytes_ratio: float | None = None  # cost-aware / jax.jit
    cost_aware_memory_ratio: float | None = None  # cost-aware / jax.jit
    cost_aware_lower_ratio: float | None = None  # cost-aware / shardc ("shardy") lowering
    cost_aware_search: dict[str, Any] = dataclasses.field(default_factory=dict)
    cost_aware_mismatched_outputs: list[str] = dataclasses.field(default_factory=list)
    donated: bool = False
    jax_deterministic: bool | None = None  # with check_determinism: two jax.jit runs
    bitwise_equal: dict[str, bool] = dataclasses.field(default_factory=dict)  # vs jax.jit
    error: str | None = None


# ----------------------------------------------------------------------------
# Building
# ----------------------------------------------------------------------------


def fresh(fun: Callable) -> Callable:
    """A new function object calling ``fun``: jax caches traces by function identity."""

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        return fun(*args, **kwargs)

    return wrapper


def abstract(named_shardings: Any) -> Any:
    """The same shardings on the abstract mesh (no devices named)."""
    return jax.tree.map(
        lambda s: NamedSharding(s.mesh.abstract_mesh, s.spec),
        named_shardings,
        is_leaf=lambda leaf: isinstance(leaf, NamedSharding),
    )


def jax_jitted(program: Program) -> Callable:
    """``jax.jit`` of a fresh copy of the program's function, with its shardings (or
    the way the program's users jit it: ``program.jit``)."""
    if program.jit is not None:
        return program.jit(jax.jit, fresh(program.fun))
    return jax.jit(
        fresh(program.fun),
        in_shardings=program.in_shardings,
        out_shardings=program.out_shardings,
        donate_argnums=program.donate_argnums,
    )


def shardc_jitted(program: Program, propagation: str = "shardy") -> Callable:
    """shardc's ``jit`` of a fresh copy of the function (shardings on the abstract mesh
    when the program asks to be lowered there), or the way the program's users jit it
    (``program.jit``) with shardc's ``jit`` in place of ``jax.jit``."""
    if program.jit is not None:
        return program.jit(functools.partial(shardc_jit, propagation=propagation),
                           fresh(program.fun))  # fmt: skip
    in_shardings, out_shardings = program.in_shardings, program.out_shardings
    if program.lower_on_abstract_mesh:
        in_shardings, out_shardings = abstract(in_shardings), abstract(out_shardings)
    return shardc_jit(
        fresh(program.fun),
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        donate_argnums=program.donate_argnums,
        propagation=propagation,
    )


def prepare(program: Program, route: str) -> tuple[Any, tuple, tuple | None]:
    """A fresh jitted function of one route, the arguments to lower it with, and the
    devices to compile it for (``None``: those of its shardings)."""
    if route == "jax":
        return jax_jitted(program), program.args, None
    if route not in PROPAGATION:
        raise ValueError(f"route must be one of {('jax', *PROPAGATION)}, got {route!r}")
    jitted = shardc_jitted(program, PROPAGATION[route])
    if not program.lower_on_abstract_mesh:
        return jitted, program.args, None
    # Lower from shapes alone, then pick the devices at compile time.
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), program.args)
    return jitted, shapes, tuple(program.mesh.devices.flat)


def lower_route(program: Program, route: str) -> tuple[Any, float, tuple | None]:
    """Lower ``program`` with one route: the lowered program, the seconds it took and
    the devices to compile it for (``None``: those of its shardings)."""
    jitted, lower_args, devices = prepare(program, route)
    start = time.perf_counter()
    lowered = jitted.lower(*lower_args)
    return lowered, time.perf_counter() - start, devices


def build(program: Program, route: str) -> Build:
    """Lower and compile ``program`` with one route, timing each stage."""
    lowered, lower_seconds, devices = lower_route(program, route)
    start = time.perf_counter()
    compiled = lowered.compile() if devices is None else lowered.compile(device_assignment=devices)
    seconds = time.perf_counter() - start
    resolution = stage(lowered).cost_aware_resolution if route == COST_AWARE else None
    return Build(route, compiled, lower_seconds, seconds, resolution, stage(lowered))


def stage(wrapped: Any) -> Any:
    """jax's (or shardc's) ``Lowered`` / ``Compiled`` under a library's stage that wraps
    it, as equinox's ``filter_jit(...).lower(...)`` and its ``.compile()`` hold it in
    ``.lowered`` / ``.compiled``; ``wrapped`` itself when it is not such a wrapper. The
    figures are read from it, while calls go through the library's own stage."""
    for attribute in ("compiled", "lowered"):
        inner = getattr(wrapped, attribute, None)
        if inner is not None:
            return inner
    return wrapped


def build_routes(
    program: Program, routes: tuple[str, ...] = ROUTES, repeats: int = 1, warmup: bool = True
) -> tuple[dict[str, Build], dict, dict]:
    """Build each route ``repeats`` times, alternating the order of the routes.

    Returns the last builds and the median lower / compile seconds per route.
    One untimed lowering per route first (unless not ``warmup``: tests that
    need no times), and the alternating order, keep one-off warm-up costs of
    jax itself (its own caches of traced helpers) off whichever route happens
    to go first.
    """
    for route in routes if warmup else ():
        lower_route(program, route)
    lower = {route: [] for route in routes}
    compile_ = {route: [] for route in routes}
    builds: dict[str, Build] = {}
    for repeat in range(repeats):
        for route in routes if repeat % 2 == 0 else routes[::-1]:
            builds[route] = build(program, route)
            lower[route].append(builds[route].lower_seconds)
            compile_[route].append(builds[route].compile_seconds)
    median = {route: statistics.median(lower[route]) for route in routes}
    return builds, median, {route: statistics.median(compile_[route]) for route in routes}


# ----------------------------------------------------------------------------
# Figures read from the compiled programs
# ----------------------------------------------------------------------------


def copy_arrays(tree: Any) -> Any:
    """Fresh device copies of the ``jax.Array`` leaves of ``tree``, placed like them."""
    return jax.tree.map(
        lambda leaf: jax.device_put(leaf, leaf.sharding, may_alias=False)
        if isinstance(leaf, jax.Array) else leaf,
        tree,
    )  # fmt: skip


def call_args(program: Program) -> tuple:
    """The arguments of one call: ``program.args``, with fresh copies of the donated ones
    (a call consumes what it was donated), ready before the call."""
    if not program.donate_argnums:
        return program.args
    donated = {i % len(program.args) for i in program.donate_argnums}
    args = tuple(
        copy_arrays(arg) if i in donated else arg for i, arg in enumerate(program.args)
    )
    return jax.block_until_ready(args)


def mesh_context(program: Program) -> contextlib.AbstractContextManager:
    """``jax.set_mesh(program.mesh)`` for a program that asks for it, else nothing."""
    return jax.set_mesh(program.mesh) if program.mesh_context else contextlib.nullcontext()


def run(compiled: Any, program: Program) -> Any:
    """Call a compiled program and wait for it (collective programs must not overlap)."""
    return jax.block_until_ready(compiled(*call_args(program)))


def bitwise_equal(expected: Any, actual: Any) -> bool:
    """Whether two output pytrees have the same structure, dtypes and bytes."""
    expected_leaves, expected_tree = jax.tree.flatten(expected)
    actual_leaves, actual_tree = jax.tree.flatten(actual)
    if expected_tree != actual_tree:
        return False
    for want, got in zip(expected_leaves, actual_leaves):
        if not is_numeric(want):
            if want != got:
                return False
            continue
        want, got = host_array(want), host_array(got)
        if want.dtype != got.dtype or want.shape != got.shape:
            return False
        if want.tobytes() != got.tobytes():
            return False
    return True


def is_numeric(leaf: Any) -> bool:
    """Whether an output leaf holds numbers; a library's outputs may also hold static
    leaves (equinox's modules return their activation functions), compared by ``==``."""
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic, bool, int, float, complex))


def host_array(leaf: Any) -> np.ndarray:
    """An output leaf as a NumPy array (a typed PRNG key array as its key data)."""
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    return np.asarray(leaf)


def errors_of(expected: Any, actual: Any) -> tuple[float, float]:
    """``(max abs error, max relative error)`` of ``actual`` against ``expected``.

    The relative error of one output is its max abs error over its max abs
    value; the worst output counts.
    """
    expected_leaves, expected_tree = jax.tree.flatten(expected)
    actual_leaves, actual_tree = jax.tree.flatten(actual)
    if expected_tree != actual_tree:
        raise AssertionError(f"output trees differ: {expected_tree} vs {actual_tree}")
    worst_abs = worst_rel = 0.0
    for want, got in zip(expected_leaves, actual_leaves):
        if not is_numeric(want):
            if want != got:
                raise AssertionError(f"static outputs differ: {want!r} vs {got!r}")
            continue
        want, got = host_array(want), host_array(got)
        # Complex outputs keep their imaginary part (float64 would drop it).
        exact = np.complex128 if np.iscomplexobj(want) else np.float64
        want, got = want.astype(exact), got.astype(exact)
        if want.shape != got.shape:
            raise AssertionError(f"output shapes differ: {want.shape} vs {got.shape}")
        if want.size == 0:
            continue
        abs_error = float(np.max(np.abs(want - got)))
        scale = float(np.max(np.abs(want)))
        worst_abs = max(worst_abs, abs_error)
        worst_rel = max(worst_rel, abs_error / scale if scale else abs_error)
    return worst_abs, worst_rel


def mismatched_output_shardings(jax_compiled: Any, shardc_compiled: Any) -> list[str]:
    """Pytree paths of the outputs whose compiled shardings are not equivalent (paths of
    the compiled program's outputs: a library's wrapper may restructure what it returns)."""
    jax_compiled, shardc_compiled = stage(jax_compiled), stage(shardc_compiled)
    paths_and_outputs, _ = jax.tree_util.tree_flatten_with_path(jax_compiled.out_info)
    expected = jax.tree.leaves(jax_compiled.output_shardings)
    actual = jax.tree.leaves(shardc_compiled.output_shardings)
    if len(expected) != len(actual) or len(expected) != len(paths_and_outputs):
        return ["<different number of outputs>"]
    return [
        jax.tree_util.keystr(path) or "<output>"
        for (path, value), want, got in zip(paths_and_outputs, expected, actual)
        if not want.is_equivalent_to(got, len(value.shape))
    ]


def collectives_of(compiled: Any) -> dict[str, collectives.CollectiveSummary]:
    """Collective kinds in the partitioned HLO (the same parser for both routes)."""
    return collectives.summarize(collectives.find_collectives(stage(compiled).as_text()))


def collective_bytes_of(compiled: Any) -> int:
    """Collective bytes per device of all kinds in the partitioned HLO."""
    return sum(s.bytes_per_device for s in collectives_of(compiled).values())


def cost_aware_search(resolution: Any) -> dict[str, Any]:
    """The log of a cost-aware lowering's search (``Lowered.cost_aware_resolution``):
    evaluations (module propagations + cost predictions), region evaluations (the
    same on regions of at most 128 ops, ``compiler/cost_aware/regions.py``),
    predicted bytes per device of Shardy's choices and of the search's, and the
    conflicts it resolved otherwise than Shardy (``{}`` when ``resolution`` is None:
    the search did not run)."""
    if resolution is None:
        return {}
    return {
        "evaluations": resolution.evaluations,
        "region_evaluations": resolution.region_evaluations,
        "predicted_bytes": {"shardy": resolution.baseline_bytes,
                            "cost-aware": resolution.final_bytes},
        "resolved": [f"{d.name} at {d.location}: {d.chosen}"
                     for d in resolution.decisions if d.chosen],
    }  # fmt: skip


# How far a predicted collective kind may be from what XLA compiled (bytes per device).
COMM_TOLERANCE = 0.05


def predict(lowered: Any) -> dict[str, Any]:
    """What shardc predicts of a lowered program before compiling it: collective bytes
    per device per kind (``comm_report``) and memory per device (``memory_estimate``,
    net of aliased buffers, as ``memory_bytes_of`` counts XLA's)."""
    totals = lowered.comm_report().totals()
    return {
        "collectives": {kind: t.bytes_per_device for kind, t in totals.items() if t.count},
        "memory": lowered.memory_estimate().net_bytes,
    }


def kinds_off(predicted: dict[str, int], compiled: dict[str, int]) -> list[tuple[str, int, int]]:
    """``(kind, predicted, compiled)`` bytes per device of every collective kind whose
    prediction is off by more than ``COMM_TOLERANCE`` of what XLA compiled."""
    return [
        (kind, predicted.get(kind, 0), compiled.get(kind, 0))
        for kind in sorted(set(predicted) | set(compiled))
        if abs(predicted.get(kind, 0) - compiled.get(kind, 0))
        > COMM_TOLERANCE * compiled.get(kind, 0)
    ]  # fmt: skip


def memory_bytes_of(compiled: Any) -> int:
    """Bytes per device: arguments + outputs + temporaries - aliased (donated) buffers."""
    stats = stage(compiled).memory_analysis()
    return (
        stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        + stats.temp_size_in_bytes
        - stats.alias_size_in_bytes
    )


def ratio(value: float, reference: float) -> float | None:
    """``value / reference`` (shardc / jax.jit); 1 when both are zero, ``None`` when
    only the reference is."""
    if reference == 0:
        return 1.0 if value == 0 else None
    return value / reference


# ----------------------------------------------------------------------------
# Per-call time
# ----------------------------------------------------------------------------


def call_microseconds(
    calls: dict[str, Callable[..., Any]],
    rounds: int,
    round_seconds: float,
    args: Callable[[], tuple] | None = None,
) -> dict[str, float]:
    """Median microseconds per call of each route, rounds alternating between routes.

    Each round makes enough calls to last about ``round_seconds`` (at least
    one); every call is waited for before the next. Without ``args`` the calls
    take no arguments; with it, each call gets ``args()``'s arguments, made
    before the call and outside its time (fresh donated arguments).
    """

    def timed(call: Callable[..., Any]) -> float:
        if args is None:
            start = time.perf_counter()
            jax.block_until_ready(call())
            return time.perf_counter() - start
        call_with = args()
        start = time.perf_counter()
        jax.block_until_ready(call(*call_with))
        return time.perf_counter() - start

    for call in calls.values():  # compile (jitted functions) and warm up, untimed
        for _ in range(2):
            timed(call)
    per_round = {}
    for route, call in calls.items():
        one = timed(call)
        per_round[route] = max(1, min(1000, int(round_seconds / max(one, 1e-9))))
    count = min(per_round.values())  # the same number of calls on both sides
    samples = {route: [] for route in calls}
    for round_ in range(rounds):
        order = list(calls) if round_ % 2 == 0 else list(calls)[::-1]
        for route in order:
            call = calls[route]
            if args is None:
                start = time.perf_counter()
                for _ in range(count):
                    jax.block_until_ready(call())
                seconds = time.perf_counter() - start
            else:
                seconds = sum(timed(call) for _ in range(count))
            samples[route].append(seconds / count * 1e6)
    return {route: statistics.median(times) for route, times in samples.items()}


# ----------------------------------------------------------------------------
# One row
# ----------------------------------------------------------------------------


def compare(
    program: Program,
    *,
    repeats: int = 3,
    time_calls: bool = True,
    rounds: int = 5,
    round_seconds: float = 0.05,
    strict: bool = False,
    cost_aware: bool = False,
    warmup: bool = True,
    check_determinism: bool = False,
    time_routes: tuple[str, ...] = ROUTES,
) -> Comparison:
    """Measure ``program`` on both routes (and with ``propagation="cost-aware"``
    when ``cost_aware``).

    A failure is recorded in ``error`` (so one broken program does not end a
    benchmark run), or raised when ``strict``. ``warmup``: one untimed lowering
    per route first (``build_routes``); ``check_determinism``: fill
    ``jax_deterministic`` and ``bitwise_equal``; ``time_routes``: the routes
    whose per-call time is taken (with ``time_calls``).
    """
    row = Comparison(program.name, program.description, donated=bool(program.donate_argnums))
    routes = (*ROUTES, COST_AWARE) if cost_aware else ROUTES
    try:
        with mesh_context(program):
            _compare(
                row, program, routes, repeats, time_calls, rounds, round_seconds, warmup,
                check_determinism, time_routes,
            )  # fmt: skip
    except Exception as error:  # noqa: BLE001 - one program's failure must not end the run
        if strict:
            raise
        row.error = f"{type(error).__name__}: {error}"
    return row


def _compare(
    row: Comparison,
    program: Program,
    routes: tuple[str, ...],
    repeats: int,
    time_calls: bool,
    rounds: int,
    round_seconds: float,
    warmup: bool,
    check_determinism: bool,
    time_routes: tuple[str, ...],
) -> None:
    """``compare``'s measurements, filled into ``row`` (raises on failure)."""
    builds, lower, compile_ = build_routes(program, routes, repeats, warmup)
    record(row, program, builds, lower, compile_, check_determinism)
    if time_calls:
        record_call_times(row, program, tuple(r for r in time_routes if r in routes), rounds,
                          round_seconds)  # fmt: skip


def record(
    row: Comparison,
    program: Program,
    builds: dict[str, Build],
    lower: dict[str, float],
    compile_: dict[str, float],
    check_determinism: bool = False,
) -> None:
    """Fill ``row`` from the compiled routes (``"jax"``, ``"shardc"`` and optionally
    ``"cost-aware"``) and their median lower / compile seconds: numerics, output
    shardings, collectives, memory, times (and determinism when asked)."""
    jax_compiled, shardc_compiled = builds["jax"].compiled, builds["shardc"].compiled
    expected = run(jax_compiled, program)
    if check_determinism:
        row.jax_deterministic = bitwise_equal(expected, run(jax_compiled, program))
    actual = run(shardc_compiled, program)
    row.max_abs_error, row.max_rel_error = errors_of(expected, actual)
    if check_determinism:
        row.bitwise_equal["shardc"] = bitwise_equal(expected, actual)
    row.mismatched_outputs = mismatched_output_shardings(jax_compiled, shardc_compiled)
    row.output_shardings_match = not row.mismatched_outputs

    for route, build_ in builds.items():
        summaries = collectives_of(build_.compiled)
        row.collectives[route] = {
            kind: {"count": s.count, "bytes_per_device": s.bytes_per_device}
            for kind, s in summaries.items()
            if s.count
        }
        row.collective_bytes[route] = sum(s.bytes_per_device for s in summaries.values())
        row.memory_bytes[route] = memory_bytes_of(build_.compiled)
    row.collective_bytes_ratio = ratio(
        row.collective_bytes["shardc"], row.collective_bytes["jax"]
    )
    row.memory_ratio = ratio(row.memory_bytes["shardc"], row.memory_bytes["jax"])
    row.lower_seconds, row.compile_seconds = lower, compile_
    row.lower_ratio = ratio(lower["shardc"], lower["jax"])
    row.compile_ratio = ratio(compile_["shardc"], compile_["jax"])
    if COST_AWARE in builds:
        record_cost_aware(
            row, builds[COST_AWARE], program, expected, check_determinism,
            jax_compiled=jax_compiled,
        )


def record_call_times(
    row: Comparison, program: Program, routes: tuple[str, ...], rounds: int,
    round_seconds: float,
) -> None:  # fmt: skip
    """The per-call time of each route (fresh jitted functions, compiled untimed)."""
    jitted = {
        route: jax_jitted(program) if route == "jax"
        else shardc_jitted(program, PROPAGATION[route])
        for route in routes
    }  # fmt: skip
    if program.donate_argnums:
        row.call_microseconds = call_microseconds(
            jitted, rounds, round_seconds, args=lambda: call_args(program)
        )
    else:
        row.call_microseconds = call_microseconds(
            {route: functools.partial(fn, *program.args) for route, fn in jitted.items()},
            rounds,
            round_seconds,
        )
    row.call_ratio = ratio(row.call_microseconds["shardc"], row.call_microseconds["jax"])

def record_cost_aware(
    row: Comparison, build_: Build, program: Program, expected: Any,
    check_determinism: bool = False, jax_compiled: Any = None,
) -> None:  # fmt: skip
    """The cost-aware route's figures against jax.jit (bytes, memory, numerics, and
    output shardings when given ``jax_compiled``) and against shardc's
    Shardy-compatible lowering (time), and its search's log; the per-route
    figures of ``row`` must be filled already."""
    compiled = build_.compiled
    actual = run(compiled, program)
    row.cost_aware_max_rel_error = errors_of(expected, actual)[1]
    if check_determinism:
        row.bitwise_equal[COST_AWARE] = bitwise_equal(expected, actual)
    if jax_compiled is not None:
        row.cost_aware_mismatched_outputs = mismatched_output_shardings(jax_compiled, compiled)
    bytes_, memory, seconds = row.collective_bytes, row.memory_bytes, row.lower_seconds
    row.cost_aware_bytes_ratio = ratio(bytes_[COST_AWARE], bytes_["jax"])
    row.cost_aware_memory_ratio = ratio(memory[COST_AWARE], memory["jax"])
    row.cost_aware_lower_ratio = ratio(seconds[COST_AWARE], seconds["shardc"])
    row.cost_aware_search = cost_aware_search(build_.resolution)
