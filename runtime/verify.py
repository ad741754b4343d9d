"""``Compiled.verify``: the sharded program against the unsharded one, on the same inputs.

The compiled (partitioned) program runs on its devices; the reference is the
same JAX function under plain ``jax.jit`` on host copies of the inputs, so it
runs on one device (a function that itself names a mesh, e.g. through
``shard_map``, keeps it). Every output is compared in float64: the largest
absolute difference and the largest relative one (over ``|reference|``, with
``atol`` as floor). A difference above ``atol + rtol * |reference|`` anywhere
raises ``VerificationError`` with the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from shardc.dialects.errors import ShardcError


@dataclass(frozen=True)
class OutputDifference:
    """How one output of the sharded program differs from the reference."""

    path: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    ok: bool


@dataclass(frozen=True)
class VerifyReport:
    """Per-output differences; ``ok`` when every output is within tolerance."""

    outputs: tuple[OutputDifference, ...]
    rtol: float
    atol: float

    @property
    def ok(self) -> bool:
        """Whether every output is within tolerance."""
        return all(o.ok for o in self.outputs)

    def format_text(self) -> str:
        """One line per output: path, shape, max abs and rel differences."""
        lines = [f"{'output':<24} {'shape':<16} {'max abs':>11} {'max rel':>11}  ok"]
        for o in self.outputs:
            shape = "x".join(map(str, o.shape)) or "scalar"
            lines.append(f"{o.path:<24} {shape:<16} {o.max_abs:>11.3e} {o.max_rel:>11.3e}  "
                         f"{'yes' if o.ok else 'NO'}")
        return "\n".join(lines) + f"\n(rtol={self.rtol}, atol={self.atol})\n"


class VerificationError(ShardcError, ValueError):
    """The sharded program's outputs differ from the unsharded reference."""

    def __init__(self, report: VerifyReport):
        super().__init__("sharded outputs differ from the unsharded reference:\n"
                         + report.format_text())
        self.report = report


def _host(value: Any) -> Any:
    return np.asarray(value) if isinstance(value, jax.Array) else value


def compare_outputs(sharded: Any, reference: Any, *, rtol: float, atol: float) -> VerifyReport:
    """Compare two output pytrees leaf by leaf (see the module docstring)."""
    got, _ = jax.tree_util.tree_flatten_with_path(sharded)
    want = jax.tree.leaves(reference)
    if len(got) != len(want):
        raise VerificationError(VerifyReport((), rtol, atol)) from None
    outputs = []
    for (path, value), expected in zip(got, want):
        a = np.asarray(value, dtype=np.float64) if np.size(value) else np.zeros(0)
        b = np.asarray(expected, dtype=np.float64) if np.size(expected) else np.zeros(0)
        diff = np.abs(a - b)
        max_abs = float(diff.max()) if diff.size else 0.0
        max_rel = float((diff / np.maximum(np.abs(b), atol)).max()) if diff.size else 0.0
        ok = bool(np.all(diff <= atol + rtol * np.abs(b))) if diff.size else True
        outputs.append(OutputDifference(jax.tree_util.keystr(path) or "result",
                                        tuple(np.shape(value)), max_abs, max_rel, ok))
    return VerifyReport(tuple(outputs), rtol, atol)


def verify(compiled: Callable, reference: Callable, args: tuple, kwargs: dict, *,
           rtol: float = 1e-5, atol: float = 1e-5, raise_on_error: bool = True) -> VerifyReport:
    """Run ``compiled`` and ``reference`` on the same inputs and compare their outputs.

    The host copies are taken first: the compiled program may donate (and so
    delete) its arguments.
    """
    host_args = jax.tree.map(_host, args)
    host_kwargs = jax.tree.map(_host, kwargs)
    sharded = compiled(*args, **kwargs)
    expected = reference(*host_args, **host_kwargs)
    report = compare_outputs(sharded, expected, rtol=rtol, atol=atol)
    if raise_on_error and not report.ok:
        raise VerificationError(report)
    return report
