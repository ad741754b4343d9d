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
import weakref
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
    name: str | None = None,
) -> Any:
    """Compile a StableHLO+sdy module for ``devices`` (the logical device order).

    The module goes in as an ``ir.Module``: jaxlib accepts text and bytecode
    too, but only without host callbacks. ``compiler_options`` are XLA's
    debug options by name, as ``jax.jit(compiler_options=...)`` passes them.
    ``name`` is the program's in jax's logs (``jit(f)``; None: the module's).
    """
    import numpy as np
    from jax._src import compiler, dispatch
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
    # The devices' own client, as jax's: a topology's devices (``jax.experimental.
    # topologies``) belong to a compile-only client, which compiles ahead of time
    # for hardware this host does not have and returns an executable that cannot run.
    client = devices[0].client
    device_list = xla_client.DeviceList(devices)
    extra = {"host_callbacks": host_callbacks} if host_callbacks else {}
    # Logged as jax logs its compilations (WARNING under `jax_log_compiles`), and
    # counted among its backend compile events.
    with dispatch.log_elapsed_time(
            "Finished XLA compilation of {fun_name} in {elapsed_time:.9f} sec",
            fun_name=name or _module_name(module), event=dispatch.BACKEND_COMPILE_EVENT):
        if is_compile_only(client):
            return client.compile(module, executable_devices=device_list,
                                  compile_options=options, **extra)
        # Through jax's persistent compilation cache (`jax_compilation_cache_dir`),
        # read and written as for jax.jit's programs, with its events and logs.
        return compiler.compile_or_get_cached(
            client, module, np.array(devices, dtype=object), options, host_callbacks,
            device_list)


def is_compile_only(client: Any) -> bool:
    """Whether ``client`` only compiles (a topology's, for devices not attached here)."""
    from jaxlib import _jax

    return isinstance(client, _jax.CompileOnlyPyClient)


def _module_name(module: ir.Module) -> str:
    name = module.operation.attributes["sym_name"] if "sym_name" in \
        module.operation.attributes else None
    return ir.StringAttr(name).value if name is not None else "<module>"


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


def compiled_sharding(op_sharding: Any, devices: tuple, aval: Any,
                      memory_kind: str | None = None) -> Any:
    """XLA's sharding of one compiled value as jax.jit reads it back: a ``GSPMDSharding``
    over ``devices`` (replicated where one device ran no partitioner, or XLA said
    nothing) in ``memory_kind``, a PRNG key's the logical one of its data's (``aval``:
    its type)."""
    from jax._src import dtypes, sharding_impls
    from jax.extend.sharding import GSPMDSharding
    from jaxlib import xla_client

    device_list = xla_client.DeviceList(tuple(devices))
    if len(devices) == 1 or op_sharding is None:
        gspmd = GSPMDSharding.get_replicated(device_list, memory_kind=memory_kind)
    else:
        gspmd = GSPMDSharding(device_list, op_sharding, memory_kind=memory_kind)
    if dtypes.issubdtype(aval.dtype, dtypes.extended):
        return sharding_impls.logical_sharding(aval.shape, aval.dtype, gspmd)
    return gspmd


def is_gspmd_sharding(sharding: Any) -> bool:
    """Whether ``sharding`` is XLA's form (``GSPMDSharding``), not one a user writes."""
    from jax.extend.sharding import GSPMDSharding

    return isinstance(sharding, GSPMDSharding)


def named_via_mesh(gspmd: Any, mesh: Any) -> Any:
    """A ``GSPMDSharding`` as the ``NamedSharding`` over ``mesh`` jax reads it as (its
    spec without trailing replicated dimensions); jax's ``IndivisibleError`` or other
    errors where no spec over ``mesh`` says the same."""
    from jax._src import sharding_impls

    return sharding_impls._gspmd_to_named_sharding_via_mesh(gspmd, mesh)


def spec_of_type(spec: Any, ndim: int) -> Any:
    """A ``PartitionSpec`` as jax writes it into a rank-``ndim`` type: unconstrained
    entries unsharded, trailing dimensions named (``None``)."""
    return spec._normalized_spec_for_aval(ndim)


def hlo_sharding_equivalent(sharding: Any, op_sharding: Any, devices: tuple, ndim: int) -> bool:
    """Whether a jax sharding and an XLA ``OpSharding`` on ``devices`` place data alike
    (the memory kind, which an ``OpSharding`` does not carry, is the sharding's)."""
    from jax.extend.sharding import GSPMDSharding
    from jaxlib import xla_client

    compiled = GSPMDSharding(xla_client.DeviceList(devices), op_sharding,
                             memory_kind=sharding.memory_kind)
    return sharding.is_equivalent_to(compiled, ndim)


def hlo_sharding(sharding: Any, ndim: int) -> Any:
    """The XLA ``HloSharding`` of a jax sharding for a rank-``ndim`` value: its tiling over
    the positions of its device list, whatever those devices are."""
    return sharding._to_xla_hlo_sharding(ndim)


def same_hlo_sharding(first: Any, second: Any) -> bool:
    """Whether two ``HloSharding``s tile alike (jax.jit's test for a committed argument
    against the sharding given for it)."""
    from jax._src import op_shardings

    return op_shardings.are_hlo_shardings_equal(first, second)


def fast_array_result_handler(aval: Any, sharding: Any, committed: bool = True) -> Any:
    """jaxlib's C++ handler that wraps output buffers as one global ``jax.Array``."""
    from jaxlib import xla_client

    return xla_client.array_result_handler(aval, sharding, committed=committed,
                                           _skip_checks=True)


def physical_type(aval: Any) -> Any:
    """The ``ShapeDtypeStruct`` an extended-dtype value (a PRNG key, any other
    ``dtypes.ExtendedDType``) has inside a module: its element's physical shape
    appended, its physical dtype (jax's ``core.physical_aval``)."""
    import jax
    from jax._src import core

    element = core.physical_element_aval(aval.dtype)
    return jax.ShapeDtypeStruct((*aval.shape, *element.shape), element.dtype)


def physical_sharding(aval: Any, sharding: Any) -> Any:
    """The sharding of an extended-dtype value's physical data (``physical_type``)
    given its own (jax's ``sharding_impls.physical_sharding``: the element's
    dimensions unsharded)."""
    from jax._src import core, sharding_impls

    return sharding_impls.physical_sharding(core.ShapedArray(aval.shape, aval.dtype), sharding)


def physical_data(value: Any) -> Any:
    """The array of physical elements an extended-dtype ``jax.Array`` holds (a PRNG
    key array's key data, an ``EArray``'s data), as jax's argument handlers pass it."""
    from jax._src import earray
    from jax._src.random import prng

    if isinstance(value, prng.PRNGKeyArray):
        return value._base_array
    if isinstance(value, earray.EArray):
        return value._data
    raise TypeError(f"no physical data known for an array of type {type(value)}")


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


