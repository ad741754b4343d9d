"""``jit`` with AUTO shardings: search once per signature, then an ordinary shardc ``jit``.

``AutoJitFunction.lower(*args)`` lowers the function once with the AUTO
arguments and results unspecified and unpropagated (their data's shardings
ignored: AUTO chooses), searches (``search``), and lowers again with the
choices as ``NamedSharding``s on the mesh: the ``Lowered`` is that ordinary
jit's (``in_shardings`` / ``out_shardings``, ``compile()``,
``input_shardings`` / ``output_shardings`` hold the choices), with
``auto_report()`` saying why. Calling the function searches the same way (once
per signature) and runs that jit: host arrays are placed by the choices,
committed arrays must already have them, as with ``jax.jit``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding

from shardc.compiler.auto.activations import (
    Constrained,
    anchors,
    chosen_constraints,
    cotangents,
    open_marks,
    with_cotangents,
)
from shardc.compiler.auto.candidates import structure_groups
from shardc.compiler.auto.evaluate import Evaluator
from shardc.compiler.auto.explicit import explicit_axes, on_mesh, searched, typed_function
from shardc.compiler.auto.layers import CARRIED, Cut, anchor_signature, cut_layers, vote
from shardc.compiler.auto.marker import (
    AutoShardingError,
    broadcast,
    has_auto,
    is_auto,
    without_auto,
)
from shardc.compiler.auto.report import AutoReport, auto_report, partition_spec
from shardc.compiler.auto.search import Group, Outcome, Search, make_groups
from shardc.compiler.cost.platforms import hardware
from shardc.compiler.function.caches import static_keys
from shardc.compiler.function.tracing import tracing_mesh
from shardc.compiler.lowered import Traced
from shardc.compiler.signature import context_mesh

# XLA:CPU's memory analysis is its buffer assignment's, made before code generation: the
# compile that reads it skips LLVM's optimisations (seconds on a large step).
_MEMORY_ONLY_CODEGEN = {"xla_backend_optimization_level": 0,
                        "xla_llvm_disable_expensive_passes": True}

# (in_shardings, out_shardings[, function][, on=mesh]) -> the jit of the function (or of
# ``function``: the same one with activation constraints) with those shardings, on ``mesh``
# (else the one given), every other option as given.
MakeJit = Callable[..., Any]


class AutoJitFunction:
    """What ``jit`` returns when a leaf of its shardings is ``AUTO``."""

    def __init__(self, fun: Callable, in_shardings: Any, out_shardings: Any, *,
                 mesh: Mesh | AbstractMesh | None, memory_budget: int | None,
                 make_jit: MakeJit):
        if not has_auto(in_shardings, out_shardings):
            raise AutoShardingError(
                "memory_budget bounds the search of AUTO shardings, and no leaf of "
                "in_shardings or out_shardings is AUTO")
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings
        self.mesh = mesh
        self.memory_budget = memory_budget
        self._make_jit = make_jit
        # The function with AUTO unspecified: jit's own validation of every other
        # option happens here, when ``jit`` is called, as jax.jit's.
        self._open = make_jit(without_auto(in_shardings), without_auto(out_shardings))
        self._searched: dict[tuple, tuple[Any, AutoReport]] = {}

    def __repr__(self) -> str:
        return f"<PjitFunction of {self.fun!r} with AUTO shardings>"

    def lower(self, *args: Any, **kwargs: Any):
        """Search the AUTO shardings for these arguments and lower with them."""
        jitted, report = self._choose(args, kwargs)
        lowered = jitted.lower(*args, **kwargs)
        lowered.auto = report
        return lowered

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        jitted, _ = self._choose(args, kwargs)
        return jitted(*args, **kwargs)

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        return self._open.eval_shape(*args, **kwargs)

    def trace(self, *args: Any, **kwargs: Any) -> Traced:
        """The function traced with AUTO unspecified; its ``lower()`` searches for the
        platform it lowers for (``lowering_platforms``' first, e.g. ``("tpu",)`` on an
        ``AbstractMesh``; else the mesh's devices'), then lowers with the choices."""
        opened = self._open.trace(*args, **kwargs)

        def lower(*, lowering_platforms: Any = None, propagate: bool | None = None,
                  lowering_parameters: Any = None) -> Any:
            platform = lowering_platforms[0] if lowering_platforms else None
            jitted, report = self._choose(args, kwargs, platform)
            lowered = jitted.trace(*args, **kwargs).lower(
                lowering_platforms=lowering_platforms, propagate=propagate,
                _private_parameters=lowering_parameters)
            lowered.auto = report
            return lowered

        return Traced(opened._jax_traced, lower, opened.out_info)

    # -- the search ----------------------------------------------------------

    def _choose(self, args: tuple, kwargs: dict, platform: str | None = None
                ) -> tuple[Any, AutoReport]:
        mesh = context_mesh(self.mesh)
        if mesh is None or not mesh.axis_names:
            raise AutoShardingError(
                "AUTO shardings need a mesh to choose shardings on: pass jit(..., mesh=...) "
                "or call under jax.set_mesh(...)")
        static = self._static_positions(len(args))
        dynamic = tuple(a for i, a in enumerate(args) if i not in static)
        dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in self._open.static_argnames}
        # jax's error for an unhashable static argument, before the search traces with it.
        static_keys([a for i, a in enumerate(args) if i in static]
                    + [v for k, v in kwargs.items() if k not in dynamic_kwargs])
        platform = platform or _platform(mesh)
        key = (_signature(args, kwargs), mesh, platform)
        found = self._searched.get(key)
        if found is None:
            found = self._searched[key] = self._search(args, kwargs, dynamic, dynamic_kwargs,
                                                       mesh, platform)
        return found

    def _static_positions(self, count: int) -> set[int]:
        return {i if i >= 0 else count + i for i in self._open.static_argnums}

    def _search(self, args: tuple, kwargs: dict, dynamic: tuple, dynamic_kwargs: dict,
                mesh: Mesh | AbstractMesh, platform: str) -> tuple[Any, AutoReport]:
        static = self._static_positions(len(args))
        abstract = [_abstract(a) if i not in static else a for i, a in enumerate(args)]
        abstract_kwargs = {k: (_abstract(v) if k in dynamic_kwargs else v)
                           for k, v in kwargs.items()}
        budget = self.memory_budget if self.memory_budget is not None else _device_memory(mesh)
        axes = [(name, size) for name, size in mesh.shape.items() if size > 1]
        on = searched(mesh)  # Explicit axes made Auto (``explicit``)
        try:
            full = self._program(abstract, abstract_kwargs, dynamic, dynamic_kwargs, on,
                                 platform)
        except ValueError as error:
            if on is mesh:
                raise
            # jax's own error (a ``reshard`` onto those axes, an ``out_sharding``), with
            # what AUTO did to the mesh to meet it.
            raise AutoShardingError(
                f"AUTO on a mesh of Explicit axes {explicit_axes(mesh)} runs the function "
                "with them Auto (jax.sharding.auto_axes), where it cannot name them in "
                "a type: give AUTO a mesh of Auto axes, or constrain with "
                f"with_sharding_constraint instead. {error}") from error
        cut = None
        if is_auto(self.in_shardings) and (is_auto(self.out_shardings)
                                           or self.out_shardings is None):
            cut = cut_layers(([abstract[i] for i in range(len(args)) if i not in static],
                              {k: abstract_kwargs[k] for k in dynamic_kwargs}))
        found = None if cut is None else self._search_cut(
            cut, abstract, abstract_kwargs, static, full, on, platform, axes, budget)
        if found is None:  # nothing to cut, or the cut cannot stand for the step
            search = Search(full.evaluator, full.groups, axes, budget)
            found = search.run(), search
        outcome, search = found
        if budget is not None and isinstance(mesh, Mesh) and platform == _platform(mesh):
            # The budget is the devices' memory as XLA compiles the program for them.
            outcome = search.fit_compiled(outcome, lambda chosen: self._compiled_memory(
                chosen, full, mesh, dynamic, abstract, abstract_kwargs, platform))
        return self._chosen(outcome, full, mesh, dynamic), auto_report(outcome)

    def _compiled_memory(self, outcome: Outcome, program: _Program, mesh: Mesh, dynamic: tuple,
                         args: list, kwargs: dict, platform: str) -> int | None:
        """Per-device bytes of the outcome's program as XLA compiles it for the mesh's
        devices (its memory analysis: arguments + outputs + temporaries - aliased);
        None where XLA cannot compile it here."""
        options = _MEMORY_ONLY_CODEGEN if platform == "cpu" else None
        try:
            return self._chosen(outcome, program, mesh, dynamic).lower(
                *args, **kwargs).compile(compiler_options=options).memory_bytes()
        except jax.errors.JaxRuntimeError:
            return None

    def _program(self, abstract: list, abstract_kwargs: dict, dynamic: Any, dynamic_kwargs: Any,
                 mesh: Mesh | AbstractMesh, platform: str) -> _Program:
        """The search's program for these arguments on ``mesh`` (of Auto axes where it
        searches): lowered with an open mark on every anchor, read by an ``Evaluator``,
        its AUTO arguments and marks in groups."""
        # The activations AUTO may constrain: the search's program marks each. Traced
        # under the mesh the jit traces it under: one trace, the same equations.
        marked = Constrained(self.fun, self._open.static_argnums, self._open.static_argnames,
                             lambda index, aval: None)
        with tracing_mesh(mesh):
            jaxpr = marked.jaxpr(*abstract, **abstract_kwargs)[0]
        # Each anchor's cotangent is marked too, in its anchor's group: one choice
        # constrains both, as with_sharding_constraint does.
        found = anchors(jaxpr)
        owner = cotangents(jaxpr, found)
        points = sorted({*found, *owner})
        if points:
            marked.sharding_at = open_marks(mesh, set(points))
        opened = self._make_jit(on_mesh(without_auto(self.in_shardings), mesh),
                                on_mesh(without_auto(self.out_shardings), mesh),
                                marked if points else self.fun, on=mesh)
        open_lowered = opened.trace(*abstract, **abstract_kwargs).lower(propagate=False)
        leaves = jax.tree.leaves((dynamic, dynamic_kwargs))
        given_in = broadcast(self.in_shardings, dynamic) + [None] * (
            len(leaves) - len(jax.tree.leaves(dynamic)))
        given_out = broadcast(self.out_shardings, open_lowered.out_avals)

        evaluator = Evaluator(open_lowered.module, hardware(platform), mesh)
        first = len(evaluator.arguments) - len(leaves)  # tokens come first
        auto_leaves = [i for i, s in enumerate(given_in) if is_auto(s)]
        positions = [first + i for i in auto_leaves]
        names = list(open_lowered.arg_names or [f"args leaf {i}" for i in range(len(leaves))])
        axes = [(name, size) for name, size in mesh.shape.items() if size > 1]
        reader = evaluator.reader()
        structure = structure_groups(reader, [evaluator.arguments[p] for p in positions])
        groups = make_groups(evaluator, positions, [names[i] for i in auto_leaves], axes,
                             structure)
        if len(evaluator.marks) == len(points):  # else a mark did not survive as one
            marks = [len(evaluator.arguments) + k for k in range(len(points))]
            groups += make_groups(
                evaluator, marks, [f"activation of equation {i}" for i in points], axes,
                with_cotangents(structure_groups(reader, evaluator.marks), points, owner),
                activation=True)
        return _Program(marked, jaxpr, points, evaluator, groups, first, given_in, given_out,
                        open_lowered.out_avals)

    def _search_cut(self, cut: Cut, abstract: list, abstract_kwargs: dict, static: set[int],
                    full: _Program, mesh: Mesh | AbstractMesh, platform: str,
                    axes: list, budget: int | None) -> tuple[Outcome, Search] | None:
        """Search the step with its long lists of layers cut (``layers``), carry its
        best few states and its refined textbook state (``Search.refined``) to every
        layer, and price those on the full step beside the
        textbook configurations (``Search.confirm``: the budget is judged there): its
        outcome and that search; None where the cut step cannot stand for the full one."""
        positional, keywords = cut.tree
        rest = iter(positional)
        cut_args = [a if i in static else next(rest) for i, a in enumerate(abstract)]
        cut_kwargs = {**abstract_kwargs, **keywords}
        try:
            small = self._program(cut_args, cut_kwargs, positional, keywords, mesh, platform)
        except (IndexError, KeyError, TypeError, ValueError, AssertionError):
            # The function reads the list's length (an index past the cut, a check of
            # its length): it is searched whole.
            return None
        # The cut step judges memory by its quick live-range peak (``Search.peak_scale``),
        # the memory model's several propagations per state being most of a budgeted
        # search: the peak is put in the model's bytes by their ratio on one state
        # (every argument left to propagation) of the cut step, and the budget scaled
        # as the peaks of that state on either step (the cut step keeps the embedding,
        # the head and the loss whole, so no count of layers scales it). The full
        # step's confirmation judges its best few states by the memory model and the
        # budget itself.
        scaled = scale = None
        if budget is not None:
            small_open, reader = small.evaluator({})
            full_open, _ = full.evaluator({})
            scale = small.evaluator.memory(reader) / max(small_open.memory_peak, 1)
            scaled = int(budget * small_open.memory_peak / max(full_open.memory_peak, 1))
        search = Search(small.evaluator, small.groups, axes, scaled, peak_scale=scale)
        found = search.run()
        states = []
        refined = [search.refined] if search.refined is not None else []
        for cut_state in search.best_states(CARRIED) + refined:
            state = self._carry(cut, small, cut_state, full)
            if state is None:  # a group without a cut counterpart: search it all
                return None
            if state not in states:
                states.append(state)
        confirming = Search(full.evaluator, full.groups, axes, budget)
        outcome = confirming.confirm(states)
        outcome.evaluations += found.evaluations
        outcome.seconds += found.seconds
        return outcome, confirming

    @staticmethod
    def _carry(cut: Cut, small: _Program, cut_state: dict, full: _Program) -> dict | None:
        """The full step's state (a spec per group) that the cut step's ``cut_state``
        stands for: each argument's spec its cut counterpart's, each activation group's
        the one its anchors' like took; None where a group has no counterpart."""
        spec_at = {p: cut_state[g] for g, group in enumerate(small.groups)
                   for p in group.positions}
        like: dict[tuple, list] = {}  # an anchor's signature -> the specs its like took
        for k, index in enumerate(small.points):
            position = len(small.evaluator.arguments) + k
            if position in spec_at:
                like.setdefault(anchor_signature(small.jaxpr.jaxpr.eqns[index]), []).append(
                    spec_at[position])
        state = {}
        for g, group in enumerate(full.groups):
            if group.activation:
                specs = [s for p in group.positions for s in like.get(anchor_signature(
                    full.jaxpr.jaxpr.eqns[full.points[p - len(full.evaluator.arguments)]]), [])]
            else:
                specs = [spec_at[small.first + cut.origin[p - full.first]]
                         for p in group.positions
                         if small.first + cut.origin[p - full.first] in spec_at]
            spec = vote(specs)
            if spec is None and not group.activation:
                return None
            if spec not in group.candidates:
                group.candidates.append(spec)
            state[g] = spec
        return state

    def _chosen(self, outcome: Outcome, program: _Program, mesh: Mesh | AbstractMesh,
                dynamic: tuple) -> Any:
        """The jit of the function with the outcome's shardings and constraints; on a mesh
        of Explicit axes, the function run with them Auto, its results typed with the
        chosen shardings (``explicit``)."""
        points, evaluator = program.points, program.evaluator
        constraints = {}
        for group in outcome.groups:
            if group.activation and group.chosen is not None:
                # the body's axes are Auto where the caller's are Explicit
                sharding = NamedSharding(searched(mesh), partition_spec(group.chosen))
                for position in group.positions:
                    constraints[points[position - len(evaluator.arguments)]] = sharding
        function = self.fun
        if constraints:
            function = Constrained(self.fun, self._open.static_argnums,
                                   self._open.static_argnames, chosen_constraints(constraints),
                                   program.marked.traced)
        chosen = {}
        for group in (g for g in outcome.groups if not g.activation):
            sharding = NamedSharding(mesh, partition_spec(group.chosen))
            for position in group.positions:
                chosen[position - program.first] = sharding
        in_leaves = [chosen.get(i, s) for i, s in enumerate(program.given_in)][
            :len(jax.tree.leaves(dynamic))]
        in_tree = jax.tree.unflatten(jax.tree.structure(dynamic), in_leaves)
        given_out = program.given_out
        result_first = len(outcome.results) - len(given_out)
        typed = bool(explicit_axes(mesh))

        def result(k: int, given: Any) -> Any:
            if not (is_auto(given) or (typed and given is None)):
                return given
            spec = outcome.results[result_first + k]
            if spec is None:  # a sub-axis sharding: left to jit, or replicated as a type
                return NamedSharding(mesh, jax.sharding.PartitionSpec()) if typed else None
            return NamedSharding(mesh, partition_spec(spec))

        out_leaves = [result(k, s) for k, s in enumerate(given_out)]
        out_tree = jax.tree.unflatten(jax.tree.structure(program.out_avals), out_leaves)
        if typed:
            function = typed_function(function, mesh, out_tree, self._open.static_argnums,
                                      self._open.static_argnames)
        return self._make_jit(in_tree, out_tree, function)


