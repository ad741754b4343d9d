"""Calling a shardc jit: jax's C++ dispatch over shardc's executables.

A call goes to jax's own C++ jit dispatch, as ``jax.jit``'s does; the dispatch
comes back to Python (``_missed``) for a signature it has not seen (jax's
trace state is part of a signature: a call under a transformation comes back
and binds), which lowers (or reuses a lowering), compiles for the devices the
call decides (``_compile_for``), runs the executable and hands the dispatch the
executable's fast-path description, so that the next calls of that signature
run in C++. Which arguments a call donates is decided here too (``_donated``).
Donation happens in the executable on either path; what Python adds after a
donating call is deleting the caller's donated arrays (``_dispatched``), so that
their later use raises jax's "Array has been deleted" error instead of handing
a consumed buffer to a fast path.

``JitCalls`` is that part of ``shardc.compiler.api.JitFunction``: it uses what
the class keeps (``fun``, ``options``, ``mesh``, static and donated argument
numbers, ``_caches``) and its lowering (``_lower``, ``_bind``, ``_trace_staged``,
``_split_static``, ``_static_positions``, ``_requested_devices``).
"""

from __future__ import annotations

import functools
import operator
import weakref
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from shardc.compiler import effects, signature
from shardc.compiler.function import binding, hitypes
from shardc.compiler.function.caches import StaticKey
from shardc.compiler.function.surface import function_name
from shardc.compiler.function.tracing import tracing_mesh
from shardc.compiler.lowered import Lowered
from shardc.dialects import jax_private
from shardc.runtime import arguments
from shardc.runtime.compiled import Compiled, device_assignment
from shardc.runtime.effects import ProgramEffects

# jax's C++ dispatch entries of every shardc jit with hashable options.
_DISPATCH_CACHE = jax_private.dispatch_cache(8192)
# Leaves a call key keeps by type alone: the compiled program takes any value of it.
_SCALARS = frozenset({bool, int, float, complex})


