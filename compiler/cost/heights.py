"""How far each op is from the end of its block, as XLA measures it to keep a
gathered value for a later reader or gather it again.

XLA's SPMD partitioner gathers an operand for each op that needs it gathered;
``ScheduleAwareCollectiveOpsCSE`` then makes a later identical all-gather of the
same operand the first one only when the two are close: an op's *height* is its
distance to the computation's root along its users (walking ops from the root
back, each op's height grows by one per user over the highest user seen so far,
``h = max(h, height(user)) + 1``), and the later gather becomes the first when
the lowest user of the first (its users so far, those of gathers already made
it included) is at most ``threshold`` above the later gather. Otherwise the later
gather stays, and it is never a target itself: only the first gather of an
operand is. XLA:TPU runs it with a threshold of 100
(``xla_tpu_spmd_threshold_for_allgather_cse``): in a train step the gathered
weights read last in the forward pass (the output projection, the last layer's
MLP) are kept for their backward use, the others gathered again.

Heights are taken here over a block's ops in the module as lowered (an op using
a value inside a nested region counts as the use by the op of the block that
holds that region, as a loop's operand does in XLA), with the all-reduce XLA's
partitioner puts after an op's partial sums counted as one op more: close to XLA's
heights over the partitioned module (on Llama-shaped steps and deep FSDP MLPs the
same weights fall either side of 100; a checkpointed loop body's partitioned
attention holds more ops than it does as lowered).
"""

from __future__ import annotations

from collections.abc import Mapping

from shardc.compiler.propagation.graph import PropagationGraph as Graph


def block_of(graph: Graph, op: int) -> tuple[int, int]:
    """``(owner, index)``: the block ``op`` is in, by the op owning it (-1: the module)
    and the block's index among that op's blocks."""
    owner = graph.op_parent[op]
    blocks = graph.op_blocks[owner] if owner >= 0 else ()
    if len(blocks) < 2:  # the module, a function: no search through its ops
        return owner, 0
    for index, (_, ops) in enumerate(blocks):
        if op in ops:
            return owner, index
    return owner, 0


def block_heights(graph: Graph, block: tuple[int, int],
                  after: Mapping[int, int]) -> dict[int, int]:
    """Each op of ``block`` (``block_of``'s) by its height in XLA's sense; ``after``:
    per op, the ops XLA's partitioner puts between it and its users (the all-reduce
    of partial sums), each one more on the way to the root."""
    owner, index = block
    ops = (graph.op_blocks[owner][index][1] if owner >= 0
           else [op for op, parent in enumerate(graph.op_parent) if parent < 0])
    members = set(ops)
    heights: dict[int, int] = {}
    for op in reversed(ops):
        users = {_in_block(graph, user, owner, members)
                 for value in graph.op_results[op] for user, _ in graph.uses[value]}
        users.discard(None)
        height = 0
        # In program order, as XLA lists an instruction's users (the sum depends on it).
        for user in sorted(users):
            height = max(height, heights.get(user, 0)) + 1
        heights[op] = height + after.get(op, 0)
    return heights


def _in_block(graph: Graph, op: int, owner: int, members: set[int]) -> int | None:
    """The op of the block (``members``, owned by ``owner``) that holds ``op``, ``op``
    itself where it is one; None where ``op`` is outside the block."""
    while op >= 0 and op not in members:
        if op == owner:
            return None
        op = graph.op_parent[op]
    return op if op >= 0 else None


def gather_reused(first: dict, key, block: tuple[int, int], height: int,
                  threshold: int) -> bool:
    """Whether the gather of ``key`` (a value and its target) for an op at ``height``
    in ``block`` is made the first gather of it, ``first[key]`` (its block and its
    users' lowest height, which the op then joins); False where the op gathers it
    again: in another block, or more than ``threshold`` below the first's lowest user."""
    first_block, lowest = first[key]
    # The later gather's one user is the op: the gather sits one above it.
    if first_block != block or lowest > height + 1 + threshold:
        return False
    first[key] = (block, min(lowest, height))
    return True


__all__ = ["block_heights", "block_of", "gather_reused"]