def check_jax_arrays(tree: Any) -> None:
    """Raise jax.jit's ``TypeError`` for a ``jax.Array`` leaf that is no JAX type (a
    string array): jax.jit checks a call's dynamic arguments so after tracing, before
    lowering. Only arrays: another leaf that is no JAX type fails its abstraction
    first, with jax's error for that (``signature.argument_signature``)."""
    import jax
    from jax._src import dispatch

    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array):
            dispatch.check_arg(leaf)


def filter_raised(error: Exception) -> None:
    """Give ``error``, caught where it leaves jax's API, the traceback jax's
    ``api_boundary`` gives it (``jax_traceback_filtering``: jax's and shardc's frames
    removed, with a note or an ``UnfilteredStackTrace`` cause, or ``__tracebackhide__``
    set); the catcher then re-raises it with a bare ``raise``, which adds no frame.
    An entry point that catches and re-raises so needs no wrapper: one frame fewer per
    call, as jax.jit's C++ calls have none."""
    from jax._src import traceback_util as tb_util

    mode = tb_util._filtering_mode()
    if tb_util._is_under_reraiser(error) or mode == "off":
        return
    tb = error.__traceback__
    if mode == "tracebackhide":
        tb_util._add_tracebackhide_to_hidden_frames(tb)
        return
    if tb is None:
        raise TypeError("Traceback is None") from error
    error.with_traceback(tb_util.filter_traceback(tb))
    # One of jax's own boundaries below shardc's (``jit(...).trace``, which shardc
    # calls) has already told the user, in this mode's form: jax says it once, as its
    # boundaries nested under an outer one stay silent.
    note = "--------------------\n" + tb_util._simplified_tb_msg
    if mode == "quiet_remove_frames":
        if note not in getattr(error, "__notes__", ()):
            error.add_note(note)
        return
    if mode != "remove_frames":
        raise ValueError(f"JAX_TRACEBACK_FILTERING={mode} is not a valid value.")
    if isinstance(error.__cause__, tb_util.UnfilteredStackTrace):
        return  # (its traceback, the whole stack, already runs through shardc's frames)
    message = f"{tb_util.format_exception_only(error)}\n\n{tb_util._jax_message_append}"
    unfiltered = tb_util.UnfilteredStackTrace(message)
    unfiltered.with_traceback(tb_util._add_call_stack_frames(tb))
    unfiltered.__cause__ = error.__cause__
    unfiltered.__context__ = error.__context__
    unfiltered.__suppress_context__ = error.__suppress_context__
    error.__cause__ = unfiltered
    error.__context__ = None


def jit_trace_inputs(jitted: Any, args: Any, kwargs: dict) -> tuple[Any, tuple]:
    """What ``jitted.trace(*args, **kwargs)`` traces from, as ``(infer, inputs)``:
    ``infer(*inputs)`` is jax's trace (its cached one if any), for a caller that runs
    it from its own frame, as jax.jit's cache-miss handler does, without the
    frames of ``trace``; ``jit_traced`` makes its result what ``trace`` returns."""
    from jax._src import pjit

    return pjit._infer_params, (jitted._fun, jitted._jit_info, tuple(args), kwargs)


def jit_traced(params: Any, args_flat: Any) -> Any:
    """The ``jax.stages.Traced`` of what ``jit_trace_inputs``'s ``infer`` returned
    (as jax's ``jit_trace`` makes it)."""
    from jax._src import pjit, stages

    return stages.Traced(list(map(pjit.convert_to_metaty, args_flat)), params.params,
                         params.in_tree, params.out_tree, params.consts)


def api_boundary(fun: Any) -> Any:
    """``fun`` as an entry point of jax's API: an exception raised below it leaves
    with a traceback without jax's and shardc's frames, in the form
    ``jax_traceback_filtering`` asks for (a note, an ``UnfilteredStackTrace``
    cause, ``__tracebackhide__``), as from jax.jit's own entry points."""
    from jax._src import traceback_util

    return traceback_util.api_boundary(fun)


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


@functools.cache
def _config() -> Any:
    # As ``_core``: imported on first use, then kept (read on every call).
    from jax._src import config

    return config


def trace_context() -> Any:
    """The configuration jax keys its traces and executables on (precision, rank
    promotion, ``no_execution``, context meshes...): what was traced under one value
    of it is not the program for another."""
    return _config().trace_context()


def default_device() -> Any:
    """The device jax runs a program on when nothing else decides (no sharding, no
    committed argument, no context mesh): ``jax.default_device``'s, else the first
    local one."""
    from jax._src.interpreters import pxla

    return pxla.get_default_device()


def array_type() -> type:
    """The type of jax's concrete arrays (``jax.Array``'s implementation)."""
    from jaxlib import xla_client

    return xla_client.ArrayImpl


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


def has_kernel_refs(leaves: list) -> bool:
    """Whether any of these values is a ``Ref`` in a Pallas memory space: a kernel's,
    which exists only while a Pallas kernel is traced."""
    for leaf in leaves:
        space = getattr(_core().typeof(leaf), "memory_space", None)
        if space is not None and type(space).__module__.startswith("jax._src.pallas"):
            return True
    return False


def jax_jit_primitive() -> Any:
    """jax's own jit primitive (``jit_p``)."""
    from jax._src import pjit

    return pjit.jit_p


def has_high_types(traced: Any) -> bool:
    """Whether a ``jax.stages.Traced``'s arguments, results or closed-over values have
    jax's high-level types (hijax), or its high-level primitives take ``Ref``
    arguments. (High-level primitives between arrays alone jax's lowering turns into
    array programs itself.)"""
    from jax._src.state.types import AbstractRef

    jaxpr = traced.jaxpr
    return (any(aval.is_high for aval in (*jaxpr.in_avals, *jaxpr.out_avals))
            or any(map(is_high_value, traced._consts))
            # Such primitives writing a Ref argument: the rule writes it back.
            or (jaxpr.jaxpr.is_high
                and any(isinstance(aval, AbstractRef) for aval in jaxpr.in_avals)))


def tracing_leaves(tree: Any) -> list:
    """The leaves of ``tree`` as jax's tracing flattens a jitted function's arguments
    (``tracing_leaves_with_paths``)."""
    from jax._src import tree_util

    return tree_util.tracing_registry.flatten(tree)[0]


