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

from shardc.compiler.cost.fusion import FUSIBLE
from shardc.compiler.explain.duplication import expensive
from shardc.compiler.propagation.graph import PropagationGraph

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


class MergedGraph:
    """``graph`` read with the merged ops' results replaced by the ops they merged into:
    operands and uses follow the merges, ``merged_ops`` are the ops that write nothing;
    every other attribute is ``graph``'s own."""

    def __init__(self, graph: PropagationGraph, merged: dict[int, int], merged_ops: set[int]) -> None:
        self._graph = graph
        self.merged_ops = merged_ops
        self.op_operands = [[merged.get(v, v) for v in operands]
                            for operands in graph.op_operands]
        uses = list(graph.uses)
        for duplicate, kept in merged.items():
            uses[kept] = uses[kept] + uses[duplicate]
            uses[duplicate] = []
        self.uses = uses

    def __getattr__(self, name: str):
        return getattr(self._graph, name)


def merged_graph(graph: PropagationGraph):
    """``graph`` as XLA's CSE leaves it once the barriers are expanded: a ``MergedGraph``
    when some op merges, else ``graph`` itself (a module without barriers is never
    walked through a proxy)."""
    if _BARRIER not in graph.op_name:
        return graph
    merged: dict[int, int] = {}
    merged_ops: set[int] = set()
    seen_blocks: set[int] = set()
    for op in range(len(graph.ops)):
        for _, block in graph.op_blocks[op]:
            if block and block[0] not in seen_blocks:
                seen_blocks.add(block[0])
                _merge_block(graph, block, merged, merged_ops)
    # XLA's fusion computes a merged cheap elementwise op (a multiply, a broadcast...)
    # again inside each fusion reading it, in the backward as before the merge: the
    # ops that stay merged are those writing a buffer of their own (dots,
    # convolutions, reductions) and the expensive ones fusion never duplicates (tanh,
    # exp: grad_loops_unrolled's checkpointed MLP under dots_saveable keeps its
    # estimate, a checkpointed tanh MLP merges its tanh)
    kept_ops = {op for op in merged_ops
                if graph.op_name[op] not in FUSIBLE or expensive(graph, op)}
    if not kept_ops:
        return graph
    kept = {value: into for value, into in merged.items()
            if graph.value_def[value] in kept_ops}
    return MergedGraph(graph, kept, kept_ops)


def _merge_block(graph: PropagationGraph, block: list[int], merged: dict[int, int],
                 merged_ops: set[int]) -> None:
    """Record in ``merged`` (value -> value it merges into) the ops of ``block`` that
    repeat an earlier op of the block."""
    first: dict[tuple, int] = {}
    for op in block:
        name = graph.op_name[op]
        if name in _NEVER or graph.op_blocks[op] or not graph.op_results[op]:
            continue
        key = (name, tuple(_through(graph, v, merged) for v in graph.op_operands[op]),
               tuple(str(graph.values[r].type) for r in graph.op_results[op]),
               _attributes(graph.ops[op]))
        kept = first.setdefault(key, op)
        if kept == op:
            continue
        merged_ops.add(op)
        for duplicate, value in zip(graph.op_results[op], graph.op_results[kept]):
            merged[duplicate] = value


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


def _attributes(operation) -> tuple:
    attributes = operation.attributes
    named = (attributes[k] for k in range(len(attributes)))
    return tuple(sorted((a.name, str(a.attr)) for a in named))
