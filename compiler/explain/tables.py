"""The tables of pointers XLA:CPU (and XLA:TPU) writes for tuple-shaped values.

XLA:CPU holds a value of several results (a while loop's carries, a
conditional's result and each branch's operands, a host callback's results, a
sort's or a combined all-reduce's) as a table of 8-byte pointers to its
arrays. Its buffer assigner gives each such table an allocation of its own,
shared with nothing, and lays them after the arrays' heap (``memory``): in a
program of small loops and checks (lineax's solvers, diffrax's steps, equinox's
error checks) they are a good part of the temporaries. Which tables there are
is decided after XLA's simplifiers: a loop's constant, dead and merged
induction carries, a conditional's unused results and folded index.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from shardc.compiler.cost.fusion import CHLO_ELEMENTWISE
from shardc.compiler.cost.fusion import FREE as _FREE
from shardc.compiler.explain.needs import CONSTANTS as _CONSTANTS
from shardc.compiler.explain.simplified import splat_value
from shardc.compiler.propagation.graph import ELEMENTWISE

# custom-call targets of jax's host callbacks, whose results XLA:CPU writes as a tuple
HOST_CALLBACKS = frozenset({"xla_ffi_python_cpu_callback", "xla_python_cpu_callback"})
_ELEMENTWISE = ELEMENTWISE | CHLO_ELEMENTWISE


class TupleTables:
    """The tables of one liveness walk's ops (``LivenessWalker``: its graph, platform
    rules, ``root``, ``loop_body`` and ``passed_through``), each op's found once."""

    def __init__(self, walker) -> None:
        self.walker = walker
        self.graph = walker.graph
        self._found: dict[int, list[tuple[tuple, int]]] = {}
        # ``constant`` walks a DAG: a value read twice (``y + y``) is judged once,
        # else a chain of such ops costs two to the power of its length
        self._constants: dict[tuple[int, frozenset], bool] = {}

    def of(self, op: int) -> list[tuple[tuple, int]]:
        """The tables of pointers ``op`` writes, each keyed by the tuple-shaped value
        XLA:CPU holds it in (one table per key), with its bytes, on a platform that
        writes them (``PlatformRules.tuple_pointer_bytes``), else none.

        XLA:CPU's ops with several results are tuple-shaped: a while loop's carries
        (its initial tuple, the body's parameter and root and the loop's result are
        one buffer), a custom call's results (lineax's LU, QR, SVD and eigh:
        ``svd.66{}``, five pointers), a variadic reduce or sort. A host callback's
        results are a tuple even when it has one (``pure_callback.4 = (f32[16,8])
        custom-call``). A case is a conditional whose result is a tuple, one or more
        (XLA's conditional canonicalizer), and whose every branch takes the values it
        reads from outside (constants aside) as a tuple of its own: one tuple for
        branches, or cases of one block, reading the same values (XLA's CSE:
        ``conditional(%pred, %tuple.41, %tuple.41)``), and none where they are the
        results of one tuple-shaped op (XLA's tuple simplifier hands that op's tuple
        on: ``conditional(%p, %conditional.2.clone, %conditional.2.clone)``).
        Where and how long each table lives does not matter: ``memory`` lays them
        out apart from the arrays' heap.
        """
        if op not in self._found:
            self._found[op] = self._tables(op)
        return self._found[op]

    def _tables(self, op: int) -> list[tuple[tuple, int]]:
        graph = self.graph
        results = graph.op_results[op]
        table = self.walker.rules.table_bytes
        name = graph.op_name[op]
        if not table(1) or not name.startswith("stablehlo.") or name in _FREE:
            return []
        if name == "stablehlo.custom_call" and graph.custom_call_target(op) in HOST_CALLBACKS:
            tables = [(("result", op), table(len(results)))]
            if self.on_one_device(op) and graph.op_operands[op]:
                # XLA's partitioner runs it in a conditional on the device's id, which
                # takes its operands as a tuple (diffrax_neural_ode's eight callbacks:
                # ``conditional(%wrapped_compare, %tuple.64, %tuple.197)``)
                tables.append((("operands", op), table(len(graph.op_operands[op]))))
            return tables
        if name == "stablehlo.while":
            return [(("result", op), table(self.kept_carries(op)))] if len(results) > 1 \
                else []
        if name != "stablehlo.case":
            return [(("result", op), table(len(results)))] if len(results) > 1 else []
        if self.constant(graph.op_operands[op][0]):
            return []  # XLA inlines the branch it selects
        tables = {("result", op): table(self.kept_results(op))}
        for _, nested in graph.op_blocks[op]:
            read = self.captured(nested)
            if read and not self._one_tuple(read):
                tables[("operands", graph.op_parent[op], frozenset(read))] = table(len(read))
        return list(tables.items())

    def constant(self, value: int, seen: frozenset = frozenset()) -> bool:
        """Whether XLA folds ``value`` to a constant: a constant, an elementwise op
        of constants, a loop carry that starts as one and that the body returns
        unchanged or as a constant (``WhileLoopConstantSinking`` puts it in the
        body), or a case's result every branch returns as one constant number, its
        index a constant (the case inlined). XLA's conditional simplifier inlines a case with such an index: of
        diffrax_neural_ode's fifteen cases, the five whose index is one (equinox's
        checkpointed loops, diffrax's ``_integrate.py:259``) are none of the nine
        conditionals in XLA's buffer assignment."""
        value = self.walker.root(value)
        if value in seen:
            return True
        key = (value, seen)
        if key not in self._constants:
            self._constants[key] = self._constant(value, seen)
        return self._constants[key]

    def _constant(self, value: int, seen: frozenset) -> bool:
        graph = self.graph
        owner = graph.value_def[value]
        if owner >= 0:
            name = graph.op_name[owner]
            if name in _CONSTANTS:
                return True
            if name == "stablehlo.case":
                # XLA inlines the branch a constant index selects: the result is
                # then what that branch returns (tinygp's ``diagonal``, a case on a
                # case of constant index, is no conditional in XLA's module). Every
                # branch must return the one number: a loop's flag a case sets to
                # True or False changes from one step to the next (numpyro's
                # tree-building loops keep their conditionals)
                k = graph.op_results[owner].index(value)
                numbers = {splat_value(graph, graph.op_operands[nested[-1]][k])
                           if nested else None for _, nested in graph.op_blocks[owner]}
                return len(numbers) == 1 and None not in numbers \
                    and self.constant(graph.op_operands[owner][0], seen)
            return (name in _ELEMENTWISE or name == "stablehlo.convert") \
                and bool(graph.op_operands[owner]) \
                and all(self.constant(v, seen) for v in graph.op_operands[owner])
        loop = graph.value_owner[value]
        if loop < 0 or graph.op_name[loop] != "stablehlo.while":
            return False
        k = graph.value_arg_index[value]
        args, body = graph.op_blocks[loop][-1]
        if k >= len(graph.op_operands[loop]) or not body:
            return False
        returned = graph.op_operands[body[-1]][k]
        return self.constant(graph.op_operands[loop][k], seen) and (
            returned == args[k] or self.constant(returned, seen | {args[k]}))

    def on_one_device(self, op: int) -> bool:
        """Whether ``op``'s first result is placed on one device (a maximal mesh)."""
        results = self.graph.op_results[op]
        tensor = self.walker.values.tensor(results[0]) if results else None
        sharding = tensor.sharding if tensor is not None else None
        mesh = self.walker.values.meshes.get(sharding.mesh) if sharding is not None else None
        return mesh is not None and mesh.maximal

    def kept_results(self, op: int) -> int:
        """How many of case ``op``'s results XLA keeps in its tuple (at least one):
        its conditional simplifier drops a result nothing reads, and one every
        branch returns in another's place (``RemoveUnusedTupleElements``,
        ``MergeDuplicateTupleElements``)."""
        graph = self.graph
        returns = [graph.op_operands[nested[-1]] for _, nested in graph.op_blocks[op] if nested]
        kept = {tuple(r[k] for r in returns) for k, value in enumerate(graph.op_results[op])
                if graph.uses[value]}
        return max(len(kept), 1)

    def kept_carries(self, op: int) -> int:
        """How many carries while loop ``op`` has in XLA (at least one): the values
        its body and condition read from outside are carries too (a Newton loop's
        ``a``: ``while.8`` carries y, its step count and a), its s32 induction
        variables are one, and its loop simplifier removes a carry the body returns
        unchanged whose initial value is a constant, or which nothing in the body or
        condition reads (``WhileLoopSimplifier``'s constant and dead parameters)."""
        graph = self.graph
        blocks = graph.op_blocks[op]
        kept = 0
        counted = False  # the one trip counter the s32 induction variables merge into
        for k, operand in enumerate(graph.op_operands[op]):
            if self.induction_variable(op, k):
                kept += not counted
                counted = True
                continue
            if not self.walker.passed_through(op, k):
                kept += 1
                continue
            init = graph.value_def[self.walker.root(operand)]
            if init >= 0 and graph.op_name[init] in _CONSTANTS:
                continue
            if any(k < len(args) and any(user != nested[-1] for user, _ in graph.uses[args[k]])
                   for args, nested in blocks if nested):
                kept += 1
        # the values the loop reads from outside, constants aside: XLA's while takes
        # them as carries too (the exporter's implicit operands)
        read = self.captured([o for _, nested in blocks for o in nested])
        kept += sum(1 for v in read if graph.value_def[v] >= 0 or graph.value_owner[v] != op)
        # a batched gather's indices concatenated before the loop (``hoisted``)
        for indexed, target in self.walker.hoisted_indices.items():
            inside = graph.op_parent[indexed]
            while inside != op and inside != target and inside >= 0:
                inside = graph.op_parent[inside]
            kept += inside == op
        return max(kept, 1)

    def induction_variable(self, op: int, k: int) -> bool:
        """Whether carry ``k`` of while loop ``op`` is an s32 scalar its body adds a
        constant to: XLA's loop simplifier merges all such into one trip counter
        (``TryMergeInductionVariables``: jax's threefry ``fori_loop`` counts its
        steps twice; diffrax's Brownian tree's 9-carry loops are 8 in XLA's buffer
        assignment)."""
        graph = self.graph
        loop = self.walker.loop_body(op, k)
        if loop is None:
            return False
        args, body = loop
        shape = graph.value_shape[args[k]]
        if shape is None or any(n != 1 for n in shape):
            return False
        step = graph.value_def[graph.op_operands[body[-1]][k]]
        if step < 0 or graph.op_name[step] != "stablehlo.add" \
                or args[k] not in graph.op_operands[step]:
            return False
        other = [v for v in graph.op_operands[step] if v != args[k]]
        constant = graph.value_def[self.walker.root(other[0])] if len(other) == 1 else -1
        if constant < 0 or graph.op_name[constant] not in _CONSTANTS:
            return False
        element = ir.RankedTensorType(graph.values[args[k]].type).element_type
        return isinstance(element, ir.IntegerType) and element.width == 32 \
            and element.is_signless

    def captured(self, ops: list[int]) -> set[int]:
        """The values a block's ops (nested ones too) read from outside it, constants
        aside: the operands XLA hands a conditional's branch."""
        graph = self.graph
        inside = set(ops)
        stack = list(ops)
        while stack:
            for _, nested in graph.op_blocks[stack.pop()]:
                inside.update(nested)
                stack.extend(nested)
        found: set[int] = set()
        for op in inside:
            for value in graph.op_operands[op]:
                owner = graph.value_def[value]
                if owner in inside or (owner >= 0 and graph.op_name[owner] in _CONSTANTS):
                    continue
                if owner < 0 and graph.value_owner[value] in inside:
                    continue  # an argument of a block within
                found.add(value)
        return found

    def _one_tuple(self, values: set[int]) -> bool:
        """Whether ``values`` are all the results of one op that XLA:CPU writes as a
        tuple (its tuple is then the branch's operand)."""
        owners = {self.graph.value_def[v] for v in values}
        if len(owners) != 1:
            return False
        owner = owners.pop()
        return owner >= 0 and len(self.graph.op_results[owner]) == len(values) \
            and bool(self.of(owner))
