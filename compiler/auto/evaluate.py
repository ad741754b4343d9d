"""Propagating one candidate assignment of argument shardings, and pricing it.

``Evaluator(module)`` takes the program as lowered with the AUTO arguments and
results carrying no sharding, runs the import stage on a copy once and reads
it once (``propagation.SharedRead``). Each call then starts Shardy-compatible
user-priority propagation from that read with some function arguments closed
to a candidate sharding (the others left as they are: open ones settle with
the candidate) and prices the result with ``objective.step_time``; ``memory``
gives a state's memory by ``Lowered.memory_estimate``'s model (what a budget is
judged by). A module
the shared read cannot stand for (manual computations, sharding groups)
propagates a copy per candidate instead: slower, the same answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from jaxlib.mlir import ir

from shardc.compiler.auto.activations import in_program_order, is_open_mark, mark_values
from shardc.compiler.auto.objective import StepTime, memory_bytes, step_time
from shardc.compiler.cost.platforms import Hardware, hardware, predicting_for
from shardc.compiler.cost_aware.candidates import tag_ops
from shardc.compiler.cost_aware.pricing import attach_rules
from shardc.compiler.explain.aliasing import donations
from shardc.compiler.explain.grid import shard_shape
from shardc.compiler.propagation import PLANS, SharedRead, cyclic_gc_paused
from shardc.compiler.propagation.driver import Driver
from shardc.compiler.propagation.graph import ReadMemo
from shardc.compiler.propagation.values import CostMemo, ModuleValues, element_bytes
from shardc.compiler.sharding.tensor import TensorSharding, format_per_value, format_sharding
from shardc.compiler.stages import import_pipeline, xla_import_rewrites
from shardc.dialects import sdy
from shardc.dialects.sdy import SHARDING_ATTR

_PLAN = "user-priority"


class Evaluator:
    """Prices assignments ``{argument position: closed TensorSharding}`` of one program."""

    def __init__(self, module: ir.Module, speeds: Hardware, mesh: Any = None):
        self.speeds = speeds
        self.count = 0
        self.costs = CostMemo(ReadMemo())
        self.work: dict = {}  # ``step_time``'s memo
        # Assignments that propagate to the same shardings are the same state (an open
        # activation constraint propagation fills as it would unconstrained, say): its
        # step and memory are read once, by ``signature``.
        self._steps: dict[tuple, StepTime] = {}
        self._memories: dict[tuple, int] = {}
        with module.context:
            imported = module.operation.clone()
            if mesh is not None:
                _declare_mesh(imported, mesh)
            xla_import_rewrites(imported)
            import_pipeline(imported)
            tag_ops(imported)
            # One propagation written to a copy attaches every op's rule to the imported
            # module, so the propagations of the shared read attach none (the cost
            # model reads rules from the IR).
            first = ModuleValues.propagated(imported.clone(), plan=_PLAN, conservative=False,
                                            missing_as_replicated=True, costs=self.costs)
            attach_rules(imported, first)
        self.imported = imported
        self.read = SharedRead(imported.clone(), memo=self.costs.reads)
        self._first: Driver | None = None
        graph = self.read.graph
        arguments, results = main_values(self.read)
        self.arguments: list[int] = list(arguments)
        self.results: list[int] = list(results)
        # The activations AUTO may constrain (``activations``): the open marks' results,
        # at positions after the arguments'.
        self.marks: list[int] = mark_values(graph)
        # The mesh symbol the candidates name: the one with the most devices (a module
        # may also hold an empty mesh, or a maximal one for a callback).
        meshes = self.read.store.meshes
        self.mesh = max(meshes, key=lambda name: math.prod(meshes[name].sizes.values()),
                        default=None)

    def reader(self) -> ModuleValues:
        """The module as read, before any propagation (what groups arguments by structure)."""
        reader = ModuleValues(self.read.graph.module, read=(self.read.graph, self.read.store),
                              costs=self.costs)
        reader.facts = self.read.facts
        return reader

    def value_at(self, position: int) -> int:
        """The graph value of an assignment position: function argument ``position``, or
        past the arguments, mark ``position - len(arguments)``."""
        count = len(self.arguments)
        return self.arguments[position] if position < count else self.marks[position - count]

    def element_bytes(self, value: int) -> int:
        """Bytes of one element of graph value ``value``."""
        return element_bytes(self.read.graph.values[value].type)

    def __call__(self, assignment: Mapping[int, TensorSharding]) -> tuple[StepTime, ModuleValues]:
        """The modelled step of the program with these arguments closed to these shardings,
        and its propagated values (function argument ``k`` is ``arguments[k]``)."""
        self.count += 1
        reader = self._on_read(assignment) if self.read.usable else None
        if reader is None:
            reader = self._on_copy(assignment)
        signature = self.signature(reader)
        found = self._steps.get(signature) if signature is not None else None
        if found is None:
            # Collectives as XLA forms them for the device's platform (reduce-scatters on TPU).
            with predicting_for(self.speeds.rules):
                found = step_time(reader, self.speeds, self.work)
            if signature is not None:
                self._steps[signature] = found
        return found, reader

    def memory(self, reader: ModuleValues) -> int:
        """Per-device bytes of a state as ``Lowered.memory_estimate`` models them:
        arguments + outputs + the heap of temporaries - aliased."""
        signature = self.signature(reader)
        found = self._memories.get(signature) if signature is not None else None
        if found is None:
            found = memory_bytes(reader, self.speeds)
            if signature is not None:
                self._memories[signature] = found
        return found

    def floor(self, reader: ModuleValues) -> int:
        """A lower bound of ``memory(reader)`` read off the arguments' and results'
        shardings alone: their unpadded bytes per device (the arguments' alone where
        one is donated: a result may take its buffer). The memory model adds the
        temporaries, the layout's padding, and counts the aliased bytes once."""
        graph, store = reader.graph, reader.store
        main = main_function(reader)
        # The reader's own values: a propagated copy (``_on_copy``) numbers them anew.
        arguments, results = main_values(reader)
        donated = any(d is not None for d in donations(graph.ops[main]))
        total = sum(self._shard_bytes(reader, value, store.value[store.slot_of[value]])
                    for value in arguments if store.slot_of[value] >= 0)
        if not donated:
            total += sum(self._shard_bytes(reader, value, store.value[slot])
                         for value, slot in zip(results, store.func_results[main]))
        return total

    def _shard_bytes(self, reader: ModuleValues, value: int, sharding) -> int:
        shape = reader.graph.value_shape[value]
        if shape is None:
            return 0
        return math.prod(shard_shape(shape, sharding)) * self.element_bytes(value)

    def signature(self, reader: ModuleValues) -> tuple | None:
        """What a state propagated on the shared read is: every value's interned sharding
        (the read's stores share one table) and the ops propagation erased; None for a
        propagated copy (a graph of its own)."""
        if reader.graph is not self.read.graph:
            return None
        return tuple(reader.store.sid), tuple(reader.store.erase_log)

    def _on_read(self, assignment: Mapping[int, TensorSharding]) -> ModuleValues | None:
        read = self.read
        store = read.store.fresh_copy(
            None if self._first is None else self._first.store.readers)
        graph = read.graph
        for position, sharding in assignment.items():
            value = self.value_at(position)
            slots = [store.slot_of[value]]
            if position >= len(self.arguments) and _closed(sharding):
                # The import gives a closed constraint's sharding to the op it constrains
                # (``apply_sharding_constraints``): the state the program AUTO returns has.
                operand = graph.op_operands[graph.value_def[value]][0]
                if graph.value_def[operand] >= 0:
                    slots.append(store.slot_of[operand])
            for slot in slots:
                if slot < 0:
                    return None
                store.value[slot] = sharding
                store.sid[slot] = store.intern(sharding)
        with cyclic_gc_paused():
            driver = Driver(read.graph, store, {}, after=self._first)
            PLANS[_PLAN](driver)
        if self._first is None and driver.reusable():
            self._first = driver
        if read.rules_to_attach():
            return None
        reader = ModuleValues(read.graph.module, missing_as_replicated=True,
                              read=(read.graph, store), costs=self.costs)
        reader.facts = read.facts
        return reader

    def _on_copy(self, assignment: Mapping[int, TensorSharding]) -> ModuleValues:
        with self.imported.context:
            copy = self.imported.clone()
            func = next(op for op in copy.regions[0].blocks[0].operations
                        if op.operation.name == "func.func")
            attrs = list(ir.ArrayAttr(func.attributes["arg_attrs"])) if (
                "arg_attrs" in func.attributes) else [ir.DictAttr.get({})] * len(self.arguments)
            for position, sharding in assignment.items():
                if position >= len(self.arguments):
                    continue
                entries = ir.DictAttr(attrs[position])
                values = {entries[i].name: entries[i].attr for i in range(len(entries))}
                values[SHARDING_ATTR] = ir.Attribute.parse(format_sharding(sharding))
                attrs[position] = ir.DictAttr.get(values)
            func.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
            marks = _mark_ops(copy)
            for position, sharding in assignment.items():
                if position < len(self.arguments):
                    continue
                mark = marks[position - len(self.arguments)]
                mark.attributes["sharding"] = ir.Attribute.parse(format_sharding(sharding))
                producer = mark.operands[0].owner
                if _closed(sharding) and isinstance(producer, ir.Operation) and (
                        len(producer.results) == 1):
                    producer.attributes[SHARDING_ATTR] = ir.Attribute.parse(
                        format_per_value([sharding]))
            return ModuleValues.propagated(copy, plan=_PLAN, conservative=False,
                                           missing_as_replicated=True, costs=self.costs)