def tracing_leaves_with_paths(tree: Any) -> list[tuple[tuple, Any]]:
    """(key path, leaf) of each leaf of ``tree`` as jax's tracing flattens a jitted
    function's arguments: a view of a ``Ref`` (``ref.at[2:7]``, a ``TransformedRef``:
    a leaf to the public registry, with no type of its own) is its ``Ref`` and its
    indexers' array leaves; every other value as ``jax.tree_util`` flattens it."""
    from jax._src import tree_util

    return tree_util.tracing_registry.flatten_with_path(tree)[0]


def is_high_value(value: Any) -> bool:
    """Whether ``value``'s type is one of jax's high-level types (a hijax ``Box``, a
    type registered with ``hijax.HiType``...)."""
    try:
        return _core().typeof(value).is_high
    except (TypeError, OverflowError):  # no value jax has a type for: the lowering says
        return False


def check_no_escaped_tracers(traced: Any) -> None:
    """jax.jit's check of a program about to run outside any transformation: a
    constant its trace closed over that is a tracer escaped another trace (a side
    effect leaked it), jax's ``UnexpectedTracerError`` naming where it was made."""
    from jax._src import core

    if core.trace_state_clean():
        core.check_eval_args(traced._consts)


def is_unspecified(sharding: Any) -> bool:
    """Whether a jit parameter's sharding entry is jax's "unspecified" marker."""
    from jax._src import sharding_impls

    return isinstance(sharding, sharding_impls.UnspecifiedValue)


# jax modules that register rules for the jit primitive but that ``import jax`` does
# not import: imported with the clone.
_MODULES_WITH_JIT_RULES = (
    "jax._src.checkify", "jax.experimental.key_reuse._core", "jax.experimental.jet")
# Per clone, its registry copier and the modules whose registries it has copied: a
# jax module imported later (jax's sparse transform, Pallas's fuser: too slow or too
# rarely used to import for every user) has its jit rules copied once imported
# (``copy_late_jit_rules``).
_late_rules: list[tuple[Any, set[str]]] = []
# How many modules were loaded when the clones last copied rules.
_modules_seen = [0]


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
    import importlib
    import sys
    import types

    from jax._src import core, pjit

    # Modules jax imports only when used, whose registries hold jit rules: imported
    # now, so that their rules are copied too (checkify's, key reuse's, jet's).
    for module_name in _MODULES_WITH_JIT_RULES:
        importlib.import_module(module_name)
    original = pjit.jit_p
    primitive = core.Primitive(name)
    namespace = dict(vars(pjit))
    namespace["jit_p"] = primitive
    # What a rule of another module reads as ``pjit``: jax's module with our primitive.
    pjit_view = types.ModuleType(pjit.__name__)
    pjit_view.__dict__.update(namespace)
    copies: dict[Any, Any] = {}
    for attr, value in vars(pjit).items():
        if isinstance(value, types.FunctionType) and value.__module__ == pjit.__name__:
            copy = types.FunctionType(value.__code__, namespace, value.__name__,
                                      value.__defaults__, value.__closure__)
            copy.__kwdefaults__ = value.__kwdefaults__
            copy.__qualname__ = value.__qualname__
            copy.__dict__.update(value.__dict__)
            namespace[attr] = copies[value] = copy

    def rebound(rule: types.FunctionType) -> types.FunctionType:
        """A rule of another module that binds jax's jit primitive through its globals
        (``pjit.jit_p.bind``, as checkify's and jet's do), copied to bind ours."""
        globals_ = rule.__globals__
        names = {k: pjit_view if v is pjit else primitive for k, v in globals_.items()
                 if v is pjit or v is original}
        if not names:
            return rule
        copy = types.FunctionType(rule.__code__, {**globals_, **names}, rule.__name__,
                                  rule.__defaults__, rule.__closure__)
        copy.__kwdefaults__ = rule.__kwdefaults__
        copy.__qualname__ = rule.__qualname__
        copy.__dict__.update(rule.__dict__)
        return copy

    def remap(rule: Any) -> Any:
        if isinstance(rule, functools.partial):
            return functools.partial(remap(rule.func), *map(remap, rule.args),
                                     **{k: remap(v) for k, v in rule.keywords.items()})
        if type(rule).__name__ == "LoweringRuleEntry":
            return type(rule)(remap(rule.rule), rule.inline)
        try:
            copied = copies.get(rule)
        except TypeError:  # unhashable: not one of the copied functions
            return rule
        if copied is not None:
            return copied
        if isinstance(rule, types.FunctionType) and rule.__module__ != pjit.__name__:
            return rebound(rule)
        return rule

    def copy_registries(modules: list[types.ModuleType]) -> None:
        for module in modules:
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

    for attr, value in vars(original).items():
        if attr not in ("name", "impl"):
            setattr(primitive, attr, remap(value))
    loaded = dict(sys.modules)
    copy_registries(list(loaded.values()))
    _late_rules.append((copy_registries, set(loaded)))
    primitive.def_impl(impl)
    _report_intermediate_shardings(primitive)
    return primitive


def _report_intermediate_shardings(primitive: Any) -> None:
    """jax's enclosing jit takes its devices from the shardings of the equations inside
    it too (``dispatch.get_intermediate_shardings``), among them the argument and
    result shardings of its jit primitive's equations, which it recognizes by
    identity: the clone's equations are reported as jax's are, so that a jit with
    shardings nested in ``jax.jit`` places the enclosing program on their devices."""
    from jax._src import dispatch

    reported = dispatch.get_intermediate_shardings  # (recurses through the module's name)

    def get_intermediate_shardings(jaxpr: Any) -> Any:
        out = reported(jaxpr)
        for eqn in jaxpr.eqns:
            if eqn.primitive is primitive:
                source_info = dispatch.SourceInfo(eqn.source_info, eqn.primitive.name)
                out.extend((s, source_info) for s in (*eqn.params["in_shardings"],
                                                      *eqn.params["out_shardings"]))
        return out

    dispatch.get_intermediate_shardings = get_intermediate_shardings


def copy_late_jit_rules() -> None:
    """Give the cloned jit primitives the jit rules of the jax modules imported since
    they were made: called before binding one, so that, e.g., ``sparsify`` of a
    function calling a shardc jit, or Pallas's fuser pulling block specs through
    one, finds its rule. Nothing to do (one length check) when no module was
    imported since the last call."""
    import sys

    if len(sys.modules) == _modules_seen[0]:
        return
    loaded = dict(sys.modules)
    _modules_seen[0] = len(loaded)
    for copy_registries, seen in _late_rules:
        new = [name for name in loaded if name not in seen]
        seen.update(new)
        copy_registries([loaded[name] for name in new])


