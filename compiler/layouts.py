"""Device-local layouts through ``jit``, as jax.jit handles them.

A ``jax.experimental.layout.Format(layout, sharding)`` leaf of ``in_shardings`` /
``out_shardings`` asks for the layout of a value's shards on their devices as
well as for its sharding: a concrete ``Layout(major_to_minor=...)``, or
``Layout.AUTO`` (XLA chooses; ``Compiled.input_formats`` / ``output_formats`` say
what it chose). ``split_formats`` takes the shardings out of such leaves for the
rest of shardc and keeps the formats aside.

Each lowering then resolves one layout per argument as jax.jit does
(``argument_layouts``, jax's ``_resolve_in_layouts``): a committed argument
whose own layout is not the default one brings it (the program is compiled for
the data as it lies, never reading it as if it lay otherwise); a layout given
to ``jit`` must agree with a committed argument's. Results take the layouts
given for them (``result_layouts``). Default layouts resolve to ``None``, so a
program that asks for nothing special is the program jax.jit lowers.

``write_layouts`` writes the resolved layouts onto ``@main`` as jax's lowering
does (``mhlo.layout_mode``: XLA reads it when compiling), after shardc's
annotation: an argument donated to a result of another layout is then only a
buffer donor, and ``Layout.AUTO`` on one side of a donation only is jax's error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
from jax.experimental.layout import Format, Layout
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxlib.mlir import ir

from shardc.compiler import annotation
from shardc.compiler.signature import LeafSignature
from shardc.dialects import jax_private
from shardc.dialects.errors import LayoutMismatchError

AutoLayout = type(Layout.AUTO)
LAYOUT_MODE_ATTR = "mhlo.layout_mode"


# ----------------------------------------------------------------------------
# jit's arguments
# ----------------------------------------------------------------------------


def split_formats(shardings: Any) -> tuple[Any, Any]:
    """``shardings`` with each ``Format`` leaf replaced by its sharding, and the same
    tree with the ``Format`` leaves kept (``None`` elsewhere); that second tree is
    ``None`` when no leaf is a ``Format``."""
    leaves, tree = jax.tree.flatten(shardings, is_leaf=_is_entry)
    if not any(isinstance(leaf, Format) for leaf in leaves):
        return shardings, None
    plain = [leaf.sharding if isinstance(leaf, Format) else leaf for leaf in leaves]
    formats = [leaf if isinstance(leaf, Format) else None for leaf in leaves]
    return jax.tree.unflatten(tree, plain), jax.tree.unflatten(tree, formats)


def _is_entry(node: Any) -> bool:
    return node is None or isinstance(node, (Format, jax.sharding.Sharding, PartitionSpec))


def _is_format_leaf(node: Any) -> bool:
    return node is None or isinstance(node, Format)


def _broadcast(formats: Any, tree: Any) -> list[Format | None]:
    """One format (or None) per leaf of ``tree`` from a pytree prefix of it (its
    structure was checked with the shardings' own)."""
    count = len(jax.tree.leaves(tree))
    if _is_format_leaf(formats):
        return [formats] * count
    expanded = jax.tree.broadcast(formats, tree, is_leaf=_is_format_leaf)
    return jax.tree.leaves(expanded, is_leaf=_is_format_leaf)


# ----------------------------------------------------------------------------
# Resolving one layout per value
# ----------------------------------------------------------------------------


def argument_layouts(leaves: Sequence[LeafSignature], args: Sequence[Any], kwargs: dict,
                     formats: Any, *, placed_by_option: bool = False) -> list[LeafSignature]:
    """The argument signatures with the layout each is compiled for (jax's
    ``_resolve_in_layouts``).

    ``formats`` is ``jit``'s tree of ``Format`` leaves over the positional
    arguments (None: none given). ``placed_by_option``: ``jit(device=)`` or
    ``jit(backend=)`` chose the devices, and then every layout is the default, as
    in jax (data from another backend may lie otherwise).
    """
    if placed_by_option:
        return list(leaves)
    values = jax.tree.leaves((tuple(args), kwargs))
    given = _broadcast(formats, tuple(args)) if formats is not None else []
    given += [None] * (len(values) - len(given))
    resolved = []
    for leaf, value, entry in zip(leaves, values, given):
        layout = _argument_layout(leaf, value, entry)
        resolved.append(leaf if layout is None else dataclasses.replace(leaf, layout=layout))
    return resolved


def _argument_layout(leaf: LeafSignature, value: Any, entry: Format | None) -> Any:
    if jax_private.is_tracer(value):
        value = None  # an enclosing trace's value: no data, no layout of its own
    committed = value is None or getattr(value, "_committed", True)
    sharding = _placed_sharding(leaf, value, entry)
    given = entry.layout if entry is not None else None
    if given is None:
        if not committed or sharding is None:
            return None
        return _own_layout(value, sharding, leaf.aval)
    if isinstance(given, Layout):
        _check_rank(given, leaf, "pjit arguments")
    own = _layout_of(value)
    if committed and sharding is not None and own is not None \
            and not jax_private.user_layout_matches(given, own):
        auto = (" The layout given to `jax.jit` is `Layout.AUTO` but the corresponding "
                "argument passed is a `jax.Array` with a concrete layout. Consider passing "
                "a `jax.ShapeDtypeStruct` instead of `jax.Array` as an argument to the "
                "jitted function  when using `Layout.AUTO`."
                if isinstance(given, AutoLayout) else "")
        raise LayoutMismatchError(
            "Layout passed to jit does not match the layout on the respective arg. "
            f"Got jit layout: {given},\narg layout: {own} for arg type: "
            f"{_short(leaf.aval)}.{auto} ({leaf.path})")
    if isinstance(given, Layout) and _is_default(given, sharding, leaf.aval):
        return None
    return given


def _placed_sharding(leaf: LeafSignature, value: Any, entry: Format | None) -> Any:
    """The sharding (on devices) whose default layout the value's is compared with:
    the one given with its format, else the one given to jit or followed, else the
    value's own; None when the sharding is left to the compiler (jax's unspecified,
    whose layout is the default)."""
    if entry is not None and entry.sharding is not None:
        return entry.sharding
    if leaf.sharding is not None and isinstance(leaf.sharding.mesh, Mesh):
        return leaf.sharding
    if isinstance(value, jax.Array) and value.committed:
        return value.sharding
    if isinstance(value, jax.ShapeDtypeStruct) and isinstance(
            value.sharding, jax.sharding.Sharding):
        sharding = value.sharding
        if not isinstance(sharding, NamedSharding) or isinstance(sharding.mesh, Mesh):
            return sharding
    return None


def _own_layout(value: Any, sharding: Any, aval: Any) -> Any:
    """A committed value's own layout where it is not the default (else None)."""
    if isinstance(value, jax.Array):
        if jax.dtypes.issubdtype(value.dtype, jax.dtypes.extended):
            return None
        own = jax_private.array_layout(value)
        if own is None or own == jax_private.default_array_layout(
                value.sharding, value.shape, value.dtype):
            return None
    layout = _layout_of(value)
    return None if _is_default(layout, sharding, aval) else layout


def _layout_of(value: Any) -> Any:
    """The layout a value brings: a placed array's, a ``ShapeDtypeStruct``'s format's."""
    if isinstance(value, jax.Array) and not jax.dtypes.issubdtype(
            value.dtype, jax.dtypes.extended):
        return value.format.layout
    if isinstance(value, jax.ShapeDtypeStruct):
        return value.format.layout
    return None


def result_layouts(results: Sequence[LeafSignature], out_tree: Any, formats: Any
                   ) -> list[LeafSignature]:
    """The result signatures with the layout each is asked for (jax's
    ``_resolve_out_layouts``: a concrete layout that is the default is ``None``)."""
    if formats is None:
        return list(results)
    given = _broadcast(formats, jax.tree.unflatten(out_tree, list(range(len(results)))))
    resolved = []
    for leaf, entry in zip(results, given):
        layout = entry.layout if entry is not None else None
        if isinstance(layout, Layout):
            _check_rank(layout, leaf, "pjit outputs")
            sharding = entry.sharding if entry.sharding is not None else leaf.sharding
            if _is_default(layout, sharding, leaf.aval):
                layout = None
        resolved.append(leaf if layout is None else dataclasses.replace(leaf, layout=layout))
    return resolved


def as_traced(results: Sequence[LeafSignature], out_tree: Any, formats: Any
              ) -> list[LeafSignature]:
    """The result signatures as a trace describes them (jax's ``Traced.out_info``): with
    each concrete layout asked for, the default one too, which only lowering drops
    (``result_layouts``)."""
    if formats is None:
        return list(results)
    given = _broadcast(formats, jax.tree.unflatten(out_tree, list(range(len(results)))))
    return [dataclasses.replace(leaf, layout=entry.layout)
            if entry is not None and isinstance(entry.layout, Layout) else leaf
            for leaf, entry in zip(results, given)]


def described(leaf: LeafSignature) -> Any:
    """What a ``jax.ShapeDtypeStruct`` of ``leaf`` takes as its ``sharding``: a ``Format``
    where it has a concrete layout (as jax's ``out_info``), else the sharding."""
    if isinstance(leaf.layout, Layout) and leaf.sharding is not None:
        return Format(leaf.layout, leaf.sharding)
    return leaf.sharding


def _is_default(layout: Any, sharding: Any, aval: Any) -> bool:
    if isinstance(sharding, NamedSharding) and not isinstance(sharding.mesh, Mesh):
        sharding = None  # no devices yet: jax's unspecified
    return jax_private.is_default_layout(layout, sharding, aval)


def _check_rank(layout: Layout, leaf: LeafSignature, what: str) -> None:
    try:
        layout.check_compatible_aval(leaf.aval.shape)
    except ValueError as error:
        raise LayoutMismatchError(
            f"One of {what} with pytree key path {leaf.path} is incompatible with its "
            f"layout annotation {layout}: {error}") from None


def _short(aval: Any) -> str:
    return jax.core.ShapedArray(aval.shape, aval.dtype).str_short()


# ----------------------------------------------------------------------------
# The module
# ----------------------------------------------------------------------------


def write_layouts(module: ir.Module, args: Sequence[LeafSignature],
                  results: Sequence[LeafSignature], offsets: tuple[int, int] = (0, 0)) -> None:
    """Write the resolved layouts on ``@main``'s arguments and results (``mhlo.layout_mode``,
    as jax's lowering: ``"auto"`` or XLA's layout text; nothing for the default),
    and keep donation to what those layouts allow; ``offsets``: where ``args`` and
    ``results`` start among ``@main``'s (``annotation.user_offsets``)."""
    if all(leaf.layout is None for leaf in (*args, *results)):
        return
    func = annotation.main_function(module)
    for which, leaves, offset in (("args", args, offsets[0]), ("results", results, offsets[1])):
        annotation.set_function_attrs(
            func, LAYOUT_MODE_ATTR, [_layout_mode(leaf) for leaf in leaves], which, offset)
    _donate_within_layouts(func, args, results, offsets)


def _layout_mode(leaf: LeafSignature) -> ir.Attribute | None:
    if leaf.layout is None:
        return None
    if isinstance(leaf.layout, AutoLayout):
        return ir.StringAttr.get("auto")
    return ir.StringAttr.get(jax_private.layout_mode_text(leaf.layout, leaf.aval.dtype))


def _donate_within_layouts(func: ir.Operation, args: Sequence[LeafSignature],
                           results: Sequence[LeafSignature],
                           offsets: tuple[int, int]) -> None:
    """An argument aliased to a result of another layout becomes a buffer donor (XLA
    may still reuse it), as in jax; ``Layout.AUTO`` on one side of an alias only is
    jax's error (the other side's layout would decide XLA's choice)."""
    def compatible(arg: LeafSignature, out: LeafSignature) -> bool:
        auto_in, auto_out = (isinstance(x.layout, AutoLayout) for x in (arg, out))
        if auto_in != auto_out:
            side = "output" if auto_in else "input"
            raise LayoutMismatchError(
                f"Input layout being donated was {arg.layout} while output layout was "
                f"{out.layout}. Did you mean to set the **{side} layout** to "
                "**Layout.AUTO**?\nThis will allow for the input and output layout to be "
                f"chosen by XLA and not the layout of the {side} which might not be optimal.")
        return arg.layout == out.layout

    annotation.donate_only_where(func, args, results, compatible, offsets)

