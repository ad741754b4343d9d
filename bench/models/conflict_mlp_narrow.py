"""Regression: the mismatched MLP of ``conflict_mlp`` with a narrow hidden layer.

At (batch, d_model, d_hidden) = (128, 256, 160) the cost-aware search once
pinned the second matmul to follow ``w_out`` (column-sharded): predicted
305152 -> 229376 bytes, but its result is resharded again at the return, and
XLA computed the matmul in the returned layout from the explicitly gathered
activations, gathering ``w_out`` too: 376832 compiled bytes, worse than
Shardy. The search now prices that route as well (``search.
returned_in_declared_layout``) and keeps Shardy's choice here.
"""

from __future__ import annotations

from bench.models.conflict_mlp import make_mlp
from bench.models.program import Program, check_size

NAME = "conflict_mlp_narrow"
SIZES = {
    "small": dict(batch=128, d_model=256, d_hidden=160),
    "large": dict(batch=512, d_model=1024, d_hidden=640),
}


def make(size: str = "small") -> Program:
    check_size(size)
    return make_mlp(NAME, "mismatched MLP, narrow hidden layer (cost-aware regression)",
                    seed=24, **SIZES[size])
