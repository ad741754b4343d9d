"""Regression: two FSDP-style layers, the second weight column-sharded.

``relu(x @ w1) @ w2`` with ``x`` batch-sharded, ``w1`` row-sharded (FSDP) and
``w2`` column-sharded, output batch-sharded. The cost-aware search once
pinned the second matmul to follow ``w2``: predicted 524288 -> 335872 bytes,
compiled 589824 (worse than Shardy's 524288) because XLA computed the matmul
in the returned, batch-sharded layout. Priced both ways, no alternative is
cheaper now and Shardy's choice is kept.
"""

from __future__ import annotations

from jax.sharding import PartitionSpec as P

from bench.models.conflict_mlp import make_mlp
from bench.models.program import Program, check_size

NAME = "conflict_fsdp_pair"
SIZES = {
    "small": dict(batch=64, d_model=256, d_hidden=256),
    "large": dict(batch=256, d_model=1024, d_hidden=1024),
}


def make(size: str = "small") -> Program:
    check_size(size)
    return make_mlp(NAME, "two FSDP layers, second weight column-sharded (cost-aware regression)",
                    seed=26, specs=(P("x", None), P("x", None), P(None, "x")), **SIZES[size])