class JitCalls:
    """Calling a jitted function: through jax's C++ dispatch, back here once per signature."""

    def _start_dispatch(self, made_with: tuple) -> None:
        """Repeated calls go through jax's own C++ dispatch, as jax.jit's do; it comes
        back to ``_call`` for every signature it has not seen. As with jax.jit, jits
        of one function made with the same arguments (``made_with``) share what it
        has seen, in the cache ``jax_jit_cpp_cache_obj`` sets when one is set."""
        key: Any = ("shardc", *made_with)
        configured = jax_private.configured_dispatch_cache()
        try:
            hash(key)
            cache = _DISPATCH_CACHE if configured is None else configured
        except TypeError:  # e.g. shardings given in a list: this jit's alone
            key = ("shardc", id(self))
            cache = jax_private.dispatch_cache(256) if configured is None else configured
        # The dispatch reaches back to this object weakly: a strong reference would
        # make a cycle, which keeps the function's closure (and its arrays) alive
        # after the last reference to the jitted function goes, until a collection.
        # (A partial, not a lambda: it adds no Python frame below the call.)
        self._dispatch = jax_private.cpp_dispatch(
            function_name(self.fun), self.fun, functools.partial(_missed, weakref.ref(self)),
            self.static_argnums, self.static_argnames, key, cache)
        # Whether calls donate arguments: their arrays are deleted after each call.
        self._donates = bool(self.donate_argnums or self.options.donate_argnames)
        # A call passing its arguments by position (more than ``_donated_bound``) has
        # its donated ones found by one C++ lookup: ``donate_argnums`` names them all
        # (``donate_argnames`` is resolved against the signature into it, as jax's).
        positional = bool(self.donate_argnums) and all(i >= 0 for i in self.donate_argnums)
        self._donated_of = operator.itemgetter(*self.donate_argnums) if positional else None
        self._donated_bound = max(self.donate_argnums) if positional else 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run on these arguments; lowering and compiling happen once per signature.

        Later calls whose arguments have the same types, shapes, shardings and
        static values go straight to the executable.
        """
        # Every call goes to jax's C++ dispatch first, as jax.jit's does, which
        # decides what jax.jit's would: jax's trace state and ``jax_debug_key_reuse``
        # are part of its key, so a call under a transformation or checking keys
        # misses and comes back to ``_call`` (which binds, or checks); under
        # ``jax_disable_jit`` it calls the function itself. The API boundary is this
        # frame's own handler: an error leaves with jax's filtered traceback
        # (``filter_raised``), and a call pays for no wrapper frame.
        try:
            if not self._donates:  # the common call
                return self._dispatch(*args, **kwargs)
            if kwargs or self._donated_of is None or len(args) <= self._donated_bound:
                return self._dispatched(args, kwargs)
            # (Gathered before the call: right after it, with the executable
            # just dispatched, the same walk costs the caller twice the CPU.)
            donated = arguments.flatten(self._donated_of(args))[0]
            outputs = self._dispatch(*args, **kwargs)
            arguments.release_donated(donated)
            return outputs
        except Exception as error:
            jax_private.filter_raised(error)
            raise

    def _dispatched(self, args: tuple, kwargs: dict) -> Any:
        """The call through jax's C++ dispatch, and then, if it donates, the caller's
        donated arrays deleted (``arguments.release_donated``): jax's dispatch leaves
        them holding consumed buffers."""
        if not self._donates:
            return self._dispatch(*args, **kwargs)
        donated = [args[i] for i in self.donate_argnums if -len(args) <= i < len(args)]
        donated += [kwargs[name] for name in self.options.donate_argnames if name in kwargs]
        donated = arguments.flatten(donated)[0]
        outputs = self._dispatch(*args, **kwargs)
        arguments.release_donated(donated)
        return outputs

    def _checking_key_reuse(self, args: tuple, kwargs: dict) -> Any:
        """A call under ``jax_debug_key_reuse``: checked on jax's trace of it, as jax.jit's."""
        traced = self._trace_staged(args, kwargs)
        dynamic, _ = self._split_static(args)
        leaves = jax.tree.leaves((tuple(dynamic), {k: v for k, v in kwargs.items()
                                                   if k not in self.static_argnames}))
        return jax_private.key_reuse_checked(traced, leaves,
                                             lambda: self._executed(args, kwargs)[0])

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Execute now on concrete arguments, whatever transformation is active around
        (what executing an equation of shardc's jit primitive does: under ``vmap``
        with ``spmd_axis_name`` the trace state is not clean, yet nothing is traced,
        and the dispatch, whose key holds that state, would come back to bind)."""
        if binding.under_a_trace():
            return self._executed(args, kwargs)[0]
        return self._dispatched(args, kwargs)

    def _executed(self, args: tuple, kwargs: dict) -> tuple[Any, Any, bool]:
        """``_missed``'s outputs of a call run now, on concrete arguments."""
        return self._ran(args, kwargs, self._missing(args, kwargs))

    def _missing(self, args: tuple, kwargs: dict) -> Miss:
        """What a call on concrete arguments lacks: a compiled program, and for it a
        lowering, and for that jax's trace of the function."""
        jax_private.test_event("jit_cpp_cache_miss")
        key = self._call_key(args, kwargs)
        compiled = self._caches.by_call.get(key) if key is not None else None
        if compiled is not None:
            return Miss(key, compiled)
        # A program with jax's high-level types (hijax) runs as jax.jit runs one:
        # one equation of the jit primitive, whose rule lowers the types to arrays
        # and binds again; traced at every call, as jax.jit does.
        if hitypes.has_high_values(args, kwargs):
            return Miss(key, high=True)
        jax_private.check_jax_arrays((self._split_static(args)[0], {
            k: v for k, v in kwargs.items() if k not in self.static_argnames}))
        request = self._lowering_request(args, kwargs, called=True)
        if request.cached is not None:
            return Miss(key, lowering=request)
        return Miss(key, lowering=request,
                    trace=self._trace_inputs(args, kwargs, request.arg_leaves))

    def _ran(self, args: tuple, kwargs: dict, miss: Miss, traced: Any = None
             ) -> tuple[Any, Any, bool]:
        """The call run: compiled first where ``miss`` says so (from ``traced``, jax's
        trace of the function, when the lowering is missing; None: traced here)."""
        if miss.high:
            return self._bind(args, kwargs), None, False
        compiled = miss.compiled
        if compiled is None:
            try:
                compiled = self._compile_for(args, kwargs, miss.lowering, traced)
            except hitypes.HighLevelProgramError:
                return self._bind(args, kwargs), None, False
            if miss.key is not None:
                self._caches.by_call[miss.key] = compiled
        elif compiled.effects.mutates:  # the lowering's checks, again for these Refs
            self._check_refs(args, kwargs, compiled.effects)
        moved = compiled.placement.resharded
        outputs = compiled.call_as_jit(*args, **kwargs)
        if jax_private.debug_special_values():
            jax_private.check_special_outputs(self.fun, args, kwargs, outputs)
        if compiled.placement.resharded != moved:
            # A committed argument was moved (other devices or device order): jax's C++
            # dispatch would pass it on unmoved, which crashes; such calls stay here.
            return outputs, None, False
        return outputs, compiled.fast_path(outputs), False

    def _check_refs(self, args: tuple, kwargs: dict, program_effects: ProgramEffects) -> None:
        effects.check_ref_arguments(
            self.fun, args, kwargs, static_argnums=self._static_positions(len(args)),
            static_argnames=self.static_argnames, effects=program_effects)

    def _call_key(self, args: tuple, kwargs: dict) -> tuple | None:
        """A cheap key for the fast call path: what lowering and compiling depend on.

        Static arguments count by value; array leaves by shape, dtype, weak type
        and (committed arrays) sharding and layout; other leaves (Python scalars) by type.
        The context mesh, which bare ``PartitionSpec``s resolve against and whose
        devices run programs that name none, is included, and jax's trace context
        (the configuration a trace depends on, e.g. the default matmul precision).
        ``None`` when a static value is unhashable: such calls take the slow path,
        which reports the error.
        """
        positions = self._static_positions(len(args))
        static = tuple(StaticKey(args[i]) for i in positions if i < len(args))
        static += tuple(StaticKey(kwargs[k]) for k in self.static_argnames if k in kwargs)
        leaves, tree = jax.tree.flatten((args, kwargs))
        parts: list = [tree, static, jax.sharding.get_abstract_mesh(),
                       signature.device_mesh(self.mesh), jax_private.trace_context()]
        for leaf in leaves:
            if isinstance(leaf, jax.Array):
                # A committed array's layout decides the program's (layouts.py).
                sharding, layout = ((leaf.sharding, jax_private.array_layout(leaf))
                                    if leaf.committed else (None, None))
                parts.append((leaf.shape, leaf.dtype, getattr(leaf, "weak_type", False),
                              sharding, layout))
            elif isinstance(leaf, np.ndarray):
                parts.append((leaf.shape, leaf.dtype))
            elif jax_private.is_ref(leaf):  # always committed, laid out as its buffer
                parts.append((type(leaf), leaf.shape, leaf.dtype, leaf.sharding))
            elif type(leaf) in _SCALARS:
                parts.append(type(leaf))
            else:  # e.g. an array type of the user's registered with jax: by its jax type
                parts.append((type(leaf), signature.jax_type(leaf)))
        key = tuple(parts)
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def _compile_for(self, args: tuple, kwargs: dict, request: LoweringRequest | None = None,
                     traced: Any = None) -> Compiled:
        _, lowered = self._lower_requested(
            request or self._lowering_request(args, kwargs, called=True), traced)
        devices = device_assignment(lowered.meshes, self._requested_devices()
                                    or _devices_of_arguments(args, kwargs, lowered))
        # (Kept in the jit's caches, shared with its lowerings' compile().)
        compiled = lowered.compile(device_assignment=devices)
        # Calls never verify: the executable, kept by the caches every jit of the
        # function shares, holds no reference to the function (through its jax.jit)
        # that would keep the function, and the caches, alive.
        compiled.reference = None
        return compiled

    def _donated(self, args: tuple, dynamic_kwargs: dict) -> tuple[bool, ...]:
        """Per dynamic argument leaf (in the order of ``(args, kwargs)``): is it donated?
        (Never under jax_debug_nans, as with jax.jit: its de-optimized rerun needs them.)"""
        static = set(self._static_positions(len(args)))
        donate = {i if i >= 0 else len(args) + i for i in self.donate_argnums}
        debug_nans = jax_private.debug_nans()
        flags: list[bool] = []
        for i, arg in enumerate(args):
            if i not in static:
                flags += [i in donate and not debug_nans] * len(jax.tree.leaves(arg))
        for name in sorted(dynamic_kwargs):
            flags += [name in self.options.donate_argnames and not debug_nans] * len(
                jax.tree.leaves(dynamic_kwargs[name]))
        return tuple(flags)