@dataclass
class _Program:
    """The search's program for one signature (``AutoJitFunction._program``)."""

    marked: Constrained
    jaxpr: Any
    points: list[int]  # the anchors' equation indices, in mark order
    evaluator: Evaluator
    groups: list[Group]
    first: int  # the evaluator position of the first dynamic argument leaf
    given_in: list
    given_out: list
    out_avals: Any


def _abstract(tree: Any) -> Any:
    """Array leaves as ``ShapeDtypeStruct``s without a sharding: AUTO ignores the data's."""
    def leaf(x: Any) -> Any:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return jax.ShapeDtypeStruct(np.shape(x), x.dtype,
                                        weak_type=getattr(x, "weak_type", False))
        return x
    return jax.tree.map(leaf, tree)


def _signature(args: tuple, kwargs: dict) -> tuple:
    """What the search depends on: the tree, and each leaf's type (or static value)."""
    def key(x: Any) -> Any:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return (tuple(np.shape(x)), str(x.dtype), getattr(x, "weak_type", False))
        try:
            hash(x)
            return x
        except TypeError:
            return id(x)
    leaves, tree = jax.tree.flatten((args, kwargs))
    return tree, tuple(map(key, leaves))


def _platform(mesh: Mesh | AbstractMesh) -> str:
    """The platform of the mesh's devices; "cpu" for an ``AbstractMesh`` lowered
    without ``lowering_platforms``."""
    if isinstance(mesh, Mesh):
        return mesh.devices.flat[0].platform
    return "cpu"


def _device_memory(mesh: Mesh | AbstractMesh) -> int | None:
    """The memory of one of the mesh's devices where the platform says (none on CPU)."""
    if not isinstance(mesh, Mesh):
        return None
    device = mesh.devices.flat[0]
    if device.platform == "cpu":
        return None
    try:
        stats = device.memory_stats() or {}
    except (NotImplementedError, RuntimeError):  # a platform without memory statistics
        return None
    return stats.get("bytes_limit")
