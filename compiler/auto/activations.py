"""Activation shardings AUTO may choose: sharding constraints on chosen intermediate values.

Argument shardings alone cannot reach every state an expert writes: MaxText pins
the residual stream, the attention heads and the MLP hidden units with
``with_sharding_constraint`` so that, with the weights FSDP-sharded over the
data axes, the activations keep the batch on those axes instead of taking the
weights' embedding sharding. AUTO chooses such constraints too, on *anchors*:
the results of the program's dots and convolutions (``ANCHOR_PRIMITIVES``) whose
leading dimension is a batch (a leading length of a data argument: one the step
does not return).

``Constrained(fun, ...)`` is ``fun`` traced to a jaxpr and evaluated equation by
equation, with a sharding constraint after chosen anchors (``sharding_at``).
The search lowers it with an *open* constraint (every dimension unconstrained)
on every anchor: the module then holds one ``sdy.sharding_constraint`` per
anchor, in equation order, that the search closes per state
(``mark_values``), and the program AUTO returns is the same function with the
chosen constraints alone. Both trace ``fun`` the same way, so the anchors'
equation indices agree.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.extend.core import ClosedJaxpr, Literal
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jaxlib.mlir import ir

from shardc.compiler.propagation.graph import PropagationGraph
from shardc.compiler.stages.hlo_order import in_jax_order, order_tags
from shardc.dialects import jax_private, sdy

# Equations whose results are the activations worth constraining. A convolution's are
# constrained closed only (``candidates.activation_candidates``).
ANCHOR_PRIMITIVES = frozenset({"dot_general", "conv_general_dilated"})
CONSTRAINT = "sdy.sharding_constraint"

# (equation index, result aval) -> the sharding to constrain it to, or None.
ShardingAt = Callable[[int, Any], Any]


def anchors(closed: ClosedJaxpr) -> list[int]:
    """Indices of the top-level equations of ``closed`` whose result is an activation:
    a dot's or convolution's result of rank >= 2 whose leading length is a batch."""
    jaxpr = closed.jaxpr
    returned = {(tuple(v.aval.shape), v.aval.dtype) for v in jaxpr.outvars
                if hasattr(v.aval, "shape")}
    batches = {v.aval.shape[0] for v in jaxpr.invars
               if getattr(v.aval, "shape", ()) and
               (tuple(v.aval.shape), v.aval.dtype) not in returned}
    found = []
    for index, eqn in enumerate(jaxpr.eqns):
        if eqn.primitive.name not in ANCHOR_PRIMITIVES or len(eqn.outvars) != 1:
            continue
        shape = getattr(eqn.outvars[0].aval, "shape", ())
        if len(shape) >= 2 and shape[0] in batches:
            found.append(index)
    return found


class Constrained:
    """``fun`` evaluated from its jaxpr, each anchor's result constrained as
    ``sharding_at`` says (``None``: the anchors, ``open_on`` every one of them
    with an open constraint on ``mesh``: the search's marks)."""

    def __init__(self, fun: Callable, static_argnums: Sequence[int],
                 static_argnames: Sequence[str], sharding_at: ShardingAt,
                 traced: dict | None = None):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.static_argnums = tuple(static_argnums)
        self.static_argnames = tuple(static_argnames)
        self.sharding_at = sharding_at
        # signature -> (jaxpr, result shapes): ``fun`` traced once per signature, shared
        # by the search's marked function and the one it returns (``traced``).
        self.traced = {} if traced is None else traced

    def jaxpr(self, *args: Any, **kwargs: Any) -> tuple[ClosedJaxpr, Any, list]:
        """The function's jaxpr for these arguments, its result shapes (a tree) and the
        flat dynamic arguments it takes."""
        static = {i if i >= 0 else len(args) + i for i in self.static_argnums}
        dynamic = [a for i, a in enumerate(args) if i not in static]
        dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        static_kwargs = {k: v for k, v in kwargs.items() if k in self.static_argnames}
        leaves, tree = jax.tree.flatten((dynamic, dynamic_kwargs))

        def flat(*values: Any) -> Any:
            given, given_kwargs = jax.tree.unflatten(tree, values)
            rest = iter(given)
            full = [args[i] if i in static else next(rest) for i in range(len(args))]
            return self.fun(*full, **static_kwargs, **given_kwargs)

        key = (tree, tuple((tuple(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x))),
                            bool(getattr(x, "weak_type", False))) for x in leaves),
               tuple(args[i] for i in sorted(static)), tuple(sorted(static_kwargs.items())),
               jax.sharding.get_abstract_mesh())  # tracing may read the context mesh
        found = self.traced.get(key)
        if found is None:
            found = self.traced[key] = jax.make_jaxpr(flat, return_shape=True)(*leaves)
        closed, shapes = found
        return closed, shapes, leaves

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        closed, shapes, leaves = self.jaxpr(*args, **kwargs)
        results = evaluate(closed, leaves, self.sharding_at)
        return jax.tree.unflatten(jax.tree.structure(shapes), results)


