"""Random sharded JAX programs: a small op grammar, meshes and shardings, as hypothesis strategies.

A ``Program`` is plain data (so hypothesis can shrink it and print it as a
reproducer): a mesh shape over 8 devices, argument shapes with their
``PartitionSpec``s, a list of ``Step``s (elementwise, dot_general, reshape,
transpose, broadcast, reduce, concatenate, slice, sharding constraint) each
making one new value from earlier ones, which values are returned, and the
output specs. ``Program.function(mesh)`` builds the JAX function;
``Program.function(None)`` builds the same function without sharding
constraints, the unsharded reference.

Specs mix ``None``, single axes, tuples of axes and, in constraints only (jit
refuses it in its shardings, as jax.jit does), ``P.UNCONSTRAINED``;
dimension sizes are drawn so that some argument and result shardings do not
divide their dimension (shardc must reject those with
``IndivisibleDimensionError``); constraints inside the function may be
indivisible, which jax pads.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

DEVICE_COUNT = 8
MESH_SHAPES = ((8,), (2, 4), (4, 2), (2, 2, 2), (1, 8), (2, 1, 4))
AXIS_NAMES = ("x", "y", "z")
DIM_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)
MAX_RANK = 4
MAX_ELEMENTS = 4096
UNARY_KINDS = ("negate", "abs", "tanh", "half")
BINARY_KINDS = ("add", "multiply", "subtract", "maximum")
REDUCE_KINDS = ("sum", "max")

Shape = tuple[int, ...]
SpecEntry = object  # None | str | tuple[str, ...] | P.UNCONSTRAINED


@dataclasses.dataclass(frozen=True)
class Step:
    """One op: ``kind`` with its operand value ids and static parameters."""

    kind: str
    operands: tuple[int, ...]
    params: tuple = ()

    def __repr__(self) -> str:
        return f"Step({self.kind!r}, {self.operands}, {self.params})"


@dataclasses.dataclass(frozen=True)
class Program:
    """A random program over one mesh: arguments, steps, outputs and their shardings."""

    mesh_shape: tuple[int, ...]
    arg_shapes: tuple[Shape, ...]
    arg_specs: tuple[P | None, ...]
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]
    out_specs: tuple[P | None, ...]
    data_seed: int

    @property
    def axis_names(self) -> tuple[str, ...]:
        return AXIS_NAMES[: len(self.mesh_shape)]

    def make_mesh(self) -> jax.sharding.Mesh:
        names = self.axis_names
        return jax.make_mesh(self.mesh_shape, names,
                             axis_types=(jax.sharding.AxisType.Auto,) * len(names))

    def value_shapes(self) -> list[Shape]:
        """The shape of every value: arguments first, then one per step."""
        shapes = list(self.arg_shapes)
        for step in self.steps:
            shapes.append(result_shape(step, shapes))
        return shapes

    def out_shapes(self) -> list[Shape]:
        shapes = self.value_shapes()
        return [shapes[i] for i in self.outputs]

    def function(self, mesh: jax.sharding.Mesh | None) -> Callable:
        """The JAX function; with ``mesh=None`` constraints are left out (the reference)."""

        def run(*args):
            values = list(args)
            for step in self.steps:
                values.append(apply_step(step, values, mesh))
            return tuple(values[i] for i in self.outputs)

        return run

    def arguments(self) -> list[np.ndarray]:
        """Small-integer float32 inputs: sums and products stay exact in any order."""
        rng = np.random.default_rng(self.data_seed)
        return [rng.integers(-3, 4, size=shape).astype(np.float32) for shape in self.arg_shapes]

    def spec_problems(self) -> list[str]:
        """Argument/result specs whose axes do not divide their dimension."""
        sizes = dict(zip(self.axis_names, self.mesh_shape))
        specs = [("argument", i, s, spec) for i, (s, spec)
                 in enumerate(zip(self.arg_shapes, self.arg_specs))]
        specs += [("result", i, s, spec) for i, (s, spec)
                  in enumerate(zip(self.out_shapes(), self.out_specs))]
        return [f"{what} {i}" for what, i, shape, spec in specs
                if spec is not None and not divides(shape, spec, sizes)]


def dim_axes(entry: SpecEntry) -> tuple[str, ...]:
    if entry is None or entry is P.UNCONSTRAINED:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def divides(shape: Shape, spec: P, axis_sizes: dict[str, int]) -> bool:
    """Whether every dimension's size is a multiple of the product of its axes."""
    return all(
        size % math.prod(axis_sizes[a] for a in dim_axes(entry)) == 0
        for size, entry in zip(shape, spec)
    )


# ---------------------------------------------------------------------------
# Shapes and semantics of the steps
# ---------------------------------------------------------------------------


