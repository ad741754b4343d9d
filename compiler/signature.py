"""What a call of a jitted function looks like to the compiler, leaf by leaf.

``jit`` accepts shardings as pytree prefixes of the arguments and results,
as ``NamedSharding``s or as ``PartitionSpec``s to be resolved against a mesh,
and it accepts arguments of several kinds (``jax.Array``, numpy arrays, Python
scalars, ``jax.ShapeDtypeStruct``). This module turns all of that into one flat
list of ``LeafSignature``s, each with its pytree path for error messages, and
checks what can be checked before tracing: pytree structure, ranks, axes,
divisibility and committed devices.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import (
    AbstractMesh,
    AxisType,
    Mesh,
    NamedSharding,
    PartitionSpec,
    SingleDeviceSharding,
)

from shardc.dialects import jax_private, sdy
from shardc.dialects.errors import (
    ArgumentShardingError,
    DeviceMismatchError,
    IndivisibleDimensionError,
    InvalidArgumentError,
    LoweringPlatformsError,
    MeshMismatchError,
    MissingMeshError,
    ShardcError,
    ShardingTreeError,
    UncommittedArrayError,
)
from shardc.runtime import tokens

AnyMesh = Mesh | AbstractMesh


@dataclasses.dataclass(frozen=True)
class LeafSignature:
    """One flattened argument or result: where it is, its type, its sharding."""

    path: str
    aval: jax.ShapeDtypeStruct
    sharding: NamedSharding | None
    # The sharding the argument's own type carries (a placed array's, a
    # ShapeDtypeStruct's): what jax.jit traces the function with. in_shardings
    # never enter the traced types.
    type_sharding: NamedSharding | None = None
    # Whether jit decides where the argument goes (a sharding given for it, or
    # jit(device=...)): a committed array elsewhere is then moved there by a call, as
    # jax.jit moves it. Otherwise its own placement is the program's.
    moved_by_jit: bool = False

    # The device-local layout it is compiled for (``shardc.compiler.layouts``): a
    # ``Layout``, ``Layout.AUTO``, or None for the default one.
    layout: Any = None
    # A committed argument's own sharding where it is of another class than
    # ``sharding`` (a GSPMDSharding, read as a NamedSharding): jax.jit's results
    # follow NamedSharding arguments only (``shardc.runtime.result_shardings``).
    placed_as: Any = None
    # The memory its type says it lives in where not the device's (an array placed
    # in host memory by any sharding: ``jax.memory.Space.Host``), as jax's types
    # carry it; None for the device's.
    memory_space: Any = None

    def abstract_key(self) -> tuple:
        """The part of this leaf a lowering depends on: no devices, only shapes."""
        # (The type tells a token from an array of its buffer's type, bool[0].)
        return (type(self.aval), self.aval.shape, self.aval.dtype, self.aval.weak_type,
                self.aval.is_ref, abstract_key(self.sharding), abstract_key(self.type_sharding),
                self.layout, self.memory_space)


def abstract_key(sharding: NamedSharding | None) -> tuple | None:
    """Key a sharding by mesh shape, axis types and spec, never by devices."""
    if sharding is None:
        return None
    return _sharding_key(sharding)


@functools.lru_cache(maxsize=256)
def _sharding_key(sharding: NamedSharding) -> tuple:
    # Asked per leaf, of the few shardings a program's leaves have.
    return (sharding.mesh.abstract_mesh, canonical_spec(sharding.spec), sharding.memory_kind)


def canonical_spec(spec: PartitionSpec) -> PartitionSpec:
    """Drop trailing ``None`` entries: ``P('x', None)`` and ``P('x')`` mean the same."""
    dims = list(sdy.spec_dims(spec))
    while dims and dims[-1] is None:
        dims.pop()
    unreduced = getattr(spec, "unreduced", frozenset())
    return PartitionSpec(*dims, unreduced=unreduced) if unreduced else PartitionSpec(*dims)


def path_prefix(path: str) -> Callable[[ShardcError], ShardcError]:
    """Return a function that re-creates an error with ``path`` in front of its message."""

    def add(error: ShardcError) -> ShardcError:
        return type(error)(f"{path}: {error}")

    return add


class IndivisibleShardingError(IndivisibleDimensionError, jax_private.indivisible_error_class()):
    """``IndivisibleDimensionError`` that is also jax's ``IndivisibleError``, as jax.jit
    raises it for the same sharding."""


def as_jax_error(error: ShardcError, spec: PartitionSpec, mesh: AnyMesh, shape: tuple,
                 path: str, jax_name: Callable[[], str] | None = None) -> ShardcError:
    """``error`` for a sharding at ``path`` (``args...`` / ``result...``), in words jax.jit
    uses first (and of its class, where jax's is not a ``ValueError``), shardc's after.
    ``jax_name()`` is jax's name of the value there (an argument's is its parameter's
    name, ``x['w']``), asked for only by an error; ``path`` where not given."""
    what = "pjit outputs" if path.startswith("result") else "pjit arguments"
    name = jax_name() if jax_name is not None else path
    theirs = jax_private.jax_sharding_error(spec, mesh, shape, what, name)
    if theirs is None:
        return path_prefix(path)(error)
    cls = type(error)
    if isinstance(theirs, jax_private.indivisible_error_class()) and cls is \
            IndivisibleDimensionError:
        cls = IndivisibleShardingError
    return cls(f"{theirs} ({path}: {error})")


# ----------------------------------------------------------------------------
# Meshes and PartitionSpecs
# ----------------------------------------------------------------------------


def context_mesh(explicit: AnyMesh | None) -> AnyMesh | None:
    """Return the mesh a bare ``PartitionSpec`` refers to, or ``None``.

    Order: ``jit(..., mesh=...)``, then ``jax.set_mesh`` (concrete, then
    abstract via ``jax.sharding.use_abstract_mesh``). A legacy ``with mesh:``
    block is not jit's context mesh (it is pjit's: ``shardc.compiler.pjit``).
    """
    if explicit is not None:
        return explicit
    # Inside an enclosing trace jax only answers for the abstract mesh.
    concrete = jax.sharding.get_mesh() if jax_private.trace_state_clean() else None
    for found in (concrete, jax.sharding.get_abstract_mesh()):
        if found is not None and not found.empty:
            return found
    return None


def device_mesh(explicit: AnyMesh | None) -> Mesh | None:
    """The concrete context mesh whose devices a program runs on when its own
    shardings name none, as jax.jit's context mesh: ``jit(..., mesh=...)`` when
    concrete, else ``jax.set_mesh``'s (a legacy ``with mesh:`` block is not one)."""
    if explicit is not None:
        return explicit if isinstance(explicit, Mesh) and explicit.axis_names else None
    if not jax_private.trace_state_clean():
        return None
    mesh = jax.sharding.get_mesh()
    return mesh if mesh is not None and not mesh.empty else None


