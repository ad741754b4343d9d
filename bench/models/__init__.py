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
    conflict_fsdp_pair,
    conflict_mlp,
    conflict_mlp_deep,
    conflict_mlp_narrow,
    conflict_mlp_wide,
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
    # Programs with real propagation conflicts (what cost-aware propagation is for).
    conflict_mlp,
    conflict_attention,
    conflict_attention_seq,
    conflict_mlp_deep,
)
REGISTRY: dict[str, Callable[[str], Program]] = {module.NAME: module.make for module in _MODULES}

# Cost-aware regressions: shapes where a predicted saving once compiled
# to more bytes than Shardy. Kept apart from ``REGISTRY`` (the e2e suite); used by
# ``bench/cost_aware.py`` and its test.
REGRESSIONS: dict[str, Callable[[str], Program]] = {
    module.NAME: module.make for module in (conflict_mlp_narrow, conflict_mlp_wide,
                                            conflict_fsdp_pair)
}


def make_programs(size: str = "small", only: Iterable[str] | None = None,
                  registry: dict[str, Callable[[str], Program]] | None = None) -> list[Program]:
    """Build the programs named in ``only`` (all when ``None``), in registry order."""
    registry = REGISTRY if registry is None else registry
    wanted = list(registry) if only is None else list(only)
    unknown = [name for name in wanted if name not in registry]
    if unknown:
        raise KeyError(f"unknown program(s) {unknown}; known: {sorted(registry)}")
    return [registry[name](size) for name in registry if name in wanted]


__all__ = ["REGISTRY", "REGRESSIONS", "SIZES", "Program", "make_programs"]
