"""What XLA's loop-invariant code motion moves out of while loops, as the liveness walk reads it.

XLA:CPU's simplification pipeline runs ``WhileLoopInvariantCodeMotion``: an op of a
loop body whose operands are all loop-invariant (a carry the body returns
unchanged, a constant, a value defined outside the loop, or an op already found
invariant) is computed once before the loop and handed to the body as one more
carry (``WhileUtil::MakeInstructionsLiveIn``), so its buffer is live from before the
loop to its end, not only while one iteration reads it. Seen in ott's Sinkhorn
solves: each loop's cost matrices, dots of the loop-invariant point clouds, are
computed before the loops (their partial sums' all-reduces combined into one at the
top of the program) and carried through them; computed inside each body they were
transient.

What it leaves in the body (``NotWorthHoistingIndividually`` with its CPU
defaults): ops that only move or replicate their operand (broadcasts, iotas,
reshapes, slices, transposes, reverses, sharding annotations) are hoisted only with
an invariant reader that is hoisted; constants stay, and so do ops computing from
constants alone, the body's or ones read from outside (XLA sinks constant carries
into the body, then folds such ops into constants or broadcasts of constants); ops
with side effects stay, and so do calls and manual computations. A loop or
conditional is hoisted whole when its operands and every value its computations
read from outside are invariant and nothing in it has side effects (diffrax's
Brownian path: the counter-hashing loops of a key fixed for the solve leave the
solver's loops). A loop none of whose carries is returned unchanged (and whose body
reads nothing from outside the loop, which HLO carries too) is left whole, as XLA
gives up on it, and so is a loop marked ``_xla_disable_loop_instr_hoisting``. Loops
are visited innermost first (XLA walks the computations in post order), so an op
hoisted out of an inner loop may leave the outer one too.

``hoisted_graph`` returns a view of the graph (``GraphView``) with each hoisted op
listed in the enclosing block right before its loop, reading the loop's initial
values where it read unchanged carries, and an equal hoisted op's readers reading
the first (XLA's CSE, ``merged``: the others are gone; equal loops too, their
computations compared by structure, unless they hold a partial sum all-reduced).

XLA also hoists what its own passes add to a body: a gather or scatter with batching
dimensions (jax's ``vmap`` of an indexing op) reads its indices concatenated with one
iota per batching dimension (``BatchedGatherScatterNormalizer``, after the
partitioner), and a concatenate is worth hoisting on its own. Where the indices are
loop-invariant (a vmapped lookup of a constant table: pgx's win lines) that
concatenate leaves the loop and is carried through it while the gather stays:
``invariant_indices`` finds them, and the loops they leave.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from jaxlib.mlir.dialects import stablehlo

from shardc.compiler.explain.merged import merge_block, removed_view
from shardc.compiler.propagation.graph import GraphView

_WHILE = "stablehlo.while"
_CONSTANTS = frozenset({"stablehlo.constant", "sdy.constant"})
# ops XLA hoists only along with a hoisted reader (``NotWorthHoistingIndividually``:
# bitcasts, broadcasts, iotas, reverses, slices, transposes, tuples, reshapes; a
# sharding annotation)
_ONLY_WITH_READER = frozenset("stablehlo." + n for n in (
    "broadcast_in_dim", "iota", "reverse", "slice", "transpose", "reshape",
    "get_tuple_element", "tuple")) | frozenset(
    {"sdy.sharding_constraint", "sdy.reshard", "sdy.data_flow_edge", "sdy.propagation_barrier"})
# ops XLA never hoists, nor a loop or conditional holding one: side effects, and ops
# this model does not look into (calls, manual computations)
_STAYING = frozenset("stablehlo." + n for n in (
    "rng", "send", "recv", "infeed", "outfeed", "after_all", "create_token",
    "custom_call", "optimization_barrier", "return")) | frozenset(
    {"func.call", "func.return", "sdy.manual_computation", "sdy.return"})
# ops with computations of their own, hoisted whole when everything they read is
# invariant (a Brownian path's counter-hashing loop inside an SDE solver's step)
_NESTING = frozenset({"stablehlo.while", "stablehlo.case", "stablehlo.if"})
_TERMINATORS = frozenset({"stablehlo.return", "sdy.return"})
# indexed ops -> (their dimension numbers' attribute, the batching dims' field)
_BATCHED = {"stablehlo.gather": ("dimension_numbers", "start_indices_batching_dims"),
            "stablehlo.scatter": ("scatter_dimension_numbers",
                                  "scatter_indices_batching_dims")}
_DISABLED = "_xla_disable_loop_instr_hoisting"
_INVARIANT_DEPTH = 200  # how many ops deep an index's invariance is traced
_EDGE = "sdy.data_flow_edge"


def hoisted_graph(graph: Any, reduced: Collection[int] = ()) -> Any:
    """``graph`` as XLA's loop-invariant code motion leaves its while loops: a view
    (``GraphView``) with the hoisted ops moved before their loops, else ``graph``
    itself where nothing moves. ``reduced``: the ops whose results the partitioned
    program all-reduces, each all-reduce with a channel of its own, which CSE never
    merges: equal hoisted dots' partial sums are all-reduced apart (ott's Sinkhorn
    solves: ``ynn_fusion.16`` twice in the combined all-reduce, two results), so
    neither they nor their readers merge."""
    loops = [op for op, name in enumerate(graph.op_name) if name == _WHILE]
    if not loops:
        return graph
    motion = _Motion(graph)
    for loop in sorted(loops, key=motion.depth, reverse=True):
        motion.hoist_from(loop)
    if not motion.moved:
        return graph
    view = GraphView(graph, op_blocks=motion.blocks, op_parent=motion.parent,
                     op_operands=motion.operands, uses=motion.uses)
    # XLA's CSE then merges the equal ops hoisted into one block (an identity
    # matrix built in several places of a body: one buffer carried, not one each)
    landed: dict[int, list[int]] = {}
    for op in sorted(motion.hoisted):
        landed.setdefault(motion.parent[op], []).append(op)
    merged: dict[int, int] = {}
    for ops in landed.values():
        # a loop computing a partial sum all-reduces it with a channel of its own
        # too: equal loops of one (a sharded contraction in their bodies) stay apart
        apart = [op for op in ops if op in reduced
                 or any(inner in reduced for inner in motion.nested(op))]
        merge_block(view, [op for op in ops if op not in apart], merged, set(), _NESTING)
    return removed_view(view, merged) if merged else view


def invariant_indices(graph: Any) -> dict[int, int]:
    """The batched gathers and scatters of ``graph`` (as ``hoisted_graph`` leaves it)
    whose concatenated indices XLA hoists, each with the outermost loop it hoists them
    out of: an op left in a loop body whose indices are invariant there (constants,
    values from outside, carries returned unchanged, and ops of those), lifted through
    each enclosing loop whose body holds that loop and to which they stay invariant
    (XLA visits the inner loop first, then finds the concatenate invariant in the outer
    body)."""
    found: dict[int, int] = {}
    motion = None
    for op, name in enumerate(graph.op_name):
        if name not in _BATCHED or not batching_dims(graph, op):
            continue
        motion = motion or _Motion(graph)
        value = graph.op_operands[op][indices_operand(graph, op)]
        held, loop = op, graph.op_parent[op]
        while loop >= 0 and graph.op_name[loop] == _WHILE and len(graph.op_blocks[loop]) > 1 \
                and held in graph.op_blocks[loop][1][1] and not _disabled(graph.ops[loop]) \
                and motion.looked_into(loop) \
                and _invariant(graph, value, loop, {}):
            found[op] = loop
            held, loop = loop, graph.op_parent[loop]  # the concatenate is before ``loop`` now
    return found


def batching_dims(graph: Any, op: int) -> list[int]:
    """The indices' batching dimensions of gather or scatter ``op``."""
    return list(getattr(_numbers(graph, op), _BATCHED[graph.op_name[op]][1]))