def to_named_sharding(
    entry: Any, mesh: AnyMesh | None, path: str, ndim: int,
    option: str = "in_shardings", api_name: str = "jit",
    jax_name: Callable[[], str] | None = None,
) -> NamedSharding | None:
    """Turn one user-given sharding leaf into a ``NamedSharding`` (or ``None``).

    A ``PartitionSpec`` is validated before jax sees it, so a bad spec gets
    shardc's error (with the path) rather than jax's. ``option`` (``in_shardings``
    / ``out_shardings``) and ``api_name`` (``jit`` / ``pjit``) word jax's error,
    ``jax_name`` as ``as_jax_error``'s.
    """
    if entry is None or isinstance(entry, NamedSharding):
        return entry
    if isinstance(entry, jax.sharding.Sharding) and not isinstance(entry, SingleDeviceSharding):
        return named_form(entry, ndim, mesh)
    if isinstance(entry, PartitionSpec):
        if mesh is None:
            raise MissingMeshError(
                f"{api_name} requires a non-empty mesh in context if you are passing "
                f"`PartitionSpec`s to {option}. You can define a context mesh via "
                "`jax.set_mesh(mesh)`. Alternatively, provide `Sharding`s to "
                f"{option} and then the mesh context manager is not required. "
                f"({path}: PartitionSpec {entry} needs a mesh: pass jit(..., mesh=...), "
                "use a NamedSharding, or call inside `with jax.set_mesh(mesh):`)"
            )
        try:
            sdy.validate_spec(entry, mesh, ndim)
        except ShardcError as error:
            raise as_jax_error(error, entry, mesh, (1,) * ndim, path, jax_name) from None
        return NamedSharding(mesh, entry)
    raise InvalidArgumentError(
        f"{path}: expected a NamedSharding, a PartitionSpec or None as a sharding, "
        f"got {type(entry).__name__} {entry!r}"
    )


def named_form(sharding: jax.sharding.Sharding, ndim: int, mesh: AnyMesh | None = None
               ) -> NamedSharding:
    """A sharding of another kind (``GSPMDSharding``: an XLA tiling over a device list,
    which jax.jit still takes) as the ``NamedSharding`` that places data alike: over
    ``mesh`` (the context mesh) where one of its specs does, else over a mesh made
    of the tiling itself, one axis per tiled dimension (``gspmd0``, ...) and one for
    the replicas (``gspmd_replicas``)."""
    devices = tuple(sharding._device_assignment)
    if isinstance(mesh, Mesh) and set(mesh.devices.flat) == set(devices):
        named = jax_private.sharding_from_op_sharding(
            jax_private.hlo_sharding(sharding, ndim).to_proto(), mesh, devices, ndim)
        if isinstance(named, NamedSharding) and named.is_equivalent_to(sharding, ndim):
            return named
    tiling = jax_private.hlo_sharding(sharding, ndim)
    if tiling.is_replicated():
        grid = np.array(devices, dtype=object)
        return NamedSharding(Mesh(grid, ("gspmd_replicas",), axis_types=(AxisType.Auto,)),
                             PartitionSpec(), memory_kind=sharding.memory_kind)
    dims = list(tiling.tile_assignment_dimensions())
    if tiling.subgroup_types() or len(dims) != ndim + int(tiling.replicate_on_last_tile_dim()):
        raise InvalidArgumentError(
            f"a {type(sharding).__name__} {sharding} that no NamedSharding can express "
            "(manual or other subgroups): give a NamedSharding")
    names = [f"gspmd{i}" for i in range(ndim)] + ["gspmd_replicas"] * (len(dims) - ndim)
    order = np.array(devices, dtype=object)[list(tiling.tile_assignment_devices())]
    kept = [i for i, size in enumerate(dims) if size > 1]
    grid = order.reshape(dims).reshape([dims[i] for i in kept]) if kept else order
    axes = tuple(names[i] for i in kept) or ("gspmd_replicas",)
    mesh = Mesh(grid, axes, axis_types=(AxisType.Auto,) * len(axes))
    spec = PartitionSpec(*(names[i] if dims[i] > 1 else None for i in range(ndim)))
    return NamedSharding(mesh, spec, memory_kind=sharding.memory_kind)


