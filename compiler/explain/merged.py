"""What XLA's common-subexpression elimination merges once optimization barriers are gone.

``jax.checkpoint`` (flax's ``nn.remat``, equinox's ``filter_checkpoint``) recomputes a
layer's forward in the backward pass from its saved inputs, which it passes through
a ``stablehlo.optimization_barrier`` so that the recomputation is not merged with the
forward's own ops. XLA:CPU removes the barriers before its CSE
(``OptimizationBarrierExpander``, run ahead of the simplification passes), so an
unrolled layer's recomputation is the forward's ops again and CSE merges it into them:
the forward's values live on into the backward, as without ``jax.checkpoint`` (a bf16
ViT whose blocks are under ``nn.remat``: each block's f32 attention probabilities,
``convert_convert_fusion.9``, live from the block's forward to its backward, and the
surviving ops' metadata joins both names, ``rematted_computation/.../max;.../max``).
Inside a scanned loop nothing merges: the recomputation reads the loop's own slice of
the saved stack, which no forward op inside the backward body computes.

``merged_graph`` finds those merges block by block (an op is keyed by its name,
attributes, result types and operands, an operand seen through the barriers and
through the merges already found) and returns the graph as the walk should read it:
each merged op's readers read the op it merged into, whose buffer lives until they
have run; the merged op itself writes nothing.
"""

from __future__ import annotations

from shardc.compiler.propagation.graph import GraphView, PropagationGraph

_BARRIER = "stablehlo.optimization_barrier"
_EDGE = "sdy.data_flow_edge"
# ops XLA's CSE never merges: side effects, random bits, collectives with their own
# channels, custom calls
_NEVER = frozenset({"stablehlo.custom_call", "stablehlo.rng", "stablehlo.rng_bit_generator",
                    "stablehlo.all_gather", "stablehlo.all_to_all", "stablehlo.all_reduce",
                    "stablehlo.reduce_scatter", "stablehlo.collective_permute",
                    "stablehlo.collective_broadcast", "stablehlo.send", "stablehlo.recv",
                    "stablehlo.infeed", "stablehlo.outfeed", "stablehlo.after_all",
                    "stablehlo.create_token", "stablehlo.partition_id",
                    "stablehlo.replica_id", "func.call", "func.return", "stablehlo.return",
                    _BARRIER})
# ops whose regions compute one element (or pair) at a time: XLA's CSE compares their
# called computations by structure, so two equal reductions merge (a checkpointed
# layer norm's mean, recomputed in the backward, is the forward's reduce)
_PER_ELEMENT = frozenset("stablehlo." + n for n in (
    "reduce", "reduce_window", "sort", "scatter", "select_and_scatter", "map"))


def merged_view(graph: PropagationGraph, merged: dict[int, int],
                merged_ops: set[int]) -> GraphView:
    """``graph`` read with the merged ops' results replaced by the values they merged
    into: operands and uses follow the merges, ``merged_ops`` are the ops that write
    nothing, ``merged`` maps a merged op's result to the value it merged into. A graph
    already merged (a view of one) keeps its merges too."""
    merged = {**getattr(graph, "merged", {}), **merged}
    merged_ops = getattr(graph, "merged_ops", set()) | merged_ops
    for duplicate, kept in merged.items():
        while kept in merged:  # a value merged into one merged later
            kept = merged[kept]
        merged[duplicate] = kept
    # a merged op reads nothing: its operands' buffers are not kept for it
    uses = [[use for use in found if use[0] not in merged_ops] for found in graph.uses]
    for duplicate, kept in merged.items():
        uses[kept] = uses[kept] + uses[duplicate]
        uses[duplicate] = []
    return GraphView(graph, merged_ops=merged_ops, merged=merged, uses=uses,
                     op_operands=[[merged.get(v, v) for v in operands]
                                  for operands in graph.op_operands])


def removed_view(graph: PropagationGraph, replaced: dict[int, int]) -> GraphView:
    """``graph`` read without the ops defining ``replaced``'s values (value -> the value
    its readers read instead): a pass of XLA's that deletes an op, not one that
    merges ops the walk still lists (``merged_view``)."""
    for value, kept in replaced.items():
        while kept in replaced:  # a value replaced by one replaced too
            kept = replaced[kept]
        replaced[value] = kept
    gone = {graph.value_def[value] for value in replaced}
    uses = list(graph.uses)
    for op in gone:
        for value in set(graph.op_operands[op]):
            uses[value] = [use for use in uses[value] if use[0] != op]
    for value, kept in replaced.items():
        uses[kept] = uses[kept] + uses[value]
        uses[value] = []
    blocks = [[(args, [op for op in ops if op not in gone]) for args, ops in op_blocks]
              if any(op in gone for _, ops in op_blocks for op in ops) else op_blocks
              for op_blocks in graph.op_blocks]
    return GraphView(graph, op_blocks=blocks, uses=uses,
                     op_operands=[[replaced.get(v, v) for v in operands]
                                  for operands in graph.op_operands])