class LoweringRequest(NamedTuple):
    """A lowering asked for (``JitFunction._lowering_request``): the arguments, what
    the lowering depends on, its cache key, and the cached lowering (None: a miss)."""

    args: tuple
    kwargs: dict
    propagate: bool
    platforms: tuple
    given_platforms: bool
    lowering_parameters: Any
    called: bool
    dynamic_args: list
    dynamic_kwargs: dict
    mesh: Any
    arg_leaves: list
    static_args: tuple
    static_kwargs: dict
    devices: Any
    in_tree: Any
    key: tuple
    cached: Any


class Miss(NamedTuple):
    """What a call jax's C++ dispatch has not seen lacks (``JitCalls._missing``)."""

    key: tuple | None  # the call key (``_call_key``), None when unhashable
    compiled: Compiled | None = None  # the program, when only the dispatch missed it
    high: bool = False  # jax's high-level types: bound, as jax.jit binds them
    lowering: LoweringRequest | None = None
    # The lowering missing too: what jax traces it from (``_trace_inputs``).
    trace: tuple | None = None


def _missed(jitted: weakref.ref, *args: Any, **kwargs: Any) -> tuple[Any, Any, bool]:
    """A call jax's C++ dispatch has not seen: bound into the enclosing trace,
    checked for key reuse, or lowered, compiled (or reused) and run.

    Returns what the dispatch caches for the next calls with the same signature:
    the outputs, the executable's fast-path description (None: every call comes
    back here) and False (nothing to rebuild).
    """
    self = jitted()
    # jax traces the function from this very frame, as jax.jit's traces from its own
    # cache-miss handler: the function runs as few Python frames below the call
    # (what a debugger, the recursion limit and inspect.stack() see) as there.
    if binding.under_a_trace() or any(
            jax_private.is_tracer(leaf) for leaf in jax.tree.leaves((args, kwargs))):
        # Traced, or tracers passed on: one equation in the enclosing trace.
        arguments = self._staged_arguments(args, kwargs)
        infer, inputs = jax_private.jit_trace_inputs(self._jax_jit, args, kwargs)
        with tracing_mesh(self.mesh, staged=True):
            traced = jax_private.jit_traced(*infer(*inputs))
        return self._bound(args, kwargs, arguments, traced), None, False
    if jax_private.debug_key_reuse():
        return self._checking_key_reuse(args, kwargs), None, False
    miss = self._missing(args, kwargs)
    traced = None
    if miss.trace is not None:
        infer, inputs = miss.trace
        with tracing_mesh(self.mesh):
            traced = jax_private.jit_traced(*infer(*inputs))
        jax_private.check_no_escaped_tracers(traced)
    return self._ran(args, kwargs, miss, traced)

