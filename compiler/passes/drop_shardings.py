"""Remove every sdy sharding, sharding op and mesh symbol from a module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import PassError, emit_warning
from shardc.compiler.passes.base import ModulePass, option
from shardc.compiler.sharding.walker import (
    FUNC_OP,
    FUNC_SHARDING_LISTS,
    SHARDING_ATTR,
    erase_unused_meshes,
    ops_in_preorder,
    sharding_attr_names,
)

# Ops that only restate a value's sharding: the value passes through unchanged.
PASS_THROUGH_OPS = ("sdy.sharding_constraint", "sdy.reshard")
# Sharding attributes an sdy op may lose without changing what it computes.
OPTIONAL_SHARDING_ATTRS = {"sdy.named_computation": ("in_shardings", "out_shardings")}
MESH_OP = "sdy.mesh"


def _drop_func_shardings(func: ir.Operation) -> None:
    for list_name in FUNC_SHARDING_LISTS:
        if list_name not in func.attributes:
            continue
        new_dicts = []
        for entry in ir.ArrayAttr(func.attributes[list_name]):
            entries = ir.DictAttr(entry)
            kept = {
                entries[i].name: entries[i].attr
                for i in range(len(entries))
                if entries[i].name != SHARDING_ATTR
            }
            new_dicts.append(ir.DictAttr.get(kept))
        if any(len(d) for d in new_dicts):
            func.attributes[list_name] = ir.ArrayAttr.get(new_dicts)
        else:
            del func.attributes[list_name]


def _drop_op_shardings(op: ir.Operation, *, strict: bool) -> bool:
    """Drop what can be dropped from one op; return False if it must keep shardings."""
    if op.name in PASS_THROUGH_OPS:
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
        return True
    optional = OPTIONAL_SHARDING_ATTRS.get(op.name, ())
    kept = False
    for name in sharding_attr_names(op):
        if name == SHARDING_ATTR or name in optional:
            del op.attributes[name]
            continue
        message = f"'{op.name}' keeps its shardings: without them it has no meaning"
        if strict:
            raise PassError(op, message)
        emit_warning(op, message)
        kept = True
        break
    return not kept


def drop_shardings(module: ir.Operation, *, keep_meshes: bool = False, strict: bool = False) -> None:
    """Strip shardings, sharding ops and (unless still used) mesh symbols from ``module``."""
    for op in ops_in_preorder(module):
        if op.name == FUNC_OP:
            _drop_func_shardings(op)
        if op.name != MESH_OP:
            _drop_op_shardings(op, strict=strict)
    if keep_meshes:
        return
    erase_unused_meshes(module)


@dataclass(frozen=True)
class DropShardingsPass(ModulePass):
    """Remove all sdy shardings, sharding ops and mesh symbols

    Reads and removes function argument/result shardings and ``sdy.sharding``
    attributes; replaces ``sdy.sharding_constraint`` and ``sdy.reshard`` by
    their operand; removes the optional shardings of ``sdy.named_computation``
    and then every ``sdy.mesh`` no longer referenced. Ops whose shardings are
    part of their meaning (``sdy.manual_computation``, collectives) keep them,
    with a warning (an error with ``strict``), and so do the meshes they use.
    """

    name: ClassVar[str] = "shardc-drop-shardings"

    keep_meshes: bool = option(False, help="leave the sdy.mesh symbols in place")
    strict: bool = option(
        False, help="fail on an op that must keep its shardings instead of warning"
    )

    def run(self, module: ir.Operation) -> None:
        """Drop the shardings of ``module``."""
        drop_shardings(module, keep_meshes=self.keep_meshes, strict=self.strict)