def is_sharding_leaf(node: Any) -> bool:
    return node is None or isinstance(node, (NamedSharding, PartitionSpec, jax.sharding.Sharding))


def broadcast_shardings(
    prefix: Any, tree: Any, what: str
) -> list[Any]:
    """Expand a sharding pytree prefix to one entry per leaf of ``tree``, as jax.jit
    reads it (``what``: "in_shardings", against the positional arguments' tuple, or
    "out_shardings", against the results).

    A single sharding (or ``None``) applies to every leaf. A ``None`` inside the
    prefix is a leaf too (unspecified), covering its whole subtree; a ``None``
    among the values (``eqx.partition``'s holes, optax states built from them) is
    a subtree without leaves, so it takes no entry whatever the prefix has there.
    Structures that do not fit raise ``ShardingTreeError`` with jax's message and
    both structures.
    """
    treedef = jax.tree.structure(tree)
    if is_sharding_leaf(prefix):
        return [prefix] * treedef.num_leaves
    try:
        return list(jax_private.flatten_shardings(
            f"pjit {what}", treedef, prefix, tupled_args=what == "in_shardings"))
    except ValueError as error:
        values = "positional arguments" if what == "in_shardings" else "results"
        raise ShardingTreeError(
            f"{error}\n(jit {what}: the shardings have structure "
            f"{jax.tree.structure(prefix, is_leaf=is_sharding_leaf)} but the {values} "
            f"have structure {treedef})"
        ) from None


def check_no_mesh_with_device(placed_by_jit: bool, context: Mesh | None) -> None:
    """``jit(device=...)`` / ``jit(backend=...)`` names the program's device itself: jax.jit
    refuses a context mesh (``jax.set_mesh``, pjit's ``with mesh:``) next to it."""
    if placed_by_jit and context is not None:
        raise DeviceMismatchError(
            "Mesh context manager should not be used with jit when backend or device is "
            f"also specified as an argument to jit. (the context mesh {context} and jit's "
            "device or backend both say where the program runs)")


def check_no_keyword_arguments(in_shardings_given: bool, kwargs: dict[str, Any]) -> None:
    """jax.jit gives ``in_shardings`` to positional arguments only, and refuses keyword
    arguments (static ones included) once they are given."""
    if kwargs and in_shardings_given:
        raise ShardingTreeError(
            "pjit does not support kwargs when in_shardings is specified. (keyword "
            f"arguments {sorted(kwargs)}: pass them positionally, with an in_shardings "
            "entry each)")


def check_sharding(sharding: NamedSharding, aval: jax.ShapeDtypeStruct, path: str,
                   jax_name: Callable[[], str] | None = None) -> None:
    """Validate rank, axes and divisibility of ``sharding`` for ``aval`` (``jax_name`` as
    ``as_jax_error``'s)."""
    try:
        sdy.validate_spec(sharding.spec, sharding.mesh, len(aval.shape))
        sdy.validate_divisible(sharding.spec, sharding.mesh, aval.shape)
    except ShardcError as error:
        raise as_jax_error(error, sharding.spec, sharding.mesh, tuple(aval.shape),
                           path, jax_name) from None


# ----------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------


def abstract_value(value: Any, name: Callable[[], str], fun: Any = "fun") -> jax.ShapeDtypeStruct:
    """Return the unsharded abstract value jax traces ``value`` as (a mutable array,
    ``jax.new_ref``, as a ``Ref`` type: ``is_ref``); ``name()`` (the argument's,
    asked for only by an error: jax makes every argument's name at once) and
    ``fun`` (the jitted function, printed as jax prints it) are for jax's error."""
    if tokens.is_token(value):
        return tokens.TOKEN
    if isinstance(value, (jax.ShapeDtypeStruct, jax.core.ShapedArray)):
        negative = [d for d in value.shape if isinstance(d, (int, np.integer)) and d < 0]
        if negative:
            # jax lowers it to an MLIR type that fails to build (a raw MLIRError).
            raise InvalidArgumentError(
                f"the shape of an abstract argument must have every element be nonnegative, "
                f"got {tuple(value.shape)} for the argument at path {name()} of {fun}")
        # Of the type jax traces it as: 64-bit types are 32-bit ones without x64.
        dtype = value.dtype if jax.dtypes.issubdtype(value.dtype, jax.dtypes.extended) \
            else jax.dtypes.canonicalize_dtype(value.dtype)
        return jax.ShapeDtypeStruct(value.shape, dtype, weak_type=value.weak_type,
                                    is_ref=getattr(value, "is_ref", False))
    try:
        aval = jax.typeof(value)
    except OverflowError:
        raise OverflowError(
            "An overflow was encountered while parsing an argument to a jitted computation, "
            f"whose argument path is {name()}. Got {type(value)} with value {value}") from None
    except TypeError:
        raise InvalidArgumentError(
            f"Error interpreting argument to {fun} as an abstract array. The "
            f"problematic value is of type {type(value)} and was passed to the function "
            f"at path {name()}.\nThis typically means that a jit-wrapped function was "
            "called with a non-array argument, and this argument was not marked as "
            "static using the static_argnums or static_argnames parameters of jax.jit."
        ) from None
    if tokens.is_token(aval):  # a token of an enclosing trace
        return tokens.TOKEN
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type,
                                is_ref=jax_private.is_ref(value))