def open_marks(mesh: Any, chosen: set[int]) -> ShardingAt:
    """An open constraint (every dimension unconstrained) on the equations ``chosen``."""
    def at(index: int, aval: Any) -> Any:
        if index not in chosen:
            return None
        return NamedSharding(mesh, P(*[P.UNCONSTRAINED] * len(aval.shape)))
    return at


def chosen_constraints(shardings: dict[int, Any]) -> ShardingAt:
    """The constraints AUTO chose: equation index -> sharding."""
    return lambda index, aval: shardings.get(index)


def evaluate(closed: ClosedJaxpr, args: Sequence[Any], sharding_at: ShardingAt) -> list:
    """``closed`` applied to ``args`` (as ``jax.core.eval_jaxpr``), the result of each
    top-level equation ``sharding_at`` names constrained to its sharding."""
    jaxpr = closed.jaxpr
    env: dict = {}

    def read(var: Any) -> Any:
        return var.val if isinstance(var, Literal) else env[var]

    for var, value in zip(jaxpr.constvars, closed.consts):
        env[var] = value
    for var, value in zip(jaxpr.invars, args):
        env[var] = value
    for index, eqn in enumerate(jaxpr.eqns):
        params = eqn.primitive.get_bind_params(eqn.params)
        with jax_private.equation_context(eqn):
            answer = eqn.primitive.bind(*map(read, eqn.invars), **params)
        results = list(answer) if eqn.primitive.multiple_results else [answer]
        if len(results) == 1:
            sharding = sharding_at(index, eqn.outvars[0].aval)
            if sharding is not None:
                results = [jax.lax.with_sharding_constraint(results[0], sharding)]
        for var, value in zip(eqn.outvars, results):
            if type(var).__name__ != "DropVar":
                env[var] = value
    return [read(var) for var in jaxpr.outvars]


def is_open_mark(op: ir.Operation) -> bool:
    """Whether ``op`` is a constraint with every dimension open and unsharded: a mark."""
    if op.name != CONSTRAINT:
        return False
    sharding = sdy.TensorShardingAttr(op.attributes["sharding"])
    return all(not sdy.DimensionShardingAttr(d).is_closed and
               not len(sdy.DimensionShardingAttr(d).axes)
               for d in sharding.dimension_shardings)


def mark_values(graph: PropagationGraph) -> list[int]:
    """The result values of the marks of ``graph``'s module, in the anchors' order
    (``in_program_order``)."""
    ops = [op for op, name in enumerate(graph.op_name)
           if name == CONSTRAINT and is_open_mark(graph.ops[op])]
    return [graph.op_results[ops[k]][0] for k in in_program_order([graph.ops[op] for op in ops])]


def in_program_order(marks: Sequence[ir.Operation]) -> list[int]:
    """The positions of ``marks`` (ops of the main function's body) in the order jax
    wrote them: the order of the anchors they constrain. The import puts the body
    in XLA's post-order before it propagates (``stages.hlo_order``), where a mark
    can come before one jax wrote ahead of it (a layer's ``h @ kv`` before its
    ``h @ q``), and a state's k-th mark must be the k-th anchor's constraint in the
    program AUTO returns."""
    tags = order_tags(marks)
    if tags is None:  # the body was not reordered
        return list(range(len(marks)))
    return in_jax_order(range(len(marks)), tags)


__all__ = ["ANCHOR_PRIMITIVES", "Constrained", "anchors", "chosen_constraints", "evaluate",
           "in_program_order", "is_open_mark", "mark_values", "open_marks"]
