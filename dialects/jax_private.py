"""The one module of shardc that touches private jax / jaxlib APIs.

Everything here reaches into ``jaxlib.mlir._mlir_libs`` or ``jax._src``, which
carry no compatibility promise. Keeping every such access in this file means a
jax upgrade breaks exactly one module. Imports of ``jax`` happen inside the
functions so that the CLI, which only needs the MLIR context, never pays for
(or depends on) importing jax.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

from jaxlib.mlir import ir

SUPPORTED_JAXLIB = "0.10.2"


def upstream_dialect_registry() -> ir.DialectRegistry:
    """Return a registry holding the upstream dialects jaxlib links (func, arith, ...).

    ``jax.extend.lowering.upstream_dialects`` is this same registry, but
    reaching it that way imports jax (0.5 s), which the CLI must not do.
    """
    from jaxlib.mlir._mlir_libs import _jax_mlir_ext

    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    return registry


def legacy_context_mesh() -> Any | None:
    """Return the mesh of an enclosing (deprecated) ``with mesh:`` block, if any.

    ``jax.sharding.get_mesh()`` only sees ``jax.set_mesh``; the older context
    manager is recorded in ``thread_resources``, which has no public accessor.
    """
    from jax._src import mesh as mesh_lib

    mesh = mesh_lib.thread_resources.env.physical_mesh
    return None if mesh.empty else mesh


# ----------------------------------------------------------------------------
# Tracing
# ----------------------------------------------------------------------------


def host_callbacks_of(jax_lowered: Any) -> tuple[list, list]:
    """Return ``(host_callbacks, keepalive)`` of a ``jax.stages.Lowered``.

    Functions with ``jax.debug.print`` / ``pure_callback`` / ``io_callback``
    lower to custom calls that index into this list; compiling without it
    crashes the process when a callback runs. It is only reachable through
    the private ``_lowering.compile_args``; read it defensively.
    """
    try:
        compile_args = jax_lowered._lowering.compile_args
        return list(compile_args.get("host_callbacks") or []), list(
            compile_args.get("keepalive") or []
        )
    except AttributeError:
        return [], []


# ----------------------------------------------------------------------------
# Compiling and executing through PJRT (jaxlib.xla_client has no stability promise)
# ----------------------------------------------------------------------------


def compile_executable(
    module: ir.Module,
    devices: tuple,
    *,
    propagate_to_parameters: list[bool],
    propagate_to_outputs: list[bool],
    host_callbacks: list,
    compiler_options: tuple[tuple[str, Any], ...] = (),
) -> Any:
    """Compile a StableHLO+sdy module for ``devices`` (the logical device order).

    The module goes in as an ``ir.Module``: jaxlib accepts text and bytecode
    too, but only without host callbacks. ``compiler_options`` are XLA's
    debug options by name, as ``jax.jit(compiler_options=...)`` passes them.
    """
    import numpy as np
    from jax.extend import backend
    from jaxlib import xla_client

    options = backend.get_compile_options(
        num_replicas=1,
        num_partitions=len(devices),
        device_assignment=np.array(devices).reshape(1, -1),
        env_options_overrides=dict(compiler_options) or None,
    )
    build = options.executable_build_options
    build.use_spmd_partitioning = True
    build.use_shardy_partitioner = True
    build.allow_spmd_sharding_propagation_to_parameters = propagate_to_parameters
    build.allow_spmd_sharding_propagation_to_output = propagate_to_outputs
    client = backend.get_backend(devices[0].platform)
    device_list = xla_client.DeviceList(devices)
    if host_callbacks:
        return client.compile_and_load(module, device_list, options, host_callbacks=host_callbacks)
    return client.compile_and_load(module, device_list, options)


def sharding_from_op_sharding(op_sharding: Any, mesh: Any, devices: tuple, ndim: int) -> Any:
    """Read an XLA ``OpSharding`` of a rank-``ndim`` value back as a ``NamedSharding``
    over ``mesh``, or, where no
    ``PartitionSpec`` of it says the same (a mesh axis split unevenly), as the
    ``GSPMDSharding`` jax itself returns then."""
    from jax._src import sharding as jsharding
    from jax._src import sharding_impls
    from jax.extend.sharding import GSPMDSharding
    from jax.sharding import NamedSharding
    from jaxlib import xla_client

    gspmd = GSPMDSharding(xla_client.DeviceList(devices), op_sharding)
    try:
        named = NamedSharding(mesh, sharding_impls.parse_flatten_op_sharding(op_sharding, mesh)[0])
    except (jsharding.IndivisibleError, KeyError, AssertionError, ValueError):
        return gspmd  # jax's parser gives up on tile shapes no spec has
    return named if named.is_equivalent_to(gspmd, ndim) else gspmd


def hlo_sharding_equivalent(sharding: Any, op_sharding: Any, devices: tuple, ndim: int) -> bool:
    """Whether a jax sharding and an XLA ``OpSharding`` on ``devices`` place data alike
    (the memory kind, which an ``OpSharding`` does not carry, is the sharding's)."""
    from jax.extend.sharding import GSPMDSharding
    from jaxlib import xla_client

    compiled = GSPMDSharding(xla_client.DeviceList(devices), op_sharding,
                             memory_kind=sharding.memory_kind)
    return sharding.is_equivalent_to(compiled, ndim)


def fast_array_result_handler(aval: Any, sharding: Any, committed: bool = True) -> Any:
    """jaxlib's C++ handler that wraps output buffers as one global ``jax.Array``."""
    from jaxlib import xla_client

    return xla_client.array_result_handler(aval, sharding, committed=committed,
                                           _skip_checks=True)


def jax_result_handler(aval: Any, sharding: Any, committed: bool = True) -> Any:
    """jax's own global result handler registry (float0, PRNG keys, tokens...)."""
    from jax._src.interpreters import pxla

    return pxla.global_aval_to_result_handler(aval, sharding, committed)


def hide_frames_of(directories: list[str]) -> None:
    """Leave shardc's own frames out of source locations and tracebacks.

    jax names the user's file and line in every op location; without this the
    first non-jax frame is shardc's ``jit`` wrapper. jax registers its own
    files the same way.
    """
    from jax._src import source_info_util, traceback_util

    for directory in directories:
        source_info_util.register_exclusion(directory)
        traceback_util.register_exclusion(directory)


# ----------------------------------------------------------------------------
# shardc's jit as a primitive of jax's traces
# ----------------------------------------------------------------------------


def trace_state_clean() -> bool:
    """Whether no jax transformation or staging trace is active (eager evaluation)."""
    return _core().trace_state_clean()


@functools.cache
def _core() -> Any:
    # Imported on first use (the CLI never imports jax), then kept: this is
    # called on every call of a jitted function.
    from jax._src import core

    return core


def is_tracer(value: Any) -> bool:
    """Whether ``value`` is an abstract value of some enclosing trace."""
    return isinstance(value, _core().Tracer)


def jit_call_parts(traced: Any) -> tuple[dict, list]:
    """The parameters and constants ``jax.jit`` would bind for a ``jax.stages.Traced``.

    ``params`` are exactly the jit primitive's (``jaxpr``, ``in_shardings``,
    ``out_shardings``, ``donated_invars``, ``ctx_mesh``, ...); the constants go
    before the arguments.
    """
    return dict(traced._params), list(traced._consts)


def is_unspecified(sharding: Any) -> bool:
    """Whether a jit parameter's sharding entry is jax's "unspecified" marker."""
    from jax._src import sharding_impls

    return isinstance(sharding, sharding_impls.UnspecifiedValue)


def clone_jit_primitive(name: str, impl: Any) -> Any:
    """A new primitive that jax transforms, stages and lowers exactly like ``jax.jit``'s.

    jax keeps its jit primitive's rules (JVP, linearization, transposition,
    batching, partial evaluation, DCE, remat, lowering, typecheck, printing) in
    module-level registries, and the rules bind the primitive by its global
    name. Every function of the module that defines it is copied with that name
    pointing at the new primitive, and every registry entry of the old one is
    registered for the new one with the copies; ``impl`` then decides what
    executing an equation of the new primitive means.
    """
    import functools
    import sys
    import types

    from jax._src import core, pjit

    original = pjit.jit_p
    primitive = core.Primitive(name)
    namespace = dict(vars(pjit))
    namespace["jit_p"] = primitive
    copies: dict[Any, Any] = {}
    for attr, value in vars(pjit).items():
        if isinstance(value, types.FunctionType) and value.__module__ == pjit.__name__:
            copy = types.FunctionType(value.__code__, namespace, value.__name__,
                                      value.__defaults__, value.__closure__)
            copy.__kwdefaults__ = value.__kwdefaults__
            copy.__qualname__ = value.__qualname__
            copy.__dict__.update(value.__dict__)
            namespace[attr] = copies[value] = copy

    def remap(rule: Any) -> Any:
        if isinstance(rule, functools.partial):
            return functools.partial(remap(rule.func), *map(remap, rule.args),
                                     **{k: remap(v) for k, v in rule.keywords.items()})
        if type(rule).__name__ == "LoweringRuleEntry":
            return type(rule)(remap(rule.rule), rule.inline)
        try:
            return copies.get(rule, rule)
        except TypeError:  # unhashable: not one of the copied functions
            return rule

    for attr, value in vars(original).items():
        if attr not in ("name", "impl"):
            setattr(primitive, attr, remap(value))
    for module in list(sys.modules.values()):
        if not getattr(module, "__name__", "").startswith("jax"):
            continue
        for registry in list(vars(module).values()):
            try:
                if isinstance(registry, dict) and original in registry:
                    registry.setdefault(primitive, remap(registry[original]))
                elif isinstance(registry, set) and original in registry:
                    registry.add(primitive)
            except TypeError:  # a dict or set whose keys cannot be compared with ours
                continue
    primitive.def_impl(impl)
    return primitive


def jaxpr_function(closed_jaxpr: Any) -> Any:
    """A Python function evaluating a closed jaxpr (flat arguments, tuple of results)."""
    from jax._src import core

    evaluate = core.jaxpr_as_fun(closed_jaxpr)
    return lambda *args: tuple(evaluate(*args))


def without_dead_code(traced: Any) -> Any:
    """``traced`` with the equations whose results nothing uses removed (arguments kept).

    jax's own lowering runs this elimination, inside loop and branch bodies too,
    unless told to keep unused arguments; shardc keeps every argument (its
    signature and runtime are per argument), so it asks for the equations alone.
    Dead equations must go before propagation: their shardings would steer it.
    """
    from jax._src import core, stages
    from jax._src.interpreters import partial_eval as pe

    closed = traced._params["jaxpr"]
    used = [True] * len(closed.jaxpr.outvars)
    jaxpr, _, _ = pe.dce_jaxpr_consts(closed.jaxpr, used, instantiate=True)
    params = dict(traced._params, jaxpr=core.ClosedJaxpr(jaxpr, closed.consts))
    return stages.Traced(traced._meta_tys_flat, params, traced._in_tree, traced.out_tree,
                         traced._consts)


def meshes_in(closed_jaxpr: Any) -> list:
    """``(primitive name, mesh)`` for every concrete ``jax.sharding.Mesh`` the equations
    of a jaxpr name in their parameters (a sharding constraint's, a ``shard_map``'s,
    a nested jit's...), inner jaxprs included.

    Walking a jaxpr's equations and their inner jaxprs has no public API.
    """
    import jax
    from jax._src import core

    found, stack = [], [closed_jaxpr.jaxpr]
    while stack:
        jaxpr = stack.pop()
        for eqn in jaxpr.eqns:
            inner = []  # core.jaxprs_in_params, in the same pass over the parameters
            for value in eqn.params.values():
                for item in value if isinstance(value, tuple) else (value,):
                    # Most parameters are plain values, with no mesh to ask for.
                    if type(item) in _PLAIN_PARAMETERS:
                        continue
                    if isinstance(item, core.Jaxpr):
                        inner.append(item)
                    elif isinstance(item, core.ClosedJaxpr):
                        inner.append(item.jaxpr)
                    mesh = getattr(item, "mesh", item)
                    if isinstance(mesh, jax.sharding.Mesh) and mesh.axis_names:
                        found.append((eqn.primitive.name, mesh))
            stack.extend(inner)
    return found


# Parameter types that are no mesh and hold none (nor a jaxpr).
_PLAIN_PARAMETERS = frozenset({bool, int, float, str, type(None)})


def argument_names(fun: Any, args: tuple, kwargs: dict, static_argnums: tuple,
                   static_argnames: tuple) -> tuple[str, ...] | None:
    """jax's names of a call's dynamic argument leaves ("x", "x[0]", "y['a']"), as its
    errors say them; None when it cannot tell."""
    from jax._src import api_util

    try:
        info = api_util.debug_info("jit", fun, args, kwargs, static_argnums=static_argnums,
                                   static_argnames=static_argnames)
    except Exception:  # noqa: BLE001 - names are for messages only
        return None
    return tuple(info.arg_names) if info.arg_names is not None else None


@contextlib.contextmanager
def concrete_mesh_context(mesh: Any) -> Any:
    """``mesh`` as the concrete context mesh, as ``jax.set_mesh`` makes it, also where
    ``jax.set_mesh`` refuses to (while a transformation's trace state is active, e.g.
    executing an equation under ``vmap``)."""
    from jax._src import config

    previous_abstract = config.abstract_mesh_context_manager.swap_local(mesh.abstract_mesh)
    previous = config.device_context.swap_local(mesh)
    try:
        yield
    finally:
        config.device_context.set_local(previous)
        config.abstract_mesh_context_manager.set_local(previous_abstract)


def parse_jit_arguments(fun: Any, **arguments: Any) -> dict[str, Any]:
    """jax.jit's own validation of its arguments (jax's errors), and the completed
    static / donated argument numbers and names (inferred from the signature)."""
    from jax._src import pjit

    info = pjit._parse_jit_arguments(fun, use_resource_env=False, **arguments)
    return {name: getattr(info, name) for name in
            ("static_argnums", "static_argnames", "donate_argnums", "donate_argnames")}


# ----------------------------------------------------------------------------
# The stages API's views of a module (jax.stages.Lowered's counterparts)
# ----------------------------------------------------------------------------


def xla_computation(module: ir.Module) -> Any:
    """The module as XLA's ``XlaComputation`` (the conversion jax's own ``hlo()`` uses)."""
    import io

    from jax._src.lib import _jax

    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    return _jax.mlir.mlir_module_to_xla_computation(buffer.getvalue(), use_tuple_args=False)


def hlo_text(computation: Any, *, debug_info: bool) -> str:
    """An ``XlaComputation`` as HLO text, printed as jax's ``as_text("hlo")`` prints it."""
    from jax._src.lib import hlo

    options = hlo.HloPrintOptions.short_parsable()
    options.print_metadata = debug_info
    return computation.as_hlo_module().to_string(options)


def hlo_cost_analysis(computation: Any) -> Any:
    """XLA's cost analysis of an unoptimized ``XlaComputation`` on the default backend."""
    from jax._src.lib import _jax
    from jax.extend import backend

    return _jax.hlo_module_cost_analysis(backend.get_backend(), computation.as_hlo_module())


def typed_aval(aval: Any, sharding: Any) -> Any:
    """``aval`` (a ``ShapeDtypeStruct``) as a ``ShapedArray`` whose type carries
    ``sharding`` as jax's types do (``None``: no sharding)."""
    from jax._src import core

    return core.update_aval_with_sharding(
        core.ShapedArray(aval.shape, aval.dtype, weak_type=aval.weak_type), sharding)


def args_info(in_tree: Any, avals: list, donated: tuple[bool, ...]) -> Any:
    """``jax.stages.ArgInfo`` per argument leaf (``avals``: ``ShapedArray``s), in
    ``in_tree``'s structure."""
    from jax._src import stages

    return in_tree.unflatten([stages.ArgInfo(aval, d) for aval, d in zip(avals, donated)])


# ----------------------------------------------------------------------------
# Dispatch through jax's C++ fast path
# ----------------------------------------------------------------------------


def dispatch_cache(capacity: int = 4096) -> Any:
    """A cache of jax's C++ jit dispatch: fast paths per function, key and signature."""
    from jax._src.lib import _jax

    return _jax.PjitFunctionCache(capacity=capacity)


def cpp_dispatch(name: str, fun: Any, call: Any, static_argnums: tuple,
                 static_argnames: tuple, key: Any, cache: Any) -> Any:
    """jax's C++ jit dispatch over shardc's executables.

    ``call(*args, **kwargs)`` runs a call the dispatch has no entry for and
    returns ``(outputs, fast_path or None, False)``; with a fast path, later
    calls of the same signature (shapes, dtypes, shardings, committedness,
    static values) execute in C++ without Python. Entries live in ``cache``
    under ``(fun, key)``: dispatches of the same function and key share them.
    """
    from jax._src import tree_util
    from jax._src.interpreters import pxla
    from jax._src.lib import _jax

    return _jax.pjit(name, fun, call, list(static_argnums), list(static_argnames),
                     key, tree_util.dispatch_registry, pxla.cc_shard_arg, cache)


def fast_path(executable: Any, outputs: Any, in_shardings: list, out_shardings: list,
              in_layouts: list | None = None) -> Any:
    """What jax's C++ dispatch needs to run ``executable`` again without Python, or None
    where it cannot (outputs that are not plain arrays). ``in_layouts``: per argument,
    the non-default layout it must be placed in (None: the default)."""
    import jax
    from jax._src.interpreters import pxla
    from jaxlib import xla_client

    flat, tree = jax.tree.flatten(outputs)
    if not all(isinstance(o, xla_client.ArrayImpl) for o in flat) or any(
            jax.dtypes.issubdtype(o.dtype, jax.dtypes.extended) for o in flat):
        return None
    count = len(in_shardings)
    return pxla.MeshExecutableFastpathData(
        executable, tree, list(in_shardings), list(out_shardings), [o.aval for o in flat],
        [o._committed for o in flat], [True] * count,
        list(in_layouts) if in_layouts is not None else [None] * count, [])


def test_event(name: str) -> None:
    """Report one of jax's test events (no-op unless jax's test utilities listen).

    shardc reports the ones whose moments it shares with jax.jit (a call the C++
    dispatch had no entry for: ``jit_cpp_cache_miss``; a compilation:
    ``pxla_cached_compilation``), so tests that count them count shardc too.
    """
    from jax._src import util

    util.test_event(name)


def jax_sharding_error(spec: Any, mesh: Any, shape: tuple, what: str, name: str
                       ) -> Exception | None:
    """The error jax.jit raises for ``spec`` on ``mesh`` given to a value of ``shape``
    (``what``: "pjit arguments" or "pjit outputs", ``name`` its path), or None."""
    from jax._src import core, pjit
    from jax.sharding import NamedSharding

    try:
        sharding = NamedSharding(mesh, spec)
        pjit.pjit_check_aval_sharding([sharding], [core.ShapedArray(tuple(shape), "float32")],
                                      [name], what, allow_uneven_sharding=False)
    except Exception as error:  # noqa: BLE001 - jax's own error, whatever its class
        return error
    return None


@functools.cache
def indivisible_error_class() -> type:
    """jax's class for a sharding that does not divide a value's shape."""
    from jax._src.sharding import IndivisibleError

    return IndivisibleError


# ----------------------------------------------------------------------------
# Layouts (jax's checks of them, and XLA's answers, have no public form)
# ----------------------------------------------------------------------------


def is_default_layout(layout: Any, sharding: Any, aval: Any) -> bool:
    """Whether ``layout`` is the one XLA gives a shard of ``aval`` under ``sharding`` by
    default (``None``, an unspecified sharding, tokens and extended dtypes: yes),
    as jax.jit decides it."""
    from jax._src import core
    from jax._src.interpreters import pxla

    return pxla.is_default_layout(layout, sharding, core.ShapedArray(aval.shape, aval.dtype))


def user_layout_matches(user: Any, xla: Any) -> bool:
    """jax's comparison of a layout given by the user with XLA's (an untiled user
    layout matches any tiling of its dimension order)."""
    from jax._src.interpreters import pxla

    return pxla.is_user_xla_layout_equal(user, xla)


def layout_mode_text(layout: Any, dtype: Any) -> str:
    """The ``mhlo.layout_mode`` text of a concrete layout for a value of ``dtype``, as
    jax's lowering writes it."""
    return str(layout._to_xla_layout(dtype))


def executable_layouts(executable: Any) -> tuple[list, list] | None:
    """The (PJRT) layout of every parameter and output of a loaded executable, or None
    where the backend does not say (``layout_from_pjrt`` reads one as a ``Layout``)."""
    from jax._src.lib import _jax

    try:
        return executable.get_parameter_layouts(), executable.get_output_layouts()
    except _jax.JaxRuntimeError as error:
        message, *_ = error.args
        if isinstance(message, str) and message.startswith("UNIMPLEMENTED"):
            return None
        raise


def layout_from_pjrt(layout: Any) -> Any:
    """A PJRT layout as jax's ``Layout``."""
    from jax._src.layout import Layout

    return Layout.from_pjrt_layout(layout)


def array_layout(value: Any) -> Any | None:
    """A placed array's own (PJRT) layout, cheap to read and compare; None where the
    backend does not say or the array is deleted."""
    # Asked per argument of every call that is not on the C++ fast path: no import
    # here (jax's JaxRuntimeError, raised where the backend has no layouts, is a
    # RuntimeError).
    try:
        if value.is_deleted():
            return None
        return getattr(value, "_pjrt_layout", None)  # PRNG key arrays have none
    except RuntimeError:
        return None


@functools.lru_cache(maxsize=1024)
def default_array_layout(sharding: Any, shape: tuple, dtype: Any) -> Any | None:
    """The (PJRT) layout XLA gives a shard of a ``shape`` array under ``sharding`` by
    default, comparable with ``array_layout``'s; None where the backend does not say."""
    from jax._src.lib import _jax

    device = sharding._device_assignment[0]
    try:
        return device.client.get_default_layout(dtype, sharding.shard_shape(shape), device)
    except _jax.JaxRuntimeError:
        return None
