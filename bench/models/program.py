"""What every benchmark program is: a function, its placed inputs and its shardings.

A model module builds one ``Program`` per size (``"small"`` for tests and CI,
``"large"`` for ``bench/e2e.py --large``). The arguments are already laid out
on the mesh with ``in_shardings``, so ``jax.jit`` and shardc run on the very
same buffers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding

SIZES = ("small", "large")


@dataclasses.dataclass(frozen=True)
class Program:
    """One sharded JAX program, ready to be compiled by ``jax.jit`` and by shardc.

    ``in_shardings`` / ``out_shardings`` are pytree prefixes of the arguments /
    results whose leaves are ``NamedSharding``s on ``mesh`` (``out_shardings``
    ``None``: the partitioner decides). With ``lower_on_abstract_mesh`` shardc
    lowers the program for ``mesh.abstract_mesh`` (no devices named) and then
    compiles it for ``mesh``'s devices; ``jax.jit`` gets the concrete shardings.
    ``donate_argnums`` are donated on every route (each call then consumes those
    arguments: the harness passes fresh copies of them, never ``args`` itself).
    With ``mesh_context`` every route lowers, compiles and runs the program
    inside ``jax.set_mesh(mesh)``, the way users resolve bare ``PartitionSpec``
    constraints (flax's logical constraints among them).

    ``jit`` is how the program's users jit ``fun`` where that is not
    ``jax.jit(fun, in_shardings=..., out_shardings=..., donate_argnums=...)``:
    ``jit(jit_function, fun)`` returns the jitted callable built on
    ``jit_function`` (``jax.jit``, or shardc's ``jit`` with its propagation
    bound), e.g. through a library's own wrapper of ``jax.jit`` (equinox's
    ``filter_jit``); it must donate ``donate_argnums`` itself.
    """

    name: str
    description: str
    fun: Callable
    args: tuple
    in_shardings: Any
    out_shardings: Any
    mesh: Mesh
    lower_on_abstract_mesh: bool = False
    donate_argnums: tuple[int, ...] = ()
    mesh_context: bool = False
    jit: Callable[[Callable, Callable], Callable] | None = None


def check_size(size: str) -> None:
    """Reject a size name that is not one of ``SIZES``."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")


def make_mesh(shape: Sequence[int], names: Sequence[str]) -> Mesh:
    """A mesh over the first devices whose axes are all ``Auto`` (the partitioner decides)."""
    return jax.make_mesh(tuple(shape), tuple(names), axis_types=(AxisType.Auto,) * len(names))


def shardings(mesh: Mesh, specs: Any) -> Any:
    """Turn a pytree of ``PartitionSpec``s into ``NamedSharding``s on ``mesh``."""
    return jax.tree.map(
        lambda spec: NamedSharding(mesh, spec),
        specs,
        is_leaf=lambda leaf: isinstance(leaf, jax.sharding.PartitionSpec),
    )


def place(values: Any, named_shardings: Any) -> Any:
    """``jax.device_put`` each NumPy leaf with the sharding at the same place."""
    return jax.tree.map(jax.device_put, values, named_shardings)


class RandomArrays:
    """Deterministic float32 / int32 test data (NumPy, so no device work before placing)."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def normal(self, shape: Sequence[int], scale: float = 1.0) -> np.ndarray:
        return (self._rng.standard_normal(tuple(shape)) * scale).astype(np.float32)

    def weight(self, shape: Sequence[int]) -> np.ndarray:
        """A weight with variance 1 / fan-in (fan-in: every dimension but the last)."""
        fan_in = int(np.prod(shape[:-1]))
        return self.normal(shape, scale=fan_in**-0.5)

    def integers(self, high: int, shape: Sequence[int]) -> np.ndarray:
        return self._rng.integers(0, high, size=tuple(shape), dtype=np.int32)
