"""Which fusible producers XLA duplicates into their several consumers.

XLA's instruction fusion fuses a producer read by several consumers into each
of them (duplicating it) unless it is expensive (``IsExpensive``: exp, log,
rsqrt, a reduction, a float division, ...) or
``InstructionFusion::ComputeGloballyUnfusible`` forbids it. That forbids a
producer reading more than it writes unless every consumer can fuse it; a
producer reading at most one "large" operand (``EffectivelyAtMostUnary``:
broadcasts, iotas and scalar constants do not count; an operand counts when
its rank, ignoring unit dimensions, is at least the result's) is always
duplicable, and so is one whose operands hold no more elements in all than its
result. Such a cheap producer is fused into every consumer that can take it
even when a convolution or a dot reads it too (it is then also a buffer, for
those): a ReLU of a batch norm of a convolution, read by the next convolution
and by the backward's ReLU gradient, which computes it again from the kept
convolution output (``liveness.LivenessWalker.duplicated``).

A producer fused into a kernel is emitted once per distinct index its readers
there compute it at (``FusionNodeIndexingEvaluation``): a reader of its shape
(an elementwise op, a transpose) hands on its own indices, any other (a slice,
a pad, a broadcast, a reshape, a concatenate) computes a new one per index it is
computed at. XLA:CPU fuses a producer into a kernel only while that emits it at
most ``PlatformRules.fused_code_copies`` times (a broadcast always), so in a
tree of slices each level doubling the indices (a pairwise product's even and
odd elements) the levels past the limit are buffers: ``CodeCopies``. A pad's
code is emitted in blocks of its own (``OpInvalidatesCache``): fused only into one kernel, where one op reads it at
one index, so every level of an ``associative_scan``'s interleaving pads, read
by the next level's odd and even slices, is a buffer.
"""

from __future__ import annotations

from math import prod

from jaxlib.mlir import ir

from shardc.compiler.cost.fusion import FUSIBLE

# Ops XLA's ``InstructionFusion::IsExpensive`` calls expensive among those the
# model fuses (float division and remainder included; sine, cosine and tan of
# reals are cheap there).
_EXPENSIVE = frozenset("stablehlo." + n for n in (
    "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "power",
    "rsqrt", "sqrt", "cbrt", "tanh", "atan2", "reduce", "acos", "acosh", "asin", "asinh",
    "atanh", "cosh", "erf", "gather")) | frozenset({"chlo.erf", "chlo.erf_inv", "chlo.acos",
                                           "chlo.acosh", "chlo.asin", "chlo.asinh",
                                           "chlo.atanh", "chlo.cosh", "chlo.lgamma",
                                           "chlo.digamma"})
_FLOAT_EXPENSIVE = frozenset({"stablehlo.divide", "stablehlo.remainder"})
# operands that do not count as a large input of a producer
_SMALL_OPERANDS = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.iota",
                             "stablehlo.constant", "sdy.constant"})


def cheap_to_duplicate(walker, op: int) -> bool:
    """Whether fusible ``op`` reads at most one large operand or no more elements than
    it writes: XLA duplicates it into every consumer that can fuse it."""
    graph = walker.graph
    return _at_most_unary(graph, walker, op) or not _reads_more_than_writes(graph, walker, op)


def _true_rank(shape) -> int:
    return sum(1 for d in shape or () if d != 1)


def _at_most_unary(graph, walker, op: int) -> bool:
    rank = _true_rank(graph.value_shape[graph.op_results[op][0]])
    large = 0
    for operand in set(graph.op_operands[op]):
        owner = graph.value_def[walker.root(operand)]
        if owner >= 0 and graph.op_name[owner] in _SMALL_OPERANDS:
            continue
        if _true_rank(graph.value_shape[operand]) >= rank:
            large += 1
    return large <= 1


def _elements(graph, value: int) -> int:
    shape = graph.value_shape[value]
    return prod(shape) if shape is not None else 0


def _reads_more_than_writes(graph, walker, op: int) -> bool:
    read = sum(_elements(graph, v) for v in {walker.root(o) for o in graph.op_operands[op]})
    return read > sum(_elements(graph, r) for r in graph.op_results[op])


def expensive(graph, op: int) -> bool:
    """Whether XLA calls ``op`` expensive (it never duplicates it)."""
    name = graph.op_name[op]
    if name in _EXPENSIVE:
        return True
    if name in _FLOAT_EXPENSIVE:
        element = ir.ShapedType(graph.values[graph.op_results[op][0]].type).element_type
        return not isinstance(element, ir.IntegerType)
    return False


