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

from jaxlib.mlir import ir

from shardc.compiler.propagation.compact_rule import CompactRule, compact_rule
from shardc.compiler.propagation.step_memo import StepMemo
from shardc.compiler.sharding.rule import OpShardingRule
from shardc.compiler.sharding.rules import _NEIGHBOUR_KEYS, NO_RULE, bears_on_rule, rule_for
from shardc.compiler.sharding.rules.elementwise import POINTWISE_OPS
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
    these graphs repeat (``step_memo.StepMemo``). A caller that
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
        self.steps = StepMemo()


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
        self._rules: dict[int, CompactRule | None] = {}
        self.memo = memo if memo is not None else ReadMemo()
        self._rule_memo = self.memo.rules
        self._printed = self.memo.printed  # the registry's printed types and attributes
        self._build()

    # ------------------------------------------------------------------ build
    def _build(self) -> None:
        # Ops and values are keyed by their hash (the MLIR pointer): comparing
        # binding objects for equality in a dict lookup costs a binding call.
        # Every binding call is per-op cost, so each fact is read once.
        ops: list[ir.Operation] = []
        append, advance = ops.append, ir.WalkResult.ADVANCE
        self.module.walk(lambda op: append(op) or advance, ir.WalkOrder.PRE_ORDER)
        # Pre-order: the module itself comes first.
        module_key = hash(self.module)
        if not ops or hash(ops[0]) != module_key:
            raise AssertionError("walk did not start at the module")
        module_blocks = [block for region in ops[0].regions for block in region.blocks]
        ops = ops[1:]
        op_hashes = [hash(op) for op in ops]
        op_id = {h: i for i, h in enumerate(op_hashes)}
        # Binding objects of distinct ops have been seen to hash alike after IR edits
        # (a constraint moved out of a case branch): those are told apart by equality.
        shared: dict[int, list[int]] = {}
        if len(op_id) != len(ops):
            for i, h in enumerate(op_hashes):
                shared.setdefault(h, []).append(i)
            shared = {h: found for h, found in shared.items() if len(found) > 1}
        value_id: dict[int, int] = {}
        shape_of: dict[int, tuple[int, ...] | None] = {}  # type hash -> static shape
        ranked: set[int] = set()  # type hashes of ranked tensor types
        self.ops = ops
        op_parent = self.op_parent = [-1] * len(ops)
        op_terminator = self.op_terminator = [False] * len(ops)
        self.erased = [False] * len(ops)
        op_name, op_results, op_blocks = self.op_name, self.op_results, self.op_blocks
        values, value_def, value_owner = self.values, self.value_def, self.value_owner
        value_arg_index, value_shape = self.value_arg_index, self.value_shape
        value_type_key, dynamic = self.value_type_key, self.dynamic_values

        def new_value(value: ir.Value, owner: int, defining: int, index: int) -> int:
            vid = len(values)
            type_ = value.type
            type_key = hash(type_)
            values.append(value)
            value_type_key.append(type_key)
            value_def.append(defining)
            value_owner.append(owner)
            value_arg_index.append(index)
            try:
                shape = shape_of[type_key]
            except KeyError:
                shape = shape_of[type_key] = _shape_of(type_, {})
                if isinstance(type_, ir.RankedTensorType):
                    ranked.add(type_key)
            if shape is None and type_key in ranked:
                dynamic.append(vid)
            value_shape.append(shape)
            value_id[hash(value)] = vid
            return vid

        # Parents from the pre-order itself: a stack of (ops left, nested list)
        # per open block, sized once per block, instead of asking each op.
        stack: list[list] = [[len(block.operations), None] for block in reversed(module_blocks)]
        for i, op in enumerate(ops):
            while stack[-1][0] == 0:
                stack.pop()
            frame = stack[-1]
            frame[0] -= 1
            if frame[1] is not None:
                frame[1].append(i)
            op_name.append(op.name)
            results = op.results
            num_results = len(results)
            if num_results == 1:
                # ``new_value`` inlined for the common case: a static shape seen before.
                value = op.result
                type_key = hash(value.type)
                shape = shape_of.get(type_key)
                if shape is None:
                    op_results.append([new_value(value, i, i, 0)])
                else:
                    vid = len(values)
                    values.append(value)
                    value_type_key.append(type_key)
                    value_def.append(i)
                    value_owner.append(i)
                    value_arg_index.append(0)
                    value_shape.append(shape)
                    value_id[hash(value)] = vid
                    op_results.append([vid])
            elif num_results:
                op_results.append([new_value(result, i, i, k)
                                   for k, result in enumerate(results)])
            else:
                op_results.append([])
            blocks = []
            regions = op.regions
            if len(regions):
                frames = []
                for region in regions:
                    for block in region.blocks:
                        args = [new_value(arg, i, -1, k)
                                for k, arg in enumerate(block.arguments)]
                        nested: list[int] = []
                        blocks.append((args, nested))
                        frames.append([len(block.operations), nested])
                stack.extend(reversed(frames))
            op_blocks.append(blocks)
        if any(frame[0] for frame in stack):
            raise AssertionError("walk order does not match the block structure")
        terminator = ir.IsTerminatorTrait
        for i, blocks in enumerate(op_blocks):
            for _, nested in blocks:
                for inner in nested:
                    op_parent[inner] = i
                # Only the last op of a block can be a terminator.
                if nested and ops[nested[-1]].has_trait(terminator):
                    op_terminator[nested[-1]] = True
        if len(value_id) != len(values):
            raise AssertionError("value hashes are not unique")
        # Uses from the operand lists; MLIR's use-list order (which decides the
        # worklist) only matters, and is only read, for values used twice or more.
        uses: list[list[tuple[int, int]]] = [[] for _ in values]
        op_operands = self.op_operands
        value_of = value_id.__getitem__
        for i, op in enumerate(ops):
            operands = list(map(value_of, map(hash, op.operands)))
            op_operands.append(operands)
            for k, value in enumerate(operands):
                uses[value].append((i, k))
        for vid, value_uses in enumerate(uses):
            if len(value_uses) > 1:
                uses[vid] = [(self._op_index(op_id, shared, u.owner.operation), u.operand_number)
                             for u in values[vid].uses]
        self.uses = uses

    def _op_index(self, op_id: dict[int, int], shared: dict[int, list[int]],
                  op: ir.Operation) -> int:
        key = hash(op)
        if key in shared:
            return next(i for i in shared[key] if self.ops[i] == op)
        return op_id[key]

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
        attributes = (_attributes_key(ir_attributes) if name not in _NEIGHBOUR_DEPENDENT
                      else None)
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
        rule = rule_for(ir_op, self.conservative, self._printed)
        compact = compact_rule(rule) if rule is not None else None
        self._rules[op] = compact
        if key is not None:
            self._rule_memo[key] = compact
        return compact

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
        if name in _EFFECTFUL or not name.startswith(_KNOWN_DIALECTS):
            return False
        if name == "stablehlo.custom_call":
            attrs = self.ops[op].attributes
            if "has_side_effect" in attrs and ir.BoolAttr(attrs["has_side_effect"]).value:
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
