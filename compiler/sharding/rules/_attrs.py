"""Typed readers for the op attributes that rules look at (jaxlib bindings only)."""

from __future__ import annotations

from jaxlib.mlir import ir


def int_attr(op: ir.Operation, name: str, default: int = 0) -> int:
    """An integer attribute's value, or ``default`` when absent."""
    if name not in op.attributes:
        return default
    return ir.IntegerAttr(op.attributes[name]).value


def bool_attr(op: ir.Operation, name: str) -> bool:
    """A boolean attribute's value (False when absent)."""
    return name in op.attributes and ir.BoolAttr(op.attributes[name]).value


def i64_list(op: ir.Operation, name: str) -> list[int] | None:
    """A dense i64 array or dense int elements attribute, flattened; None when absent."""
    if name not in op.attributes:
        return None
    attr = op.attributes[name]
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return list(ir.DenseI64ArrayAttr(attr))
    return [int(x) for x in ir.DenseIntElementsAttr(attr)]


def str_attr(op: ir.Operation, name: str) -> str:
    """A string attribute's value ('' when absent)."""
    if name not in op.attributes:
        return ""
    return ir.StringAttr(op.attributes[name]).value


def defining_op_name(value: ir.Value) -> str | None:
    """Name of the op that defines ``value``; None for block arguments."""
    if isinstance(value.owner, ir.Block):
        return None
    return value.owner.name
