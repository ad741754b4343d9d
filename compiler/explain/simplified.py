"""What XLA's algebraic simplifier rewrites before fusion, as the liveness walk reads it.

A ``dot_general`` that contracts no dimension (an outer product, batched or not), or
only dimensions of size 1, which ``RemoveDegenerateDimensionFromDot`` reshapes away, is
no dot once XLA has simplified the module: ``AlgebraicSimplifier::HandleDot``
rewrites it as ``multiply(broadcast(x), broadcast(y))`` (``enable_dot_to_multiply_rewrite``),
which fuses with its readers like any elementwise op. Seen in
eqx_while_fixed_point's buffer assignment: a checkpointed loop's weight-gradient
outer product is ``broadcast``/``multiply`` inside ``multiply_add_fusion``, written
over the gradient carry it is added to; read as a dot it was a buffer of its own
beside the carry. e3nn's tensor products contract unit dimensions (a ``1x1x1`` path
weight against ``8x30x8x1x1`` features): multiplies to XLA, fused with their readers,
and a dot of a parameter with a broadcast of ones is the parameter times one, read
from the parameter (the readout's gradient gathered from a fusion of the parameter
alone, which XLA's scheduler runs first).

A ``select`` whose two cases are one value is that value (``HandleSelect``): a vmapped
``lax.cond`` whose branches pass an operand on unchanged selects it from itself, and
cases XLA's CSE makes one value are one too (equal constants, then equal ops of equal
operands: a vmapped ``lax.cond`` whose branches each read the same table, a constant
of its own in each). Its
readers read the value, and a loop body's dot reading it reads a loop-invariant
value, which XLA then hoists out of the loop (``hoisted``): ott's batched Sinkhorn
solves, each cost matrix computed once before the loop.

A broadcast of a number computed from constants (``jnp.zeros``) that a loop's body
reads from outside, or carries unchanged, is computed inside the body: XLA's module
has it there before any of its passes (the carry gone, its readers after the loop
reading the broadcast), and the body's kernels fuse it, a dynamic slice of it a
broadcast of the number (``AlgebraicSimplifier::HandleDynamicSlice``). No buffer outside is kept for the
loop: jaxopt's LBFGS, whose first update scans its zero s/y histories (its
``while.511`` carries only the step and the direction; XLA's temp 13400 bytes, the
model's 23424 with a 960-byte history per scan).

A reduce that reduces no element (over no dimension, or over dimensions of size 1
only: jax's ``jnp.sum`` of a 0-d value, vmapped) is a reshape of its operand
(``HandleReduce``: the init value is the reduction's identity), fused with its readers:
tinygp's kernels sum each pair's squared distance over no axis, and XLA's
``negate_exponential_fusion`` reads the points themselves; read as a reduce, each
distance matrix was a buffer live until the gradient read it.

A case whose index XLA's constant folding makes a number (a constant, or a clamp of
constants: ``lax.switch``'s index) is the branch that number selects: XLA's conditional
simplifier inlines it (``TryRemoveConditional``), and nothing of the other branches is
in the module. jaxopt's L-BFGS has four cases on a constant index, two in loop bodies: the
walk held both branches (their peaks and their combined all-reduces' tables), XLA's
module one; equinox's checkpointed loops in diffrax likewise. What the inlined branch
returns folds on: the zoom's next case reads its index from an ``and`` of a false
comparison the first case returns, and XLA inlines that case too.

``simplified_graph`` returns a view of the graph (``GraphView``) with such dots named
``stablehlo.multiply``, such reduces ``stablehlo.reshape`` of their operand alone,
such selects gone, their readers reading their value (``removed_view``), such cases
left with their selected branch (``_selected_branches``), and such broadcasts read by no
loop body (``sunk``; one no other op reads gone); every other attribute is the graph's
own.

An add of zeros, a subtract of zeros, a multiply or a divide by ones is its operand
(``HandleAdd``'s ``A + 0 => A`` and its kind): ``forwarded`` names it. A frozen
parameter's update (``optax.set_to_zero``: ``table + 0``) leaves the donated
argument as the output, nothing written over it.
"""

