"""Regression: the mismatched MLP of ``conflict_mlp`` with a small batch, wide hidden layer.

At (batch, d_model, d_hidden) = (32, 256, 512) the cost-aware search once
predicted 565248 -> 102400 bytes for pinning the second matmul to follow
``w_out``, which compiled to 622592 (XLA computed the matmul in the returned
layout, see ``conflict_mlp_narrow``). Priced both ways, the search now picks
following the activations instead: 131072 bytes, predicted and compiled.
"""

from __future__ import annotations

from bench.models.conflict_mlp import make_mlp
from bench.models.program import Program, check_size

NAME = "conflict_mlp_wide"
SIZES = {
    "small": dict(batch=32, d_model=256, d_hidden=512),
    "large": dict(batch=128, d_model=1024, d_hidden=2048),
}


def make(size: str = "small") -> Program:
    check_size(size)
    return make_mlp(NAME, "mismatched MLP, small batch, wide hidden layer "
                    "(cost-aware regression)", seed=25, **SIZES[size])
