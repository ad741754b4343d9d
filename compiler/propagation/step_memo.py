"""What propagation steps repeat, kept across the drivers of one ``ReadMemo``.

A step is a pure function of its plan signature (rule, flags, data-flow
view), its factor directions, the strategy and the shardings it reads, so
everything naming those is interned here as small ints: shardings
(``ShardingStore.sid``), plan signatures (``Plan.key``) and (plan key,
directions) pairs (*heads*), and the step updates are memoised on heads and
sharding ids. Keys are made of values that mean the same in every graph of
one context (never op or value indices), so a caller that propagates many
copies of one module (the cost-aware search) reuses the steps of earlier
copies. Like ``ReadMemo``, it holds for one context, one set of meshes and
one ``conservative`` setting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardc.compiler.propagation.compact_rule import CompactRule
    from shardc.compiler.sharding.tensor import TensorSharding


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