from __future__ import annotations

from math import prod
from typing import Any

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.explain.merged import removed_view
from shardc.compiler.propagation.graph import GraphView

_DOT = "stablehlo.dot_general"
# op -> (the splat that leaves the operand unchanged, the operands it may stand at)
_NEUTRAL = {"stablehlo.add": (0.0, (0, 1)), "stablehlo.subtract": (0.0, (1,)),
            "stablehlo.multiply": (1.0, (0, 1)), "stablehlo.divide": (1.0, (1,))}
_CONSTANTS = frozenset({"stablehlo.constant", "sdy.constant"})
_PASSED = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.convert", "stablehlo.reshape",
                     "sdy.data_flow_edge"})
_FOLDED = {"stablehlo.add": lambda a, b: a + b, "stablehlo.subtract": lambda a, b: a - b,
           "stablehlo.multiply": lambda a, b: a * b, "stablehlo.divide": lambda a, b: a / b,
           "stablehlo.negate": lambda a: -a,
           "stablehlo.clamp": lambda low, a, high: min(max(a, low), high),
           "stablehlo.and": lambda a, b: a & b, "stablehlo.or": lambda a, b: a | b}
_COMPARED = {"EQ": lambda a, b: a == b, "NE": lambda a, b: a != b, "LT": lambda a, b: a < b,
             "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b, "GE": lambda a, b: a >= b}
_COMPARE = "stablehlo.compare"
_NOT = "stablehlo.not"
# op -> (the number that, as either operand, is its result whatever the other operand
# is; whether only on predicates): ``HandleAnd``'s ``A && False => False or A & 0 => 0``,
# ``HandleOr``'s ``A || True => True``
_ABSORBING = {"stablehlo.and": (0, False), "stablehlo.or": (1, True)}
_MULTIPLY = "stablehlo.multiply"
_REDUCE = "stablehlo.reduce"
_RESHAPE = "stablehlo.reshape"
_SELECT = "stablehlo.select"
_BROADCAST = "stablehlo.broadcast_in_dim"
_WHILE = "stablehlo.while"
_CASE = "stablehlo.case"
# ops CSE never merges: each draws, reads or calls anew
_UNMERGED = frozenset("stablehlo." + n for n in (
    "rng", "rng_bit_generator", "custom_call", "infeed", "recv", "send", "outfeed",
    "after_all", "create_token", "optimization_barrier")) | frozenset({"func.call"})
_EQUAL_DEPTH = 64  # how deep two cases' ops are compared


def simplified_graph(graph: Any) -> Any:
    """``graph`` as XLA's algebraic simplifier leaves its dots and selects: a
    ``GraphView`` renaming the dots where some dot contracts nothing and merging the
    selects of one value, else ``graph`` itself."""
    outer = [op for op, name in enumerate(graph.op_name)
             if name == _DOT and _contracts_nothing(graph, op)]
    if outer:
        names = list(graph.op_name)
        for op in outer:
            names[op] = _MULTIPLY
        graph = GraphView(graph, op_name=names)
    graph = _reshaped_reduces(graph)
    graph = _selected_branches(graph)
    graph = sunk(graph)
    memo: dict[tuple[int, int], bool] = {}
    same = [op for op, name in enumerate(graph.op_name)
            if name == _SELECT and _equal(graph, *graph.op_operands[op][1:], memo, 0)]
    if not same:
        return graph
    return removed_view(graph, {graph.op_results[op][0]: graph.op_operands[op][1]
                                for op in same})


def _reshaped_reduces(graph: Any) -> Any:
    """``graph`` with each reduce of one operand that reduces no element named
    ``stablehlo.reshape``, reading its operand alone, its computation gone (a view);
    else ``graph`` itself."""
    kept = [op for op, name in enumerate(graph.op_name)
            if name == _REDUCE and len(graph.op_results[op]) == 1
            and _elements(graph, graph.op_results[op][0]) is not None
            and _elements(graph, graph.op_operands[op][0])
            == _elements(graph, graph.op_results[op][0])]
    if not kept:
        return graph
    names, operands = list(graph.op_name), list(graph.op_operands)
    blocks, uses = list(graph.op_blocks), list(graph.uses)
    for op in kept:
        names[op], blocks[op] = _RESHAPE, []
        operands[op] = graph.op_operands[op][:1]
        for init in set(graph.op_operands[op][1:]):
            uses[init] = [use for use in uses[init] if use[0] != op]
    return GraphView(graph, op_name=names, op_operands=operands, op_blocks=blocks,
                     uses=uses)


def _elements(graph: Any, value: int) -> int | None:
    """How many elements ``value`` has (None when its shape is unknown)."""
    shape = graph.value_shape[value]
    return None if shape is None else prod(shape)


def _equal(graph: Any, a: int, b: int, memo: dict[tuple[int, int], bool],
           depth: int) -> bool:
    """Whether XLA's CSE makes values ``a`` and ``b`` one: the same value, equal
    constants, or the same result of ops of one name, type and attributes, without
    computations or side effects, reading equal operands (``depth`` ops deep at most
    ``_EQUAL_DEPTH``)."""
    if a == b:
        return True
    key = (a, b) if a < b else (b, a)
    if key in memo:
        return memo[key]
    memo[key] = False
    first, second = graph.value_def[a], graph.value_def[b]
    if first < 0 or second < 0 or depth > _EQUAL_DEPTH:
        return False
    name = graph.op_name[first]
    if name != graph.op_name[second] or name in _UNMERGED or graph.op_blocks[first] \
            or graph.op_blocks[second]:
        return False
    if graph.op_results[first].index(a) != graph.op_results[second].index(b) \
            or graph.values[a].type != graph.values[b].type:
        return False
    attributes = [_attributes(graph.ops[op]) for op in (first, second)]
    operands = graph.op_operands[first], graph.op_operands[second]
    memo[key] = attributes[0] == attributes[1] and len(operands[0]) == len(operands[1]) \
        and all(_equal(graph, x, y, memo, depth + 1) for x, y in zip(*operands))
    return memo[key]


def _attributes(op: ir.Operation) -> dict[str, ir.Attribute]:
    """``op``'s attributes by name (MLIR uniques them: equal ones compare equal)."""
    attributes = op.attributes
    return {name: attributes[name] for name in attributes}


def _selected_branches(graph: Any) -> Any:
    """``graph`` with each case whose index is a constant number left with the branch
    that number selects (the last one where it is out of range, as ``stablehlo.case``
    reads it), the other branches' ops and the reads they make gone (a view); else
    ``graph`` itself. XLA's conditional simplifier inlines such a conditional
    (``TryRemoveConditional``): jaxopt's zoom line search starts from a case on a
    constant, of whose two branches only one is in XLA's module. The inlined branch's
    results fold on (``_inlined``): the zoom's next case reads its index from the first
    case's ``and`` of a false comparison, and is inlined too."""
    while True:
        kept: dict[int, int] = {}
        for op, name in enumerate(graph.op_name):
            if name != _CASE or len(graph.op_blocks[op]) < 2:
                continue
            number = splat_value(graph, graph.op_operands[op][0])
            if number is None:
                continue
            branches = len(graph.op_blocks[op])
            kept[op] = int(number) if 0 <= number < branches else branches - 1
        if not kept:
            return graph
        # an index read from an inlined branch may fold now (``_inlined``)
        graph = _with_branches(graph, kept)


def _with_branches(graph: Any, kept: dict[int, int]) -> Any:
    """``graph`` with each case of ``kept`` left with the branch it names (a view)."""
    blocks = list(graph.op_blocks)
    gone: set[int] = set()
    for op, k in kept.items():
        for j, (_, nested) in enumerate(graph.op_blocks[op]):
            if j != k:
                gone.update(all_ops(graph, nested))
        blocks[op] = [graph.op_blocks[op][k]]
    uses = [[use for use in found if use[0] not in gone] for found in graph.uses]
    return GraphView(graph, op_blocks=blocks, uses=uses)


def all_ops(graph: Any, ops: list[int]) -> list[int]:
    """``ops`` and every op in their regions, nested ones too, in program order."""
    found, stack = [], list(reversed(ops))
    while stack:
        op = stack.pop()
        found.append(op)
        for _, nested in graph.op_blocks[op]:
            stack.extend(reversed(nested))
    return found


def sunk(graph: Any) -> Any:
    """``graph`` with each broadcast of a constant number read by no op of a loop body
    (a view): neither one read from outside the loop nor one a loop carries unchanged,
    whose results' readers read the broadcast (the carry is gone, as the import's
    canonicalization drops it); gone where nothing else reads it. Else ``graph``
    itself."""
    uses = None
    operands = None
    gone: set[int] = set()
    for op, name in enumerate(graph.op_name):
        if name != _BROADCAST:
            continue
        value = graph.op_results[op][0]
        inside = [use for use in graph.uses[value] if _in_loop_of(graph, use[0], op)
                  or _carried_unchanged(graph, *use)]
        if not inside or splat_value(graph, value) is None:
            continue
        uses = list(graph.uses) if uses is None else uses
        operands = list(graph.op_operands) if operands is None else operands
        uses[value] = [use for use in graph.uses[value] if use not in inside]
        for loop, k in inside:
            if graph.op_name[loop] != _WHILE:
                continue
            result = graph.op_results[loop][k]
            for reader, j in graph.uses[result]:
                operands[reader] = [value if i == j else v
                                    for i, v in enumerate(operands[reader])]
                uses[value].append((reader, j))
            uses[result] = []
        if not uses[value]:
            gone.add(op)
    if uses is None:
        return graph
    blocks = [[(args, [op for op in ops if op not in gone]) for args, ops in op_blocks]
              if any(op in gone for _, ops in op_blocks for op in ops) else op_blocks
              for op_blocks in graph.op_blocks]
    return GraphView(graph, uses=uses, op_operands=operands, op_blocks=blocks)


def _carried_unchanged(graph: Any, op: int, k: int) -> bool:
    """Whether ``op`` is a while loop whose body returns its carry ``k`` unchanged."""
    if graph.op_name[op] != _WHILE or len(graph.op_blocks[op]) < 2:
        return False
    args, body = graph.op_blocks[op][1]
    if not body or k >= len(args):
        return False
    returned = graph.op_operands[body[-1]]
    return k < len(returned) and returned[k] == args[k]


def _in_loop_of(graph: Any, user: int, op: int) -> bool:
    """Whether ``user`` is nested in a while loop of ``op``'s block."""
    block = graph.op_parent[op]
    while graph.op_parent[user] != block and graph.op_parent[user] >= 0:
        user = graph.op_parent[user]
        if graph.op_name[user] == _WHILE:
            return True
    return False


def _contracts_nothing(graph: Any, op: int) -> bool:
    """Whether dot ``op`` contracts no dimension once XLA has dropped its unit ones
    (``RemoveDegenerateDimensionFromDot`` reshapes them away first)."""
    dims = _contracted_dims(graph.ops[op])
    if dims is None:
        return True
    shape = graph.value_shape[graph.op_operands[op][0]]
    return shape is not None and all(shape[d] == 1 for d in dims)


def _contracted_dims(op: ir.Operation) -> list[int] | None:
    """The dimensions dot ``op`` contracts of its left operand (None when unread)."""
    try:
        dims = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    except (KeyError, ValueError, AttributeError):
        return None
    return list(dims.lhs_contracting_dimensions)


def forwarded(graph: Any, value: int) -> int:
    """The value XLA's algebraic simplifier leaves in place of ``value``: the other
    operand of an add or subtract of zeros or a multiply or divide by ones, through
    any number of them; else ``value`` itself."""
    while True:
        op = graph.value_def[value]
        neutral = _NEUTRAL.get(graph.op_name[op]) if op >= 0 else None
        if neutral is None:
            return value
        operands = graph.op_operands[op]
        kept = [operands[1 - k] for k in neutral[1] if splat_value(graph, operands[k]) == neutral[0]]
        if not kept:
            return value
        value = kept[0]


def _inlined(graph: Any, value: int) -> int:
    """The value inside a case of one branch that the case's result ``value`` is once
    XLA inlines the case (``TryRemoveConditional``: a conditional of one branch, or
    one whose index folds, which ``_selected_branches`` leaves one), through any
    number of them; else ``value`` itself."""
    while True:
        op = graph.value_def[value]
        if op < 0 or graph.op_name[op] != _CASE or len(graph.op_blocks[op]) != 1:
            return value
        branch = graph.op_blocks[op][0][1]
        if not branch:
            return value
        value = graph.op_operands[branch[-1]][graph.op_results[op].index(value)]


def splat_value(graph: Any, value: int,
                memo: dict[int, float | None] | None = None) -> float | None:
    """The number in every element of ``value`` where it is one XLA's constant folding
    computes (a constant, broadcast, converted, combined with others: ``0.1 * zeros``),
    else None. Each value is judged once (``memo``): a chain of sums each reading the
    one before twice is one walk, not two to the power of its length."""
    memo = {} if memo is None else memo
    if value not in memo:
        memo[value] = None  # a value being judged folds to nothing it reads
        memo[value] = _splat(graph, value, memo)
    return memo[value]


def _splat(graph: Any, value: int, memo: dict[int, float | None]) -> float | None:
    op = graph.value_def[value]
    if op < 0:
        return None
    name = graph.op_name[op]
    if name == _CASE:
        inner = _inlined(graph, value)
        return None if inner == value else splat_value(graph, inner, memo)
    if name in _CONSTANTS:
        try:
            dense = ir.DenseElementsAttr(graph.ops[op].attributes["value"])
            splat = dense.get_splat_value() if dense.is_splat else None
        except (KeyError, ValueError, TypeError):
            return None
        return splat.value if isinstance(splat, (ir.FloatAttr, ir.IntegerAttr, ir.BoolAttr)) \
            else None
    if name in _PASSED:
        return splat_value(graph, graph.op_operands[op][0], memo)
    if name not in _FOLDED and name not in (_COMPARE, _NOT):
        return None
    numbers = [splat_value(graph, operand, memo) for operand in graph.op_operands[op]]
    absorbing, predicates = _ABSORBING.get(name, (None, False))
    if absorbing is not None and absorbing in numbers and (
            not predicates or _predicate(graph, value)):
        return absorbing
    if None in numbers:
        return None
    if name == _NOT:
        # an integer's bitwise not depends on its width and signedness: left unread
        return not numbers[0] if _predicate(graph, value) else None
    if name == _COMPARE:
        return _compared(graph.ops[op], *numbers)
    try:
        return _FOLDED[name](*numbers)
    except ZeroDivisionError:
        return None


def _predicate(graph: Any, value: int) -> bool:
    """Whether ``value``'s elements are predicates (``i1``)."""
    element = ir.ShapedType(graph.values[value].type).element_type
    return ir.IntegerType.isinstance(element) and ir.IntegerType(element).width == 1


def _compared(op: ir.Operation, a: float, b: float) -> bool | None:
    """What compare ``op`` makes of numbers ``a`` and ``b`` (None for an unsigned
    comparison of negative numbers or an unread direction)."""
    try:
        direction = stablehlo.ComparisonDirectionAttr(
            op.attributes["comparison_direction"]).value
        kind = str(op.attributes["compare_type"]) if "compare_type" in op.attributes else ""
    except (KeyError, ValueError):
        return None
    if "UNSIGNED" in kind and min(a, b) < 0:
        return None
    return _COMPARED[direction](a, b) if direction in _COMPARED else None