def merged_graph(graph: PropagationGraph):
    """``graph`` as XLA's CSE leaves it once the barriers are expanded: a merged view
    (``GraphView``) when some op merges, else ``graph`` itself (a module without
    barriers is never walked through a view)."""
    if _BARRIER not in graph.op_name:
        return graph
    merged: dict[int, int] = {}
    merged_ops: set[int] = set()
    seen_blocks: set[int] = set()
    for op in range(len(graph.ops)):
        for _, block in graph.op_blocks[op]:
            if block and block[0] not in seen_blocks:
                seen_blocks.add(block[0])
                merge_block(graph, block, merged, merged_ops)
    # Every merged op stays merged, a cheap elementwise one too: XLA's fusion then
    # treats the one op as it treats any value read by the forward and the backward
    # (``LivenessWalker.materialised``). Unmerging the cheap ones left the backward's
    # recomputed chains reading merged dots while the forward's values they merged
    # into were freed: a checkpointed ViT's layer norms and softmax (0.76x of XLA's
    # net bytes against 0.93x merged) and an unrolled checkpointed Llama step's
    # RMS norms (0.88x against 0.97x).
    if not merged_ops:
        return graph
    return merged_view(graph, merged, merged_ops)


def merge_block(graph: PropagationGraph, block: list[int], merged: dict[int, int],
                 merged_ops: set[int], nesting: frozenset[str] = frozenset()) -> None:
    """Record in ``merged`` (value -> value it merges into) the ops of ``block`` (ops
    of one block, in order) that repeat an earlier op of them. ``nesting``: the ops
    with whole computations of their own (loops, conditionals) that may merge too,
    their computations compared by structure as XLA's CSE compares them."""
    first: dict[tuple, int] = {}
    for op in block:
        name = graph.op_name[op]
        if name in _NEVER or not graph.op_results[op] or (
                graph.op_blocks[op] and name not in _PER_ELEMENT and name not in nesting):
            continue
        if name in nesting and _holds_unmerged(graph, op):
            continue
        key = (name, tuple(_through(graph, v, merged) for v in graph.op_operands[op]),
               tuple(str(graph.values[r].type) for r in graph.op_results[op]),
               _attributes(graph.ops[op]), _regions(graph, op, merged))
        kept = first.setdefault(key, op)
        if kept == op:
            continue
        merged_ops.add(op)
        for duplicate, value in zip(graph.op_results[op], graph.op_results[kept]):
            merged[duplicate] = value


def _holds_unmerged(graph: PropagationGraph, op: int) -> bool:
    """Whether an op nested in ``op`` is one CSE never merges (a collective with its
    own channel makes two equal loops holding it differ)."""
    for _, ops in graph.op_blocks[op]:
        for inner in ops:
            if graph.op_name[inner] in _NEVER and graph.op_name[inner] != "stablehlo.return":
                return True
            if graph.op_blocks[inner] and _holds_unmerged(graph, inner):
                return True
    return False


def _through(graph: PropagationGraph, value: int, merged: dict[int, int]) -> int:
    """``value`` seen through optimization barriers (and the data-flow edges Shardy
    puts on their results) and the merges found so far."""
    while True:
        value = merged.get(value, value)
        owner = graph.value_def[value]
        if owner < 0:
            return value
        if graph.op_name[owner] == _EDGE:
            value = graph.op_operands[owner][0]
        elif graph.op_name[owner] == _BARRIER:
            value = graph.op_operands[owner][graph.op_results[owner].index(value)]
        else:
            return value


def _regions(graph: PropagationGraph, op: int, merged: dict[int, int]) -> tuple:
    """``op``'s regions by structure: each nested op's name, attributes, result types
    and operands, an operand named by its place (a block argument, an earlier nested
    op's result) or, from outside, as ``_through`` sees it."""
    local: dict[int, tuple] = {}
    key = []
    for b, (args, ops) in enumerate(graph.op_blocks[op]):
        local.update((arg, ("arg", b, k)) for k, arg in enumerate(args))
        for i, inner in enumerate(ops):
            local.update((r, ("result", b, i, k)) for k, r in enumerate(graph.op_results[inner]))
            key.append((graph.op_name[inner],
                        tuple(local.get(v) or _through(graph, v, merged)
                              for v in graph.op_operands[inner]),
                        tuple(str(graph.values[r].type) for r in graph.op_results[inner]),
                        _attributes(graph.ops[inner]), _regions(graph, inner, merged)))
    return tuple(key)


def _attributes(operation) -> tuple:
    attributes = operation.attributes
    named = (attributes[k] for k in range(len(attributes)))
    return tuple(sorted((a.name, str(a.attr)) for a in named))
