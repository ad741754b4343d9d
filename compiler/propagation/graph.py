"""The compact graph propagation runs on: ops and values as ints, built once.

``PropagationGraph.build(module)`` walks the module one time and records, per
op (pre-order index): name, parent, operands, results, nested blocks, whether
it is a terminator and whether it is free of memory effects; per value: its
defining op or owning block's op, its static shape, and its uses *in MLIR's
use-list order* (read through the bindings, since that order decides the
worklist). Where each value's sharding lives is the business of
``ir_access``; this module only holds structure and the few facts the
op-priority heuristics need. Erasing an op (dead-op removal) only updates
the graph; ``ir_access.write_back`` applies it to the IR at the end.
"""

from __future__ import annotations

from bisect import bisect_left
from operator import attrgetter
from typing import Any

from jaxlib.mlir import ir

from shardc.compiler.propagation import step_memo
from shardc.compiler.propagation.compact_rule import CompactRule, compact_rule
from shardc.compiler.propagation.step_memo import StepMemo
from shardc.compiler.sharding.rule import OpShardingRule
from shardc.compiler.sharding.rules import (
    _NEIGHBOUR_KEYS,
    NO_RULE,
    bears_on_rule,
    rule_for,
    rule_from_texts,
)
from shardc.compiler.sharding.rules.elementwise import POINTWISE_OPS
from shardc.compiler.sharding.tensor import MeshInfo
from shardc.dialects.sdy import SHARDING_RULE_ATTR

# Ops that must never be erased even when unused (MLIR: not memory-effect free).
_EFFECTFUL = frozenset({
    "func.call",
    "sdy.data_flow_edge",
    "sdy.func_data_flow_edge",
    "sdy.sharding_constraint",
    "sdy.sharding_group",
    "stablehlo.all_gather",
    "stablehlo.all_reduce",
    "stablehlo.all_to_all",
    "stablehlo.collective_broadcast",
    "stablehlo.collective_permute",
    "stablehlo.cross-replica-sum",
    "stablehlo.infeed",
    "stablehlo.outfeed",
    "stablehlo.recv",
    "stablehlo.reduce_scatter",
    "stablehlo.rng",
    "stablehlo.send",
    "stablehlo.trace",
})
# Ops whose effects are those of the ops nested in their regions.
_RECURSIVE = frozenset({
    "sdy.manual_computation",
    "sdy.named_computation",
    "stablehlo.case",
    "stablehlo.if",
    "stablehlo.map",
    "stablehlo.reduce",
    "stablehlo.reduce_window",
    "stablehlo.scatter",
    "stablehlo.select_and_scatter",
    "stablehlo.sort",
    "stablehlo.while",
})
# Ops whose rule also depends on neighbouring ops (never memoised on the op alone):
# the registry's own list, so that it stays the one place to add them.
_NEIGHBOUR_DEPENDENT = _NEIGHBOUR_KEYS
_MISSING = object()
_KNOWN_DIALECTS = ("stablehlo.", "sdy.", "chlo.", "func.", "arith.", "tensor.", "math.")
NEVER_DEAD = frozenset({"func.func", "sdy.mesh", "builtin.module"})


def has_no_effects_of_its_own(op: ir.Operation, name: str) -> bool:
    """Whether ``op`` (named ``name``), leaving aside the ops in its regions, is free of
    memory effects as MLIR sees it."""
    if name in _EFFECTFUL or not name.startswith(_KNOWN_DIALECTS):
        return False
    if name == "stablehlo.custom_call":
        attrs = op.attributes
        if "has_side_effect" in attrs and ir.BoolAttr(attrs["has_side_effect"]).value:
            return False
    return True
_NAME, _RESULT, _RESULTS, _REGIONS, _TYPE = map(
    attrgetter, ("name", "result", "results", "regions", "type"))

ELEMENTWISE_EXTRA = frozenset({
    "sdy.propagation_barrier",
    "sdy.reshard",
    "sdy.sharding_constraint",
    "stablehlo.clamp",
    "stablehlo.select",
    "stablehlo.uniform_dequantize",
    "stablehlo.uniform_quantize",
})
_NOT_ELEMENTWISE = frozenset({
    "sdy.sharding_constraint",
    "stablehlo.all_reduce",
    "stablehlo.collective_broadcast",
    "stablehlo.collective_permute",
    "stablehlo.cross-replica-sum",
})