# ops that end a block: a value they return is written by its kernel, the kernel's root
_TERMINATORS = frozenset({"func.return", "stablehlo.return", "sdy.return"})
_BROADCAST = "stablehlo.broadcast_in_dim"
_TRANSPOSE = "stablehlo.transpose"
# fusible ops whose code a kernel emits in blocks of their own, so it cannot reuse
# one copy for another reader (``OpInvalidatesCache``). A concatenate is one too,
# but XLA:CPU often fuses small ones read by several kernels into each all the
# same, which the model does not tell apart from those it writes (einops_attention's
# class-token concatenate): eqx_rope_mha_lm's and penzai_gemma2_stack's counted as
# buffers took their nets from 1.096x to 1.104x and from 1.017x to 1.246x XLA's
_ONE_COPY = frozenset({"stablehlo.pad"})


class CodeCopies:
    """How many times the kernels fusing a value emit its code, per kernel, for one
    liveness walk (``LivenessWalker``: its graph, platform rules, ``readers`` and
    ``materialised``), each value's counted once."""

    def __init__(self, walker) -> None:
        self.walker = walker
        self.graph = walker.graph
        # value -> kernel (its root op) -> the ops computing indices the value is
        # computed at there, each with how many indices it computes
        self._indexing: dict[int, dict[int, dict[int, int]]] = {}

    def too_many(self, value: int) -> bool:
        """Whether a kernel fusing ``value`` would emit its code more often than the
        platform allows (``PlatformRules.fused_code_copies``): XLA writes it then."""
        limit = self.walker.rules.fused_code_copies
        owner = self.graph.value_def[value]
        if not limit or owner < 0 or self.graph.op_name[owner] == _BROADCAST:
            return False
        kernels = self.indexing(value)
        if self.graph.op_name[owner] in _ONE_COPY:
            # fused only into one kernel, where one op reads it at one index
            if len(kernels) > 1 or len(self.walker.readers(value, owner)) > 1:
                return True
            limit = 1
        return any(sum(users.values()) > limit for users in kernels.values())

    def indexing(self, value: int) -> dict[int, dict[int, int]]:
        """``value``'s kernels, each with the ops computing the indices the value is
        computed at there (an op reading it with a shape of its own) and how many
        each computes; the readers' own values come first (their kernels are known
        once XLA has fused what reads them), walked without recursion."""
        stack = [(value, False)]
        while stack:
            current, expanded = stack.pop()
            if current in self._indexing:
                continue
            if expanded:
                self._indexing[current] = self._evaluate(current)
                continue
            stack.append((current, True))
            stack.extend((result, False) for result in self._fused_results(current)
                         if result not in self._indexing)
        return self._indexing[value]

    def _fused_results(self, value: int) -> list[int]:
        """The results of the fusible ops reading ``value`` in its block."""
        graph = self.graph
        found = []
        for user, top in self.walker.readers(value, graph.value_def[value]):
            if user == top and self._fusing(user):
                found.append(graph.op_results[user][0])
        return found

    def _fusing(self, op: int) -> bool:
        name = self.graph.op_name[op]
        return len(self.graph.op_results[op]) == 1 and (
            name in FUSIBLE or name in self.walker.rules.fusible)

    def _root(self, result: int, op: int) -> bool:
        """Whether ``op``'s ``result`` is written by the kernel it roots: returned, or
        a buffer."""
        return any(self.graph.op_name[top] in _TERMINATORS
                   for _, top in self.walker.readers(result, op)) \
            or self.walker.materialised(result, op)

    def _evaluate(self, value: int) -> dict[int, dict[int, int]]:
        graph = self.graph
        found: dict[int, dict[int, int]] = {}
        for user, top in self.walker.readers(value, graph.value_def[value]):
            if user != top or not self._fusing(user):
                found.setdefault(top, {})[top] = 1  # a kernel of its own reads it
                continue
            result = graph.op_results[user][0]
            same = graph.op_name[user] == _TRANSPOSE \
                or graph.value_shape[result] == graph.value_shape[value]
            if self._root(result, user):
                # the kernel's root is computed at one index: the value at that one
                # where the root hands it on, at one of the root's own where not
                found.setdefault(user, {})[~user if same else user] = 1
                continue
            kernels = self._indexing.get(result, {})
            if same:
                # the reader hands on the indices it is computed at
                for kernel, users in kernels.items():
                    found.setdefault(kernel, {}).update(users)
            else:
                # one new index per index the reader is computed at
                for kernel, users in kernels.items():
                    found.setdefault(kernel, {})[user] = sum(users.values())
        return found
