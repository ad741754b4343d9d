"""jax.jit's warning for donated arguments no result can reuse.

jax decides at lowering (``mlir.lower_jaxpr_to_module`` and its
``_set_up_aliases``) which donated arguments are usable: each result, in order,
takes the first donated argument whose shard has its shape and dtype (and
memory, where every argument and result names one); an argument left over is
still handed to XLA when some result not taken has a shard of as many
elements. With several devices and a result whose sharding is not given, XLA
decides the shardings, so jax hands it every donated argument and says
nothing; otherwise it warns of those left with ``UserWarning`` "Some donated
buffers were not usable: ...". shardc lowers jax's module with no result
sharding given (it writes its own), so jax's lowering says nothing there: the
warning is made here from shardc's signatures, as jax's words it. On one
device jax's own lowering warns (the shardings play no part), so shardc's
lowering passes it on as it is.
"""

from __future__ import annotations

import collections
import math
import warnings
from collections.abc import Sequence

import jax
from jaxlib.mlir import ir

from shardc.compiler.annotation import main_function, user_offsets
from shardc.compiler.explain.aliasing import donations
from shardc.compiler.signature import LeafSignature, shard_shape
from shardc.dialects import jax_private, sdy

_EXPLANATION = "See an explanation at https://docs.jax.dev/en/latest/faq.html#buffer-donation."


def warn_unusable_donations(jax_module: ir.Module, args: Sequence[LeafSignature],
                            results: Sequence[LeafSignature], tokens: int,
                            device_count: int | None) -> None:
    """Warn as jax.jit does of the donated arguments of ``jax_module`` (jax's lowering,
    which marks them) that no result can reuse; ``args`` and ``results``: ``@main``'s
    after its global constants and ``tokens`` tokens (``annotation.user_offsets``),
    ``device_count``: the devices the program runs on."""
    if device_count is None or device_count <= 1:
        return
    if any(not _given(leaf) for leaf in results):
        return
    arg_offset, _ = user_offsets(jax_module, tokens)
    marks = donations(main_function(jax_module))[arg_offset:arg_offset + len(args)]
    donated = [mark is not None for mark in marks]
    if not any(donated):
        return
    unusable = unusable_donations(args, results, donated)
    if unusable:
        texts = ", ".join(str(_shard_aval(args[k])) for k in unusable)
        warnings.warn(f"Some donated buffers were not usable: {texts}.\n{_EXPLANATION}")


def unusable_donations(args: Sequence[LeafSignature], results: Sequence[LeafSignature],
                       donated: Sequence[bool]) -> list[int]:
    """The donated arguments (positions) jax finds no use for: none of the results,
    each taking the first donated argument whose shard has its shape and dtype,
    took it, and no result left over has a shard of as many elements."""
    kinds = _memory_kinds([*args, *results])
    arg_kinds, result_kinds = kinds[:len(args)], kinds[len(args):]
    waiting: dict[tuple, collections.deque[int]] = collections.defaultdict(collections.deque)
    for k, (arg, kind, given) in enumerate(zip(args, arg_kinds, donated)):
        if given and not _is_token(arg):
            waiting[(*_shard_type(arg), kind)].append(k)
    left = list(donated)
    taken: set[int] = set()
    for out, (result, kind) in enumerate(zip(results, result_kinds)):
        if _is_token(result):
            continue
        queue = waiting.get((*_shard_type(result), kind))
        if queue:
            left[queue.popleft()] = False
            taken.add(out)
    # A donated argument no result took goes to XLA when a result no argument took
    # has a shard of as many elements.
    sizes: dict[tuple, int] = collections.Counter(
        (_shard_size(result), kind)
        for out, (result, kind) in enumerate(zip(results, result_kinds))
        if out not in taken and not _is_token(result))
    for k, (arg, kind) in enumerate(zip(args, arg_kinds)):
        if left[k] and not _is_token(arg) and sizes.get((_shard_size(arg), kind)):
            sizes[(_shard_size(arg), kind)] -= 1
            left[k] = False
    return [k for k, still in enumerate(left) if still]


def _given(leaf: LeafSignature) -> bool:
    """Whether the result's sharding is given whole (no dimension left to XLA)."""
    if _is_token(leaf):
        return True
    if leaf.sharding is None:
        return False
    spec = getattr(leaf.sharding, "spec", None)
    return spec is None or not any(entry is spec.UNCONSTRAINED for entry in sdy.spec_dims(spec))


def _memory_kinds(leaves: Sequence[LeafSignature]) -> list[str | None]:
    """Each leaf's memory kind, where every leaf names one (else none, as jax)."""
    kinds = [leaf.sharding.memory_kind if leaf.sharding is not None else None
             for leaf in leaves]
    if any(kind is None for kind in kinds):
        return [None] * len(leaves)
    return kinds


def _is_token(leaf: LeafSignature) -> bool:
    return not isinstance(leaf.aval, jax.ShapeDtypeStruct)


def _shard_shape(leaf: LeafSignature) -> tuple[int, ...]:
    shape = tuple(leaf.aval.shape)
    return shape if leaf.sharding is None else tuple(shard_shape(leaf.sharding, shape))


def _shard_type(leaf: LeafSignature) -> tuple:
    return _shard_shape(leaf), leaf.aval.dtype


def _shard_size(leaf: LeafSignature) -> int:
    return math.prod(_shard_shape(leaf))


def _shard_aval(leaf: LeafSignature):
    """The argument's shard as jax's warning prints it (``~float32[2,4]``)."""
    aval = leaf.aval
    shard = jax.ShapeDtypeStruct(_shard_shape(leaf), aval.dtype, weak_type=aval.weak_type)
    return jax_private.typed_aval(shard, None, memory_space=leaf.memory_space)
