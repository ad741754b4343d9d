"""Random JAX programs with control flow, autodiff and shardings, as hypothesis strategies.

The differential test ``test_property_jax_programs.py`` runs every program
through ``jax.jit`` and through ``shardc.compiler.jit`` on the same placed
inputs. A ``Program`` is plain data (frozen dataclasses, tuples, strings,
ints and ``PartitionSpec``s), so hypothesis can shrink it and print it as a
reproducer; ``Program.build(mesh)`` turns it into the JAX function.

What a program holds:

* a mesh of 1-3 axes over 8 devices (``AxisType.Auto``, as in
  ``program_grammar.py``);
* arguments (``Arg``): float32 arrays with dims 2..16, and int32 index
  vectors; each has an ``in_shardings`` spec that divides its dims, or
  ``None`` with a placement (the sharding the array is ``device_put`` with,
  which both ``jit``s then follow);
* ``Step``s, each making one or more values from earlier ones. Top level:
  elementwise ops, ``jnp.dot`` / ``einsum``, reductions, ``cumsum``,
  reshape, transpose, broadcast, slice, concatenate, gather ``x[idx]`` /
  ``jnp.take``, scatter-add ``x.at[idx].add(u)``, integer arithmetic,
  ``jax.lax.with_sharding_constraint``, and regions with a small body of
  ``Step``s: ``lax.fori_loop``, ``lax.while_loop`` (static or data-dependent
  trip count; with a data-dependent one, the values its body reads are
  carried through unchanged next to a counter the body adds 0 to, carries
  XLA drops from the loop), ``lax.scan`` (forward or ``reverse=True``), ``lax.cond``,
  ``jax.checkpoint`` (with a policy) and ``jax.shard_map`` (full or partial
  manual axes; an elementwise body, then an optional ``lax.psum``);
* a ``mode``: the plain outputs, or autodiff of the scalar loss
  ``sum(tanh(output))`` over the float outputs: ``jax.grad``,
  ``jax.value_and_grad`` (integer outputs ride along as ``has_aux``) or
  ``jax.vjp`` (primal outputs + cotangents);
* ``out_specs``: one per result leaf (a spec dividing its dims, or ``None``),
  or the whole ``out_shardings`` ``None`` / a replicated prefix.
  ``P.UNCONSTRAINED`` appears in sharding constraints only: ``jax.jit`` (and
  shardc, as it) refuse it in ``in_shardings`` / ``out_shardings``.

Region bodies work on *locals*, referred to by position: ``0`` is the loop
carry (or the ``cond`` / ``checkpoint`` / ``shard_map`` operand), a
``scan`` body sees the current slice of ``xs`` next, then the closed-over
operands; every body step appends one local of the carry's shape, and the
body's result is its last local (or the carry if the body is empty).
Top-level values are named ``"a<j>"`` (argument j) and ``"v<k>"`` (the k-th
value made by the steps).

Every generated program must run under ``jax.jit``; a program ``jax.jit``
rejects is a bug of this grammar.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

UNCONSTRAINED = P.UNCONSTRAINED  # so that printed programs evaluate as written

DEVICE_COUNT = 8
MESH_SHAPES = ((8,), (2, 4), (4, 2), (2, 2, 2), (1, 8), (2, 1, 4))
AXIS_NAMES = ("x", "y", "z")
DIM_SIZES = (2, 3, 4, 6, 8, 12, 16)
MAX_RANK = 4
MAX_ELEMENTS = 2048
F32, I32 = "f32", "i32"
MODES = ("plain", "grad", "value_and_grad", "vjp")
UNARY_KINDS = ("tanh", "negate", "sin", "half", "abs", "relu", "log1p_sq")
BINARY_KINDS = ("add", "multiply", "subtract", "maximum", "minimum")
BODY_BINARY_KINDS = ("add", "subtract", "maximum", "minimum", "mul_tanh")
CHECKPOINT_POLICIES = (None, "nothing_saveable", "dots_saveable", "everything_saveable")

Shape = tuple[int, ...]
Aval = tuple[Shape, str]


# ---------------------------------------------------------------------------
# The data
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Arg:
    """An argument: shape, dtype, its ``in_shardings`` spec and, without one, its placement."""

    shape: Shape
    dtype: str = F32
    spec: P | None = None
    placement: P | None = None  # used when spec is None (None: replicated)

    @property
    def placed_spec(self) -> P:
        if self.spec is not None:
            return self.spec
        return self.placement if self.placement is not None else P()


@dataclasses.dataclass(frozen=True)
class Step:
    """One op: ``kind`` with its operand value names (or body locals) and static params."""

    kind: str
    operands: tuple = ()
    params: tuple = ()

    def __repr__(self) -> str:
        return f"Step({self.kind!r}, {self.operands!r}, {self.params!r})"


@dataclasses.dataclass(frozen=True)
class Program:
    """A random program: mesh, arguments, steps, outputs, autodiff mode, result shardings."""

    mesh_shape: tuple[int, ...]
    args: tuple[Arg, ...]
    steps: tuple[Step, ...]
    outputs: tuple[str, ...]
    mode: str = "plain"
    wrt: tuple[int, ...] = ()  # argument indices differentiated (float arguments)
    out_specs: tuple[P | None, ...] | None = None  # per result leaf; None: out_shardings=None
    out_prefix: bool = False  # out_shardings is the single prefix P() (replicated)
    in_form: str = "leaves"  # "leaves": one spec per argument; "none": in_shardings=None
    data_seed: int = 0

    # -- mesh and shardings -------------------------------------------------

    @property
    def axis_names(self) -> tuple[str, ...]:
        return AXIS_NAMES[: len(self.mesh_shape)]

    def make_mesh(self) -> jax.sharding.Mesh:
        names = self.axis_names
        return jax.make_mesh(self.mesh_shape, names, axis_types=(AxisType.Auto,) * len(names))

    def in_specs(self):
        """``in_shardings`` as specs (what shardc gets with ``mesh=``)."""
        if self.in_form == "none":
            return None
        return tuple(arg.spec for arg in self.args)

    def out_shardings_specs(self):
        """``out_shardings`` as specs: a tuple of leaves, None, or the prefix ``P()``."""
        if self.out_prefix:
            return P()
        return self.out_specs

    def arguments(self, mesh: jax.sharding.Mesh | None = None) -> list:
        """Inputs: floats are multiples of 1/4 in [-1, 1], ints in [0, 16); placed on ``mesh``."""
        rng = np.random.default_rng(self.data_seed)
        arrays = []
        for arg in self.args:
            if arg.dtype == F32:
                arrays.append((rng.integers(-4, 5, size=arg.shape) / 4).astype(np.float32))
            else:
                arrays.append(rng.integers(0, 16, size=arg.shape).astype(np.int32))
        if mesh is None:
            return arrays
        return [jax.device_put(a, NamedSharding(mesh, arg.placed_spec))
                for a, arg in zip(arrays, self.args)]

    # -- shapes -------------------------------------------------------------

    def value_avals(self) -> dict[str, Aval]:
        avals: dict[str, Aval] = {f"a{j}": (arg.shape, arg.dtype) for j, arg in enumerate(self.args)}
        for step in self.steps:
            for aval in step_avals(step, avals, self.mesh_sizes()):
                avals[f"v{_count_values(avals)}"] = aval
        return avals

    def mesh_sizes(self) -> dict[str, int]:
        return dict(zip(self.axis_names, self.mesh_shape))

    def result_avals(self) -> list[Aval]:
        """Shapes and dtypes of the leaves the built function returns."""
        avals = self.value_avals()
        outs = [avals[name] for name in self.outputs]
        floats = [a for a in outs if a[1] == F32]
        ints = [a for a in outs if a[1] == I32]
        grads = [(self.args[j].shape, F32) for j in self.wrt]
        if self.mode == "plain":
            return outs
        if self.mode == "grad":
            return grads + ints
        if self.mode == "value_and_grad":
            return [((), F32)] + grads + ints
        return floats + grads + ints  # vjp

    # -- the function -------------------------------------------------------

    def build(self, mesh: jax.sharding.Mesh) -> Callable:
        """The JAX function of this program (constraints and shard_maps use ``mesh``)."""
        differentiated = self.mode != "plain"
        sizes = self.mesh_sizes()

        def forward(args):
            values = {f"a{j}": a for j, a in enumerate(args)}
            avals = {f"a{j}": (arg.shape, arg.dtype) for j, arg in enumerate(self.args)}
            for step in self.steps:
                results = apply_step(step, values, mesh, differentiated)
                for aval, value in zip(step_avals(step, avals, sizes), results):
                    name = f"v{_count_values(avals)}"
                    avals[name] = aval
                    values[name] = value
            return [values[name] for name in self.outputs]

        if self.mode == "plain":
            return lambda *args: tuple(forward(args))

        wrt = self.wrt

        def split(outs):
            return ([o for o in outs if o.dtype == jnp.float32],
                    [o for o in outs if o.dtype != jnp.float32])

        def with_wrt(args, wrt_values):
            full = list(args)
            for j, value in zip(wrt, wrt_values):
                full[j] = value
            return full

        def loss_and_aux(args, *wrt_values):
            floats, ints = split(forward(with_wrt(args, wrt_values)))
            return sum(jnp.sum(jnp.tanh(o)) for o in floats), ints

        argnums = tuple(range(len(wrt)))
        if self.mode == "grad":
            def run(*args):
                fun = lambda *w: loss_and_aux(args, *w)  # noqa: E731
                grads, aux = jax.grad(fun, argnums=argnums, has_aux=True)(
                    *[args[j] for j in wrt])
                return (*grads, *aux)
        elif self.mode == "value_and_grad":
            def run(*args):
                fun = lambda *w: loss_and_aux(args, *w)  # noqa: E731
                (loss, aux), grads = jax.value_and_grad(fun, argnums=argnums, has_aux=True)(
                    *[args[j] for j in wrt])
                return (loss, *grads, *aux)
        else:
            def run(*args):
                def primal(*w):
                    return split(forward(with_wrt(args, w)))
                floats, vjp_fun, ints = jax.vjp(primal, *[args[j] for j in wrt], has_aux=True)
                cotangents = vjp_fun([jnp.tanh(o) for o in floats])
                return (*floats, *cotangents, *ints)
        return run

    def __repr__(self) -> str:
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}"
                           for f in dataclasses.fields(self))
        return f"Program({fields})"

    def _repr_pretty_(self, printer, cycle) -> None:  # hypothesis prints examples with this
        printer.text(repr(self))


def _count_values(avals: dict[str, Aval]) -> int:
    return sum(1 for name in avals if name.startswith("v"))


# ---------------------------------------------------------------------------
# Shapes and semantics of the steps
# ---------------------------------------------------------------------------


def dim_axes(entry) -> tuple[str, ...]:
    if entry is None or entry is P.UNCONSTRAINED:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def spec_factors(spec: P, rank: int, sizes: dict[str, int]) -> list[int]:
    entries = list(spec) + [None] * (rank - len(spec))
    return [math.prod(sizes[a] for a in dim_axes(e)) for e in entries[:rank]]


def divides(shape: Shape, spec: P, sizes: dict[str, int]) -> bool:
    return all(d % f == 0 for d, f in zip(shape, spec_factors(spec, len(shape), sizes)))


def shard_map_out_spec(in_spec: P, psum_axes: tuple[str, ...]) -> P:
    """The shard_map's out_specs: its in_specs less the axes summed over."""
    entries = []
    for entry in in_spec:
        kept = tuple(a for a in dim_axes(entry) if a not in psum_axes)
        entries.append(None if not kept else kept[0] if len(kept) == 1 else kept)
    return P(*entries)