def index_vector_dim(graph: Any, op: int) -> int:
    """The indices' dimension of gather or scatter ``op`` that holds each index."""
    return _numbers(graph, op).index_vector_dim


def _numbers(graph: Any, op: int) -> Any:
    """Gather or scatter ``op``'s dimension numbers."""
    attribute = _BATCHED[graph.op_name[op]][0]
    kind = (stablehlo.GatherDimensionNumbers if attribute == "dimension_numbers"
            else stablehlo.ScatterDimensionNumbers)
    return kind(graph.ops[op].attributes[attribute])


def indices_operand(graph: Any, op: int) -> int:
    """The operand number of gather or scatter ``op``'s indices (a scatter's come after
    its inputs, one per result)."""
    return 1 if graph.op_name[op] == "stablehlo.gather" else len(graph.op_results[op])


def _invariant(graph: Any, value: int, loop: int, memo: dict[int, bool],
               depth: int = 0) -> bool:
    """Whether ``value`` is the same in every iteration of ``loop``: defined outside
    it, a carry of its body (or of a loop nested in it, through its initial value)
    returned unchanged, or a result of an op without side effects or computations of
    its own all of whose operands are (``_INVARIANT_DEPTH`` ops deep at most)."""
    if value in memo:
        return memo[value]
    if depth > _INVARIANT_DEPTH:
        return False
    memo[value] = False  # a value reached again through a loop's carries is no proof
    owner = _definer(graph, value)
    inside = owner
    while inside >= 0 and inside != loop:
        inside = graph.op_parent[inside]
    if inside != loop:
        memo[value] = True
        return True
    if graph.value_def[value] < 0:
        # a block argument: a while body's carry returned unchanged is its initial value
        if graph.op_name[owner] != _WHILE or len(graph.op_blocks[owner]) < 2:
            return False
        args, body = graph.op_blocks[owner][1]
        if value not in args or not body:
            return False
        k = args.index(value)
        returned = graph.op_operands[body[-1]]
        if k >= len(returned) or returned[k] != value:
            return False
        memo[value] = owner == loop or _invariant(graph, graph.op_operands[owner][k], loop,
                                                  memo, depth + 1)
        return memo[value]
    if graph.op_name[owner] in _STAYING or graph.op_blocks[owner]:
        return False
    memo[value] = all(_invariant(graph, v, loop, memo, depth + 1)
                      for v in graph.op_operands[owner])
    return memo[value]


