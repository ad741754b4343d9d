"""``grad_loops`` with its ``lax.fori_loop`` and ``lax.scan`` unrolled twice per iteration.

``unroll=2`` is what users set on a loop for speed: jax then lowers a loop of
half the trip count whose body runs the step twice (stacking per-step
residuals two at a time), and the backward pass walks those stacks in reverse.
Everything else is ``grad_loops``: the same loss, the same (data, fsdp, model)
mesh of 2 x 2 x 2, the same outputs.
"""

from __future__ import annotations

from bench.models.program import Program
from bench.zoo import grad_loops

NAME = "grad_loops_unrolled"
SIZES = grad_loops.SIZES
UNROLL = 2


def make(size: str = "small") -> Program:
    return grad_loops.build(size, NAME, unroll=UNROLL)