def sharding_of_value(value: Any) -> NamedSharding | None:
    """The sharding a value brings with it: computation follows data.

    An uncommitted array may go wherever the program runs, which jax decides
    for one device only: on several, it is jax's ``NotImplementedError``.
    """
    if jax_private.is_tracer(value):
        return None  # an abstract value of an enclosing trace: no buffers, no devices
    sharding = getattr(value, "sharding", None)
    if isinstance(value, jax.Array) and not value.committed:
        if len(sharding.device_set) > 1 and not (
                isinstance(sharding, NamedSharding) and sharding.mesh.empty):
            raise UncommittedArrayError(
                "Having uncommitted Array sharded on multiple devices is not supported.")
        return None
    # On one device in another memory than the device's, it is read as the
    # NamedSharding on that device in that memory (compiled for that memory). The
    # sharding says which memory where the type does not: an array put with a
    # ``Format`` is typed in the device's memory whatever memory its sharding is in,
    # and jax.jit compiles it for its sharding's (its buffers are there).
    if isinstance(value, jax.Array) and not isinstance(sharding, NamedSharding) and (
            not isinstance(sharding, SingleDeviceSharding) or memory_space(value) is not None
            or jax_private.space_of_memory_kind(sharding.memory_kind) != jax.memory.Space.Device):
        return named_form(sharding, value.ndim)
    return sharding if isinstance(sharding, NamedSharding) else None


def type_sharding(value: Any) -> NamedSharding | None:
    """The ``NamedSharding`` an argument's type carries, as jax abstracts it: any
    array's (committed or not) and a ``ShapeDtypeStruct``'s."""
    if jax_private.is_tracer(value):
        return None
    sharding = getattr(value, "sharding", None)
    return sharding if isinstance(sharding, NamedSharding) else None


def traced_exactly(aval: jax.ShapeDtypeStruct) -> bool:
    """Whether an array's type is not the canonical one (64-bit, made under
    ``jax.enable_x64()`` with x64 now off): jax traces it as it is, while a
    ``ShapeDtypeStruct`` of it would be traced as the canonical (32-bit) type."""
    return not aval.is_ref and not jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended) \
        and jax.dtypes.canonicalize_dtype(aval.dtype) != aval.dtype


def jax_type(value: Any) -> Any:
    """jax's type of a value (``jax.typeof``), None for a value jax has no type for."""
    try:
        return jax.typeof(value)
    except TypeError:
        return None


def memory_space(value: Any) -> Any:
    """The memory an array's type says it lives in where not the device's (jax's
    types carry it whatever the array's sharding class), else None."""
    if jax_private.is_tracer(value) or jax_private.is_ref(value) \
            or not isinstance(value, jax.Array):
        return None
    return _type_memory(jax.typeof(value))


def _type_memory(aval: Any) -> Any:
    space = getattr(aval, "memory_space", None)
    return None if space in (None, jax.memory.Space.Device) else space


def committed_devices(value: Any) -> tuple | None:
    """The device set a committed ``jax.Array`` lives on, else ``None``."""
    if jax_private.is_tracer(value):
        return None
    if isinstance(value, jax.Array) and value.committed:
        return _sorted_device_set(value.sharding)
    return None


@functools.lru_cache(maxsize=256)
def _sorted_device_set(sharding: jax.sharding.Sharding) -> tuple:
    # Asked twice per argument, of the few shardings a program's arguments have.
    return tuple(sorted(sharding.device_set, key=lambda d: d.id))


def flatten_with_paths(tree: Any, root: str) -> tuple[list[str], list[Any]]:
    """Flatten a pytree to (path strings, leaves), paths like ``args[0]['w']``, as jax's
    tracing flattens a jitted function's arguments (a ``Ref``'s view is its ``Ref``)."""
    pairs = jax_private.tracing_leaves_with_paths(tree)
    paths = [root + jax.tree_util.keystr(keys) for keys, _ in pairs]
    return paths, [leaf for _, leaf in pairs]