def jaxpr_function(closed_jaxpr: Any) -> Any:
    """A Python function evaluating a closed jaxpr (flat arguments, tuple of results)."""
    from jax._src import core

    evaluate = core.jaxpr_as_fun(closed_jaxpr)
    return lambda *args: tuple(evaluate(*args))


def source_position(eqn: Any) -> str:
    """The user's file, line and column an equation was traced from; jax gives the
    equations a transpose writes the position of the equation they transpose."""
    from jax._src import source_info_util

    return source_info_util.summarize(eqn.source_info)


def equation_context(eqn: Any) -> Any:
    """The context jax's own ``eval_jaxpr`` binds an equation in: its source location
    and name stack (what the lowering writes as the op's location) and its ``ctx``."""
    import contextlib

    from jax._src import source_info_util

    stack = contextlib.ExitStack()
    stack.enter_context(source_info_util.user_context(
        eqn.source_info.traceback,
        name_stack=source_info_util.current_name_stack() + eqn.source_info.name_stack))
    stack.enter_context(eqn.ctx.manager)
    return stack


def without_dead_code(traced: Any, in_shardings: list | None = None,
                      out_shardings: list | None = None, keep_unused: bool = True) -> Any:
    """``traced`` with the equations whose results nothing uses removed (arguments kept).

    jax's own lowering runs this elimination, inside loop and branch bodies too,
    unless told to keep unused arguments; shardc keeps every argument (its
    signature and runtime are per argument), so it asks for the equations alone.
    Dead equations must go before propagation: their shardings would steer it.
    ``in_shardings`` and ``out_shardings`` (per argument / result, None:
    unspecified) are the jit's shardings jax lowers with, as if given to ``jax.jit``.
    Without ``keep_unused`` an argument the program does not read is not donated:
    jax prunes it (``pxla._dce_jaxpr``) with its donation, so the caller's array
    stays live.

    A program whose equations include jax's high-level primitives between arrays
    (``jax_scan3``'s scan, which carries through ``Ref``s) is taken in its low-level
    form first, as jax's lowering takes it (``Traced.lojax``): such an equation
    declares no effects, so only its low-level form shows what it writes.
    """
    from jax._src import core, sharding_impls, stages
    from jax._src.interpreters import partial_eval as pe

    if traced._params["jaxpr"].jaxpr.is_high:
        lo = traced.lojax
        traced = stages.Traced(lo._meta_tys_flat, lo._params, lo._in_tree, lo.out_tree,
                               lo._consts)
    closed = traced._params["jaxpr"]
    used = [True] * len(closed.jaxpr.outvars)
    jaxpr, _, _ = pe.dce_jaxpr_consts(closed.jaxpr, used, instantiate=True)
    params = dict(traced._params, jaxpr=core.ClosedJaxpr(jaxpr, closed.consts))
    if not keep_unused and all(core.is_constant_shape(getattr(a, "shape", ()))
                               for a in closed.in_avals):
        read = {v for eqn in jaxpr.eqns for v in eqn.invars if isinstance(v, core.Var)}
        read.update(v for v in jaxpr.outvars if isinstance(v, core.Var))
        params["donated_invars"] = tuple(
            donated and var in read
            for donated, var in zip(params["donated_invars"], jaxpr.invars))
    if in_shardings is not None:
        params["in_shardings"] = tuple(sharding_impls.UNSPECIFIED if s is None else s
                                       for s in in_shardings)
    if out_shardings is not None:
        params["out_shardings"] = tuple(sharding_impls.UNSPECIFIED if s is None else s
                                        for s in out_shardings)
    return stages.Traced(traced._meta_tys_flat, params, args_info_tree(traced._in_tree),
                         traced.out_tree, traced._consts)


def args_info_tree(in_tree: Any) -> Any:
    """The arguments' tree for jax's ``Lowered``, which unflattens one ``ArgInfo`` record
    per leaf into it: a tree whose nodes refuse such leaves (a dataclass checking its
    fields are arrays when built, as ``StatefulPRNG`` does) takes the arguments flat
    (jax.jit's own call never builds a ``Lowered``, so such a function runs there)."""
    import jax
    import numpy as np
    from jax._src import core, stages

    probe = stages.ArgInfo(core.ShapedArray((), np.float32), False)
    try:
        in_tree.unflatten([probe] * in_tree.num_leaves)
    except Exception:  # the node's own unflatten (user code) refused them, whatever its error
        return jax.tree.structure((tuple(range(in_tree.num_leaves)), {}))
    return in_tree


def meshes_in(closed_jaxpr: Any) -> list:
    """``(primitive name, mesh)`` for every concrete ``jax.sharding.Mesh`` the equations
    of a jaxpr name in their parameters (a sharding constraint's, a ``shard_map``'s,
    a nested jit's...), inner jaxprs included.
    """
    import jax

    found = []
    for eqn, item in _equation_parameters(closed_jaxpr):
        mesh = getattr(item, "mesh", item)
        if isinstance(mesh, jax.sharding.Mesh) and mesh.axis_names:
            found.append((eqn.primitive.name, mesh))
    return found


def callback_shardings_in(closed_jaxpr: Any) -> list:
    """The shardings given to the host callbacks of a jaxpr (``pure_callback(...,
    sharding=)``, ``io_callback(..., sharding=)``), inner jaxprs included."""
    return [item for eqn, item in _equation_parameters(closed_jaxpr)
            if eqn.primitive.name in ("pure_callback", "io_callback")
            and eqn.params.get("sharding") is item]


def _equation_parameters(closed_jaxpr: Any) -> tuple:
    """``(equation, parameter)`` for every parameter value of every equation of a jaxpr
    (tuples unpacked), inner jaxprs included."""
    return _equations_read(closed_jaxpr.jaxpr)[1]


def primitive_names(closed_jaxpr: Any) -> frozenset[str]:
    """The names of the primitives a jaxpr's equations bind, inner jaxprs included."""
    return _equations_read(closed_jaxpr.jaxpr)[0]


# A jaxpr's equations as read by ``_equations_read``, while the jaxpr lives: a lowering
# asks of the one it traced for its meshes, callbacks and primitives, each in a walk
# of its own otherwise. Jaxprs are immutable.
_EQUATIONS_READ: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _equations_read(top: Any) -> tuple[frozenset[str], tuple]:
    """The primitive names and ``(equation, parameter)`` pairs of ``top`` (a jaxpr),
    inner jaxprs included, from one walk. Walking a jaxpr's equations and their inner
    jaxprs has no public API."""
    found = _EQUATIONS_READ.get(top)
    if found is not None:
        return found
    from jax._src import core

    names: set[str] = set()
    parameters = []
    stack = [top]
    while stack:
        jaxpr = stack.pop()
        for eqn in jaxpr.eqns:
            names.add(eqn.primitive.name)
            for value in eqn.params.values():
                for item in value if isinstance(value, tuple) else (value,):
                    # Most parameters are plain values, with no mesh to ask for.
                    if type(item) in _PLAIN_PARAMETERS:
                        continue
                    if isinstance(item, core.Jaxpr):
                        stack.append(item)
                    elif isinstance(item, core.ClosedJaxpr):
                        stack.append(item.jaxpr)
                    parameters.append((eqn, item))
    found = _EQUATIONS_READ[top] = (frozenset(names), tuple(parameters))
    return found