def step_avals(step: Step, avals: dict[str, Aval], sizes: dict[str, int]) -> list[Aval]:
    """The shapes and dtypes ``step`` makes from the values named in ``avals``."""
    kind, params = step.kind, step.params
    shape, dtype = avals[step.operands[0]] if step.operands else ((), F32)
    if kind in ("unary", "binary", "constraint", "cumsum", "scatter_add", "iarith",
                "fori", "while", "cond", "checkpoint"):
        return [(shape, dtype)]
    if kind == "dot":
        rhs = avals[step.operands[1]][0]
        form = params[0]
        if form == "dot":
            return [(shape[:-1] + rhs[1:], F32)]
        if form == "einsum_t":
            return [(shape[:-1] + (rhs[0],), F32)]
        return [((shape[0], shape[1], rhs[2]), F32)]  # einsum_batch
    if kind == "reduce":
        axis = params[1]
        return [(shape[:axis] + shape[axis + 1:], dtype)]
    if kind == "reshape":
        return [(params[0], dtype)]
    if kind == "transpose":
        return [(tuple(shape[i] for i in params[0]), dtype)]
    if kind == "broadcast":
        position, size = params
        return [(shape[:position] + (size,) + shape[position:], dtype)]
    if kind == "slice":
        axis, start, limit, stride = params
        return [(shape[:axis] + (len(range(start, limit, stride)),) + shape[axis + 1:], dtype)]
    if kind == "concatenate":
        axis = params[0]
        other = avals[step.operands[1]][0]
        return [(shape[:axis] + (shape[axis] + other[axis],) + shape[axis + 1:], dtype)]
    if kind == "gather":
        axis = params[0]
        count = avals[step.operands[1]][0][0]
        return [(shape[:axis] + (count,) + shape[axis + 1:], dtype)]
    if kind == "scan":
        xs_shape = avals[step.operands[1]][0]
        return [(shape, F32), (xs_shape, F32)]
    if kind == "shard_map":
        in_spec, psum_axes = params[0], params[3]
        in_factors = spec_factors(in_spec, len(shape), sizes)
        out_factors = spec_factors(shard_map_out_spec(in_spec, psum_axes), len(shape), sizes)
        return [(tuple(d // i * o for d, i, o in zip(shape, in_factors, out_factors)), F32)]
    raise ValueError(f"unknown step kind {kind!r}")


def _unary(kind: str, x):
    if kind == "tanh":
        return jnp.tanh(x)
    if kind == "negate":
        return -x
    if kind == "sin":
        return jnp.sin(x)
    if kind == "half":
        return x * 0.5
    if kind == "abs":
        return jnp.abs(x)
    if kind == "relu":
        return jnp.maximum(x, 0.0)
    if kind == "log1p_sq":
        return jnp.log1p(x * x)
    raise ValueError(kind)


def _binary(kind: str, x, y):
    if kind == "mul_tanh":
        return x * jnp.tanh(y)
    return getattr(jnp, kind)(x, y)


def _named(mesh, spec: P) -> NamedSharding:
    return NamedSharding(mesh, spec)


def apply_body(body: Sequence[Step], locals_: list, mesh, index=None):
    """Run a region body on ``locals_`` (locals by position); its result is the last local."""
    locals_ = list(locals_)
    made = False
    for step in body:
        x = locals_[step.operands[0]]
        kind, params = step.kind, step.params
        if kind == "unary":
            out = _unary(params[0], x)
        elif kind == "binary":
            out = _binary(params[0], x, locals_[step.operands[1]])
        elif kind == "matmul":
            # Scaled so that the loop's map does not expand: rounding differences of
            # two partitionings then stay at rounding size over the iterations.
            out = jnp.tanh(x @ locals_[step.operands[1]] / x.shape[-1])
        elif kind == "center":
            out = x - jnp.mean(x, axis=params[0], keepdims=True)
        elif kind == "constraint":
            out = lax.with_sharding_constraint(x, _named(mesh, params[0]))
        elif kind == "add_index":
            out = x + index.astype(jnp.float32) * 0.5
        elif kind == "row_update":
            rows = x.shape[0]
            out = x.at[index % rows].add(jnp.tanh(x[(index + 1) % rows]))
        elif kind == "take":
            idx = locals_[step.operands[1]]
            out = x + x[idx % x.shape[0]]
        elif kind == "axis_index":
            out = x + lax.axis_index(params[0]).astype(jnp.float32) * 0.25
        else:
            raise ValueError(f"unknown body step {kind!r}")
        locals_.append(out)
        made = True
    return locals_[-1] if made else locals_[0]


def _predicate(source, threshold: float):
    if source.dtype == jnp.int32:
        return jnp.sum(source) % 2 == 0
    return jnp.sum(source) > threshold


def apply_step(step: Step, values: dict, mesh, differentiated: bool) -> list:
    """Run one top-level step on traced values; returns its values."""
    kind, params = step.kind, step.params
    ops = [values[name] for name in step.operands]
    x = ops[0] if ops else None
    if kind == "unary":
        return [_unary(params[0], x)]
    if kind == "binary":
        return [_binary(params[0], x, ops[1])]
    if kind == "dot":
        form = params[0]
        if form == "dot":
            return [jnp.dot(x, ops[1])]
        if form == "einsum_t":
            return [jnp.einsum("...j,kj->...k", x, ops[1])]
        return [jnp.einsum("bij,bjk->bik", x, ops[1])]
    if kind == "reduce":
        reduce_kind, axis = params
        return [{"sum": jnp.sum, "max": jnp.max, "mean": jnp.mean}[reduce_kind](x, axis=axis)]
    if kind == "cumsum":
        return [lax.cumsum(x, axis=params[0], reverse=params[1])]
    if kind == "reshape":
        return [jnp.reshape(x, params[0])]
    if kind == "transpose":
        return [jnp.transpose(x, params[0])]
    if kind == "broadcast":
        position, size = params
        expanded = jnp.expand_dims(x, position)
        return [jnp.broadcast_to(expanded, x.shape[:position] + (size,) + x.shape[position:])]
    if kind == "slice":
        axis, start, limit, stride = params
        return [lax.slice_in_dim(x, start, limit, stride, axis=axis)]
    if kind == "concatenate":
        return [jnp.concatenate([x, ops[1]], axis=params[0])]
    if kind == "gather":
        axis = params[0]
        idx = ops[1] % x.shape[axis]
        if axis == 0:
            return [x[idx]]
        if axis == 1:
            return [x[:, idx]]
        return [jnp.take(x, idx, axis=axis)]
    if kind == "scatter_add":
        return [x.at[ops[1] % x.shape[0]].add(ops[2])]
    if kind == "iarith":
        scale, offset = params
        return [x * scale + offset]
    if kind == "constraint":
        return [lax.with_sharding_constraint(x, _named(mesh, params[0]))]
    if kind == "fori":
        lower, upper, body = params
        closures = ops[1:]
        return [lax.fori_loop(lower, upper,
                              lambda i, c: apply_body(body, [c, *closures], mesh, i), x)]
    if kind == "while":
        trips, body, carried = params
        if differentiated:  # reverse-mode autodiff of while_loop is undefined
            ops = [lax.stop_gradient(v) if v.dtype == jnp.float32 else v for v in ops]
        if trips == "dynamic":
            count, closures = jnp.sum(ops[1]) % 4, ops[2:]
        else:
            count, closures = trips, ops[1:]

        if carried:
            def carrying_body(carry):
                i, c, k, *passed = carry
                return i + 1, apply_body(body, [c, *passed], mesh, i), k + 0, *passed

            return [lax.while_loop(lambda carry: carry[0] < count, carrying_body,
                                   (jnp.int32(0), ops[0], jnp.int32(0), *closures))[1]]

        def loop_body(carry):
            i, c = carry
            return i + 1, apply_body(body, [c, *closures], mesh, i)

        return [lax.while_loop(lambda carry: carry[0] < count, loop_body,
                               (jnp.int32(0), ops[0]))[1]]
    if kind == "scan":
        reverse, body = params
        init, xs, closures = ops[0], ops[1], ops[2:]

        def scan_body(c, x_t):
            new = apply_body(body, [c, x_t, *closures], mesh)
            return new, new + x_t

        carry, ys = lax.scan(scan_body, init, xs, reverse=reverse)
        return [carry, ys]
    if kind == "cond":
        threshold, true_body, false_body = params
        pred = _predicate(ops[1], threshold)
        closures = ops[2:]
        return [lax.cond(pred,
                         lambda v, *cl: apply_body(true_body, [v, *cl], mesh),
                         lambda v, *cl: apply_body(false_body, [v, *cl], mesh),
                         x, *closures)]
    if kind == "checkpoint":
        policy, body = params
        policy_fn = None if policy is None else getattr(jax.checkpoint_policies, policy)
        fn = jax.checkpoint(lambda v, *cl: apply_body(body, [v, *cl], mesh), policy=policy_fn)
        return [fn(x, *ops[1:])]
    if kind == "shard_map":
        in_spec, manual, body, psum_axes = params

        def local(*locals_):
            out = apply_body(body, list(locals_), mesh)
            return lax.psum(out, psum_axes) if psum_axes else out

        out_spec = shard_map_out_spec(in_spec, psum_axes)
        kwargs = {} if manual is None else {"axis_names": set(manual)}
        fn = jax.shard_map(local, mesh=mesh, in_specs=(in_spec,) * len(ops),
                           out_specs=out_spec, **kwargs)
        return [fn(*ops)]
    raise ValueError(f"unknown step kind {kind!r}")


# ---------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------

dim_sizes = st.sampled_from(DIM_SIZES)


@st.composite
def partition_specs(draw, shape: Shape, sizes: dict[str, int], *, axes=None,
                    divisible: bool = True, open_dims: bool = False) -> P:
    """A spec for ``shape``: each axis used once; dims it shards are divisible unless asked."""
    unused = list(sizes if axes is None else axes)
    entries: list = []
    for dim in shape[: draw(st.integers(0, len(shape)))]:
        def fits(group):
            return not divisible or dim % math.prod(sizes[a] for a in group) == 0
        singles = [a for a in unused if fits((a,))]
        pairs = [(a, b) for a in unused for b in unused if a != b and fits((a, b))]
        options = ["none"] + ["axis"] * bool(singles) + ["tuple"] * bool(pairs)
        options += ["open"] * open_dims
        choice = draw(st.sampled_from(options))
        if choice == "axis":
            axis = draw(st.sampled_from(singles))
            unused.remove(axis)
            entries.append(axis)
        elif choice == "tuple":
            pair = draw(st.sampled_from(pairs))
            for axis in pair:
                unused.remove(axis)
            entries.append(pair)
        elif choice == "open":
            entries.append(P.UNCONSTRAINED)
        else:
            entries.append(None)
    return P(*entries)


def _small(shape: Shape) -> bool:
    return math.prod(shape) <= MAX_ELEMENTS and len(shape) <= MAX_RANK


def _factor_pairs(size: int) -> list[tuple[int, int]]:
    return [(a, size // a) for a in range(2, size) if size % a == 0]


class _Builder:
    """Draws one program step by step, adding arguments as the steps need them."""

    def __init__(self, draw, sizes: dict[str, int], mode: str):
        self.draw = draw
        self.sizes = sizes
        self.mode = mode
        self.args: list[Arg] = []
        self.avals: dict[str, Aval] = {}
        self.steps: list[Step] = []

    # -- values ---------------------------------------------------------------

    def new_arg(self, shape: Shape, dtype: str = F32) -> str:
        name = f"a{len(self.args)}"
        self.args.append(Arg(shape, dtype))
        self.avals[name] = (shape, dtype)
        return name

    def names(self, predicate) -> list[str]:
        return [n for n, aval in self.avals.items() if predicate(aval)]

    def value_of(self, shape: Shape, dtype: str = F32, fresh_ok: bool = True) -> str:
        """An existing value of this shape and dtype, or a new argument."""
        existing = self.names(lambda a: a == (shape, dtype))
        if existing and (not fresh_ok or self.draw(st.booleans())):
            return self.draw(st.sampled_from(existing))
        return self.new_arg(shape, dtype)

    def index_vector(self) -> str:
        """An int32 vector (an argument or an integer value)."""
        existing = self.names(lambda a: a[1] == I32 and len(a[0]) == 1)
        if existing and self.draw(st.booleans()):
            return self.draw(st.sampled_from(existing))
        return self.new_arg((self.draw(st.sampled_from((2, 3, 4, 6, 8))),), I32)

    def add(self, step: Step) -> None:
        for aval in step_avals(step, self.avals, self.sizes):
            self.avals[f"v{_count_values(self.avals)}"] = aval
        self.steps.append(step)

    # -- bodies ---------------------------------------------------------------

    def body(self, shape: Shape, locals_: list[Aval], *, indexed: bool = False,
             constraints: bool = True, manual_axes: Sequence[str] = (),
             elementwise: bool = False, max_steps: int = 3) -> tuple[Step, ...]:
        """A region body on locals of avals ``locals_`` (the carry first); keeps ``shape``."""
        draw = self.draw
        locals_ = list(locals_)
        steps: list[Step] = []
        rank = len(shape)
        for _ in range(draw(st.integers(0, max_steps))):
            same = [i for i, a in enumerate(locals_) if a == (shape, F32)]
            weights = [i for i, a in enumerate(locals_)
                       if rank and a == ((shape[-1], shape[-1]), F32)]
            indices = [i for i, a in enumerate(locals_)
                       if rank and a == ((shape[0],), I32)]
            kinds = ["unary", "binary"]
            if not elementwise:
                kinds += ["matmul"] * bool(weights) + ["take"] * bool(indices)
                kinds += ["center"] * (rank > 0) + ["constraint"] * constraints
            kinds += ["add_index"] * indexed + ["row_update"] * (indexed and rank > 0)
            kinds += ["axis_index"] * bool(manual_axes)
            kind = draw(st.sampled_from(kinds))
            x = draw(st.sampled_from(same))
            if kind == "unary":
                step = Step("unary", (x,), (draw(st.sampled_from(UNARY_KINDS)),))
            elif kind == "binary":
                step = Step("binary", (x, draw(st.sampled_from(same))),
                            (draw(st.sampled_from(BODY_BINARY_KINDS)),))
            elif kind == "matmul":
                step = Step("matmul", (x, draw(st.sampled_from(weights))))
            elif kind == "take":
                step = Step("take", (x, draw(st.sampled_from(indices))))
            elif kind == "center":
                step = Step("center", (x,), (draw(st.integers(0, rank - 1)),))
            elif kind == "constraint":
                spec = draw(partition_specs(shape, self.sizes, open_dims=True))
                step = Step("constraint", (x,), (spec,))
            elif kind == "axis_index":
                step = Step("axis_index", (x,), (draw(st.sampled_from(list(manual_axes))),))
            else:
                step = Step(kind, (x,))
            steps.append(step)
            locals_.append((shape, F32))
        return tuple(steps)

    def closures(self, shape: Shape) -> list[str]:
        """Values a region closes over: maybe a same-shaped value, a square weight, indices."""
        draw = self.draw
        names = []
        if draw(st.booleans()):
            names.append(self.value_of(shape))
        if shape and draw(st.booleans()):
            names.append(self.value_of((shape[-1], shape[-1])))
        if shape and shape[0] <= 16 and draw(st.integers(0, 3)) == 0:
            names.append(self.value_of((shape[0],), I32))
        return names

    # -- steps ----------------------------------------------------------------

    def step(self) -> None:
        draw = self.draw
        floats = self.names(lambda a: a[1] == F32)
        # Mostly chain on the newest value, so that steps build on each other.
        value = floats[-1] if draw(st.booleans()) else draw(st.sampled_from(floats))
        shape = self.avals[value][0]
        rank = len(shape)
        kinds = ["unary", "binary", "dot", "reduce", "reshape", "transpose", "constraint",
                 "gather", "scatter_add", "cumsum", "slice", "concatenate", "broadcast",
                 "fori", "while", "scan", "cond", "checkpoint", "shard_map", "int"]
        kind = draw(st.sampled_from(kinds))
        method = getattr(self, f"_{kind}")
        step = method(value, shape, rank)
        if step is None:
            step = Step("unary", (value,), (draw(st.sampled_from(UNARY_KINDS)),))
        self.add(step)

    def _unary(self, value, shape, rank):
        return Step("unary", (value,), (self.draw(st.sampled_from(UNARY_KINDS)),))

    def _binary(self, value, shape, rank):
        other = self.value_of(shape)
        return Step("binary", (value, other), (self.draw(st.sampled_from(BINARY_KINDS)),))

    def _dot(self, value, shape, rank):
        draw = self.draw
        forms = []
        if 1 <= rank <= 2:
            forms.append("dot")
        if 1 <= rank <= 3:
            forms.append("einsum_t")
        if rank == 3:
            forms.append("einsum_batch")
        if not forms:
            return None
        form = draw(st.sampled_from(forms))
        n = draw(dim_sizes)
        if form == "dot":
            rhs = (shape[-1], n) if rank == 1 or draw(st.booleans()) else (shape[-1],)
            if rank == 1 and len(rhs) == 2 and draw(st.booleans()):
                rhs = (shape[-1],)
        elif form == "einsum_t":
            rhs = (n, shape[-1])
        else:
            rhs = (shape[0], shape[2], n)
        return Step("dot", (value, self.value_of(rhs)), (form,))

    def _reduce(self, value, shape, rank):
        if rank == 0:
            return None
        return Step("reduce", (value,), (self.draw(st.sampled_from(("sum", "max", "mean"))),
                                         self.draw(st.integers(0, rank - 1))))

    def _cumsum(self, value, shape, rank):
        if rank == 0:
            return None
        return Step("cumsum", (value,), (self.draw(st.integers(0, rank - 1)),
                                         self.draw(st.booleans())))

    def _reshape(self, value, shape, rank):
        draw = self.draw
        options = ["flatten"] * (rank >= 2) + ["merge"] * (rank >= 2)
        if rank < MAX_RANK and any(_factor_pairs(d) for d in shape):
            options.append("split")
        if not options:
            return None
        choice = draw(st.sampled_from(options))
        if choice == "flatten":
            new = (math.prod(shape),)
        elif choice == "merge":
            i = draw(st.integers(0, rank - 2))
            new = shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:]
        else:
            i = draw(st.sampled_from([i for i, d in enumerate(shape) if _factor_pairs(d)]))
            new = shape[:i] + draw(st.sampled_from(_factor_pairs(shape[i]))) + shape[i + 1:]
        return Step("reshape", (value,), (new,))

    def _transpose(self, value, shape, rank):
        if rank < 2:
            return None
        return Step("transpose", (value,), (tuple(self.draw(st.permutations(range(rank)))),))

    def _broadcast(self, value, shape, rank):
        size = self.draw(dim_sizes)
        if not _small(shape + (size,)):
            return None
        return Step("broadcast", (value,), (self.draw(st.integers(0, rank)), size))

    def _slice(self, value, shape, rank):
        draw = self.draw
        if rank == 0:
            return None
        axis = draw(st.integers(0, rank - 1))
        start = draw(st.integers(0, shape[axis] - 1))
        limit = draw(st.integers(start + 1, shape[axis]))
        return Step("slice", (value,), (axis, start, limit, draw(st.sampled_from([1, 1, 2]))))

    def _concatenate(self, value, shape, rank):
        draw = self.draw
        if rank == 0:
            return None
        axis = draw(st.integers(0, rank - 1))
        other = shape[:axis] + (draw(dim_sizes),) + shape[axis + 1:]
        if not _small(shape[:axis] + (shape[axis] + other[axis],) + shape[axis + 1:]):
            return None
        return Step("concatenate", (value, self.value_of(other)), (axis,))

    def _constraint(self, value, shape, rank):
        draw = self.draw
        spec = draw(partition_specs(shape, self.sizes, open_dims=True,
                                    divisible=draw(st.integers(0, 4)) > 0))
        return Step("constraint", (value,), (spec,))

    def _gather(self, value, shape, rank):
        draw = self.draw
        if rank == 0:
            return None
        if draw(st.integers(0, 3)) == 0:  # gather from integers: an integer result
            ints = self.names(lambda a: a[1] == I32 and len(a[0]) >= 1)
            if ints:
                value = draw(st.sampled_from(ints))
                shape = self.avals[value][0]
                rank = len(shape)
        axis = draw(st.integers(0, rank - 1))
        idx = self.index_vector()
        count = self.avals[idx][0][0]
        if not _small(shape[:axis] + (count,) + shape[axis + 1:]):
            return None
        return Step("gather", (value, idx), (axis,))

    def _scatter_add(self, value, shape, rank):
        if rank == 0:
            return None
        idx = self.index_vector()
        count = self.avals[idx][0][0]
        updates = self.value_of((count,) + shape[1:])
        return Step("scatter_add", (value, idx, updates))

    def _int(self, value, shape, rank):
        """Integer arithmetic, a sum or a cumsum on an integer value."""
        draw = self.draw
        ints = self.names(lambda a: a[1] == I32)
        source = draw(st.sampled_from(ints)) if ints else self.index_vector()
        int_shape = self.avals[source][0]
        choice = draw(st.sampled_from(["iarith", "iarith", "sum", "cumsum"] if int_shape
                                      else ["iarith"]))
        if choice == "iarith":
            return Step("iarith", (source,), (draw(st.integers(1, 3)), draw(st.integers(0, 5))))
        if choice == "sum":
            return Step("reduce", (source,), ("sum", draw(st.integers(0, len(int_shape) - 1))))
        return Step("cumsum", (source,), (draw(st.integers(0, len(int_shape) - 1)),
                                          draw(st.booleans())))

    def _fori(self, value, shape, rank):
        draw = self.draw
        closures = self.closures(shape)
        lower = draw(st.integers(0, 1))
        upper = lower + draw(st.integers(0, 3))
        locals_ = [(shape, F32)] + [self.avals[n] for n in closures]
        body = self.body(shape, locals_, indexed=True)
        return Step("fori", (value, *closures), (lower, upper, body))

    def _while(self, value, shape, rank):
        draw = self.draw
        if draw(st.booleans()):  # the trip count is data: sum(int value) % 4
            ints = self.names(lambda a: a[1] == I32)
            trips = "dynamic"
            counters = [draw(st.sampled_from(ints)) if ints and draw(st.booleans())
                        else self.index_vector()]
        else:
            trips, counters = draw(st.integers(0, 3)), []
        closures = self.closures(shape)
        locals_ = [(shape, F32)] + [self.avals[n] for n in closures]
        body = self.body(shape, locals_, indexed=True)
        # A data-dependent loop carries the values its body reads, a static one closes
        # over them (no draw of its own: the derandomized examples stay as they were).
        return Step("while", (value, *counters, *closures),
                    (trips, body, trips == "dynamic" and bool(closures)))

    def _scan(self, value, shape, rank):
        draw = self.draw
        if rank == 0:
            return None
        carry_shape = shape[1:]
        init = self.value_of(carry_shape)
        closures = self.closures(carry_shape)
        locals_ = [(carry_shape, F32)] * 2 + [self.avals[n] for n in closures]
        body = self.body(carry_shape, locals_)
        return Step("scan", (init, value, *closures), (draw(st.booleans()), body))

    def _cond(self, value, shape, rank):
        draw = self.draw
        sources = self.names(lambda a: True)
        predicate = draw(st.sampled_from(sources))
        closures = self.closures(shape)
        locals_ = [(shape, F32)] + [self.avals[n] for n in closures]
        true_body, false_body = self.body(shape, locals_), self.body(shape, locals_)
        if (true_body and false_body and true_body[-1].kind == false_body[-1].kind == "constraint"
                and true_body[-1].params != false_body[-1].params):
            # jax.jit (XLA's verifier) rejects a cond whose branches return values
            # constrained to different shardings: "Inconsistent conditional sharding".
            false_body = false_body[:-1]
        return Step("cond", (value, predicate, *closures),
                    (draw(st.sampled_from((0.375, -0.625, 1.125))), true_body, false_body))

    def _checkpoint(self, value, shape, rank):
        draw = self.draw
        closures = self.closures(shape)
        locals_ = [(shape, F32)] + [self.avals[n] for n in closures]
        return Step("checkpoint", (value, *closures),
                    (draw(st.sampled_from(CHECKPOINT_POLICIES)), self.body(shape, locals_)))

    def _shard_map(self, value, shape, rank):
        draw = self.draw
        names = list(self.sizes)
        if draw(st.booleans()) or len(names) == 1:
            manual = None
            manual_axes = names
        else:
            manual_axes = sorted(draw(st.lists(st.sampled_from(names), min_size=1,
                                               max_size=len(names) - 1, unique=True)))
            manual = tuple(manual_axes)
            if all(self.sizes[a] == 1 for a in manual_axes):
                # jax.jit (XLA) fails on a psum over only size-1 manual axes with the
                # other axes automatic ("Cross-partition allreduce must be in (partial)
                # manual partitioning mode"): make every axis manual instead.
                manual, manual_axes = None, names
        in_spec = draw(partition_specs(shape, self.sizes, axes=manual_axes))
        for _ in range(3):  # mostly a spec that splits something
            if any(dim_axes(e) for e in in_spec):
                break
            in_spec = draw(partition_specs(shape, self.sizes, axes=manual_axes))
        operands = [value]
        if draw(st.booleans()):
            operands.append(self.value_of(shape))
        locals_ = [(shape, F32)] * len(operands)
        used = {a for e in in_spec for a in dim_axes(e)}
        # Shapes inside are per shard: only elementwise steps and axis_index.
        body = self.body(shape, locals_, elementwise=True, manual_axes=sorted(used))
        # psum's axes are all ones the shard varies over (the spec's) or all ones it
        # does not vary over (then psum multiplies by their size): jax rejects a mix.
        varying = sorted(used)
        invariant = [a for a in manual_axes if a not in used]
        group = draw(st.sampled_from([g for g in (varying, invariant) if g] or [[]]))
        psum_axes = tuple(sorted(draw(st.lists(st.sampled_from(group), max_size=2, unique=True))
                                 if group else ()))
        return Step("shard_map", tuple(operands), (in_spec, manual, body, psum_axes))


@st.composite
def programs(draw, max_steps: int = 6) -> Program:
    """A whole random program (see the module docstring)."""
    mesh_shape = draw(st.sampled_from(MESH_SHAPES))
    sizes = dict(zip(AXIS_NAMES, mesh_shape))
    mode = draw(st.sampled_from(MODES))
    builder = _Builder(draw, sizes, mode)
    first = tuple(draw(st.lists(dim_sizes, min_size=1, max_size=3)))
    builder.new_arg(first)
    for _ in range(draw(st.integers(1, max_steps))):
        builder.step()
    made = [f"v{k}" for k in range(_count_values(builder.avals))]
    outputs = tuple(draw(st.lists(st.sampled_from(made), min_size=1, max_size=3, unique=True)))
    if made[-1] not in outputs and draw(st.booleans()):
        outputs = (made[-1],) + outputs[:2]
    if mode != "plain" and not any(builder.avals[o][1] == F32 for o in outputs):
        floats = [n for n in made if builder.avals[n][1] == F32] or ["a0"]
        outputs = outputs + (floats[-1],)
    float_args = [j for j, a in enumerate(builder.args) if a.dtype == F32]
    wrt: tuple[int, ...] = ()
    if mode != "plain":
        wrt = tuple(sorted(draw(st.lists(st.sampled_from(float_args), min_size=1,
                                         max_size=3, unique=True))))
    args = []
    for arg in builder.args:
        if draw(st.integers(0, 3)) == 0:
            placement = draw(partition_specs(arg.shape, sizes))
            args.append(dataclasses.replace(arg, placement=placement if placement else None))
        else:
            args.append(dataclasses.replace(arg, spec=draw(partition_specs(arg.shape, sizes))))
    in_form = "none" if draw(st.integers(0, 7)) == 0 else "leaves"
    if in_form == "none":  # every argument follows its placement
        args = [dataclasses.replace(a, spec=None, placement=a.placed_spec or None) for a in args]
    program = Program(mesh_shape, tuple(args), tuple(builder.steps), outputs, mode, wrt,
                      in_form=in_form, data_seed=draw(st.integers(0, 2**16)))
    results = program.result_avals()
    out_form = draw(st.sampled_from(["leaves", "leaves", "leaves", "none", "prefix"]))
    if out_form == "none":
        return program
    if out_form == "prefix":
        return dataclasses.replace(program, out_prefix=True)
    out_specs = [draw(st.one_of(st.none(), partition_specs(shape, sizes)))
                 for shape, _ in results]
    return dataclasses.replace(program, out_specs=tuple(out_specs))