def argument_signature(
    args: Sequence[Any],
    kwargs: dict[str, Any],
    in_shardings: Any,
    mesh: AnyMesh | None,
    *,
    follow_data: bool = True,
    placed_by_jit: bool = False,
    moved_to: Any = None,
    devices: Mesh | None = None,
    names: Callable[[], Sequence[str] | None] = lambda: None,
    fun: Any = "fun",
    fun_name: str = "fun",
    api_name: str = "jit",
) -> list[LeafSignature]:
    """Resolve every dynamic argument leaf to its aval and sharding.

    ``in_shardings`` applies to the positional arguments (as in ``jax.jit``);
    keyword arguments and leaves given ``None`` follow their data's sharding
    (with ``follow_data``; else their sharding is ``None``). A committed
    argument given a sharding must be tiled as that sharding says (jax.jit's
    rule, ``check_committed_sharding``); it is then moved there, from whatever
    devices and device order it is on, and its own devices take no part in the
    program's. Committed arguments that follow their data must be on
    ``devices`` (``device_mesh``'s) when given. ``placed_by_jit``
    (``jit(device=...)`` / ``jit(backend=...)``): every argument is moved to the
    program's device as by ``device_put``, so nothing of where it is counts.
    ``moved_to`` (a ``SingleDeviceSharding`` given for every argument): every
    argument is moved to its device, committed ones tiled as it says (replicated).
    Errors name arguments as jax does (``names()``: jax's names of the leaves,
    asked for only then; ``fun``: the jitted function, ``fun_name``: its name in
    them, ``surface.error_name``'s; ``api_name``: ``jit`` or ``pjit``).
    """
    # jax's names are made for all leaves at once: asked once, not once per leaf.
    names = functools.cache(names)
    paths, values = flatten_with_paths((tuple(args), kwargs), "")
    paths = [_argument_path(path) for path in paths]
    num_positional = len(jax_private.tracing_leaves(tuple(args)))
    given = broadcast_shardings(in_shardings, tuple(args), "in_shardings")
    given += [None] * (len(values) - num_positional)

    leaves = []
    # The values whose own placement decides the program's devices: those that
    # follow their data.
    followed: list[Any] = []
    # Leaves mostly share a few shardings and shapes (a parameter's optimizer
    # state has its shape): each pair that passed is not checked again.
    checked: set[tuple] = set()
    for index, (path, value, entry) in enumerate(zip(paths, values, given)):
        jax_name = functools.partial(_name, names, index, path)
        aval = abstract_value(value, jax_name, fun)
        if moved_to is not None:
            check_committed_sharding(path, value, moved_to)
        sharding = to_named_sharding(entry, mesh, path, len(aval.shape), api_name=api_name,
                                     jax_name=jax_name)
        traced_as = None if placed_by_jit else type_sharding(value)
        given_here = sharding is not None
        followed.append(None if given_here or placed_by_jit else value)
        placed_as = None
        if not given_here and follow_data and not placed_by_jit:
            sharding = sharding_of_value(value)
            if sharding is not None and not isinstance(value.sharding, NamedSharding):
                placed_as = value.sharding
        if sharding is not None and (sharding, aval.shape) not in checked:
            check_sharding(sharding, aval, path, jax_name)
            checked.add((sharding, aval.shape))
        if given_here:
            check_committed_sharding(path, value, sharding)
            check_host_data_sharding(path, value, sharding)
            traced_as = entered_as(traced_as, sharding)
        leaves.append(LeafSignature(path, aval, sharding, traced_as,
                                    moved_by_jit=given_here or placed_by_jit,
                                    placed_as=placed_as,
                                    memory_space=None if given_here or placed_by_jit
                                    else memory_space(value)))
    def describe(index: int) -> str:
        return describe_argument(_name(names, index, paths[index]), fun_name,
                                 leaves[index].aval)

    check_committed_devices(paths, followed, leaves, devices, describe)
    return leaves


def describe_argument(name: str, fun_name: str, aval: Any) -> str:
    """jax's words for an argument in its errors: "argument x of f with shape f32[8]"."""
    dtype = aval.dtype
    # A PRNG key's dtype (key<fry>) is jax's own, not numpy's: named as jax prints it.
    dtype_name = str(dtype) if jax.dtypes.issubdtype(dtype, jax.dtypes.extended) \
        else np.dtype(dtype).name
    return f"argument {name} of {fun_name} with shape {dtype_name}[{','.join(map(str, aval.shape))}]"


def committed_arguments(values: Sequence[Any], leaves: Sequence[LeafSignature],
                        names: Sequence[str] | None, fun_name: str
                        ) -> list[tuple[str, tuple]]:
    """``(jax's description, devices)`` of each committed argument whose own placement
    is the program's (no sharding given for it, not moved by ``jit(device=)``)."""
    found = []
    for index, (value, leaf) in enumerate(zip(values, leaves)):
        devices = None if leaf.moved_by_jit else committed_devices(value)
        if devices is not None:
            name = names[index] if names and index < len(names) else leaf.path
            found.append((describe_argument(name, fun_name, leaf.aval), devices))
    return found


def _name(names: Callable[[], Sequence[str] | None], index: int, path: str) -> str:
    """jax's name of argument leaf ``index`` (``names()``), else its ``path``."""
    jax_names = names()
    return jax_names[index] if jax_names and index < len(jax_names) else path


def entered_as(own: NamedSharding | None, given: NamedSharding) -> NamedSharding | None:
    """The sharding an argument given ``given`` is traced with: its own (``own``, its
    type's), unless that lies on another mesh (other axis names, other devices or
    device order): the argument is moved to ``given`` before the program sees it,
    and a mesh of its own would be one the program does not have."""
    if own is None or not own.mesh.axis_names or own.mesh == given.mesh:
        return own  # (no mesh of its own: an unplaced type, a ShapedArray)
    if not isinstance(given.mesh, Mesh) and own.mesh.abstract_mesh == given.mesh:
        return own
    return given


