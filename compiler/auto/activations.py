"""Activation shardings AUTO may choose: sharding constraints on chosen intermediate values.

Argument shardings alone cannot reach every state an expert writes: MaxText pins
the residual stream, the attention heads and the MLP hidden units with
``with_sharding_constraint`` so that, with the weights FSDP-sharded over the
data axes, the activations keep the batch on those axes instead of taking the
weights' embedding sharding. AUTO chooses such constraints too, on *anchors*:
the results of the program's dots and convolutions (``ANCHOR_PRIMITIVES``), and
the sums that start a residual stream (``stream_starts``), whose leading
dimension is a batch (a leading length of a data argument: one the step
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
    a dot's or convolution's result, or a residual stream's first sum
    (``stream_starts``), of rank >= 2 whose leading length is a batch."""
    jaxpr = closed.jaxpr
    returned = {(tuple(v.aval.shape), v.aval.dtype) for v in jaxpr.outvars
                if hasattr(v.aval, "shape")}
    batches = {v.aval.shape[0] for v in jaxpr.invars
               if getattr(v.aval, "shape", ()) and
               (tuple(v.aval.shape), v.aval.dtype) not in returned}
    found = []
    starts = stream_starts(closed)
    for index, eqn in enumerate(jaxpr.eqns):
        if (eqn.primitive.name not in ANCHOR_PRIMITIVES and index not in starts
                or len(eqn.outvars) != 1):
            continue
        shape = getattr(eqn.outvars[0].aval, "shape", ())
        if len(shape) >= 2 and shape[0] in batches:
            found.append(index)
    return found


def cotangents(closed: ClosedJaxpr, points: Sequence[int]) -> dict[int, int]:
    """The equations of ``closed`` whose result is an anchor's cotangent -> that anchor.

    ``jax.lax.with_sharding_constraint`` in a differentiated function pins its
    value's cotangent too (its transpose applies the same constraint); an AUTO
    constraint is chosen on the differentiated program, where nothing ties the
    two, so the cotangent is found by structure: a later dot or convolution that
    reads one of the anchor's operands reads the cotangent as its other operand,
    a value of the anchor's result type. An operand another anchor also reads (the
    input of a layer's q, k and v) tells whose cotangent it meets only where the
    value meets both of the anchor's operands, or where the dots that meet it carry
    the anchor's source position and no other reader's (jax writes a transposed
    equation at the position of the one it transposes). An equation claimed by two
    anchors is nobody's; one that consumes a cotangent (a backward dot) is no
    forward anchor."""
    eqns = closed.jaxpr.eqns
    made = {v: k for k, e in enumerate(eqns) for v in e.outvars if len(e.outvars) == 1}

    def operands(eqn: Any) -> list:
        return [v for v in eqn.invars if not isinstance(v, Literal)]

    readers: dict = {}  # an operand -> the anchors that read it
    for index in points:
        for v in set(operands(eqns[index])):
            readers.setdefault(v, []).append(index)
    found: dict[int, int] = {}
    claimed: dict[int, set] = {}
    backward: set[int] = set()  # dots that read a cotangent
    for index in points:
        if index in backward or index in claimed:
            continue
        anchor = eqns[index]
        result = anchor.outvars[0]
        ins = operands(anchor)
        met: dict = {}  # candidate cotangent -> (operands it met, the dots that met it)
        for k in range(index + 1, len(eqns)):
            eqn = eqns[k]
            if eqn.primitive.name not in ANCHOR_PRIMITIVES:
                continue
            vs = operands(eqn)
            for own in (v for v in vs if v in ins):
                for v in vs:
                    if (v not in ins and v is not result and v in made and made[v] > index
                            and getattr(v.aval, "shape", None) == result.aval.shape
                            and v.aval.dtype == result.aval.dtype):
                        seen, dots = met.setdefault(v, (set(), set()))
                        seen.add(own)
                        dots.add(k)
        for v, (seen, dots) in met.items():
            if (len(seen) < len(set(ins)) and all(len(readers.get(o, ())) > 1 for o in seen)
                    and not _transposes(eqns, index, dots, seen, readers)):
                continue
            claimed.setdefault(made[v], set()).add(index)
            backward |= dots
    for k, owners in claimed.items():
        if len(owners) == 1:
            found[k] = next(iter(owners))
    return found


def with_cotangents(structure: list[list[int]], points: Sequence[int],
                    owner: dict[int, int]) -> list[list[int]]:
    """``structure`` (groups of indices into ``points``) with each cotangent's group
    merged into its anchor's (``cotangents``: equation -> anchor): the merged group's
    members in mark order, so that it leads with a forward anchor."""
    where = {index: k for k, index in enumerate(points)}
    parent = list(range(len(structure)))

    def root(g: int) -> int:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    group_of = {m: g for g, members in enumerate(structure) for m in members}
    for cotangent, anchor in owner.items():
        a, b = root(group_of[where[cotangent]]), root(group_of[where[anchor]])
        if a != b:
            parent[max(a, b)] = min(a, b)
    merged: dict[int, list[int]] = {}
    for g, members in enumerate(structure):
        merged.setdefault(root(g), []).extend(members)
    return [sorted(members) for _, members in sorted(merged.items())]


def _transposes(eqns: Sequence[Any], index: int, dots: set[int], seen: set,
                readers: dict) -> bool:
    """Whether the ``dots`` are the anchor ``index``'s transposes by their source
    position: theirs is the anchor's, and no other anchor reading the operands they
    met (``seen``) was written there."""
    where = jax_private.source_position(eqns[index])
    others = {a for o in seen for a in readers.get(o, ()) if a != index}
    return (all(jax_private.source_position(eqns[k]) == where for k in dots)
            and all(jax_private.source_position(eqns[a]) != where for a in others))


def stream_starts(closed: ClosedJaxpr) -> set[int]:
    """Indices of the top-level ``add`` equations whose result starts a residual
    stream: added as it is to a dot's result (``x + o @ w``), itself the sum of
    no dot's result nor of such a sum (features plus a position table: GPT-2's
    token and position embeddings, a speech encoder's convolved frames plus
    learned positions). MaxText pins it with the batch on the data axes and the
    embedding whole; left open, it takes the position table's FSDP axes on its
    embedding beside the batch, and every layer's residual adds gather it (a speech
    encoder on 4x2: AUTO's best textbook state 1.19x MaxText's modelled step)."""
    jaxpr = closed.jaxpr
    made = {var: eqn for eqn in jaxpr.eqns for var in eqn.outvars}
    index_of = {id(eqn): index for index, eqn in enumerate(jaxpr.eqns)}

    def name(var: Any) -> str | None:
        eqn = made.get(var) if not isinstance(var, Literal) else None
        return None if eqn is None else eqn.primitive.name

    @functools.cache
    def sums_dot(var: Any) -> bool:  # a dot's result, or an add of one (a stream's later sum)
        if name(var) == "dot_general":
            return True
        return name(var) == "add" and any(sums_dot(v) for v in made[var].invars)

    found = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name != "add" or not any(name(v) == "dot_general" for v in eqn.invars):
            continue
        for var in eqn.invars:
            if name(var) == "add" and not sums_dot(var):
                found.add(index_of[id(made[var])])
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


__all__ = ["ANCHOR_PRIMITIVES", "Constrained", "anchors", "chosen_constraints", "cotangents", "evaluate",
           "in_program_order", "is_open_mark", "mark_values", "open_marks", "stream_starts",
           "with_cotangents"]