def result_shape(step: Step, shapes: Sequence[Shape]) -> Shape:
    """The static shape ``step`` produces from the shapes of earlier values."""
    first = shapes[step.operands[0]]
    kind, params = step.kind, step.params
    if kind in ("unary", "binary", "constraint"):
        return first
    if kind == "dot":
        rhs = shapes[step.operands[1]]
        if params[0] == "batch":
            return (first[0], first[1], rhs[2])
        return first[:-1] + rhs[1:]
    if kind == "reshape":
        return params[0]
    if kind == "transpose":
        return tuple(first[i] for i in params[0])
    if kind == "broadcast":
        position, size = params
        return first[:position] + (size,) + first[position:]
    if kind == "reduce":
        axis = params[1]
        return first[:axis] + first[axis + 1 :]
    if kind == "concatenate":
        axis = params[0]
        second = shapes[step.operands[1]]
        return first[:axis] + (first[axis] + second[axis],) + first[axis + 1 :]
    if kind == "slice":
        axis, start, limit, stride = params
        return first[:axis] + (len(range(start, limit, stride)),) + first[axis + 1 :]
    raise ValueError(f"unknown step kind {kind!r}")


def apply_step(step: Step, values: Sequence, mesh: jax.sharding.Mesh | None):
    """Run ``step`` on traced values; constraints only when a mesh is given."""
    operands = [values[i] for i in step.operands]
    x = operands[0]
    kind, params = step.kind, step.params
    if kind == "unary":
        return {"negate": jnp.negative, "abs": jnp.abs, "tanh": jnp.tanh,
                "half": lambda v: v * 0.5}[params[0]](x)
    if kind == "binary":
        return getattr(jnp, params[0])(x, operands[1])
    if kind == "dot":
        if params[0] == "batch":
            return jax.lax.dot_general(x, operands[1], (((2,), (1,)), ((0,), (0,))))
        return jax.lax.dot_general(x, operands[1], (((x.ndim - 1,), (0,)), ((), ())))
    if kind == "reshape":
        return jnp.reshape(x, params[0])
    if kind == "transpose":
        return jnp.transpose(x, params[0])
    if kind == "broadcast":
        position, size = params
        shape = x.shape[:position] + (size,) + x.shape[position:]
        dims = tuple(i if i < position else i + 1 for i in range(x.ndim))
        return jax.lax.broadcast_in_dim(x, shape, dims)
    if kind == "reduce":
        reduce_kind, axis = params
        return (jnp.sum if reduce_kind == "sum" else jnp.max)(x, axis=axis)
    if kind == "concatenate":
        return jnp.concatenate([x, operands[1]], axis=params[0])
    if kind == "slice":
        axis, start, limit, stride = params
        return jax.lax.slice_in_dim(x, start, limit, stride, axis=axis)
    if kind == "constraint":
        if mesh is None:
            return x
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, params[0]))
    raise ValueError(f"unknown step kind {kind!r}")


# ---------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------

dim_sizes = st.sampled_from(DIM_SIZES)


def shapes(min_rank: int = 1, max_rank: int = 3) -> st.SearchStrategy[Shape]:
    return st.lists(dim_sizes, min_size=min_rank, max_size=max_rank).map(tuple).filter(
        lambda s: math.prod(s) <= MAX_ELEMENTS)


@st.composite
def partition_specs(draw, rank: int, axis_names: Sequence[str], open_dims: bool = False) -> P:
    """A spec of at most ``rank`` entries, each axis used once: None, axis, tuple or
    (with ``open_dims``) open."""
    unused = list(axis_names)
    entries: list[SpecEntry] = []
    for _ in range(draw(st.integers(0, rank))):
        choice = draw(st.sampled_from(["none", "axis", "tuple"] + (["open"] if open_dims else [])))
        if choice == "open":
            entries.append(P.UNCONSTRAINED)
        elif choice == "axis" and unused:
            axis = draw(st.sampled_from(unused))
            unused.remove(axis)
            entries.append(axis)
        elif choice == "tuple" and len(unused) >= 2:
            axes = draw(st.permutations(unused).map(lambda p: tuple(p[:2])))
            for axis in axes:
                unused.remove(axis)
            entries.append(axes)
        else:
            entries.append(None)
    return P(*entries)


def optional_specs(rank: int, axis_names: Sequence[str]) -> st.SearchStrategy[P | None]:
    return st.one_of(st.none(), partition_specs(rank, axis_names))


