"""``lm_linen``'s train step with its activation constraints removed.

The same flax.linen model, train state, logical rules and shardings of the
parameters, inputs and outputs; only the ``nn.with_logical_constraint`` calls
on activations are skipped (``constrain_activations=False``). Users write those
constraints by hand because propagation alone shards the activations after the
FSDP-sharded parameters; this row measures how close each route gets without
them (the cost-aware search is meant to find them).
"""

from __future__ import annotations

from bench.models.program import Program
from bench.zoo import lm_linen

NAME = "lm_linen_unconstrained"
SIZES = lm_linen.SIZES


def make(size: str = "small") -> Program:
    return lm_linen.make(size, constrain_activations=False, name=NAME,
                         description="constraints removed: ")