def check_committed_sharding(path: str, value: Any, sharding: NamedSharding) -> None:
    """A committed array must be tiled as the sharding given for it says (jax.jit's
    rule: the same HLO sharding, whatever the mesh's axis names, devices or device
    order; the memory kind too), since moving data to another tiling is
    communication the program does not show. Moving it to other devices, or the
    same ones in another order, jax.jit does, and so does shardc. No array, committed
    or not, moves to another memory (jax's rule too: ``device_put`` does that)."""
    placed = isinstance(value, jax.Array) and not jax_private.is_tracer(value)
    # A ShapeDtypeStruct's sharding is a committed array's to come (jax.jit's rule too).
    declared = isinstance(value, jax.ShapeDtypeStruct) and isinstance(value.sharding, NamedSharding)
    if not (placed or declared) or value.sharding == sharding:
        return
    arg_type = jax.core.ShapedArray(value.shape, value.dtype).str_short()
    if sharding.memory_kind is not None and value.sharding.memory_kind != sharding.memory_kind:
        raise ArgumentShardingError(
            "Memory kinds passed to jax.jit does not match memory kind on the respective "
            f"arg. Got jit memory kind: {sharding.memory_kind}, arg memory kind: "
            f"{value.sharding.memory_kind} for arg type: {arg_type} ({path}: "
            "jax.device_put it to the given memory kind first)")
    if placed and committed_devices(value) is None:
        return
    ndim = len(value.shape)
    own, wanted = (jax_private.hlo_sharding(s, ndim) for s in (value.sharding, sharding))
    if jax_private.same_hlo_sharding(own, wanted):
        return
    raise ArgumentShardingError(
        "Sharding passed to jit does not match the sharding on the respective arg. "
        f"Got jit sharding: {sharding},\narg sharding: {value.sharding} for arg type: "
        f"{arg_type} ({path}: the argument is tiled as {own} but the given "
        f"sharding tiles it as {wanted}; device_put it with the given sharding, or leave "
        "its in_shardings entry None to follow it)")


def check_host_data_sharding(path: str, value: Any, sharding: NamedSharding) -> None:
    """With several processes, a numpy array given a sharding that splits it is refused
    (jax.jit's rule): each process holds its own numpy data, so which process's rows
    a device gets would be a guess; a global array is made from the processes' data
    explicitly (``jax.make_array_from_process_local_data``)."""
    if not isinstance(value, np.ndarray) or sharding.is_fully_replicated \
            or jax.process_count() == 1:
        return
    raise ArgumentShardingError(
        "Passing non-trivial shardings for numpy inputs is not allowed. To fix this error, "
        "either specify a replicated sharding explicitly or use "
        "`jax.make_array_from_process_local_data(...)` to convert your host local numpy "
        "inputs to a jax.Array which you can pass to jit. If the numpy input is the same "
        "on each process, then you can use `jax.make_array_from_callback(...) to create a "
        f"`jax.Array` which you can pass to jit. Got arg type: {jax.typeof(value)} ({path})")


def _argument_path(path: str) -> str:
    # keystr of ((args...), {kwargs}) reads "[0][1]['w']"; say "args[1]['w']".
    if path.startswith("[0]"):
        return "args" + path[3:]
    return "kwargs" + path[3:]


def check_committed_devices(
    paths: Sequence[str], values: Sequence[Any], leaves: Sequence[LeafSignature],
    context: Mesh | None = None, describe: Callable[[int], str] | None = None,
) -> None:
    """All committed arguments and concrete meshes (the context mesh included) must use
    one device set (``describe(i)`` names argument ``i`` in the error)."""
    first: tuple[Any, tuple] | None = None
    if context is not None and context.axis_names:
        first = ("jit's context mesh", sorted_devices(context))
    for index, (path, value, leaf) in enumerate(zip(paths, values, leaves)):
        for what, devices in ((index, committed_devices(value)),
                              (f"the sharding of {path}", mesh_devices(leaf.sharding))):
            if devices is None:
                continue
            if first is None:
                first = (what, devices)
            elif devices != first[1]:
                name = lambda w: (describe(w) if describe else f"argument {paths[w]}") \
                    if isinstance(w, int) else w  # noqa: E731
                raise incompatible_devices((name(first[0]), first[1]), (name(what), devices))


def check_result_devices(args: Sequence[LeafSignature], results: Sequence[LeafSignature]
                         ) -> None:
    """Given result shardings must use the devices of the arguments' (as jax.jit requires)."""
    first = next(((f"the sharding of {leaf.path}", devices) for leaf in args
                  if (devices := mesh_devices(leaf.sharding)) is not None), None)
    for leaf in results:
        devices = mesh_devices(leaf.sharding)
        if first is None and devices is not None:
            first = (f"the sharding of {leaf.path}", devices)
        elif devices is not None and devices != first[1]:
            raise incompatible_devices(first, (f"the sharding of {leaf.path}", devices))


