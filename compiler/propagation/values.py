"""Shapes, element sizes and shardings of every value of a module, read once.

``ModuleValues`` wraps the propagation engine's compact graph and sharding
store (``shardc.compiler.propagation``), so the cost model and the checks
read shardings exactly where propagation writes them (function arguments and
results, per-value op attributes, sdy op attributes, data-flow edges, manual
computations). Values are graph indices.
"""

from __future__ import annotations

import functools

from jaxlib.mlir import ir

from shardc.compiler.propagation import propagate_read
from shardc.compiler.propagation.graph import PropagationGraph, ReadMemo
from shardc.compiler.propagation.ir_access import ShardingStore
from shardc.compiler.sharding.rule import OpShardingRule
from shardc.compiler.sharding.rules import rule_for
from shardc.compiler.sharding.tensor import DimSharding, MeshInfo, Tensor, TensorSharding


def element_bytes(type_: ir.Type) -> int:
    """Bytes of one element of a tensor type (at least 1; i1 counts as a byte)."""
    element = ir.ShapedType(type_).element_type
    if isinstance(element, ir.ComplexType):
        inner = element.element_type
        return 2 * max(1, getattr(inner, "width", 32) // 8)
    width = getattr(element, "width", None)
    return max(1, width // 8) if isinstance(width, int) else 4


@functools.cache  # a few (mesh, rank) pairs, asked for every value without a sharding
def replicated(mesh: str, rank: int) -> TensorSharding:
    """The closed, fully replicated sharding of a rank-``rank`` tensor."""
    return TensorSharding(mesh, (DimSharding((), True),) * rank)


class ModuleValues:
    """The values of one module: shape, element size and sharding by graph index.

    With ``missing_as_replicated`` a value that carries no sharding reads as
    replicated on the module's first mesh (what XLA assumes once propagation
    is over); otherwise it reads as None (unknown).
    """

    def __init__(self, module: ir.Operation, *, missing_as_replicated: bool = False,
                 read: tuple[PropagationGraph, ShardingStore] | None = None):
        if read is None:
            graph = PropagationGraph(module)
            read = graph, ShardingStore(graph)
        self.graph, self.store = read
        self.meshes: dict[str, MeshInfo] = self.store.meshes
        self.mesh = next(iter(self.meshes), None) if missing_as_replicated else None
        # XLA reshards a value to a given sharding once and reuses it (reshard cache).
        self.resharded: set[tuple[int, tuple]] = set()
        # (element bytes, element type) per uniqued type: the cost model asks per use.
        self._elements: dict[int, tuple[int, str]] = {}
        # Each value as a Tensor: the cost model asks per use, and a module is read
        # once (its shardings never change under a reader).
        self._tensors: dict[int, Tensor | None] = {}
        self.funcs = {
            ir.StringAttr(self.graph.ops[op].attributes["sym_name"]).value: op
            for op, name in enumerate(self.graph.op_name) if name == "func.func"
        }

    @classmethod
    def propagated(cls, module: ir.Operation, *, plan: str, conservative: bool,
                   missing_as_replicated: bool = False,
                   memo: ReadMemo | None = None) -> ModuleValues:
        """Propagate ``module`` in place (keeping the rules it used), then read it.

        The propagation's own graph and store are read (``propagate_read``)
        unless they differ from the module's: where it erased ops, or where a
        manual computation's in-shardings may have been rewritten. ``memo``:
        ``propagate_read``'s.
        """
        graph, store = propagate_read(module, plan=plan, conservative=conservative,
                                      keep_sharding_rules=True, memo=memo)
        if any(graph.erased) or store.manual:
            return cls(module, missing_as_replicated=missing_as_replicated)
        return cls(module, missing_as_replicated=missing_as_replicated, read=(graph, store))

    def mesh_of(self, *shardings: TensorSharding | None) -> MeshInfo | None:
        """The ``sdy.mesh`` of the first sharding given, for the reshard cost model.

        ``reshard_collectives(..., mesh=)`` needs it to order the devices the
        way XLA does (every mesh axis, in mesh order). None when no sharding
        is given, the mesh is unknown or has no axes, or a sharding names an
        axis the mesh lacks; the model then orders the axes the shardings name.
        """
        first = next((s for s in shardings if s is not None), None)
        if first is None:
            return None
        mesh = self.meshes.get(first.mesh)
        if mesh is None or not mesh.sizes:
            return None
        sizes = mesh.sizes
        for sharding in shardings:
            if sharding is None:
                continue
            if sharding.mesh != first.mesh and self.meshes.get(sharding.mesh) != mesh:
                return None
            for dim in sharding.dims:
                for axis in dim.axes:  # plain loops: the cost model asks once per op
                    if axis.name not in sizes:
                        return None
        return mesh

    def sharding(self, value: int) -> TensorSharding | None:
        """The value's sharding (see the class docstring for missing ones)."""
        sharding = self.store.get(value)
        graph = self.graph
        if sharding is None and graph.value_def[value] == -1:
            owner = graph.value_owner[value]
            if graph.op_name[owner] == "stablehlo.while":
                # After the edges are sunk, the loop's per-value sharding is also
                # that of its body and condition arguments.
                sharding = self.store.get(graph.op_results[owner][graph.value_arg_index[value]])
        if sharding is None and self.mesh is not None:
            return replicated(self.mesh, self.graph.value_rank(value))
        return sharding

    def tensor(self, value: int) -> Tensor | None:
        """The value as the cost model sees it; None for non-static or non-tensor values."""
        try:
            return self._tensors[value]
        except KeyError:
            tensor = self._tensors[value] = self._read_tensor(value)
            return tensor

    def _read_tensor(self, value: int) -> Tensor | None:
        shape = self.graph.value_shape[value]
        if shape is None:
            return None
        key = self.graph.value_type_key[value]
        element = self._elements.get(key)
        if element is None:
            type_ = self.graph.values[value].type
            element = self._elements[key] = (element_bytes(type_),
                                             str(ir.ShapedType(type_).element_type))
        return Tensor(shape, element[0], self.sharding(value), element[1])

    def rule_tensors(self, op: int) -> tuple[OpShardingRule, list[Tensor], list[Tensor]] | None:
        """The op's sharding rule with its operand and result tensors.

        None when the op has no rule or one of its operands or results is not
        a static tensor, since the cost model can then say nothing about it.
        """
        rule = rule_for(self.graph.ops[op])
        if rule is None:
            return None
        operands = [self.tensor(v) for v in self.graph.op_operands[op]]
        results = [self.tensor(v) for v in self.graph.op_results[op]]
        if any(t is None for t in operands + results):
            return None
        return rule, operands, results