def with_context_mesh(traced: Any, mesh: Any) -> Any:
    """``traced`` (a ``jax.stages.Traced``) lowered by jax with ``mesh`` as its context
    mesh, unless it was traced under one: jax's lowering then counts that mesh's
    devices (its ``mhlo.num_partitions`` and the device count lowering rules see)."""
    from jax._src import stages

    if not traced._params["ctx_mesh"].empty:
        return traced
    return stages.Traced(traced._meta_tys_flat, dict(traced._params, ctx_mesh=mesh),
                         traced._in_tree, traced.out_tree, traced._consts)


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


def flatten_shardings(what: str, treedef: Any, shardings: Any, tupled_args: bool) -> tuple:
    """jax.jit's reading of a sharding pytree prefix against the flattened values'
    ``treedef``: one entry per leaf. A ``None`` in ``shardings`` is a leaf (unspecified)
    that covers a whole subtree, and a ``None`` among the values is a subtree without
    leaves, which any prefix entry covers. Raises jax's ``ValueError`` (``what``:
    "pjit in_shardings" / "pjit out_shardings") for a tree that is no prefix."""
    from jax._src import api_util

    return api_util.flatten_axis_resources(what, treedef, shardings, tupled_args)


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


def memory_kind_of_space(space: Any) -> str:
    """The memory kind a sharding names for the memory a type says (``jax.memory.Space``)."""
    from jax._src import core

    return core.mem_space_to_kind(space)


def space_of_memory_kind(kind: str | None) -> Any:
    """The memory (``jax.memory.Space``) jax's types say for a sharding's memory kind."""
    from jax._src import core

    return core.mem_kind_to_space(kind)


def typed_aval(aval: Any, sharding: Any, *, canonical: bool = True,
               memory_space: Any = None) -> Any:
    """``aval`` (a ``ShapeDtypeStruct``) as a ``ShapedArray`` whose type carries
    ``sharding`` as jax's types do (``None``: no sharding), its dtype canonical as
    jax traces it (``float64`` is ``float32`` without x64) unless not ``canonical``
    (a traced result's type is what it is: made under ``jax.enable_x64()``, 64-bit),
    and ``memory_space`` where given (else the sharding's memory, whatever its class:
    a result in host memory on one device has a host type, as jax traced it)."""
    from jax._src import core, dtypes
    from jax.sharding import NamedSharding

    dtype = (dtypes.canonicalize_dtype(aval.dtype, allow_extended_dtype=True) if canonical
             else aval.dtype)
    typed = core.update_aval_with_sharding(
        core.ShapedArray(aval.shape, dtype, weak_type=aval.weak_type), sharding)
    if memory_space is None and sharding is not None and not isinstance(sharding, NamedSharding):
        memory_space = core.mem_kind_to_space(sharding.memory_kind)
    return typed if memory_space is None else typed.update(memory_space=memory_space)


def pytree_mismatch_message(expected: Any, given: Any) -> str:
    """jax's words for a compiled function called with arguments of another pytree
    structure (``jax.stages.Compiled``'s), each mismatch with its path."""
    from jax._src import tree_util

    errors = list(tree_util.equality_errors_pytreedef(given, expected))
    lines = ["Function compiled with input pytree does not match the input pytree it was "
             f"called with. There are {len(errors)} mismatches, including:"]
    for path, thing1, thing2, explanation in errors:
        first, *rest = path
        base = ["args", "kwargs"][first.idx]
        lines.append(f"    * at {base}{tree_util.keystr(tuple(rest))}, seen {thing2} but now "
                     f"given {thing1}, so {explanation}")
    return "\n".join(lines)


def args_info(in_tree: Any, avals: list, donated: tuple[bool, ...]) -> Any:
    """``jax.stages.ArgInfo`` per argument leaf (``avals``: ``ShapedArray``s), in
    ``in_tree``'s structure."""
    from jax._src import stages

    return args_info_tree(in_tree).unflatten(
        [stages.ArgInfo(aval, d) for aval, d in zip(avals, donated)])


def compiled_call_params(executable: Any, no_kwargs: bool, in_tree: Any, out_tree: Any, *,
                         const_args: list) -> Any:
    """jax's parameters of a ``jax.stages.Compiled``'s calls (``CompiledCallParams``:
    ``const_args`` are the constants passed in front of the arguments)."""
    from jax._src import stages

    return stages.CompiledCallParams(executable, no_kwargs, in_tree, out_tree, const_args,
                                     None, None)


def serialized_executable(executable: Any) -> bytes:
    """XLA's loaded executable as bytes its client loads again
    (``deserialized_executable``)."""
    return executable.client.serialize_executable(executable)


def deserialized_executable(client: Any, serialized: bytes, devices: tuple) -> Any:
    """An executable ``serialized_executable`` wrote, loaded by ``client`` onto
    ``devices`` (the program's, in its partition order)."""
    from jax._src.lib import xla_client

    return client.deserialize_executable(
        serialized, executable_devices=xla_client.DeviceList(tuple(devices)))


def with_embedded_constants(parameters: Any) -> Any:
    """jax's lowering parameters (``mlir.LoweringParameters``; None: jax's defaults)
    with the closed-over constants kept inside the module, not hoisted into leading
    arguments as ``jax_use_simplified_jaxpr_constants`` set at start-up asks:
    shardc's programs take the call's arguments alone (``const_args`` stay empty),
    as ``jax.export``'s do."""
    import dataclasses

    from jax._src.interpreters import mlir

    if parameters is None:
        parameters = mlir.LoweringParameters()
    if not parameters.hoist_constants_as_args:
        return parameters
    return dataclasses.replace(parameters, hoist_constants_as_args=False)


def jit_lowering(jax_lowered: Any) -> Any:
    """The ``MeshComputation`` behind a ``jax.stages.Lowered`` of jit (its ``_lowering``)."""
    return jax_lowered._lowering


def lowering_name(jax_lowering: Any) -> str | None:
    """The program's name in jax's compile logs (``jit(f)``), from its ``MeshComputation``."""
    return getattr(jax_lowering, "_name", None)


