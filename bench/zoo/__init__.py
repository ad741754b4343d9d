"""The zoo: real JAX programs written the way users write them, for shardc to compile.

Where ``bench/models`` holds programs written for shardc's comparisons, the zoo
holds what people actually run: flax.linen and flax.nnx train steps with
logical axis names, optax optimizers and donated train states, layers stacked
by ``nn.scan``, gradients through loops, ``custom_vjp`` and ``checkpoint``,
mixture of experts, BatchNorm, mixed precision, a KV-cache decode step, a
``shard_map`` pipeline, scatter-add gradients and typed PRNG keys with
``cond`` / ``switch``. Each module holds one program (``NAME``, ``SIZES``,
``make(size) -> Program``, ``bench.models.program.Program``), except
``report`` (measuring and the table, for ``python -m bench.zoo`` and the test);
``REGISTRY`` maps names to ``make`` and ``make_programs(size, only)`` builds
them.
``python -m bench.zoo`` (``__main__``) compares each with ``jax.jit``;
``test/python/test_zoo.py`` holds shardc to it at the small sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from bench.models import make_programs as _make_programs
from bench.models.program import SIZES, Program
from bench.zoo import (
    cnn_batchnorm,
    decode_kv_cache,
    dropout_cond,
    embedding_heads,
    grad_loops,
    grad_loops_unrolled,
    lm_linen,
    lm_linen_unconstrained,
    lm_nnx,
    lm_scan_layers,
    moe,
    pipeline_shard_map,
    vit_bf16,
)

_MODULES = (
    lm_linen,
    lm_linen_unconstrained,
    lm_nnx,
    lm_scan_layers,
    grad_loops,
    grad_loops_unrolled,
    moe,
    cnn_batchnorm,
    vit_bf16,
    decode_kv_cache,
    pipeline_shard_map,
    embedding_heads,
    dropout_cond,
)
REGISTRY: dict[str, Callable[[str], Program]] = {module.NAME: module.make for module in _MODULES}


def make_programs(size: str = "small", only: Iterable[str] | None = None) -> list[Program]:
    """Build the zoo programs named in ``only`` (all when ``None``), in registry order."""
    return _make_programs(size, only, registry=REGISTRY)


__all__ = ["REGISTRY", "SIZES", "Program", "make_programs"]