def _elementwise_names() -> frozenset[str]:
    return frozenset(n for n in POINTWISE_OPS if n not in _NOT_ELEMENTWISE) | ELEMENTWISE_EXTRA


ELEMENTWISE = _elementwise_names()


def _shape_of(type_: ir.Type, cache: dict) -> tuple[int, ...] | None:
    """Static shape of a ranked tensor type, None for anything else (cached)."""
    try:
        return cache[type_]
    except KeyError:
        pass
    shape = None
    if isinstance(type_, ir.RankedTensorType) and type_.has_static_shape:
        shape = tuple(type_.shape)
    cache[type_] = shape
    return shape


def _attributes_key(attributes: ir.OpAttributeMap) -> tuple[tuple[str, int], ...] | None:
    """(name, uniqued pointer) of each attribute that bears on the rule; None when
    the bindings cannot read one (a complex-valued constant)."""
    if not len(attributes):
        return ()
    try:
        # Names first: reading an attribute costs more, and sdy.sharding and the
        # search's bookkeeping attributes need not be read.
        return tuple([(name, hash(attributes[name])) for name in attributes.keys()
                      if bears_on_rule(name)])
    except TypeError:
        return None


class ReadMemo:
    """What reading modules of one context repeats, kept across graphs.

    Rules by their uniqued key, printed types and attributes (``rule_for``'s
    ``texts``) and parsed shardings (``ShardingStore``), all keyed on uniqued
    pointers, which stay valid as long as the context lives, the rule
    attributes written back (``keep_sharding_rules``) and what the drivers of
    these graphs repeat (``step_memo.StepMemo``, the one of the first store
    read: ``bind_steps``). A caller that
    propagates many copies of one module (the cost-aware search) hands each
    graph the same memo; it holds only for one context, one set of meshes and
    one ``conservative`` setting.
    """

    def __init__(self) -> None:
        self.rules: dict[tuple, CompactRule | None] = {}
        self.printed: dict[int, str] = {}
        self.shardings: dict[int, object] = {}
        # id of a rule -> (the rule, kept alive so the id stays its own, its attribute).
        self.rule_attributes: dict[int, tuple[OpShardingRule, ir.Attribute]] = {}
        self.steps: StepMemo | None = None

    def bind_steps(self, meshes: dict[str, MeshInfo]) -> StepMemo:
        """The step memo of these reads: that of every read of the same meshes."""
        if self.steps is None:
            self.steps = step_memo.for_meshes(meshes)
        return self.steps


class GraphView:
    """A ``PropagationGraph`` read with some attributes replaced (``overrides``): every
    other attribute is the graph's own. What a reader sees of a graph XLA's passes have
    changed (ops in another order, merged, renamed) without copying the graph. A view
    of a view reads the base graph with both views' replacements (the later one's
    first), so views stacked by several readers cost one lookup, not one per view."""

    def __init__(self, graph: Any, **overrides: Any) -> None:
        if isinstance(graph, GraphView):
            inherited = {k: v for k, v in vars(graph).items() if k != "_graph"}
            overrides = {**inherited, **overrides}
            graph = graph._graph
        self._graph = graph
        vars(self).update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)