def _devices_of_arguments(args: tuple, kwargs: dict, lowered: Lowered) -> tuple | None:
    """Devices for a program lowered on an abstract mesh (or on none): a committed argument's.

    An argument already laid out on a concrete mesh of the program's shape
    decides the device order, so computation follows data; a program without
    a mesh runs on the one device its committed arguments are on.
    """
    mesh = lowered.mesh
    if mesh is None:
        return _device_of_committed(args, kwargs)
    if isinstance(mesh, Mesh):
        return None
    for value in jax.tree.leaves((args, kwargs)):
        sharding = getattr(value, "sharding", None)
        if (
            isinstance(value, jax.Array)
            and value.committed
            and isinstance(sharding, NamedSharding)
            and isinstance(sharding.mesh, Mesh)
            and sharding.mesh.axis_sizes == mesh.axis_sizes
        ):
            return tuple(sharding.mesh.devices.flat)
    return None


def _device_of_committed(args: tuple, kwargs: dict) -> tuple | None:
    """The single device the committed arguments of a meshless program are on, if any."""
    for value in jax.tree.leaves((args, kwargs)):
        # (Its sharding's devices: a deleted array still has them, and the call's
        # check of its arguments then names it.)
        if isinstance(value, jax.Array) and value.committed \
                and len(value.sharding.device_set) == 1:
            return tuple(value.sharding.device_set)
    return None
