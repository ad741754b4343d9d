"""The op sharding rule registry: which ``OpShardingRule`` each op gets.

``rule_for(op, conservative=False)`` answers, in Shardy's order: a rule already
attached to the op (``sdy.sharding_rule``) as is; else the ``RULES`` entry for
the op's name; else ``None`` for ops in ``NO_RULE`` (data-flow ops such as
while/case/optimization_barrier are handled by edges, constants need nothing);
else ``None`` after warning once per op name. Results are cached per distinct
(op name, types, attributes, conservative, neighbour facts): a few rules
(concatenate, dynamic_update_slice, scatter, custom_call X64Combine) also read
the ops around the op, so those facts are part of the key.

One deliberate difference from Shardy: CHLO's elementwise ops (``chlo.erf``,
``chlo.square``...) get the pointwise rule (``elementwise.CHLO_POINTWISE_OPS``).
Shardy has none for them, but under ``jax.jit`` it never sees them, because
XLA decomposes CHLO into StableHLO first; shardc propagates before that.

Adding a rule for a new op
==========================

====================  =========================================================
Step                  What to do
====================  =========================================================
1. Write it           ``def my_op(op, conservative=False) -> OpShardingRule`` in
                      the family module (``shape.py``, ``indexing.py``, ...),
                      named after the op, docstring = the factor picture, built
                      with ``RuleBuilder`` (never mutating ``op``).
2. Register it        one line ``"stablehlo.my_op": family.my_op`` in ``RULES``
                      below (alphabetical), or the name in ``POINTWISE_OPS``.
3. Neighbours?        if it reads other ops, add a key to ``_NEIGHBOUR_KEYS``.
4. Test it            a generator in the differential test (the native pass is
                      the oracle) and a CHECK line in ``test/lit/sharding_rules``.
====================  =========================================================
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import source_loc_of
from shardc.compiler.sharding import user_rules
from shardc.compiler.sharding.rule import OpShardingRule
from shardc.compiler.sharding.rules import (
    collective,
    contraction,
    custom_call,
    elementwise,
    indexing,
    linalg,
    reduction,
    shape,
)
from shardc.compiler.sharding.rules._attrs import defining_op_name
from shardc.dialects.sdy import SHARDING_ATTR, SHARDING_RULE_ATTR

RuleFn = Callable[..., OpShardingRule | None]


RULES: dict[str, RuleFn] = {
    **{name: elementwise.pointwise for name in elementwise.POINTWISE_OPS},
    **{name: elementwise.pointwise for name in elementwise.CHLO_POINTWISE_OPS},
    "chlo.top_k": reduction.top_k,
    "stablehlo.all_gather": collective.all_gather,
    "stablehlo.all_to_all": collective.all_to_all,
    "stablehlo.batch_norm_inference": linalg.batch_norm_inference,
    "stablehlo.bitcast_convert": elementwise.bitcast_convert,
    "stablehlo.broadcast_in_dim": shape.broadcast_in_dim,
    "stablehlo.cholesky": linalg.cholesky,
    "stablehlo.clamp": elementwise.clamp,
    "stablehlo.concatenate": shape.concatenate,
    "stablehlo.convolution": contraction.convolution,
    "stablehlo.custom_call": custom_call.custom_call,
    "stablehlo.dot": contraction.dot,
    "stablehlo.dot_general": contraction.dot_general,
    "stablehlo.dynamic_slice": indexing.dynamic_slice,
    "stablehlo.dynamic_update_slice": indexing.dynamic_update_slice,
    "stablehlo.fft": linalg.fft,
    "stablehlo.gather": indexing.gather,
    "stablehlo.pad": shape.pad,
    "stablehlo.reduce": reduction.reduce,
    "stablehlo.reduce_scatter": collective.reduce_scatter,
    "stablehlo.reduce_window": reduction.reduce_window,
    "stablehlo.reshape": shape.reshape,
    "stablehlo.reverse": shape.reverse,
    "stablehlo.rng_bit_generator": linalg.rng_bit_generator,
    "stablehlo.scatter": indexing.scatter,
    "stablehlo.select": elementwise.select,
    "stablehlo.select_and_scatter": reduction.select_and_scatter,
    "stablehlo.slice": shape.slice,
    "stablehlo.sort": reduction.sort,
    "stablehlo.transpose": shape.transpose,
    "stablehlo.triangular_solve": linalg.triangular_solve,
}

# Indexed ops: which operand is indexed, which holds the indices (read by
# the cost model, which follows XLA's gather/scatter handler for them).
INDEXED_ROLES: dict[str, Callable[[ir.Operation], indexing.IndexedRoles]] = {
    "stablehlo.gather": indexing.gather_roles,
    "stablehlo.scatter": indexing.scatter_roles,
}


def indexed_roles_for(op: ir.Operation) -> indexing.IndexedRoles | None:
    """The operand roles of an indexed op (gather, scatter); None for any other op."""
    roles = INDEXED_ROLES.get(op.name)
    return roles(op) if roles is not None else None


# Ops that get no rule on purpose: structure, terminators, constants, and
# data-flow ops whose values are linked by edges instead of a rule.
NO_RULE: frozenset[str] = frozenset({
    "builtin.module",
    "func.call",
    "func.func",
    "func.return",
    "sdy.constant",
    "sdy.data_flow_edge",
    "sdy.func_data_flow_edge",
    "sdy.manual_computation",
    "sdy.mesh",
    "sdy.named_computation",
    "sdy.propagation_barrier",
    "sdy.reshard",
    "sdy.return",
    "sdy.sharding_group",
    "stablehlo.after_all",
    "stablehlo.case",
    "stablehlo.constant",
    "stablehlo.create_token",
    "stablehlo.get_tuple_element",
    "stablehlo.infeed",
    "stablehlo.iota",
    "stablehlo.optimization_barrier",
    "stablehlo.outfeed",
    "stablehlo.partition_id",
    "stablehlo.recv",
    "stablehlo.return",
    "stablehlo.send",
    "stablehlo.while",
})


class UnknownOpShardingRuleWarning(UserWarning):
    """An op (or custom call target) the registry has no rule for."""


def _concatenate_key(op: ir.Operation) -> Hashable:
    """Which operands are slices and which share a source (the concat-dim kind)."""
    sources: list[ir.Value] = []
    key = []
    for value in op.operands:
        name = defining_op_name(value)
        source = value.owner.operands[0] if name == "stablehlo.slice" else value
        index = next((i for i, s in enumerate(sources) if s == source), None)
        if index is None:
            sources.append(source)
            index = len(sources) - 1
        key.append((name == "stablehlo.slice", index))
    return tuple(key)


def _dynamic_update_slice_key(op: ir.Operation) -> Hashable:
    return tuple(defining_op_name(v) for v in list(op.operands)[2:])


def _scatter_key(op: ir.Operation) -> Hashable:
    return indexing.is_plain_reduction(op.regions[0].blocks[0], len(op.results))


def _custom_call_key(op: ir.Operation) -> Hashable:
    return custom_call.feeds_rng_bit_generator(op)


# Facts outside the op's own types and attributes that its rule depends on.
_NEIGHBOUR_KEYS: dict[str, Callable[[ir.Operation], Hashable]] = {
    "stablehlo.concatenate": _concatenate_key,
    "stablehlo.custom_call": _custom_call_key,
    "stablehlo.dynamic_update_slice": _dynamic_update_slice_key,
    "stablehlo.scatter": _scatter_key,
}

# The only mutable module state: names already warned about, and the rule caches.
_warned: set[str] = set()
_cache: dict[Hashable, OpShardingRule | None] = {}
_attached_cache: dict[str, OpShardingRule] = {}  # printed sdy.sharding_rule -> rule
_CACHE_LIMIT = 4096
_MISSING = object()
# Attributes shardc adds for its own bookkeeping (the cost-aware search numbers
# every op): never part of an op's rule.
_BOOKKEEPING_PREFIX = "shardc."


def is_bookkeeping(attribute_name: str) -> bool:
    """Whether an attribute of this name is shardc's own bookkeeping (the cost-aware
    search's op numbers): it says nothing about what the op computes."""
    return attribute_name.startswith(_BOOKKEEPING_PREFIX)


