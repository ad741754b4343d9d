"""What a backend that stages a small program through on-chip memory leaves in HBM.

XLA:TPU's memory-space assignment holds every array of a small program in the
core's VMEM (the ``S(1)`` of a layout; libzoo's train steps on v5e 2x4: no array
in the HBM heap but a few scalars), so its HBM temporaries are what is never an
array (``PlatformRules.stages_in_vmem``):

* tuple-shaped values: each a table of pointers (``PlatformRules.table_bytes``:
  512 bytes, XLA:TPU's smallest buffer), every one at an offset of its own
  (``heap_alignment``: 16 KiB apart), as the loop carries and combined
  all-reduces of ``tables``. The staging adds two kinds:

  - the prefetch of each argument into VMEM: a ``copy-start`` whose result is
    (VMEM destination, HBM source, context), one per non-scalar argument some op
    reads (``copy-start(%param.2), cross_program_prefetch_index=0``; a scalar
    is read from HBM);
  - a multi-output fusion: XLA's producer-consumer fusion fuses a reduction
    with the op producing its operand and, where that value is read again, writes
    both (jaxtyping_mlp's ``bitcast_reduce_fusion = (f32[4,2], f32[4,8,2])``: the
    logits and their max; ``multiply_reduce_fusion``, a product and its sum):
    one tuple per such kept value, also in loop bodies;

* the scalars of each reduction's per-element computation (a reduce's, an
  all-reduce's: ``region_0.0 (reduce_max.0: f32[], reduce_max.1: f32[])``, its
  two parameters and its root), each a thread-local allocation of one smallest
  buffer: three per ``max`` or ``add``.
"""

from __future__ import annotations

from math import prod

from shardc.compiler.cost.fusion import FUSIBLE
from shardc.compiler.explain.simplified import all_ops

# Ops whose region XLA runs once per element, in thread-local scalars.
PER_ELEMENT = frozenset("stablehlo." + n for n in (
    "reduce", "reduce_window", "sort", "scatter", "select_and_scatter", "all_reduce",
    "reduce_scatter", "map"))
# Ops XLA's producer-consumer fusion fuses a reduction with (as its producer).
_PRODUCERS = FUSIBLE | {"stablehlo.dot_general", "stablehlo.convolution"}


def staged_tables(walker, args: list[int], ops: list[int]) -> dict[tuple, int]:
    """The tables of the tuple-shaped values staging adds to the program of ``ops``
    (``args``: its arguments), as ``LivenessWalker.tables`` holds them, after the walk
    (``walker.buffers``: the values written to buffers); none on a platform that does
    not stage (``PlatformRules.stages_in_vmem``)."""
    graph, rules = walker.graph, walker.rules
    tables: dict[tuple, int] = {}
    if not rules.stages_in_vmem:
        return tables
    for arg in args:
        shape = graph.value_shape[arg]
        if shape and prod(shape) > 0 and graph.uses[arg]:
            tables[("prefetch", arg)] = rules.table_bytes(3)
    kept = {buffer.value for buffer in walker.buffers}
    for op in all_ops(graph, ops):
        if graph.op_name[op] != "stablehlo.reduce" or op in walker.merged_ops:
            continue
        inputs = graph.op_operands[op][:len(graph.op_results[op])]
        for value in {walker.root(v) for v in inputs}:
            producer = graph.value_def[value]
            if value in kept and producer >= 0 and graph.op_name[producer] in _PRODUCERS:
                tables[("fusion", value)] = rules.table_bytes(2)
    for group in _sibling_outputs(walker, ops, kept):
        tables[("siblings", min(group))] = rules.table_bytes(len(group))
    return tables


def _sibling_outputs(walker, ops: list[int], kept: set[int]) -> list[set[int]]:
    """The outputs of ``ops`` XLA's sibling and producer-consumer fusion write from
    one multi-output fusion: elementwise results reading a common array (through the
    values fused into them) or one another, in groups of two or more (an Adam
    update's parameter, first and second moments, all read the gradient:
    ``multiply_add_fusion = (f32[32,8], f32[32,8], f32[32,8])``)."""
    graph = walker.graph
    returned = [walker.root(v) for v in graph.op_operands[ops[-1]]]
    computed = {v for v in returned
                if graph.value_def[v] >= 0 and graph.op_name[graph.value_def[v]] in FUSIBLE}
    group = {v: v for v in computed}

    def find(v: int) -> int:
        while group[v] != v:
            group[v] = group[group[v]]
            v = group[v]
        return v

    reader: dict[int, int] = {}  # an array read -> an output reading it
    for output in sorted(computed):
        for read in _fused_inputs(walker, output, kept, computed):
            if read in computed:
                group[find(read)] = find(output)
            elif read in reader:
                group[find(reader[read])] = find(output)
            else:
                reader[read] = output
    groups: dict[int, set[int]] = {}
    for v in computed:
        groups.setdefault(find(v), set()).add(v)
    return [g for g in groups.values() if len(g) > 1]


def _fused_inputs(walker, value: int, kept: set[int], outputs: set[int]) -> set[int]:
    """The non-scalar arrays the fusion computing ``value`` reads: the buffers,
    arguments and other outputs it reaches through the fusible values fused into it."""
    graph = walker.graph
    found: set[int] = set()
    seen: set[int] = set()
    stack = list(graph.op_operands[graph.value_def[value]])
    while stack:
        v = walker.root(stack.pop())
        if v in seen:
            continue
        seen.add(v)
        producer = graph.value_def[v]
        if producer < 0 or v in kept or v in outputs or graph.op_name[producer] not in FUSIBLE:
            shape = graph.value_shape[v]
            if shape and prod(shape) > 1:
                found.add(v)
            continue
        stack.extend(graph.op_operands[producer])
    return found


def per_element_bytes(walker, ops: list[int]) -> int:
    """The thread-local scalars of the per-element computations of ``ops`` and the
    ops nested in them: each of a reduction's region's arguments and results, and
    those of each all-reduce the partitioner adds (``walker.reduced``, combined ones
    one), a smallest buffer."""
    graph, rules = walker.graph, walker.rules
    if not rules.stages_in_vmem:
        return 0
    scalars = 0
    for op in all_ops(graph, ops):
        if graph.op_name[op] not in PER_ELEMENT or op in walker.merged_ops:
            continue
        for region_args, region_ops in graph.op_blocks[op]:
            scalars += len(region_args) + sum(len(graph.op_results[o]) for o in region_ops)
    combined = walker.combined(ops)
    partitioned = {at for at in combined.values()} | {
        op for op in ops if op in walker.reduced and op not in walker.merged_ops
        and not any(v in combined for v in graph.op_results[op])}
    # an all-reduce's sum: its two parameters and the add
    scalars += 3 * len(partitioned)
    return scalars * rules.buffer_bytes((), 4)

