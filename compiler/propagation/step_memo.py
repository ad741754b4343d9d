"""What propagation steps repeat, kept across the drivers of one ``ReadMemo``.

A step is a pure function of its plan signature (rule, flags, data-flow
view), its factor directions, the strategy and the shardings it reads, so
everything naming those is interned here as small ints: shardings
(``ShardingStore.sid``), plan signatures (``Plan.key``) and (plan key,
directions) pairs (*heads*), and the step updates are memoised on heads and
sharding ids. Keys are made of values that mean the same in every graph of
one context (never op or value indices), so a caller that propagates many
copies of one module (the cost-aware search) reuses the steps of earlier
copies. It holds for one set of meshes (``common_mesh`` reads them by name):
``for_meshes`` hands every read of modules with the same meshes the same
memo, so that a program lowered again, or another with the same ops and
shardings (a train and an eval step, a jit of the same model), replays the
steps an earlier lowering computed. Rules are named by ``id`` of the
process-wide compact rules, which the memo keeps alive.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardc.compiler.propagation.compact_rule import CompactRule
    from shardc.compiler.sharding.tensor import MeshInfo, TensorSharding

# Memos kept for this many sets of meshes (the most recently read), each replaced by
# an empty one, for reads that start after it, once it holds this many entries.
_MESH_SETS = 8
_ENTRIES = 250_000


class StepMemo:
    """Interned shardings, plan keys and heads, and the memoised steps."""

    def __init__(self) -> None:
        # Sharding -> its id (0 is None, never stored).
        self.sharding_ids: dict[TensorSharding, int] = {}
        # Plan signature -> plan key; the rules the signatures name by ``id``,
        # kept alive so that no id is reused.
        self.plan_keys: dict[tuple, int] = {}
        self.rules: list[CompactRule] = []
        # (plan key, directions) -> head, and head -> directions.
        self.heads: dict[tuple, int] = {}
        self.head_dirs: list[tuple] = []
        # (chain, op signature, plan key) -> head per level of the chain.
        self.chains: dict[tuple, list[int]] = {}
        # strategy -> (head, sharding ids) -> updates.
        self.updates: dict = {}
        # strategy -> (shape, sharding ids) -> func-result step updates.
        self.results: dict = {}

    def entries(self) -> int:
        """How many shardings, heads and steps it holds (what it costs to keep)."""
        return (len(self.sharding_ids) + len(self.head_dirs)
                + sum(map(len, self.updates.values())) + sum(map(len, self.results.values())))


_by_meshes: OrderedDict[tuple, StepMemo] = OrderedDict()


def for_meshes(meshes: dict[str, MeshInfo]) -> StepMemo:
    """The memo of every read of modules whose mesh symbols are ``meshes``."""
    key = tuple(sorted((name, info.key) for name, info in meshes.items()))
    memo = _by_meshes.get(key)
    if memo is None or memo.entries() >= _ENTRIES:
        memo = _by_meshes[key] = StepMemo()
        while len(_by_meshes) > _MESH_SETS:
            _by_meshes.popitem(last=False)
    _by_meshes.move_to_end(key)
    return memo