def bears_on_rule(attribute_name: str) -> bool:
    """Whether an op's rule may depend on its attribute of this name (what a rule
    cache keys on): a value's sharding never changes it, nor do shardc's own
    bookkeeping attributes (a key holding the search's op number would make every
    op a miss)."""
    return attribute_name != SHARDING_ATTR and not is_bookkeeping(attribute_name)


def _printed(thing: ir.Type | ir.Attribute, texts: dict[int, str] | None) -> str:
    """``str(thing)``, looked up in ``texts`` first when given: one context's printed
    types and attributes by uniqued pointer (printing costs more than a lookup)."""
    if texts is None:
        return str(thing)
    key = hash(thing)
    text = texts.get(key)
    if text is None:
        text = texts[key] = str(thing)
    return text


def _cache_key(op: ir.Operation, conservative: bool, texts: dict[int, str] | None) -> Hashable:
    attributes = tuple(
        (name, _printed(op.attributes[name], texts))
        for name in op.attributes if bears_on_rule(name)
    )
    neighbours = _NEIGHBOUR_KEYS[op.name](op) if op.name in _NEIGHBOUR_KEYS else None
    return _key(op.name, tuple(_printed(v.type, texts) for v in op.operands),
                tuple(_printed(v.type, texts) for v in op.results), attributes, conservative,
                neighbours)