def check_program_meshes(args: Sequence[LeafSignature], results: Sequence[tuple[str, Any]],
                         requested: Any = None) -> None:
    """One program, one device set, checked before tracing as jax.jit checks it.

    ``args`` are the arguments' signatures, ``results`` ``(path, sharding)`` for
    the result shardings given to ``jit``, ``requested`` the device that
    ``SingleDeviceSharding`` leaves of jit's shardings ask for (they leave no
    sharding on their argument, yet name the program's devices as the others do).
    Concrete meshes over other devices
    get jax's "incompatible devices" error; an abstract mesh whose size is not
    the concrete meshes' device count, jax's "AbstractMesh size" error; abstract
    meshes of different sizes, shardc's (jax would fail later without naming them).
    """
    entries = [(f"the sharding of {leaf.path}", leaf.sharding.mesh) for leaf in args
               if leaf.sharding is not None]
    entries += [(f"the sharding of {path}", sharding.mesh) for path, sharding in results
                if isinstance(sharding, NamedSharding)]
    entries = [(what, mesh) for what, mesh in entries if mesh.axis_names]
    concrete = [(what, sorted_devices(mesh))
                for what, mesh in entries if isinstance(mesh, Mesh)]
    if requested is not None and concrete:
        concrete.insert(0, ("a SingleDeviceSharding given to jit", (requested,)))
    for other in concrete[1:]:
        if other[1] != concrete[0][1]:
            raise incompatible_devices(concrete[0], other)
    sizes = [(what, math.prod(mesh.axis_sizes)) for what, mesh in entries]
    if concrete:
        for what, size in sizes:
            if size != len(concrete[0][1]):
                raise MeshMismatchError(
                    f"AbstractMesh size: {size} does not match the device assignment size: "
                    f"{len(concrete[0][1])} ({what} against {concrete[0][0]})")
    elif len({size for _, size in sizes}) > 1:
        raise MeshMismatchError(
            "the shardings of this program use meshes of different device counts: "
            + ", ".join(f"{what}: {size} devices" for what, size in sizes))


def check_devices_known(leaves: Sequence[LeafSignature], values: Sequence[Any],
                        body_meshes: Sequence[AnyMesh], given: Any, jit_mesh: AnyMesh | None,
                        devices: Mesh | None) -> None:
    """jax.jit's rule for a lowering without ``lowering_platforms``: arguments whose types
    are on abstract meshes only (``ShapeDtypeStruct``s), with no devices anywhere else
    (a concrete mesh, a committed argument, the context mesh), name no platform to
    lower for. ``devices``: the concrete context mesh (``device_mesh``); ``given``:
    jit's ``in_shardings`` / ``out_shardings``, and ``jit_mesh`` its ``mesh=``: a
    sharding or an ``AbstractMesh`` given to shardc's ``jit`` asks for a lowering that
    names no devices, which shardc makes (and reuses on any devices)."""
    typed = [s.mesh for leaf in leaves for s in (leaf.sharding, leaf.type_sharding)
             if s is not None and s.mesh.axis_names]
    if not typed or any(isinstance(m, Mesh) for m in (*typed, *body_meshes)):
        return
    if isinstance(jit_mesh, AbstractMesh) or any(
            s is not None for s in jax.tree.leaves(given, is_leaf=is_sharding_leaf)):
        return
    if devices is not None or any(committed_devices(v) is not None for v in values):
        return
    raise LoweringPlatformsError(
        "Passing lowering_platforms via jax.export or "
        "jit(f).trace(*args).lower(lowering_platforms=...) is required when only "
        f"AbstractMesh exists in a jitted computation. Got context mesh: "
        f"{jax.sharding.get_abstract_mesh()} (the arguments' types are on "
        f"{typed[0]}, and no argument, sharding or mesh names devices)")


def check_body_devices(args: Sequence[LeafSignature], results: Sequence[LeafSignature],
                       body: Sequence[tuple[str, Mesh]], requested: tuple | None = None,
                       committed: Sequence[tuple[str, tuple]] = ()) -> None:
    """A concrete mesh named inside the function (``(primitive, mesh)``: a constraint's,
    a ``shard_map``'s...) must list the program's devices in the program's order, as
    jax.jit requires: the order decides which device holds which shard. ``requested``:
    the device ``jit(device=...)`` names (jax's "explicit output sharding");
    ``committed``: the committed arguments that follow their data
    (``committed_arguments``), whose device set must be the body meshes' too."""
    if not body:
        # No mesh inside the function: nothing to compare, so the arguments' device
        # arrays are never flattened.
        return
    first = ("explicit output sharding", requested) if requested else next(
        ((f"the sharding of {leaf.path}", tuple(leaf.sharding.mesh.devices.flat))
         for leaf in (*args, *results) if leaf.sharding is not None
         and isinstance(leaf.sharding.mesh, Mesh) and leaf.sharding.mesh.axis_names),
        None)
    for primitive, mesh in body:
        inside = (f"{primitive} inside jit", tuple(mesh.devices.flat))
        for argument in committed:  # a device set, not an order: the argument is resharded
            if argument[1] != sorted_devices(mesh):
                raise incompatible_devices(argument, inside)
        if first is None:
            first = inside
        elif inside[1] != first[1]:
            raise incompatible_devices(first, inside)


def incompatible_devices(first: tuple[str, tuple], second: tuple[str, tuple]
                         ) -> DeviceMismatchError:
    """jax.jit's error for two device sets in one program, naming both culprits (an
    argument before anything else, as jax words it)."""
    if second[0].startswith("argument ") and not first[0].startswith("argument "):
        first, second = second, first
    platform = first[1][0].platform.upper() if first[1] else ""

    def culprit(what: str, devices: tuple) -> str:
        # jax's words: "argument x of f with shape f32[8] and with device ids [...]".
        joint = "and with" if what.startswith("argument ") else "with"
        return f"{what} {joint} device ids {_ids(devices)} on platform {platform}"

    return DeviceMismatchError(
        f"Received incompatible devices for jitted computation. Got {culprit(*first)} and "
        f"{culprit(*second)}; every argument and sharding of one program must use the "
        "same devices (jax.device_put one of them)"
    )