def main_values(reader: ModuleValues) -> tuple[list[int], list[int]]:
    """The value numbers of the main function's arguments and returned values in
    ``reader`` (each read numbers them anew)."""
    graph = reader.graph
    arguments, ops = graph.op_blocks[main_function(reader)][0]
    return arguments, graph.op_operands[ops[-1]]


def main_function(reader: ModuleValues) -> int:
    """The op number of ``reader``'s main function (the one no op holds)."""
    return next(f for f in reader.store.funcs if reader.graph.op_parent[f] == -1)


def _closed(sharding: TensorSharding) -> bool:
    return all(dim.closed for dim in sharding.dims)


def _mark_ops(module: ir.Operation) -> list[ir.Operation]:
    """The open marks of ``module`` (``activations``), in jax's order
    (``mark_values``')."""
    found = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if is_open_mark(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return [found[k] for k in in_program_order(found)]


def _declare_mesh(module: ir.Operation, mesh: Any) -> None:
    """Give ``module`` a symbol for ``mesh`` where it declares no mesh with axes: a
    program whose every sharding is AUTO, on an ``AbstractMesh`` (no device
    assignment writes one), names none, and the candidates need one."""
    body = module.regions[0].blocks[0]
    names = set()
    for op in body.operations:
        if op.operation.name == "sdy.mesh":
            if sdy.MeshAttr(op.operation.attributes["mesh"]).axes:
                return
            names.add(ir.StringAttr(op.operation.attributes["sym_name"]).value)
    name = next(n for n in ("mesh", *(f"mesh_{i}" for i in range(len(names) + 1)))
                if n not in names)
    sdy.MeshOp(name, sdy.mesh_attr(mesh, with_device_ids=False),
               ip=ir.InsertionPoint.at_block_begin(body), loc=ir.Location.unknown())


def modelled_step(unpropagated: ir.Module, platform: str = "cpu") -> StepTime:
    """The objective of a program lowered with its shardings given and not propagated
    (``jit(...).trace(*args).lower(propagate=False).module``): what AUTO's search would
    price it at, to compare hand-written shardings with its choice."""
    return Evaluator(unpropagated, hardware(platform))({})[0]