def lowering_with_module(jax_lowering: Any, module: ir.Module, *, in_shardings: list,
                         out_shardings: list, num_devices: int, devices: tuple | None) -> Any:
    """A copy of jax's ``MeshComputation`` of a jit that holds ``module`` and these
    shardings (``None``: unspecified) instead of jax's.

    ``jax.export`` reads a lowering's module, shardings and device count from
    this private class alone (it refuses any other); jax's avals, effects,
    shape-polymorphism state and platforms stay as they are.
    """
    import copy

    from jax._src import core, sharding_impls
    from jax._src.interpreters import pxla

    def jax_sharding(sharding: Any) -> Any:
        return sharding_impls.UNSPECIFIED if sharding is None else sharding

    def typed(avals: Any, shardings: list) -> tuple:
        # The types carry the shardings' meshes, as jax's lowering of them would.
        return tuple(aval if s is None else core.update_aval_with_sharding(aval, s)
                     for aval, s in zip(avals, shardings))

    compile_args = jax_lowering.compile_args
    lowering = copy.copy(jax_lowering)
    lowering._hlo = module
    lowering._executable = None
    lowering.compile_args = dict(
        compile_args,
        in_shardings=tuple(jax_sharding(s) for s in in_shardings),
        out_shardings=tuple(jax_sharding(s) for s in out_shardings),
        global_in_avals=typed(compile_args["global_in_avals"], in_shardings),
        global_out_avals=typed(compile_args["global_out_avals"], out_shardings),
        num_devices=num_devices)
    if devices is not None:
        lowering._device_list = pxla._create_device_list(tuple(devices))
    return lowering


def has_dimension_variables(jax_lowered: Any) -> bool:
    """Whether a ``jax.stages.Lowered``'s arguments have symbolic shapes (the module
    takes their dimension variables)."""
    state = jax_lowered._lowering.compile_args.get("shape_poly_state")
    return state is not None and bool(state.dim_vars)


def refined_module(jax_lowered: Any) -> ir.Module:
    """The module of a ``jax.stages.Lowered`` with static argument shapes whose body
    still has symbolic ones (it calls a ``jax.export.Exported`` lowered for
    symbolic shapes), refined to static shapes as jax refines it before
    compiling; any other module as it is. A module whose arguments have symbolic
    shapes (one being exported) stays as it is."""
    from jax._src.interpreters import mlir

    module = jax_lowered.compiler_ir("stablehlo")
    state = jax_lowered._lowering.compile_args.get("shape_poly_state")
    if state is None or not state.uses_dim_vars or state.dim_vars:
        return module
    return mlir.refine_polymorphic_shapes(module)


# ----------------------------------------------------------------------------
# Dispatch through jax's C++ fast path
# ----------------------------------------------------------------------------


def dispatch_cache(capacity: int = 4096) -> Any:
    """A cache of jax's C++ jit dispatch: fast paths per function, key and signature."""
    from jax._src.lib import _jax

    return _jax.PjitFunctionCache(capacity=capacity)


def configured_dispatch_cache() -> Any:
    """The dispatch cache a user set for the jits made now (``jax_jit_cpp_cache_obj``,
    e.g. a small one to bound what they keep), or None; as jax.jit, only outside a
    trace: a jit made while tracing keeps to the default."""
    cache = _config().jax_jit_cpp_cache_obj.value
    return cache if cache is not None and trace_state_clean() else None


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

    dispatch = _jax.pjit(name, fun, call, list(static_argnums), list(static_argnames),
                         key, tree_util.dispatch_registry, pxla.cc_shard_arg, cache)
    # Under jax_debug_nans / jax_debug_infs the C++ fast path hands its outputs to
    # jax's post hook, which re-runs ``_fun`` de-optimized to name the bad operation.
    dispatch._fun = fun
    return dispatch


def debug_special_values() -> bool:
    """Whether jax_debug_nans or jax_debug_infs is on: jit's outputs are checked for
    NaNs / infinities."""
    from jax._src import dispatch

    return dispatch.needs_check_special()


def debug_nans() -> bool:
    return _config().debug_nans.value


def check_special_outputs(fun: Any, args: tuple, kwargs: dict, outputs: Any) -> None:
    """jax.jit's check of a call's outputs under jax_debug_nans / jax_debug_infs: on a
    NaN (infinity) it calls ``fun`` de-optimized on the same arguments, so that the
    operation making it raises ``FloatingPointError``, or raises jax's error saying
    that the de-optimized function made none."""
    import jax
    from jax._src import api_util, dispatch
    from jax._src.pjit import jit_p

    buffers = [shard.data for leaf in jax.tree.leaves(outputs)
               if hasattr(leaf, "addressable_shards") for shard in leaf.addressable_shards]
    try:
        dispatch.check_special(jit_p.name, buffers)
    except api_util.InternalFloatingPointError as e:
        api_util.maybe_recursive_nan_check(e, fun, args, kwargs)


def compiled_dispatch(name: str, call: Any) -> Any:
    """jax's C++ dispatch for one compiled program, as ``jax.stages.Compiled`` calls
    through: ``call(*args, **kwargs)`` runs a call whose signature it has not seen
    and returns ``(outputs, fast_path or None, False)``; the entries are its own."""
    from jax._src import tree_util
    from jax._src.interpreters import pxla
    from jax._src.lib import _jax

    return _jax.pjit(name, None, call, [], [], pxla.JitGlobalCppCacheKeys(),
                     tree_util.dispatch_registry, pxla.cc_shard_arg)


def fast_path(executable: Any, outputs: Any, in_shardings: list, out_shardings: list,
              in_layouts: list | None = None, kept: list[bool] | None = None) -> Any:
    """What jax's C++ dispatch needs to run ``executable`` again without Python, or None
    where it cannot (outputs that are not arrays). ``in_shardings`` and ``in_layouts``
    (the non-default layout it must be placed in, None: the default) are per
    argument the executable takes; ``kept``, per argument leaf, whether it takes it
    (None: every one), as jax's ``kept_var_bitvec``.

    As jax.jit's, PRNG keys among the outputs are flattened to their data by jax's
    dispatch registry, which the C++ dispatch wraps in the keys' own (logical)
    shardings: the data of a key it returns is sharded ``P(None, 'y', 'x')``, not
    ``P(None, 'y', 'x', None)`` as from the first call."""
    from jax._src import tree_util
    from jax._src.interpreters import pxla
    from jaxlib import xla_client

    flat, tree = tree_util.dispatch_registry.flatten(outputs, None)
    if not all(isinstance(o, xla_client.ArrayImpl) for o in flat):
        return None
    count = len(in_shardings)
    return pxla.MeshExecutableFastpathData(
        executable, tree, list(in_shardings), list(out_shardings), [o.aval for o in flat],
        [o._committed for o in flat], [True] * count if kept is None else list(kept),
        list(in_layouts) if in_layouts is not None else [None] * count, [])