def mesh_devices(sharding: NamedSharding | None) -> tuple | None:
    """The sorted devices of a sharding's concrete mesh, ``None`` if abstract."""
    if sharding is None or not isinstance(sharding.mesh, Mesh):
        return None
    return sorted_devices(sharding.mesh)


@functools.lru_cache(maxsize=64)
def sorted_devices(mesh: Mesh) -> tuple:
    """A concrete mesh's devices by id (asked per leaf, of the few meshes a program has)."""
    return tuple(sorted(mesh.devices.flat, key=lambda d: d.id))


def _ids(devices: Sequence) -> list[int]:
    return [device.id for device in devices]


def result_signature(
    out_info: Any, out_shardings: Any, mesh: AnyMesh | None, *, follow_types: bool = True,
    api_name: str = "jit",
    types: Sequence[NamedSharding | None] | None = None,
) -> list[LeafSignature]:
    """Resolve the results' shardings against the traced output avals: the given ones,
    else (with ``follow_types``) the ones their types carry on Explicit axes.
    ``types``: per result, its traced type (``result_types``): the sharding it comes
    back with follows the type's (``shardc.runtime.result_shardings``), and its
    memory is the type's where no sharding is given (``shardc.compiler.memories``)."""
    paths, avals = flatten_with_paths(out_info, "result")
    given = broadcast_shardings(out_shardings, out_info, "out_shardings")
    types = list(types) if types is not None else [ResultType(None)] * len(avals)
    leaves = []
    checked: set[tuple] = set()  # as in argument_signature
    for path, aval, entry, type_of in zip(paths, avals, given, types):
        if tokens.is_token(aval):
            leaves.append(LeafSignature(path, tokens.TOKEN, None))
            continue
        typed = typed_sharding(aval, mesh)
        aval = jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type,
                                    sharding=typed)
        sharding = to_named_sharding(entry, mesh, path, len(aval.shape), "out_shardings",
                                     api_name)
        if sharding is None and follow_types:
            sharding = typed
            if typed is not None and type_of.memory_space is not None:
                # The type's memory too: jax.jit's result stays where its type says.
                sharding = typed.with_memory_kind(
                    jax_private.memory_kind_of_space(type_of.memory_space))
        if sharding is not None and (sharding, aval.shape) not in checked:
            check_sharding(sharding, aval, path)
            checked.add((sharding, aval.shape))
        leaves.append(LeafSignature(path, aval, sharding, type_of.sharding,
                                    memory_space=type_of.memory_space))
    return leaves


class ResultType(NamedTuple):
    """What a traced result's type says beyond its shape: the sharding it carries
    (``jax.typeof(result).sharding``: its mesh's axis names and types even where every
    axis is Auto, which ``out_info`` leaves out) and the memory it lives in where not
    the device's (None)."""

    sharding: NamedSharding | None
    memory_space: Any = None


def result_types(traced: Any) -> list[ResultType]:
    """Each traced result's ``ResultType``."""
    return [ResultType(getattr(aval, "sharding", None), _type_memory(aval))
            for aval in traced.jaxpr.out_avals]


def leaf_types(results: Sequence[LeafSignature]) -> list[ResultType]:
    """The ``ResultType``s results were signed with (a lowering read back from a cache)."""
    return [ResultType(leaf.type_sharding, leaf.memory_space) for leaf in results]


def typed_sharding(aval: Any, mesh: AnyMesh | None) -> NamedSharding | None:
    """The sharding a traced result's type carries on a mesh with Explicit axes (there
    jax decides it at trace time, and jax.jit returns exactly it); None otherwise.
    On ``mesh`` (the concrete one) when it is the type's mesh."""
    sharding = getattr(aval, "sharding", None)
    if not isinstance(sharding, NamedSharding) or not any(
            t == AxisType.Explicit for t in sharding.mesh.axis_types):
        return None
    if mesh is not None and mesh.abstract_mesh == sharding.mesh.abstract_mesh:
        return NamedSharding(mesh, sharding.spec)
    return sharding


def shard_shape(sharding: NamedSharding, shape: Sequence[int]) -> tuple[int, ...]:
    """Per-device shape of a value of ``shape`` under ``sharding`` (divisible dims)."""
    sizes = dict(sdy.mesh_axes(sharding.mesh))
    dims = sdy.spec_dims(sharding.spec)
    out = list(shape)
    for dim, entry in enumerate(dims):
        out[dim] //= int(np.prod([sizes[name] for name in sdy.dim_axis_names(entry)]))
    return tuple(out)


def key_result_shardings(results: Sequence[LeafSignature]) -> list | None:
    """Per result, its given sharding if it is a PRNG key (None otherwise); None when
    no key result has one: the only shardings jax's own lowering of shardc's trace
    gets. shardc writes the shardings itself, but jax's lowering reads one kind: a
    PRNG key result without a given sharding gets a ``sdy.sharding_constraint``
    (key dims open, key-data dims replicated), with one none. For the module to be
    jax.jit's, the given shardings of key results reach jax's lowering."""
    shardings = [leaf.sharding if leaf.sharding is not None
                 and jax.dtypes.issubdtype(leaf.aval.dtype, jax.dtypes.extended) else None
                 for leaf in results]
    return shardings if any(s is not None for s in shardings) else None
