"""The libzoo: JAX programs written the way other libraries' users write them.

Where ``bench/zoo`` holds flax / optax programs, the libzoo holds programs of
equinox (an ``eqx.nn`` transformer trained under ``eqx.filter_jit`` with
``eqx.filter_shard``, and a model split by ``eqx.partition`` / ``eqx.combine``
under ``jax.jit``), diffrax (a neural ODE, Tsit5 with an adaptive step and
``SaveAt``, its loss differentiated), orbax-checkpoint (a sharded train state
saved and restored onto its shardings, then stepped), penzai (a named-axis
``pz.nn`` model with a sharded embedding table), optax's combinators
(``multi_transform`` with a label tree and ``None`` parameters, ``chain`` of
``clip_by_global_norm`` and ``adamw``, ``MultiSteps``), chex (a
``chex.dataclass`` state and chex's shape asserts) and jaxtyping (a model typed
with ``Float[Array, "batch features"]`` and checked under ``jaxtyped``).
Gemma's library is left out: it needs tensorflow. Each module holds one
program, with the zoo's interface (``NAME``, ``SIZES``, ``make(size) ->
Program``); the user's jit call goes to the route's jit: ``jax.jit`` itself, or
``eqx.filter_jit`` built on it (``equinox_jit``). ``python -m bench.zoo --zoo
libzoo`` measures them; ``test/python/test_libzoo.py`` holds shardc to jax.jit
on them. A program in ``ISOLATED`` is measured in a child process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from bench.libzoo import (
    chex_dataclass_state,
    diffrax_neural_ode,
    eqx_filter_jit,
    eqx_partition_jit,
    jaxtyping_mlp,
    optax_multi_transform,
    optax_multisteps,
    orbax_restore_step,
    penzai_named_lm,
)
from bench.models import make_programs as _make_programs
from bench.models.program import SIZES, Program

_MODULES = (
    eqx_filter_jit,
    eqx_partition_jit,
    diffrax_neural_ode,
    orbax_restore_step,
    penzai_named_lm,
    optax_multi_transform,
    optax_multisteps,
    chex_dataclass_state,
    jaxtyping_mlp,
)
REGISTRY: dict[str, Callable[[str], Program]] = {module.NAME: module.make for module in _MODULES}
# Programs measured in a child process of their own (``report.measure_isolated``) by
# ``python -m bench.zoo --zoo libzoo`` and the test: diffrax's solve is a while loop
# whose partitioned module XLA has aborted the process on (a failed RET_CHECK).
ISOLATED = ("diffrax_neural_ode",)


def make_programs(size: str = "small", only: Iterable[str] | None = None) -> list[Program]:
    """Build the libzoo programs named in ``only`` (all when ``None``), in registry order."""
    return _make_programs(size, only, registry=REGISTRY)


__all__ = ["ISOLATED", "REGISTRY", "SIZES", "Program", "make_programs"]
