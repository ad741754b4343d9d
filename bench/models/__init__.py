"""The end-to-end benchmark programs: sharded JAX programs written for shardc's comparisons.

``REGISTRY`` maps each program's name to its ``make(size) -> Program``;
``make_programs(size, only)`` builds them. Each module holds one program.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from bench.models import (
    abstract_mesh_constraint,
    conflict_attention,
    conflict_attention_seq,
    conflict_mlp,
    conv_net,
    embedding_scatter,
    fsdp_train_step,
    mlp_data_parallel,
    mlp_megatron,
    moe_routing,
    scan_rnn,
    shard_map_pipeline,
    transformer,
)
from bench.models.program import SIZES, Program

_MODULES = (
    mlp_data_parallel,
    mlp_megatron,
    fsdp_train_step,
    transformer,
    conv_net,
    embedding_scatter,
    moe_routing,
    scan_rnn,
    shard_map_pipeline,
    abstract_mesh_constraint,
    # Programs with real propagation conflicts (issue 12, cost-aware propagation).
    conflict_mlp,
    conflict_attention,
    conflict_attention_seq,
)
REGISTRY: dict[str, Callable[[str], Program]] = {module.NAME: module.make for module in _MODULES}


def make_programs(size: str = "small", only: Iterable[str] | None = None) -> list[Program]:
    """Build the programs named in ``only`` (all when ``None``), in registry order."""
    wanted = list(REGISTRY) if only is None else list(only)
    unknown = [name for name in wanted if name not in REGISTRY]
    if unknown:
        raise KeyError(f"unknown program(s) {unknown}; known: {sorted(REGISTRY)}")
    return [REGISTRY[name](size) for name in REGISTRY if name in wanted]


__all__ = ["REGISTRY", "SIZES", "Program", "make_programs"]