def _factor_pairs(size: int) -> list[tuple[int, int]]:
    return [(a, size // a) for a in range(2, size) if size % a == 0]


@st.composite
def steps(draw, shapes_so_far: list[Shape], new_args: list[Shape], axis_names) -> Step:
    """One step on the existing values; may append new arguments to ``new_args``."""
    value = draw(st.sampled_from([i for i, s in enumerate(shapes_so_far) if s]))
    shape = shapes_so_far[value]
    rank = len(shape)

    def new_argument(arg_shape: Shape) -> int:
        new_args.append(arg_shape)
        return -len(new_args)  # placeholder -(j+1) for new argument j, renumbered later

    kinds = ["unary", "binary", "dot", "reshape", "transpose", "reduce", "concatenate",
             "slice", "constraint"]
    if rank < MAX_RANK:
        kinds.append("broadcast")
    kind = draw(st.sampled_from(kinds))
    if kind == "unary":
        return Step("unary", (value,), (draw(st.sampled_from(UNARY_KINDS)),))
    if kind == "binary":
        same = [i for i, s in enumerate(shapes_so_far) if s == shape]
        other = draw(st.sampled_from(same)) if draw(st.booleans()) else new_argument(shape)
        return Step("binary", (value, other), (draw(st.sampled_from(BINARY_KINDS)),))
    if kind == "dot":
        if rank == 3 and draw(st.booleans()):
            rhs = new_argument((shape[0], shape[2], draw(dim_sizes)))
            return Step("dot", (value, rhs), ("batch",))
        if rank > 2:
            return Step("unary", (value,), ("negate",))
        rhs_shape = (shape[-1],) + tuple(draw(st.lists(dim_sizes, max_size=1)))
        return Step("dot", (value, new_argument(rhs_shape)), ("contract",))
    if kind == "reshape":
        return Step("reshape", (value,), (draw(reshaped(shape)),))
    if kind == "transpose":
        return Step("transpose", (value,), (tuple(draw(st.permutations(range(rank)))),))
    if kind == "broadcast":
        return Step("broadcast", (value,), (draw(st.integers(0, rank)), draw(dim_sizes)))
    if kind == "reduce":
        return Step("reduce", (value,), (draw(st.sampled_from(REDUCE_KINDS)),
                                         draw(st.integers(0, rank - 1))))
    if kind == "concatenate":
        axis = draw(st.integers(0, rank - 1))
        other = shape[:axis] + (draw(dim_sizes),) + shape[axis + 1 :]
        return Step("concatenate", (value, new_argument(other)), (axis,))
    if kind == "slice":
        axis = draw(st.integers(0, rank - 1))
        start = draw(st.integers(0, shape[axis] - 1))
        limit = draw(st.integers(start + 1, shape[axis]))
        return Step("slice", (value,), (axis, start, limit, draw(st.sampled_from([1, 1, 2]))))
    return Step("constraint", (value,), (draw(partition_specs(rank, axis_names, open_dims=True)),))


@st.composite
def reshaped(draw, shape: Shape) -> Shape:
    """A new shape of the same size: two dims merged, one split, or all flattened."""
    options = ["flatten"]
    if len(shape) >= 2:
        options.append("merge")
    if len(shape) < MAX_RANK and any(_factor_pairs(d) for d in shape):
        options.append("split")
    choice = draw(st.sampled_from(options))
    if choice == "flatten":
        return (math.prod(shape),)
    if choice == "merge":
        i = draw(st.integers(0, len(shape) - 2))
        return shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2 :]
    i = draw(st.sampled_from([i for i, d in enumerate(shape) if _factor_pairs(d)]))
    return shape[:i] + draw(st.sampled_from(_factor_pairs(shape[i]))) + shape[i + 1 :]


@st.composite
def programs(draw, max_steps: int = 5) -> Program:
    """A whole random program (see the module docstring)."""
    mesh_shape = draw(st.sampled_from(MESH_SHAPES))
    axis_names = AXIS_NAMES[: len(mesh_shape)]
    first_args = draw(st.lists(shapes(), min_size=1, max_size=2))
    value_shapes: list[Shape] = list(first_args)
    raw_steps: list[Step] = []
    new_args: list[Shape] = []
    for _ in range(draw(st.integers(1, max_steps))):
        step = draw(steps(value_shapes, new_args, axis_names))
        raw_steps.append(step)
        shape_args = value_shapes + new_args  # placeholders index new_args from the end
        value_shapes.append(result_shape(_resolve(step, len(value_shapes), new_args), shape_args))
    # Number the values: the first arguments, the new arguments, then the steps.
    num_args = len(first_args) + len(new_args)
    arg_shapes = tuple(first_args) + tuple(new_args)
    final_steps = tuple(_renumber(step, len(first_args), num_args, len(new_args))
                        for step in raw_steps)
    num_values = num_args + len(final_steps)
    outputs = tuple(draw(st.lists(st.integers(num_args, num_values - 1), min_size=1,
                                  max_size=2, unique=True)))
    program_shapes = Program(mesh_shape, arg_shapes, (), final_steps, outputs, (), 0)
    out_shapes = program_shapes.out_shapes()
    arg_specs = tuple(draw(optional_specs(len(s), axis_names)) for s in arg_shapes)
    out_specs = tuple(draw(optional_specs(len(s), axis_names)) for s in out_shapes)
    return dataclasses.replace(program_shapes, arg_specs=arg_specs, out_specs=out_specs,
                               data_seed=draw(st.integers(0, 2**16)))


def _resolve(step: Step, num_values: int, new_args: list[Shape]) -> Step:
    """``step`` with ids into ``values + new_args`` (placeholder ``-(j+1)`` is new arg ``j``)."""
    operands = tuple(num_values - i - 1 if i < 0 else i for i in step.operands)
    return dataclasses.replace(step, operands=operands)


def _renumber(step: Step, num_first: int, num_args: int, num_new: int) -> Step:
    """Final value ids: first args, then new args, then one value per step in order."""
    def renumber(i: int) -> int:
        if i < 0:
            return num_first - i - 1
        return i if i < num_first else i - num_first + num_args
    return dataclasses.replace(step, operands=tuple(renumber(i) for i in step.operands))