def _key(name: str, operand_types: tuple[str, ...], result_types: tuple[str, ...],
         attributes: tuple[tuple[str, str], ...], conservative: bool,
         neighbours: Hashable = None) -> Hashable:
    """The registry's cache key: what a rule is computed from, as printed texts."""
    return (name, operand_types, result_types, attributes, conservative, neighbours,
            user_rules.generation())


def _cached(key: Hashable, op: ir.Operation, conservative: bool) -> OpShardingRule | None:
    rule = _cache.get(key, _MISSING)
    if rule is _MISSING:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        rule = _cache[key] = compute_rule(op, conservative)
    return rule


def _warn_once(key: str, op: ir.Operation, what: str, example: str) -> None:
    """Warn about ``op`` once per ``key``, at the user's source line when it has one."""
    if key in _warned:
        return
    _warned.add(key)
    message = (
        f"{what} has no sharding rule in shardc: shardc propagates no sharding through "
        "it and XLA's partitioner decides how to split it (often by replicating its "
        f"operands). If you know how it shards, teach shardc: {example}"
    )
    loc = source_loc_of(op.location)
    if loc is None or loc.line < 1:
        warnings.warn(message, UnknownOpShardingRuleWarning, stacklevel=4)
    else:
        warnings.warn_explicit(message, UnknownOpShardingRuleWarning, loc.file, loc.line)


def compute_rule(op: ir.Operation, conservative: bool = False) -> OpShardingRule | None:
    """Compute ``op``'s rule from the registry alone (no attached rule, no cache)."""
    name = op.name
    if user_rules.has_user_rules():  # rules users registered come first
        registered = user_rules.user_rule(op)
        if registered is not None:
            return registered
    if name in RULES:
        if name == "stablehlo.custom_call" and not custom_call.is_known_target(op):
            target = custom_call.target_name(op)
            _warn_once(
                f"custom_call@{target}", op, f"custom call @{target}",
                f"shardc.compiler.register_sharding_rule({target!r}, 'ij->ij') "
                "(an einsum-like spec of its operands and results).",
            )
        return RULES[name](op, conservative=conservative)
    if name not in NO_RULE:
        _warn_once(name, op, f"op '{name}'",
                   f"shardc.compiler.register_sharding_rule({name!r}, 'ij->ij') "
                   "(an einsum-like spec of its operands and results).")
    return None


def rule_for(op: ir.Operation | ir.OpView, conservative: bool = False,
             texts: dict[int, str] | None = None) -> OpShardingRule | None:
    """The sharding rule of ``op``: attached rule, else registry (cached), else None.

    ``texts``: a dict the caller keeps for one context (and only one), in which
    the cache key's printed types and attributes are remembered.
    """
    op = op.operation
    if SHARDING_RULE_ATTR in op.attributes:
        # Printing the attribute costs a fifteenth of reading it back field by field.
        attached = op.attributes[SHARDING_RULE_ATTR]
        text = str(attached)
        rule = _attached_cache.get(text)
        if rule is None:
            if len(_attached_cache) >= _CACHE_LIMIT:
                _attached_cache.clear()
            rule = _attached_cache[text] = OpShardingRule.from_attr(attached)
        return rule
    if op.name in NO_RULE:
        return None
    return _cached(_cache_key(op, conservative, texts), op, conservative)


def rule_from_texts(op: ir.Operation, operand_types: tuple[str, ...],
                    result_types: tuple[str, ...], attributes: tuple[tuple[str, str], ...],
                    conservative: bool = False) -> OpShardingRule | None:
    """``rule_for`` of an op whose cache key the caller has printed already: the
    printed types of its operands and results and ``(name, printed attribute)``
    of each attribute that bears on the rule, in the op's order.

    Only for an op without an attached rule, outside ``NO_RULE`` and
    ``_NEIGHBOUR_KEYS``: its key is then these texts alone. A caller that reads
    the op's types and attributes anyway (the propagation graph) spares reading
    them again through the bindings.
    """
    return _cached(_key(op.name, operand_types, result_types, attributes, conservative),
                   op, conservative)


def clear_cache() -> None:
    """Forget cached rules (tests use it to measure or to start clean)."""
    _cache.clear()
    _attached_cache.clear()