class _Motion:
    """The blocks, parents, operands and uses of a graph as hoisting changes them
    (each list copied where it changes)."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.blocks = list(graph.op_blocks)
        self.parent = list(graph.op_parent)
        self.operands = list(graph.op_operands)
        self.uses = list(graph.uses)
        self.hoisted: set[int] = set()  # every op moved out of a loop
        self.moved = False

    def depth(self, op: int) -> int:
        found = 0
        while self.parent[op] >= 0:
            op, found = self.parent[op], found + 1
        return found

    def within(self, op: int, loop: int) -> bool:
        """Whether ``op`` is ``loop`` or nested in it."""
        while op >= 0 and op != loop:
            op = self.parent[op]
        return op == loop

    def hoist_from(self, loop: int) -> None:
        """Move the ops of ``loop``'s body XLA hoists before ``loop``."""
        graph = self.graph
        if len(self.blocks[loop]) < 2 or _disabled(graph.ops[loop]):
            return
        args, body = self.blocks[loop][1]
        if not body:
            return
        entering = self.entering(loop)
        if not self.looked_into(loop):
            return
        invariant: set[int] = set(entering)  # values computed the same in every iteration
        constant: set[int] = set()  # values XLA folds into constants
        waiting: set[int] = set()  # invariant ops hoisted only with a hoisted reader
        hoisted: list[int] = []
        inside = set(body)

        def take(op: int) -> None:
            # XLA copies the invariant operands it left in the body along (a
            # broadcast, a constant) with the op it hoists
            for value in self._reads(op):
                owner = graph.value_def[value]
                if owner in waiting or (value in constant and owner in inside):
                    waiting.discard(owner)
                    inside.discard(owner)
                    take(owner)
            inside.discard(op)
            hoisted.append(op)

        for op in body:
            name = graph.op_name[op]
            if name in _STAYING or not graph.op_results[op]:
                continue
            if graph.op_blocks[op] and (name not in _NESTING or not self._pure(op)):
                continue
            reads = self._reads(op)
            if not all(v in invariant or not self.within(_definer(graph, v), loop)
                       for v in reads):
                continue
            results = graph.op_results[op]
            if name in _CONSTANTS or (name not in _NESTING and reads and all(
                    v in constant or graph.op_name[_definer(graph, v)] in _CONSTANTS
                    for v in reads)):
                # XLA folds ops of constants into constants, and an elementwise op of
                # a broadcast scalar into a broadcast of the op of the scalar, folded
                # (``square(broadcast(0.0))``: a broadcast, hoisted only with a reader);
                # a constant read from outside is one of the body's (XLA sinks constant
                # carries into the body: ``WhileLoopConstantSinking``)
                constant.update(results)
                invariant.update(results)
                continue
            invariant.update(results)
            owner = graph.value_def[reads[0]] if reads else -1
            if name == _EDGE and owner >= 0 and self.parent[owner] == loop \
                    and owner not in inside:
                # Shardy's edge on a hoisted loop's result is no op of XLA's: it
                # leaves with the loop, else the loop's unread results would be
                # carried through the body to it
                take(op)
                continue
            if name in _ONLY_WITH_READER:
                waiting.add(op)
                continue
            take(op)
        if not hoisted:
            return
        self.moved = True
        self.hoisted.update(hoisted)
        order = {op: i for i, op in enumerate(body)}
        hoisted.sort(key=order.__getitem__)
        moving = set(hoisted)
        self.blocks[loop] = [*self.blocks[loop][:1],
                             (args, [op for op in body if op not in moving]),
                             *self.blocks[loop][2:]]
        outer = self.parent[loop]
        self.blocks[outer] = [(block_args, _before(ops, loop, hoisted))
                              for block_args, ops in self.blocks[outer]]
        for op in hoisted:
            self.parent[op] = outer
            for reader in [op, *self.nested(op)]:
                if any(v in entering for v in self.operands[reader]):
                    self._read_initial(reader, entering)

    def entering(self, loop: int) -> dict[int, int]:
        """The carries ``loop``'s body returns unchanged, each with the loop's initial
        value it enters as."""
        args, body = self.blocks[loop][1]
        returned = self.operands[body[-1]] if body else []
        return {arg: self.operands[loop][k] for k, arg in enumerate(args)
                if k < len(returned) and returned[k] == arg
                and self.graph.value_shape[arg] is not None}

    def looked_into(self, loop: int) -> bool:
        """Whether XLA looks for invariant ops in ``loop``'s body: it gives up on a loop
        with no invariant carry (a value the body reads from outside the loop is one
        once exported to HLO)."""
        return bool(self.entering(loop)) or self._reads_outside(loop)

    def nested(self, op: int) -> list[int]:
        """The ops nested in ``op``'s regions, at any depth."""
        found: list[int] = []
        for _, ops in self.blocks[op]:
            for inner in ops:
                found.append(inner)
                found.extend(self.nested(inner))
        return found

    def _reads(self, op: int) -> list[int]:
        """``op``'s operands and the values its regions read from outside it (HLO
        hands those to a loop or conditional as operands too)."""
        graph = self.graph
        captured = [v for inner in self.nested(op) for v in self.operands[inner]
                    if not self.within(_definer(graph, v), op)]
        return [*self.operands[op], *dict.fromkeys(captured)]

    def _pure(self, op: int) -> bool:
        """Whether no op nested in ``op`` is one XLA never hoists (a side effect)."""
        names = self.graph.op_name
        return not any(names[inner] in _STAYING and names[inner] not in _TERMINATORS
                       for inner in self.nested(op))

    def _reads_outside(self, op: int) -> bool:
        """Whether an op nested in ``op``'s regions reads a value defined outside ``op``,
        constants aside (XLA sinks those into the body before it looks for invariant
        carries: ``WhileLoopConstantSinking``)."""
        graph = self.graph
        for _, nested in self.blocks[op]:
            for inner in nested:
                if any(not self.within(_definer(graph, v), op)
                       and graph.op_name[_definer(graph, v)] not in _CONSTANTS
                       for v in self.operands[inner]):
                    return True
                if self.blocks[inner] and self._reads_outside(inner):
                    return True
        return False

    def _read_initial(self, op: int, entering: dict[int, int]) -> None:
        """Make hoisted ``op`` read each unchanged carry's initial value instead."""
        operands = list(self.operands[op])
        for k, value in enumerate(operands):
            initial = entering.get(value)
            if initial is None:
                continue
            operands[k] = initial
            self.uses[value] = [use for use in self.uses[value] if use != (op, k)]
            self.uses[initial] = [*self.uses[initial], (op, k)]
        self.operands[op] = operands


def _definer(graph: Any, value: int) -> int:
    """The op defining ``value``, or for a block argument the op whose block it is."""
    owner = graph.value_def[value]
    return owner if owner >= 0 else graph.value_owner[value]


def _before(ops: list[int], loop: int, hoisted: list[int]) -> list[int]:
    """``ops`` with ``hoisted`` listed right before ``loop`` (where ``loop`` is one)."""
    if loop not in ops:
        return ops
    at = ops.index(loop)
    return [*ops[:at], *hoisted, *ops[at:]]


def _disabled(operation: Any) -> bool:
    """Whether the loop's frontend attributes turn hoisting off."""
    try:
        attributes = operation.attributes["mhlo.frontend_attributes"]
    except (KeyError, AttributeError):
        return False
    return _DISABLED in str(attributes)