class PropagationGraph:
    """Ops and values of one module as parallel lists indexed by ints."""

    def __init__(self, module: ir.Operation, *, conservative: bool = False,
                 memo: ReadMemo | None = None):
        self.module = module
        self.conservative = conservative
        self.ops: list[ir.Operation] = []
        self.op_name: list[str] = []
        self.op_parent: list[int] = []
        self.op_operands: list[list[int]] = []
        self.op_results: list[list[int]] = []
        self.op_blocks: list[list[tuple[list[int], list[int]]]] = []
        self.op_terminator: list[bool] = []
        self.erased: list[bool] = []
        self.values: list[ir.Value] = []
        self.value_def: list[int] = []      # defining op, or -1 for block args
        self.value_owner: list[int] = []    # op owning the block of a block arg
        self.value_arg_index: list[int] = []
        self.value_shape: list[tuple[int, ...] | None] = []
        self.value_type_key: list[int] = []  # hash of the (uniqued) type
        self.uses: list[list[tuple[int, int]]] = []
        self.dynamic_values: list[int] = []
        self._types: dict[int, ir.Type] = {}  # each distinct type by its key
        self._rules: dict[int, CompactRule | None] = {}
        self.memo = memo if memo is not None else ReadMemo()
        self._rule_memo = self.memo.rules
        self._printed = self.memo.printed  # the registry's printed types and attributes
        self._build()

    @classmethod
    def of_region(cls, source: PropagationGraph, *, symbols: list[int],
                  function: ir.Operation, ret: ir.Operation, arguments: list[int],
                  ops: list[int], bindings: list[ir.Operation], returned: list[int],
                  conservative: bool = False, memo: ReadMemo | None = None
                  ) -> PropagationGraph:
        """The graph a walk would read of a module cut out of ``source``'s, taken from
        ``source``'s arrays without making that module: ``source``'s top-level ops
        ``symbols`` (ops without operands, results or regions), then ``function``,
        whose entry block's arguments stand for ``source``'s values ``arguments`` and
        whose body is ``source``'s ops ``ops``, their operands those arguments or
        results of earlier ones, then ``ret`` returning ``returned``.

        Each op of ``ops`` is read through ``bindings`` (an op it would be a clone of:
        the same name, attributes and nested ops), its nested ops through a walk of
        that op; ``function`` and ``ret`` only through their attributes. Values are
        ``source``'s bindings: only their types are read, which the cut keeps. The
        uses are in the use-list order of that module made op by op in program
        order, each op's operands set in order, the return last
        (``regions.cut_out``), and of any clone of it: MLIR puts each new use first,
        so a value's uses are in the reverse of that order.
        """
        graph = cls.__new__(cls)
        graph.module, graph.conservative = source.module, conservative
        graph._types, graph._rules = source._types, {}
        graph.memo = memo if memo is not None else ReadMemo()
        graph._rule_memo, graph._printed = graph.memo.rules, graph.memo.printed
        head = len(symbols)
        graph.ops = [*(source.ops[op] for op in symbols), function]
        graph.op_name = [source.op_name[op] for op in symbols] + ["func.func"]
        graph.op_parent = [-1] * (head + 1)
        graph.op_operands = [[] for _ in range(head + 1)]
        graph.op_results = [[] for _ in range(head + 1)]
        graph.op_blocks = [[] for _ in range(head + 1)]
        graph.op_terminator = [False] * (head + 1)
        origin = list(arguments)  # each value's in ``source``
        graph.value_def = [-1] * len(arguments)
        graph.value_owner = [head] * len(arguments)
        graph.value_arg_index = list(range(len(arguments)))
        value_of = {value: k for k, value in enumerate(arguments)}
        body = []
        src_name, src_operands, src_results = source.op_name, source.op_operands, \
            source.op_results
        op_ops, op_name, op_parent = graph.ops, graph.op_name, graph.op_parent
        op_operands, op_results, op_blocks = graph.op_operands, graph.op_results, \
            graph.op_blocks
        op_terminator, value_def, value_owner = graph.op_terminator, graph.value_def, \
            graph.value_owner
        for op, binding in zip(ops, bindings, strict=True):
            if not source.op_blocks[op]:  # most ops: no nested ops (appended inline)
                i = len(op_ops)
                op_ops.append(binding)
                op_name.append(src_name[op])
                op_parent.append(head)
                op_terminator.append(source.op_terminator[op])
                op_operands.append([value_of[v] for v in src_operands[op]])
                own, first = src_results[op], len(origin)
                op_results.append(list(range(first, first + len(own))))
                for k, value in enumerate(own):
                    value_of[value] = first + k
                origin.extend(own)
                value_def.extend([i] * len(own))
                value_owner.extend([i] * len(own))
                graph.value_arg_index.extend(range(len(own)))
                op_blocks.append([])
                body.append(i)
                continue
            subtree = source.subtree(op)
            walked = []  # the binding's nested ops, in the same pre-order
            binding.walk(lambda o: walked.append(o) or ir.WalkResult.ADVANCE,
                         ir.WalkOrder.PRE_ORDER)
            index_of = {}
            for p, ir_op in zip(subtree, walked, strict=True):
                i = index_of[p] = len(op_ops)
                op_ops.append(ir_op)
                op_name.append(src_name[p])
                op_parent.append(head if p == op else index_of[source.op_parent[p]])
                op_terminator.append(source.op_terminator[p])
                op_operands.append([value_of[v] for v in src_operands[p]])
                own = src_results[p]
                op_results.append(list(range(len(origin), len(origin) + len(own))))
                for k, value in enumerate(own):
                    value_of[value] = len(origin)
                    origin.append(value)
                    value_def.append(i)
                    value_owner.append(i)
                    graph.value_arg_index.append(k)
                for args, _ in source.op_blocks[p]:
                    for k, value in enumerate(args):
                        value_of[value] = len(origin)
                        origin.append(value)
                        value_def.append(-1)
                        value_owner.append(i)
                        graph.value_arg_index.append(k)
            op_blocks.extend(
                [([value_of[v] for v in args], [index_of[n] for n in nested])
                 for args, nested in source.op_blocks[p]] for p in subtree)
            body.append(index_of[op])
        last = len(graph.ops)
        graph.ops.append(ret)
        graph.op_name.append("func.return")
        graph.op_parent.append(head)
        graph.op_terminator.append(True)
        graph.op_operands.append([value_of[v] for v in returned])
        graph.op_results.append([])
        graph.op_blocks.append([])
        graph.op_blocks[head] = [(list(range(len(arguments))), [*body, last])]
        graph.erased = [False] * len(graph.ops)
        graph.values = [source.values[v] for v in origin]
        graph.value_type_key = [source.value_type_key[v] for v in origin]
        graph.value_shape = [source.value_shape[v] for v in origin]
        dynamic = set(source.dynamic_values)
        graph.dynamic_values = ([k for k, v in enumerate(origin) if v in dynamic]
                                if dynamic else [])
        uses: list[list[tuple[int, int]]] = [[] for _ in origin]
        for i, operands in enumerate(graph.op_operands):
            for k, value in enumerate(operands):
                uses[value].append((i, k))
        for value_uses in uses:
            value_uses.reverse()
        graph.uses = uses
        return graph

    @classmethod
    def of_clone(cls, module: ir.Operation, source: PropagationGraph, *,
                 conservative: bool = False, memo: ReadMemo | None = None) -> PropagationGraph:
        """The graph of ``module`` as a walk reads it, taken from ``source``'s arrays:
        ``module`` and the module ``source`` was read from are clones of one module (so
        their use-lists, which order the worklist, are in the same order).

        A clone has its module's ops in the same pre-order, with the same names,
        results, blocks, types and rules, so only the binding objects are new: the
        ops walked and their results and block arguments. Where ``module`` is not
        laid out as ``source`` (other ops, or ``source`` erased some), it is read
        as a walk reads it.
        """
        walked: list[ir.Operation] = []
        append, advance = walked.append, ir.WalkResult.ADVANCE
        module.walk(lambda op: append(op) or advance, ir.WalkOrder.PRE_ORDER)
        ops = walked[1:]
        if (len(ops) != len(source.ops) or any(source.erased)
                or list(map(_NAME, ops)) != source.op_name):
            return cls(module, conservative=conservative, memo=memo)
        values: list[ir.Value | None] = [None] * len(source.values)
        single = [i for i, own in enumerate(source.op_results) if len(own) == 1]
        for i, binding in zip(single, map(_RESULT, [ops[i] for i in single])):
            values[source.op_results[i][0]] = binding
        for i, own in enumerate(source.op_results):
            if len(own) > 1:
                for value, binding in zip(own, ops[i].results, strict=True):
                    values[value] = binding
        for i, blocks in enumerate(source.op_blocks):
            if blocks:
                bound = [block for region in ops[i].regions for block in region.blocks]
                for (args, _), block in zip(blocks, bound, strict=True):
                    for value, binding in zip(args, block.arguments, strict=True):
                        values[value] = binding
        graph = cls.__new__(cls)
        graph.module, graph.conservative, graph.ops, graph.values = module, conservative, ops, \
            values
        graph.memo = memo if memo is not None else ReadMemo()
        graph._rule_memo, graph._printed = graph.memo.rules, graph.memo.printed
        graph._types, graph._rules = source._types, {}
        for name in ("op_name", "op_parent", "op_operands", "op_results", "op_blocks",
                     "op_terminator", "value_def", "value_owner", "value_arg_index",
                     "value_shape", "value_type_key", "dynamic_values"):
            setattr(graph, name, getattr(source, name))  # read, never written
        graph.erased = [False] * len(ops)
        graph.uses = list(source.uses)  # ``drop_uses_of`` replaces a value's list
        return graph

    def subtree(self, op: int) -> list[int]:
        """``op`` and the ops nested in it, in pre-order."""
        found = [op]
        for _, nested in self.op_blocks[op]:
            for inner in nested:
                found += self.subtree(inner)
        return found

    # ------------------------------------------------------------------ build
    def _build(self) -> None:
        # Ops and values are keyed by their hash (the MLIR pointer): comparing
        # binding objects for equality in a dict lookup costs a binding call.
        # Every binding call is per-op cost, so each fact is read once, and read
        # for all ops at a time (``map``): a Python loop per op costs as much.
        walked: list[ir.Operation] = []
        append, advance = walked.append, ir.WalkResult.ADVANCE
        self.module.walk(lambda op: append(op) or advance, ir.WalkOrder.PRE_ORDER)
        # Pre-order: the module itself comes first.
        if not walked or hash(walked[0]) != hash(self.module):
            raise AssertionError("walk did not start at the module")
        module_blocks = [block for region in walked[0].regions for block in region.blocks]
        ops = self.ops = walked[1:]
        n = len(ops)
        self.op_name = list(map(_NAME, ops))
        results = list(map(_RESULTS, ops))
        n_results = list(map(len, results))
        regions = list(map(_REGIONS, ops))
        self.op_parent = [-1] * n
        self.op_terminator = [False] * n
        self.erased = [False] * n
        op_results: list[list[int]] = [[]] * n  # each replaced by its own list below
        op_blocks: list[list[tuple[list[int], list[int]]]] = [[] for _ in range(n)]
        # Values are numbered op by op: its results, then its blocks' arguments.
        # Most ops have one result and no region: those runs are read in bulk.
        values: list[ir.Value] = []
        value_def: list[int] = []      # defining op, or -1 for block args
        value_owner: list[int] = []    # op owning the block of a block arg
        value_arg_index: list[int] = []
        with_regions = [i for i, owned in enumerate(map(len, regions)) if owned]
        irregular = sorted({i for i, count in enumerate(n_results) if count != 1}
                           .union(with_regions))
        # op with regions -> (nested op list, number of ops) per block
        block_sizes: dict[int, list[tuple[list[int], int]]] = {}
        start = 0
        for i in (*irregular, n):
            if start < i:
                first = len(values)
                values.extend(map(_RESULT, ops[start:i]))
                run = range(start, i)
                value_def.extend(run)
                value_owner.extend(run)
                value_arg_index.extend([0] * (i - start))
                op_results[start:i] = [[vid] for vid in range(first, first + i - start)]
            if i == n:
                break
            count = n_results[i]
            op_results[i] = list(range(len(values), len(values) + count))
            values.extend(results[i])
            value_def.extend([i] * count)
            value_owner.extend([i] * count)
            value_arg_index.extend(range(count))
            if regions[i]:
                sizes = block_sizes[i] = []
                for region in regions[i]:
                    for block in region.blocks:
                        args = list(block.arguments)
                        count = len(args)
                        nested: list[int] = []
                        op_blocks[i].append((list(range(len(values), len(values) + count)),
                                             nested))
                        sizes.append((nested, len(block.operations)))
                        values.extend(args)
                        value_def.extend([-1] * count)
                        value_owner.extend([i] * count)
                        value_arg_index.extend(range(count))
            start = i + 1
        self.op_results, self.op_blocks = op_results, op_blocks
        self.values, self.value_def = values, value_def
        self.value_owner, self.value_arg_index = value_owner, value_arg_index
        self._read_types()
        self._nest(module_blocks, with_regions, block_sizes)
        value_id = dict(zip(map(hash, values), range(len(values))))
        if len(value_id) != len(values):
            raise AssertionError("value hashes are not unique")
        value_of = value_id.__getitem__
        self.op_operands = [list(map(value_of, map(hash, op.operands))) for op in ops]
        self._read_uses()

    def _read_uses(self) -> None:
        """Uses from the operand lists; MLIR's use-list order (which decides the
        worklist) only matters, and is only read, for values used twice or more."""
        uses: list[list[tuple[int, int]]] = [[] for _ in self.values]
        for i, operands in enumerate(self.op_operands):
            for k, value in enumerate(operands):
                uses[value].append((i, k))
        for vid, value_uses in enumerate(uses):
            if len(value_uses) > 1:
                uses[vid] = self._use_order(vid, value_uses)
        self.uses = uses

    def _read_types(self) -> None:
        """Each value's type key and static shape (read once per distinct type)."""
        types = list(map(_TYPE, self.values))
        type_keys = self.value_type_key = list(map(hash, types))
        distinct = self._types = dict(zip(type_keys, types))
        shape_of = {key: _shape_of(type_, {}) for key, type_ in distinct.items()}
        self.value_shape = list(map(shape_of.__getitem__, type_keys))
        dynamic = {key for key, type_ in distinct.items()
                   if shape_of[key] is None and isinstance(type_, ir.RankedTensorType)}
        self.dynamic_values = ([vid for vid, key in enumerate(type_keys) if key in dynamic]
                               if dynamic else [])

    def _nest(self, module_blocks: list[ir.Block], with_regions: list[int],
              block_sizes: dict[int, list[tuple[list[int], int]]]) -> None:
        """Parents, nested op lists and terminators from the pre-order and block sizes.

        In pre-order an op's descendants follow it: a block's ops are its next
        op, then the op after that one's descendants, and so on. Ops with
        regions are done innermost first, so each knows how many descendants
        its nested ops with regions have.
        """
        op_parent, ops = self.op_parent, self.ops
        descendants: dict[int, int] = {}

        def children(parent: int, j: int, count: int, nested: list[int] | None) -> int:
            # Runs of ops without regions are whole children: assigned by slices.
            at = bisect_left(with_regions, j)
            while count:
                leaves = count
                if at < len(with_regions):
                    leaves = min(count, with_regions[at] - j)
                if leaves:
                    if nested is not None:
                        nested.extend(range(j, j + leaves))
                    op_parent[j:j + leaves] = [parent] * leaves
                    j += leaves
                    count -= leaves
                if count:
                    if nested is not None:
                        nested.append(j)
                    op_parent[j] = parent
                    j += 1 + descendants[j]
                    count -= 1
                    at = bisect_left(with_regions, j, at)
            return j

        for i in reversed(with_regions):
            j = i + 1
            for nested, count in block_sizes[i]:
                j = children(i, j, count, nested)
            descendants[i] = j - i - 1
        j = 0
        for block in module_blocks:
            j = children(-1, j, len(block.operations), None)
        if j != len(ops):
            raise AssertionError("walk order does not match the block structure")
        terminator = ir.IsTerminatorTrait
        for i in with_regions:
            for _, nested in self.op_blocks[i]:
                # Only the last op of a block can be a terminator.
                if nested and ops[nested[-1]].has_trait(terminator):
                    self.op_terminator[nested[-1]] = True

    def _use_order(self, value: int, users: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The uses of ``value`` in MLIR's use-list order, its owners told apart by hash."""
        ops = self.ops
        by_hash: dict[int, list[int]] = {}
        for user, _ in users:
            found = by_hash.setdefault(hash(ops[user]), [])
            if user not in found:
                found.append(user)
        order = []
        for use in self.values[value].uses:
            owner = use.owner.operation
            found = by_hash[hash(owner)]
            # Binding objects of distinct ops have been seen to hash alike after IR
            # edits (a constraint moved out of a case branch): told apart by equality.
            user = found[0] if len(found) == 1 else next(i for i in found if ops[i] == owner)
            order.append((user, use.operand_number))
        return order

    # ------------------------------------------------------------------ queries
    def value_rank(self, value: int) -> int:
        """Rank of a static tensor value; 0 for scalars and non-tensors."""
        shape = self.value_shape[value]
        return len(shape) if shape else 0

    def num_uses(self, value: int) -> int:
        """Number of uses (an op using a value twice counts twice)."""
        return len(self.uses[value])

    def is_elementwise(self, op: int) -> bool:
        """Shardy's isElementwise: elementwise trait ops, barriers, constraints."""
        name = self.op_name[op]
        if name in ELEMENTWISE:
            return True
        if name == "stablehlo.bitcast_convert":
            operand = self.op_operands[op][0]
            return self.value_shape[operand] == self.value_shape[self.op_results[op][0]]
        return False

    def custom_call_target(self, op: int) -> str:
        """The call target name of a ``stablehlo.custom_call``."""
        attr = self.ops[op].attributes["call_target_name"]
        return ir.StringAttr(attr).value

    def cached_rule(self, op: int) -> CompactRule | None:
        """The rule cached on ``op`` by an earlier visit (None if none yet)."""
        return self._rules.get(op)

    def rule(self, op: int) -> CompactRule | None:
        """The op's rule: computed (and cached) on the first visit, as Shardy does."""
        # Asked once per op, so mostly a miss: no KeyError raised per op.
        known = self._rules.get(op, _MISSING)
        if known is not _MISSING:
            return known
        name = self.op_name[op]
        ir_op = self.ops[op]
        ir_attributes = ir_op.attributes
        if name in NO_RULE and SHARDING_RULE_ATTR not in ir_attributes:
            # ``rule_for``'s answer for these without a cache key (a constant's
            # key would hash its value): no rule unless one is attached.
            self._rules[op] = None
            return None
        key = None
        if name in _NEIGHBOUR_DEPENDENT:
            attributes = None
        elif SHARDING_RULE_ATTR in ir_attributes:
            # An attached rule is the op's rule whatever its other attributes say
            # (``rule_for``): its uniqued pointer alone keys it, without reading them.
            attributes = ((SHARDING_RULE_ATTR, hash(ir_attributes[SHARDING_RULE_ATTR])),)
        else:
            attributes = _attributes_key(ir_attributes)
        if attributes is not None:
            # What the registry's own cache key says, from uniqued pointers
            # instead of printed text: types and attributes are uniqued per context.
            type_of = self.value_type_key.__getitem__
            key = (name, tuple(map(type_of, self.op_operands[op])),
                   tuple(map(type_of, self.op_results[op])), attributes)
            compact = self._rule_memo.get(key, _MISSING)
            if compact is not _MISSING:
                self._rules[op] = compact
                return compact
        if key is not None and not any(attr == SHARDING_RULE_ATTR for attr, _ in attributes):
            rule = rule_from_texts(
                ir_op, tuple(map(self._type_text, key[1])), tuple(map(self._type_text, key[2])),
                tuple([(attr, self._attribute_text(ir_attributes, attr, pointer))
                       for attr, pointer in attributes]),
                self.conservative)
        else:
            rule = rule_for(ir_op, self.conservative, self._printed)
        compact = compact_rule(rule) if rule is not None else None
        self._rules[op] = compact
        if key is not None:
            self._rule_memo[key] = compact
        return compact

    def _type_text(self, type_key: int) -> str:
        """The printed type of this type key, printed once per context (the memo's)."""
        text = self._printed.get(type_key)
        if text is None:
            text = self._printed[type_key] = str(self._types[type_key])
        return text

    def _attribute_text(self, attributes: ir.OpAttributeMap, name: str, pointer: int) -> str:
        """The printed attribute ``name`` of ``pointer``, printed once per context."""
        text = self._printed.get(pointer)
        if text is None:
            text = self._printed[pointer] = str(attributes[name])
        return text

    def visited_rules(self) -> dict[int, CompactRule | None]:
        """Every rule computed so far, by op."""
        return self._rules

    def rules_to_attach(self) -> bool:
        """Whether writing back with ``keep_rules`` would attach a rule computed so far
        to an op that does not carry it."""
        ops = self.ops
        return any(rule is not None and rule.rule is not None
                   and SHARDING_RULE_ATTR not in ops[op].attributes
                   for op, rule in self._rules.items())

    # ------------------------------------------------------------------ dead ops
    def is_trivially_dead(self, op: int) -> bool:
        """No result has a use and the op (with its regions) has no effects."""
        if self.op_terminator[op] or self.op_name[op] in NEVER_DEAD:
            return False
        for value in self.op_results[op]:
            if self.uses[value]:
                return False
        return self._effect_free(op)

    def _effect_free(self, op: int) -> bool:
        name = self.op_name[op]
        if not has_no_effects_of_its_own(self.ops[op], name):
            return False
        if name in _RECURSIVE or self.op_blocks[op]:
            for _, nested in self.op_blocks[op]:
                for inner in nested:
                    if not self._effect_free(inner):
                        return False
        return True

    def erase_order(self, op: int) -> list[int]:
        """``op`` and its nested ops in MLIR's erase order (users before defs)."""
        order: list[int] = []
        for _, nested in reversed(self.op_blocks[op]):
            for inner in reversed(nested):
                order.extend(self.erase_order(inner))
        order.append(op)
        return order

    def drop_uses_of(self, op: int) -> None:
        """Forget the uses ``op`` makes of its operands (it is being erased)."""
        for value in set(self.op_operands[op]):
            self.uses[value] = [u for u in self.uses[value] if u[0] != op]
        self.erased[op] = True
