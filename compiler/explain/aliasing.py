"""Which donated arguments share their buffer with which results (input/output aliasing).

jax 0.10.2 marks a donated argument of the lowered ``main`` in one of two ways:
``tf.aliasing_output = k`` when jax paired it with result ``k`` itself (the
result's sharding is known at lowering, e.g. ``out_shardings`` given), or
``jax.buffer_donor = true`` when it leaves the pairing to XLA. XLA's
``OptimizeInputOutputBufferAlias`` pass then pairs each donor with a result
not yet aliased whose per-device shape and element type are the same (after
SPMD partitioning, so shardings only matter through the shard shape). An
aliased result is written into its argument's buffer, and
``Compiled.memory_analysis()`` reports those bytes as ``alias_size_in_bytes``.
Validated on a donated SGD step (both marks) and on the zoo's donated train
states and KV cache (``bench/memory_estimate.py``): the alias bytes equal XLA's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jaxlib.mlir import ir

ALIASING_OUTPUT = "tf.aliasing_output"
BUFFER_DONOR = "jax.buffer_donor"


@dataclass(frozen=True)
class Alias:
    """A donated argument whose buffer result ``result`` reuses."""

    argument: int
    path: str | None  # jax's name for the argument leaf, when known
    result: int
    bytes_per_device: int


@dataclass(frozen=True)
class Slot:
    """What aliasing needs to know of one argument or result: bytes and per-device type."""

    bytes_per_device: int
    key: tuple  # (shard shape, element type): XLA pairs donors and results on it


def donations(func: ir.Operation) -> list[int | bool | None]:
    """Per argument of ``func``: the result jax aliased it with, True for a bare
    donor (XLA chooses the result), None when not donated."""
    try:
        attrs = func.attributes["arg_attrs"]
    except KeyError:
        return []
    found: list[int | bool | None] = []
    for entry in attrs:
        entry = ir.DictAttr(entry)
        if ALIASING_OUTPUT in entry:
            found.append(ir.IntegerAttr(entry[ALIASING_OUTPUT]).value)
        elif BUFFER_DONOR in entry and ir.BoolAttr(entry[BUFFER_DONOR]).value:
            found.append(True)
        else:
            found.append(None)
    return found


def find_aliases(
    marks: Sequence[int | bool | None],
    arguments: Sequence[Slot],
    results: Sequence[Slot],
    names: Sequence[str] | None = None,
) -> tuple[Alias, ...]:
    """The aliased (argument, result) pairs, as XLA makes them from jax's marks.

    Explicit pairs first; then each bare donor, in argument order, takes the
    first result not yet aliased with the same per-device shape and type.
    """
    named = names is not None and len(names) == len(arguments)
    taken: dict[int, int] = {}
    for index, mark in enumerate(marks):
        if mark is not True and mark is not None and 0 <= mark < len(results):
            taken[mark] = index
    for index, mark in enumerate(marks):
        if mark is not True or index >= len(arguments):
            continue
        for k, result in enumerate(results):
            if k not in taken and result.key == arguments[index].key:
                taken[k] = index
                break
    return tuple(
        Alias(index, names[index] if named else None, k, arguments[index].bytes_per_device)
        for k, index in sorted(taken.items(), key=lambda item: item[1])
        if index < len(arguments))