def register_cache(cache: Any, for_what: str) -> None:
    """Have ``jax.clear_caches()`` clear ``cache`` too (an object with ``cache_clear``,
    ``cache_info`` and ``cache_keys``; jax holds it weakly)."""
    from jax._src import util

    util.register_cache(cache, for_what)


def check_execution_allowed(executable: Any) -> None:
    """Raise jax's error for executing a program under ``jax.no_execution()`` (asked on
    every call of a compiled program: jax's config is read through ``_config``)."""
    if _config().no_execution.value:
        name = executable.hlo_modules()[0].name
        raise RuntimeError(f"JAX tried to execute function {name}, but the no_execution "
                           "config option is set")


def test_event(name: str) -> None:
    """Report one of jax's test events (no-op unless jax's test utilities listen).

    shardc reports the ones whose moments it shares with jax.jit (a call the C++
    dispatch had no entry for: ``jit_cpp_cache_miss``, or ``stages_compiled_call`` for
    an ahead-of-time compiled one; a compilation: ``pxla_cached_compilation``), so
    tests that count them count shardc too.
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
# Effects: jax's runtime tokens and mutable arrays (``shardc.runtime.effects``)
# ----------------------------------------------------------------------------


def lowering_effects(jax_lowered: Any) -> tuple[list, bool, list, list | None]:
    """What jax's lowering of a jit decided about effects: its ordered effects (one
    token argument and result each, in front), whether it has unordered ones, the
    mutable arrays (``jax.new_ref``) it closes over (extra arguments at the end) and,
    per result, the argument whose ``Ref`` it writes back (None: a result of the
    function); the last two are ``[], None`` without mutable arrays."""
    compile_args = jax_lowered._lowering.compile_args
    mut = compile_args.get("mut")
    return (list(compile_args.get("ordered_effects") or []),
            bool(compile_args.get("unordered_effects")),
            list(mut.in_mut) if mut is not None else [],
            list(mut.out_mut) if mut is not None else None)


def effects_unshardable(ordered_effects: list) -> list:
    """The ordered effects jax refuses in a program of more than one device (all but
    ``io_callback(ordered=True)``'s)."""
    from jax._src import effects

    return list(effects.shardable_ordered_effects.filter_not_in(ordered_effects))


def is_ref(value: Any) -> bool:
    """Whether ``value`` is a mutable array (``jax.new_ref``), not its abstract type."""
    return isinstance(value, _core().Ref)


def low_level_form(traced: Any, params: dict) -> tuple[Any, list, tuple, tuple, tuple, Any, Any]:
    """jax's low-level form of a high-level ``Traced`` (``Traced.lojax``) bound with
    ``params`` (its jit parameters, shardings given): a function of the low-level
    argument leaves (constants closed over), their shardings, the results' (the
    mutable arguments' new contents first, unspecified), the donated positions,
    and the high-level input and output types ``jax.stages.Compiled`` converts
    calls with."""
    from jax._src import api_util, stages

    lo = stages.Traced(traced._meta_tys_flat, params, traced._in_tree, traced.out_tree,
                       traced._consts).lojax
    consts = list(lo._consts)
    evaluate = jaxpr_function(lo._params["jaxpr"])
    n = len(consts)
    ins, donated = lo._params["in_shardings"][n:], lo._params["donated_invars"][n:]
    def low_level(*args: Any) -> Any:
        return evaluate(*consts, *args)

    # The module is named for the user's function, as jax names it, and its arguments
    # and results as jax names the low-level ones (a high-level argument's name once
    # per array it lowers to).
    low_level.__name__ = low_level.__qualname__ = traced.fun_name
    api_util.save_wrapped_fun_debug_info(low_level, lo._params["jaxpr"].jaxpr.debug_info)
    return (low_level, list(ins), tuple(lo._params["out_shardings"]),
            tuple(i for i, d in enumerate(donated) if d), lo._in_types, lo._out_types)


def lower_high_values(values: list) -> list:
    """The low-level leaves of argument values, as ``jax.stages.Compiled`` lowers them
    (a mutable value's current contents)."""
    from jax._src import core

    lowered = []
    for x in values:
        aval = core.typeof(x)
        lowered += aval.read_loval(core.cur_qdd(x), x) if aval.has_qdd else aval.lower_val(x)
    return lowered


def raise_high_results(in_types: Any, out_types: Any, hi_args: list, lo_outs: list) -> Any:
    """A low-level program's results as the high-level program's (a pytree), the
    mutable arguments updated from their new contents, as ``jax.stages.Compiled`` does."""
    import jax
    from jax._src import stages

    _, final_qdds = in_types
    num_mutable = stages._num_himuts_out(final_qdds)
    stages._apply_himut(final_qdds, hi_args, lo_outs[:num_mutable])
    out_tree, out_avals = out_types
    return jax.tree.unflatten(out_tree, stages.raise_lo_outs(out_avals, lo_outs[num_mutable:]))


def ref_buffer(ref: Any) -> Any:
    """The ``jax.Array`` a mutable array currently holds."""
    return ref._refs._buf


def replace_ref_buffer(ref: Any, array: Any) -> None:
    """Make a mutable array hold ``array``'s buffers from now on (as jax's dispatch
    writes a jit's new value of a ``Ref`` back)."""
    ref._refs._buf._replace_with(array)


def runtime_token_inputs(ordered_effects: list, devices: list) -> list:
    """The runtime token buffer of each ordered effect for a program on ``devices``:
    the last program's token for that effect (moved to these devices), so effects of
    successive programs happen in call order; shared with ``jax.jit``'s calls."""
    from jax._src import dispatch

    tokens = dispatch.runtime_tokens
    return [tokens.get_token_input(effect, devices)._buf for effect in ordered_effects]


def set_runtime_tokens(ordered_effects: list, token_buffers: list, sharded_token: Any,
                       devices: list) -> None:
    """Record a program's output tokens as jax's dispatch does: per ordered effect
    its result token (the next program's input) and per device the runtime token
    ``jax.effects_barrier()`` waits for."""
    from jax._src import array, core, dispatch
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    tokens = dispatch.runtime_tokens
    for i, device in enumerate(devices):
        tokens.set_output_runtime_token(device, sharded_token.get_token(i))
    for effect, buffers in zip(ordered_effects, token_buffers):
        if len(buffers) == 1:
            tokens.set_token_result(effect, core.Token(buffers[0]))
            continue
        token_devices = [next(iter(b.sharding.device_set)) for b in buffers]
        sharding = NamedSharding(Mesh(token_devices, "x"), PartitionSpec("x"))
        tokens.set_token_result(effect, core.Token(
            array.make_array_from_single_device_arrays((0,), sharding, buffers)))


def check_ref_arguments(fun: Any, args: tuple, kwargs: dict, static_argnums: tuple,
                        static_argnames: tuple, values: list, closed_refs: list) -> None:
    """jax.jit's checks of a call's mutable arrays, with its errors (``ValueError``): a
    ``Ref`` may be passed once, and not both closed over and passed (``values``: the
    dynamic argument leaves, flattened as jax flattens them)."""
    from jax._src import api_util, config, core

    if not config.mutable_array_checks.value:
        return
    def debug_info() -> Any:
        return api_util.debug_info("jit", fun, args, kwargs, static_argnums=static_argnums,
                                   static_argnames=static_argnames)
    api_util.check_no_aliased_ref_args(debug_info, [core.typeof(v) for v in values], values)
    if closed_refs:
        api_util._check_no_aliased_closed_over_refs(debug_info(), closed_refs, values)


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


def token_types() -> tuple[type, type]:
    """jax's token value (``jax.lax.create_token()``'s) and its abstract type."""
    core = _core()
    return core.Token, core.AbstractToken


def abstract_token() -> Any:
    """The abstract type jax traces and lowers a token as (``!stablehlo.token``)."""
    return _core().abstract_token


def debug_key_reuse() -> bool:
    """Whether jax checks PRNG keys for reuse (``jax_debug_key_reuse``)."""
    return _config().debug_key_reuse.value


def key_reuse_checked(traced: Any, dynamic_leaves: list, run: Any) -> Any:
    """``run()`` (a jit call's outputs) as jax.jit runs a call under
    ``jax_debug_key_reuse``: its jaxpr's key reuse signature checked against the
    arguments (a consumed key passed in raises jax's ``KeyReuseError``), and the keys
    it consumes marked consumed afterwards (jax's ``call_impl_with_key_reuse_checks``
    for its jit primitive, with the constants the trace closed over)."""
    import jax
    from jax.experimental.key_reuse import _core as key_reuse

    closed = traced._params["jaxpr"]
    args = [*traced._consts, *dynamic_leaves, *closed.consts]
    signature = key_reuse.jaxpr_type_signature(closed.jaxpr)
    signature.check_signature(*args, funcname="jit-compiled function")
    outputs = run()
    signature.update_consumption(args, jax.tree.leaves(outputs))
    return outputs


def as_placed_host_value(value: Any, array: Any) -> Any:
    """``array`` (host data converted from ``value``) typed as jax.jit's dispatch types
    ``value`` when placing it: a Python scalar (``1``, ``2.0``) is weakly typed, so
    what jax says of its transfer (the transfer guard's ``aval=ShapedArray(int32[],
    weak_type=True)``) is what it says for ``jax.jit``'s."""
    from jax._src import core, dtypes, literals

    if not dtypes.is_weakly_typed(value):
        return array
    return literals.TypedNdArray(array, aval=core.ShapedArray(array.shape, array.dtype,
                                                              weak_type=True))


def has_jax_argument_handler(value: Any) -> bool:
    """Whether jax's dispatch places values of ``value``'s type (jax's
    ``shard_arg_handlers``: where a user registers an array type of their own, with
    ``core.pytype_aval_mappings`` for its type)."""
    from jax._src.interpreters import pxla

    return type(value) in pxla.shard_arg_handlers


def place_as_jit(value: Any, sharding: Any, layout: Any = None) -> Any:
    """``value`` (host data, a ``jax.Array``, a token's buffer) put where a jit call
    puts an argument, as jax.jit's dispatch does (jax's ``shard_args``): an implicit
    transfer, which jax's transfer guards check (``"disallow"`` refuses it), unlike
    the explicit one of ``jax.device_put``. ``layout``: the device-local layout the
    program reads it in (None: the default)."""
    from jax._src.interpreters import pxla
    from jaxlib import xla_client

    return pxla.shard_args([sharding], [layout], [xla_client.ArrayCopySemantics.REUSE_INPUT],
                           [value], canonicalize=False)[0]


def custom_partition(key: str, operands: list[tuple], results: list[tuple]
                     ) -> tuple[bytes, list, list] | None:
    """What XLA's SPMD partitioner gets from a ``custom_partitioning`` op's partition
    callback (the ``CustomSPMDPartitioning`` call whose ``backend_config`` is ``key``):
    the partitioned body as MLIR bytecode, and the operand and result shardings it
    was written for as ``PartitionSpec``s. ``operands`` / ``results``: (shape, numpy
    dtype, ``PartitionSpec`` entries) each, as the call is sharded. None where the callback is
    gone (its lowering freed) or it gives shardings that are not on its mesh."""
    import numpy as np
    from jax._src import custom_partitioning
    from jax.sharding import NamedSharding, PartitionSpec
    from jaxlib import xla_client

    info = custom_partitioning._sharding_callbacks.get(key.encode())
    if info is None or info.mesh.empty:
        return None

    def shapes(values: list[tuple]) -> tuple[list, list]:
        return ([xla_client.Shape.array_shape(np.dtype(dtype), shape) for shape, dtype, _ in values],
                [NamedSharding(info.mesh, PartitionSpec(*spec))._to_xla_hlo_sharding(len(shape))
                 for shape, _, spec in values])

    arg_shapes, arg_shardings = shapes(operands)
    result_shapes, result_shardings = shapes(results)
    if len(results) == 1:
        result_shape, result_sharding = result_shapes[0], result_shardings[0]
    else:
        result_shape = xla_client.Shape.tuple_shape(result_shapes)
        result_sharding = xla_client.HloSharding.tuple_sharding(result_shape, result_shardings)
    body, arg_shardings, result_sharding = custom_partitioning._custom_partitioning_partition(
        arg_shapes, arg_shardings, result_shape, result_sharding, key.encode())
    if len(results) != 1:
        result_shardings = result_sharding.tuple_elements()
    else:
        result_shardings = [result_sharding]

    def specs(hlo_shardings: list, values: list[tuple]) -> list | None:
        decoded = [info.to_mesh_pspec_sharding(hlo, len(shape))
                   for hlo, (shape, _, _) in zip(hlo_shardings, values)]
        if not all(isinstance(s, NamedSharding) for s in decoded):
            return None
        return [s.spec for s in decoded]

    operand_specs, result_specs = specs(arg_shardings, operands), specs(result_shardings, results)
    if operand_specs is None or result_specs is None:
        return None
    return body, operand_specs, result_specs
