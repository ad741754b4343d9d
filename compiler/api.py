"""``shardc.compiler.jit``: trace a JAX function and lower it with shardc's shardings.

The stages follow jax's own (``jit(f).lower(*args)`` -> ``Lowered``): jax traces
the function with the arguments' shardings in their types (as ``jax.jit`` does),
then shardc writes the Shardy mesh and sharding attributes itself
(``shardc.compiler.annotation``). Lowerings are cached on what
they depend on: static arguments, the abstract signature and the *abstract*
shardings (mesh shape, axis types, spec), never on devices, so the same
program on another set of devices reuses the lowering. ``Lowered`` itself,
with what it offers before and after compiling, is ``shardc.compiler.lowered``;
calling, ``shardc.compiler.function.calling``; ``pjit``, the same for code written
against jax's ``pjit``, ``shardc.compiler.function.pjit``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding
from jaxlib.mlir import ir

import shardc.compiler as shardc_compiler
import shardc.dialects as shardc_dialects
import shardc.runtime as shardc_runtime
from shardc.compiler import auto, effects, export, layouts, memories, signature
from shardc.compiler.checks.strict import check_strict
from shardc.compiler.cost_aware import Resolution
from shardc.compiler.function import annotated, binding, caches, donation, hitypes
from shardc.compiler.function import options as jit_options
from shardc.compiler.function.caches import static_keys
from shardc.compiler.function.calling import JitCalls, LoweringRequest
from shardc.compiler.function.surface import JitSurface, error_name, function_name
from shardc.compiler.function.tracing import abstract_tree, traced_aval, tracing_mesh
from shardc.compiler.lowered import AnyMesh, Lowered, Traced
from shardc.compiler.sharding import user_rules
from shardc.compiler.signature import LeafSignature
from shardc.compiler.stages import xla_import_rewrites
from shardc.compiler.stages.hlo_order import restore_jax_order
from shardc.dialects import jax_private, sdy
from shardc.runtime.compiled import StaticArguments
from shardc.runtime.effects import NO_EFFECTS, ProgramEffects

# Op locations must name the user's source line, not shardc's jit wrapper.
jax_private.hide_frames_of(
    [os.path.dirname(module.__file__)
     for module in (shardc_compiler, shardc_runtime, shardc_dialects)]
)


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """Counts of the lowering cache of one jitted function."""

    hits: int
    misses: int
    size: int
    compiled: int  # executables built by calls, one per (lowering, device order)


@dataclasses.dataclass
class _CachedLowering:
    """An annotated module, copied for every ``Lowered`` (each gets its own)."""

    module: ir.Module
    out_tree: Any
    results: list[LeafSignature]
    mesh_symbols: dict[str, ir.Attribute]
    host_callbacks: list
    keepalive: list
    # The annotated module before propagation (None when not propagated), made when
    # first asked: explain() re-propagates it to record exactly where each sharding
    # came from.
    unpropagated: annotated.Unpropagated | None = None
    # jax's names of the argument leaves (the parameters', "x", "y['a']"), for errors.
    arg_names: tuple[str, ...] | None = None
    # The concrete meshes named inside the function (shard_map's, constraints'):
    # they decide the devices where no argument or result sharding does.
    body_meshes: tuple = ()
    # propagation="cost-aware": the search's Resolution (its decisions and predicted
    # bytes), for Lowered.cost_aware_resolution; None on every other route.
    cost_aware_resolution: Resolution | None = None
    # Tokens and Refs (shardc.compiler.effects), and the closed-over Refs' signatures.
    effects: ProgramEffects = NO_EFFECTS
    closed_refs: tuple[LeafSignature, ...] = ()
    # jax's lowering of the traced program (for Lowered._lowering, what jax.export reads).
    jax_lowering: Any = None

    @functools.cached_property
    def text(self) -> str:
        """The module as printed, which a ``Lowered``'s own copy prints until changed."""
        return str(self.module)


class JitFunction(JitCalls, JitSurface):
    """The object ``jit`` returns: call it (``JitCalls``) or ``.lower(*args, **kwargs)``;
    the rest of ``jax.jit``'s object (repr, pickling, methods, cache control) is
    ``JitSurface``."""

    def __init__(
        self,
        fun: Callable,
        *,
        options: jit_options.JitOptions,
        mesh: AnyMesh | None,
        propagate: bool,
        strict: Any = False,
        propagation: str = "shardy",
    ) -> None:
        # The wrapped function's attributes first (jax.jit's object has them), then
        # shardc's own: a function made by `jax.grad` of another shardc jit carries
        # that one's state in its attributes, which must not replace this one's.
        self._take_attributes_of(fun)
        self.fun = fun
        self.propagate = propagate
        self.propagation = propagation  # "shardy" or "cost-aware"
        self.strict = strict  # bool or shardc.compiler.checks.strict.StrictOptions
        # `lower(..., propagate=False)` is ours unless the function itself takes
        # a parameter of that name.
        self._lower_takes_propagate = "propagate" not in _parameter_names(fun)
        self.in_shardings = options.in_shardings
        self.out_shardings = options.out_shardings
        self.options = options
        self.static_argnums = tuple(sorted(options.static_argnums))
        self.static_argnames = options.static_argnames
        self.donate_argnums = options.donate_argnums
        self.mesh = mesh
        # Traced and lowered with every argument (shardc's signature, module and
        # reports are per argument); the compiled program leaves out those it never
        # reads unless `keep_unused` (``shardc.compiler.function.unused_arguments``).
        self._jax_jit = jax.jit(fun, keep_unused=True, **options.tracing_options())
        made_with = (options, mesh, propagate, strict, propagation)
        self._start_dispatch(made_with)
        self._caches = caches.function_caches(fun, made_with)

    def cache_info(self) -> CacheInfo:
        """How often ``lower`` reused a cached lowering."""
        c = self._caches
        return CacheInfo(c.hits, c.misses, len(c.lowerings), len(c.executables))

    @jax_private.api_boundary
    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """Trace (or reuse), annotate and propagate the function for these arguments.

        ``propagate=False`` (a keyword, unless the function has a parameter of
        that name) skips shardc's propagation pipeline: the module then only
        carries the shardings given for arguments, results and constraints.
        """
        propagate = self.propagate
        if self._lower_takes_propagate and "propagate" in kwargs:
            kwargs = dict(kwargs)
            propagate = jit_options.propagate_flag(kwargs.pop("propagate"))
        if hitypes.has_high_values(args, kwargs):
            return self._lower_high(args, kwargs, propagate)
        try:  # (not through _lower: jax.jit's lower() traces one frame nearer the call)
            return self._lower_requested(self._lowering_request(args, kwargs, propagate))[1]
        except hitypes.HighLevelProgramError:  # high-level results or closed-over boxes
            return self._lower_high(args, kwargs, propagate)

    @jax_private.api_boundary
    def trace(self, *args: Any, **kwargs: Any) -> Traced:
        """Trace the function for these arguments (a ``Traced``: ``jaxpr``, ``out_info``,
        ``lower()``), as ``jax.jit(f).trace`` does."""
        if hitypes.has_high_values(args, kwargs):
            return self._trace_high(args, kwargs)
        _, _, mesh, arg_leaves = self._arguments(args, kwargs)
        # Traced from this frame, as jax.jit's trace() traces from its own.
        infer, inputs = self._trace_inputs(args, kwargs, arg_leaves)
        with tracing_mesh(self.mesh):
            jax_traced = jax_private.jit_traced(*infer(*inputs))
        jax_private.check_no_escaped_tracers(jax_traced)
        if jax_private.has_high_types(jax_traced):
            return self._trace_high(args, kwargs)
        results = layouts.as_traced(
            self._result_signature(jax_traced.out_info, mesh, signature.result_types(jax_traced)),
            jax.tree.structure(jax_traced.out_info), self.options.out_formats)
        # A SingleDeviceSharding given for a result is its sharding, as in jax's out_info.
        given = signature.broadcast_shardings(self.options.given_out_shardings,
                                              jax_traced.out_info, "out_shardings")
        out_info = jax.tree.unflatten(
            jax.tree.structure(jax_traced.out_info),
            [jax.ShapeDtypeStruct(r.aval.shape, r.aval.dtype, weak_type=r.aval.weak_type,
                                  sharding=layouts.described(r) if r.sharding is not None
                                  else g)
             for r, g in zip(results, given)])
        def lower(*, lowering_platforms: Sequence[str] | None = None,
                  propagate: bool | None = None, lowering_parameters: Any = None) -> Lowered:
            return self._lower(args, kwargs, propagate, lowering_platforms,
                               lowering_parameters)[1]

        return Traced(jax_traced, lower, out_info)

    @jax_private.api_boundary
    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """The results' types and given shardings, as ``jax.ShapeDtypeStruct``s."""
        return self.trace(*args, **kwargs).out_info

    def _bind(self, args: tuple, kwargs: dict) -> Any:
        """Under an enclosing trace: one equation of shardc's jit primitive
        (``shardc.compiler.function.binding``)."""
        arguments = self._staged_arguments(args, kwargs)
        return self._bound(args, kwargs, arguments, self._trace_staged(args, kwargs))

    def _staged_arguments(self, args: tuple, kwargs: dict) -> tuple | None:
        """The arguments of a call staged into an enclosing trace, checked against the
        shardings given to ``jit`` before the function is traced, as jax.jit checks
        them (None: jax's high-level values, bound as they are).

        Only the shardings given to ``jit`` go into the equation, as with
        ``jax.jit``: tracers carry no data whose sharding could be followed.
        """
        if hitypes.has_high_values(args, kwargs):
            return None
        return self._arguments(args, kwargs, follow_data=False)

    def _bound(self, args: tuple, kwargs: dict, arguments: tuple | None, traced: Any) -> Any:
        """The equation of ``traced``, jax's trace of the function staged for these
        arguments (``_staged_arguments``)."""
        if arguments is None or jax_private.has_high_types(traced):
            dynamic, _ = self._split_static(args)
            dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
            return binding.bind_high(SHARDC_JIT, traced,
                                     jax_private.tracing_leaves((tuple(dynamic), dynamic_kwargs)),
                                     *self._high_shardings(traced, dynamic, dynamic_kwargs))
        dynamic_args, dynamic_kwargs, mesh, arg_leaves = arguments
        results = signature.result_signature(traced.out_info, self.out_shardings, mesh,
                                             follow_types=False,
                                             api_name=self.options.api_name)
        values = jax_private.tracing_leaves((tuple(dynamic_args), dynamic_kwargs))
        return binding.bind(SHARDC_JIT, traced, values, [leaf.sharding for leaf in arg_leaves],
                            [leaf.sharding for leaf in results], self.options.keep_unused,
                            self.options.compiler_options)

    def _trace_staged(self, args: tuple, kwargs: dict) -> Any:
        """jax's trace of the function as staged into an enclosing trace (``jit(mesh=)``
        as an abstract context mesh)."""
        with tracing_mesh(self.mesh, staged=True):
            return self._jax_jit.trace(*args, **kwargs)

    def _high_shardings(self, traced: Any, dynamic_args: Sequence, dynamic_kwargs: dict
                        ) -> tuple[list, list]:
        """The given shardings of a high-level program's argument and result leaves."""
        mesh = signature.context_mesh(self.mesh)
        return (hitypes.argument_shardings(self.in_shardings, dynamic_args, dynamic_kwargs, mesh),
                hitypes.result_shardings(self.out_shardings, traced, mesh))

    def _trace_high(self, args: tuple, kwargs: dict) -> Traced:
        """jax's trace of a program with high-level types (its results' types are
        jax's), lowered as ``lower()`` lowers it."""
        with tracing_mesh(self.mesh):
            jax_traced = self._jax_jit.trace(*args, **kwargs)

        def lower(*, lowering_platforms: Sequence[str] | None = None,
                  propagate: bool | None = None, lowering_parameters: Any = None) -> Any:
            return self._lower_high(args, kwargs,
                                    self.propagate if propagate is None else propagate,
                                    lowering_platforms, lowering_parameters)

        return Traced(jax_traced, lower, jax_traced.out_info)

    def _lower_high(self, args: tuple, kwargs: dict, propagate: bool,
                    lowering_platforms: Sequence[str] | None = None,
                    lowering_parameters: Any = None) -> hitypes.HighLowered:
        """A program with high-level types, lowered in its low-level form (jax's) by
        shardc's jit of that form (``shardc.compiler.function.hitypes``); the
        platforms and parameters of ``trace(...).lower(...)`` reach that lowering."""
        dynamic_args, _ = self._split_static(args)
        dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        with tracing_mesh(self.mesh):
            traced = self._jax_jit.trace(*args, **kwargs)
        program = hitypes.low_level_program(
            traced, *self._high_shardings(traced, dynamic_args, dynamic_kwargs))
        low = _jit_of_flat(program.fun, program.in_shardings, program.out_shardings,
                           program.donate_argnums, self.options.compiler_options,
                           self.options.keep_unused)
        low_args = hitypes.low_level_arguments(dynamic_args, dynamic_kwargs)
        if lowering_platforms is None and lowering_parameters is None:
            lowered = low.lower(*low_args, propagate=propagate)
        else:
            lowered = low.trace(*low_args).lower(lowering_platforms=lowering_platforms,
                                                 propagate=propagate,
                                                 _private_parameters=lowering_parameters)
        return hitypes.HighLowered(lowered, program)

    def _requested_devices(self) -> tuple | None:
        """The one device ``jit(device=...)``, ``jit(backend=...)`` or ``SingleDeviceSharding``
        shardings ask for, if any."""
        if self.options.device is not None:
            return (self.options.device,)
        if self.options.single_device is not None:
            return (self.options.single_device,)
        if self.options.backend is not None:
            return (jax.devices(self.options.backend)[0],)
        return None

    def _lower(
        self, args: tuple, kwargs: dict, propagate: bool | None = None,
        platforms: Sequence[str] | None = None, lowering_parameters: Any = None,
        called: bool = False,
    ) -> tuple[tuple, Lowered]:
        return self._lower_requested(self._lowering_request(
            args, kwargs, propagate, platforms, lowering_parameters, called))

    def _lowering_request(
        self, args: tuple, kwargs: dict, propagate: bool | None = None,
        platforms: Sequence[str] | None = None, lowering_parameters: Any = None,
        called: bool = False,
    ) -> LoweringRequest:
        """What ``_lower`` needs for these arguments, with the cached lowering (None:
        a miss, which traces)."""
        propagate = self.propagate if propagate is None else propagate
        dynamic_args, dynamic_kwargs, mesh, arg_leaves = self._arguments(args, kwargs,
                                                                         called=called)
        positions = self._static_positions(len(args))
        static_args = tuple(args[i] for i in positions)
        static_kwargs = {k: v for k, v in kwargs.items() if k in self.static_argnames}
        devices = signature.device_mesh(self.mesh)
        in_tree = jax.tree.structure((tuple(dynamic_args), dynamic_kwargs))
        given_platforms = bool(platforms)
        platforms = tuple(platforms) if platforms else (_platform(arg_leaves),)
        # The registered sharding rules decide the propagation: a new rule is a new lowering.
        key = (propagate, self.propagation, platforms, lowering_parameters, devices is not None,
               jax_private.trace_context(), user_rules.generation(),
               self._cache_key(static_args, static_kwargs, in_tree, arg_leaves, mesh))
        return LoweringRequest(args, kwargs, propagate, platforms, given_platforms,
                               lowering_parameters, called, dynamic_args, dynamic_kwargs,
                               mesh, arg_leaves, static_args, static_kwargs, devices, in_tree,
                               key, self._caches.lowerings.get(key))

    def _lower_requested(self, request: LoweringRequest, traced: Any = None
                         ) -> tuple[tuple, Lowered]:
        """The lowering ``request`` asks for: the cached one, or (a miss) one written
        from ``traced``, jax's trace of the function for it (None: traced here)."""
        (args, kwargs, propagate, platforms, given_platforms, lowering_parameters, called,
         dynamic_args, dynamic_kwargs, mesh, arg_leaves, static_args, static_kwargs, devices,
         in_tree, key, cached) = request
        positions = self._static_positions(len(args))
        module = None  # a miss's own module goes to its Lowered as it is, not copied
        if cached is None:
            self._caches.misses += 1
            if traced is None:
                traced = self._trace(args, kwargs, arg_leaves)
            cached, module = self._lower_uncached(traced, args, kwargs, arg_leaves, mesh,
                                                  propagate, platforms, devices,
                                                  lowering_parameters, called)
            self._caches.lowerings[key] = cached
        else:
            self._caches.hits += 1
        if not given_platforms:
            signature.check_devices_known(
                arg_leaves, jax.tree.leaves((tuple(dynamic_args), dynamic_kwargs)),
                cached.body_meshes, (self.in_shardings, self.out_shardings), self.mesh,
                devices)
        self._check_refs(args, kwargs, cached.effects)
        static = StaticArguments(
            positions, static_args, tuple(sorted(static_kwargs.items()))
        )
        lowered = self._make_lowered(cached, module, in_tree, arg_leaves, mesh, static, devices)
        lowered.donated = self._donated(args, dynamic_kwargs)
        lowered.platforms = platforms if given_platforms else None
        lowered.placed_by_jit = self.options.device is not None or self.options.backend is not None
        lowered.keep_unused = self.options.keep_unused
        # jax.jit takes device=/backend= as a SingleDeviceSharding given for every
        # argument and result: its results are committed there too.
        lowered.placed_on_request = self.options.single_device is not None or lowered.placed_by_jit
        lowered.requested_devices = self._requested_devices()
        lowered.arg_names = cached.arg_names
        lowered.jax_lowering = cached.jax_lowering
        lowered.reference = self._jax_jit  # the unsharded program, for Compiled.verify
        lowered.executables = caches.SharedExecutables(
            self._caches.executables, key, lowered.module, lambda: cached.text, trusted=called)
        if self.strict:
            check_strict(lowered.module, self.strict)
        return key, lowered

    # -- steps ---------------------------------------------------------------

    def _arguments(self, args: tuple, kwargs: dict, *, follow_data: bool = True,
                   called: bool = False
                   ) -> tuple[list, dict, AnyMesh | None, list[LeafSignature]]:
        """A call's dynamic arguments (positional, keyword), the context mesh and the
        arguments' signatures (``signature.argument_signature``), errors naming the
        arguments and the function as jax's do."""
        signature.check_no_keyword_arguments(self.options.in_shardings_given, kwargs)
        placed_by_jit = self.options.device is not None or self.options.backend is not None
        devices = signature.device_mesh(self.mesh)
        signature.check_no_mesh_with_device(placed_by_jit, devices)
        dynamic_args, _ = self._split_static(args)
        dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        mesh = signature.context_mesh(self.mesh)
        leaves = signature.argument_signature(
            dynamic_args, dynamic_kwargs, self.in_shardings, mesh, follow_data=follow_data,
            placed_by_jit=placed_by_jit or self.options.inputs_to_device is not None,
            moved_to=self.options.inputs_to_device, devices=devices,
            names=lambda: jax_private.argument_names(
                self.fun, args, kwargs, self.static_argnums, self.static_argnames),
            fun=self.fun, fun_name=error_name(self.fun, called),
            api_name=self.options.api_name)
        leaves = layouts.argument_layouts(
            leaves, dynamic_args, dynamic_kwargs, self.options.in_formats,
            placed_by_option=self.options.device is not None or self.options.backend is not None)
        return dynamic_args, dynamic_kwargs, mesh, leaves

    def _static_positions(self, num_args: int) -> tuple[int, ...]:
        """The static positions among a call's ``num_args`` positional arguments.

        As in jax.jit, static_argnums past them name nothing in that call (a
        static argument passed by keyword is static by name).
        """
        positions = (i if i >= 0 else num_args + i for i in self.static_argnums)
        return tuple(sorted(p for p in positions if 0 <= p < num_args))

    def _split_static(self, args: Sequence[Any]) -> tuple[list[Any], tuple]:
        positions = self._static_positions(len(args))
        dynamic = [a for i, a in enumerate(args) if i not in positions]
        return dynamic, tuple(args[i] for i in positions)

    def _cache_key(self, static_args, static_kwargs, in_tree, arg_leaves, mesh) -> tuple:
        is_leaf = signature.is_sharding_leaf
        out_given = jax.tree.leaves(self.out_shardings, is_leaf=is_leaf)
        names = sorted(static_kwargs)
        return (
            static_keys(static_args),
            tuple(zip(names, static_keys([static_kwargs[n] for n in names]))),
            in_tree,
            tuple(leaf.abstract_key() for leaf in arg_leaves),
            tuple(
                signature.abstract_key(s) if isinstance(s, NamedSharding) else s
                for s in out_given
            ),
            jax.tree.structure(self.out_shardings, is_leaf=is_leaf),
            None if mesh is None else mesh.abstract_mesh,
        )

    def _trace(self, args: tuple, kwargs: dict, arg_leaves: Sequence[LeafSignature]) -> Any:
        """jax's trace of the function for these arguments (``_trace_inputs``), under
        ``jit(mesh=)`` as the context mesh."""
        infer, inputs = self._trace_inputs(args, kwargs, arg_leaves)
        with tracing_mesh(self.mesh):
            traced = jax_private.jit_traced(*infer(*inputs))
        jax_private.check_no_escaped_tracers(traced)
        return traced

    def _trace_inputs(self, args: tuple, kwargs: dict, arg_leaves: Sequence[LeafSignature]
                      ) -> tuple[Any, tuple]:
        """What jax traces the function from (``jax_private.jit_trace_inputs``): each
        dynamic argument leaf as jax.jit traces it (``traced_aval``), static ones as
        they are."""
        given = jax.tree.leaves(self.out_shardings, is_leaf=signature.is_sharding_leaf)
        signature.check_program_meshes(
            arg_leaves, [(f"out_shardings leaf {i}", s) for i, s in enumerate(given)],
            self.options.single_device)
        avals = iter(traced_aval(leaf) for leaf in arg_leaves)
        trace_args, trace_kwargs = self._abstract_call_args(args, kwargs, avals)
        return jax_private.jit_trace_inputs(self._jax_jit, trace_args, trace_kwargs)

    def _lower_uncached(self, traced, args, kwargs, arg_leaves, mesh, propagate,
                        platforms, devices, lowering_parameters=None, called=False
                        ) -> tuple[_CachedLowering, ir.Module]:
        """The cache entry written from ``traced``, and the module it was written from
        (for this call's ``Lowered`` alone: later hits parse their own copy of the entry)."""
        if jax_private.has_high_types(traced):
            raise hitypes.HighLevelProgramError(
                f"shardc lowers no program with jax's high-level types (results or "
                f"closed-over boxes of {function_name(self.fun)}): it runs them, as "
                "jax.jit does, by lowering the types to arrays at each call")
        out_tree = jax.tree.structure(traced.out_info)
        results = self._result_signature(traced.out_info, mesh, signature.result_types(traced))
        named_inside = jax_private.meshes_in(traced.jaxpr)
        signature.check_body_devices(arg_leaves, results, named_inside,
                                     self._requested_devices(),
                                     self._committed_arguments(args, kwargs, arg_leaves, called)
                                     if named_inside else ())
        body_meshes = tuple(mesh for _, mesh in named_inside)
        jax_lowered = export.lowered_with_exported_calls(
            jax_private.without_dead_code(
                traced, *effects.lowering_shardings(traced.jaxpr, arg_leaves, results),
                self.options.keep_unused),
            arg_leaves, results, cut_from=traced.jaxpr,
        ).lower(lowering_platforms=platforms,
                _private_parameters=jax_private.with_embedded_constants(lowering_parameters))
        jax_module = jax_private.refined_module(jax_lowered)
        host_callbacks, keepalive = jax_private.host_callbacks_of(jax_lowered)
        program_effects = effects.program_effects(jax_lowered)
        closed_refs = effects.closed_ref_leaves(program_effects)
        values = effects.program_values(program_effects, arg_leaves, results, closed_refs)

        # jax's module may be shared by its lowering cache: shardc rewrites a copy,
        # in jax's context (a fresh one per jax lowering, which has every dialect).
        with jax_module.context, ir.Location.unknown():
            module, symbols = annotated.annotated_copy(jax_module, *values, devices, program_effects)
            donation.warn_unusable_donations(jax_module, *values, program_effects.tokens,
                                             symbols.device_count())
            unpropagated = resolution = None
            # Shardy propagates static shapes only: a module exported for symbolic
            # shapes keeps the given shardings, as jax's export does, and is
            # propagated once its caller's shapes are known.
            if (propagate and symbols.device_count() is not None
                    and not jax_private.has_dimension_variables(jax_lowered)):
                # Propagate what XLA's own Shardy would see: the module as XLA's
                # import rewrites it (unpropagated, XLA makes the same rewrites).
                # The walk that rewrites takes the census Shardy's import stage needs.
                census = xla_import_rewrites(module.operation, census=True)
                unpropagated = annotated.Unpropagated(jax_module, *values, devices, program_effects)
                resolution = annotated.propagate(module, unpropagated, self.propagation, census)
                # Propagated in XLA's order; what reads the module next reads jax's.
                restore_jax_order(module.operation)
            entry = annotated.copy_module(module)
        debug_info = traced.jaxpr.jaxpr.debug_info
        return _CachedLowering(
            entry, out_tree, results, symbols.attrs, host_callbacks, keepalive,
            unpropagated,
            tuple(debug_info.safe_arg_names(len(arg_leaves))) if debug_info else None,
            body_meshes,
            cost_aware_resolution=resolution, effects=program_effects,
            closed_refs=tuple(closed_refs),
            jax_lowering=jax_private.jit_lowering(jax_lowered),
        ), module

    def _committed_arguments(self, args: tuple, kwargs: dict, arg_leaves: Sequence[LeafSignature],
                             called: bool) -> list[tuple[str, tuple]]:
        """The committed arguments that follow their data, as jax's errors name them."""
        dynamic = (tuple(self._split_static(args)[0]),
                   {k: v for k, v in kwargs.items() if k not in self.static_argnames})
        names = jax_private.argument_names(self.fun, args, kwargs, self.static_argnums,
                                           self.static_argnames)
        return signature.committed_arguments(jax.tree.leaves(dynamic), arg_leaves, names,
                                             error_name(self.fun, called))

    def _result_signature(self, out_info: Any, mesh: AnyMesh | None, types: list
                          ) -> list[LeafSignature]:
        """The results' signatures: their shardings, types and the layouts asked for them."""
        results = signature.result_signature(out_info, self.out_shardings, mesh, types=types,
                                             api_name=self.options.api_name)
        if self.options.single_device is not None:
            results = memories.given_on_one_device(results, signature.broadcast_shardings(
                self.options.given_out_shardings, out_info, "out_shardings"))
        return layouts.result_layouts(results, jax.tree.structure(out_info),
                                      self.options.out_formats)

    def _abstract_call_args(self, args, kwargs, avals) -> tuple[list, dict]:
        # Replace every dynamic leaf by its traced ShapeDtypeStruct, in the
        # flattening order argument_signature used; static values stay as they are.
        static = set(self._static_positions(len(args)))
        dynamic = [a for i, a in enumerate(args) if i not in static]
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        abstract_dynamic = [abstract_tree(a, avals) for a in dynamic]
        abstract_kwargs = {k: abstract_tree(dyn_kwargs[k], avals) for k in sorted(dyn_kwargs)}
        it = iter(abstract_dynamic)
        call_args = [a if i in static else next(it) for i, a in enumerate(args)]
        call_kwargs = {k: (v if k in self.static_argnames else abstract_kwargs[k])
                       for k, v in kwargs.items()}
        return call_args, call_kwargs

    def _make_lowered(self, cached, module, in_tree, arg_leaves, mesh, static, devices
                      ) -> Lowered:
        if module is None:
            module = annotated.copy_module(cached.module)
            # A hit may come with another concrete mesh of the same shape.
            results = self._result_signature(
                jax.tree.unflatten(cached.out_tree, [leaf.aval for leaf in cached.results]),
                mesh, signature.leaf_types(cached.results))
        else:  # the miss that just wrote the entry, for this very mesh
            results = list(cached.results)
        signature.check_result_devices(arg_leaves, results)
        meshes = _meshes_by_symbol(cached.mesh_symbols, [*arg_leaves, *results],
                                   [*([devices] if devices is not None else []),
                                    *cached.body_meshes])
        return Lowered(
            module,
            in_tree,
            arg_leaves,
            cached.out_tree,
            results,
            meshes,
            static=static,
            host_callbacks=cached.host_callbacks,
            keepalive=cached.keepalive,
            unpropagated=cached.unpropagated,
            compiler_options=self.options.compiler_options,
            cost_aware_resolution=cached.cost_aware_resolution,
            effects=cached.effects,
            closed_refs=cached.closed_refs,
        )


def _platform(leaves: Sequence[LeafSignature]) -> str:
    """The platform the program is lowered for: its meshes' devices', else the default.

    jax asks for it when the arguments are traced on abstract meshes.
    """
    for leaf in leaves:
        if leaf.sharding is not None:
            device = getattr(leaf.sharding.mesh.abstract_mesh, "abstract_device", None)
            if device is not None:
                return device.platform
    return jax.default_backend()


def _meshes_by_symbol(
    mesh_symbols: dict[str, ir.Attribute], leaves: Sequence[LeafSignature],
    others: Sequence[Mesh],
) -> list[AnyMesh]:
    """One jax mesh per symbol: this call's concrete mesh where a leaf has one, else
    the first of ``others`` (the context mesh, the meshes named in the body) of its
    shape."""
    # Leaves mostly share a few meshes: each is asked its axes once.
    axes_of: dict[AnyMesh, tuple] = {}
    given = [leaf.sharding.mesh for leaf in leaves if leaf.sharding is not None]
    meshes = []
    for attr in mesh_symbols.values():
        axes = _attr_axes(attr)
        chosen = None  # the first concrete mesh of these axes, else the first of any kind
        for mesh in itertools.chain(given, others):
            if mesh not in axes_of:
                axes_of[mesh] = sdy.mesh_axes(mesh)
            if axes_of[mesh] == axes:
                if isinstance(mesh, Mesh):
                    chosen = mesh
                    break
                if chosen is None:
                    chosen = mesh
        meshes.append(chosen if chosen is not None else sdy.mesh_from_attr(attr))
    return meshes


def _attr_axes(attr: ir.Attribute) -> tuple[tuple[str, int], ...]:
    return tuple(
        (sdy.MeshAxisAttr(a).name, sdy.MeshAxisAttr(a).size) for a in sdy.MeshAttr(attr).axes
    )


class _NotGiven:
    """The function not given: ``jit(in_shardings=...)`` without it is a decorator."""


_NOT_GIVEN = _NotGiven()


@jax_private.api_boundary
def jit(
    fun: Callable | _NotGiven = _NOT_GIVEN,
    in_shardings: Any = None,
    out_shardings: Any = None,
    *,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Sequence[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Sequence[str] | None = None,
    keep_unused: bool = False,
    device: Any = None,
    backend: str | None = None,
    inline: bool = False,
    compiler_options: dict[str, Any] | None = None,
    mesh: AnyMesh | None = None,
    propagate: bool = True,
    strict: Any = False,
    propagation: str = "shardy",
    memory_budget: int | None = None,
) -> JitFunction | auto.AutoJitFunction | Callable[[Callable], JitFunction]:
    """Prepare ``fun`` for lowering with shardc; ``jax.jit``'s signature and semantics.

    ``in_shardings`` / ``out_shardings`` are pytree prefixes of the positional
    arguments / results whose leaves are ``NamedSharding``, ``PartitionSpec``
    (resolved against ``mesh`` or the active ``jax.set_mesh``) or ``None``
    (unspecified: an argument then follows its data's sharding); they may be
    given positionally, as with ``pjit``. ``static_argnums`` / ``static_argnames``,
    ``donate_argnums`` / ``donate_argnames``, ``keep_unused``, ``device`` /
    ``backend``, ``inline`` and ``compiler_options`` are jax.jit's, validated
    and completed (names from numbers and back) as jax.jit does it, with its
    errors; without ``fun``, ``jit(...)`` returns a decorator.
    ``mesh`` is the context mesh while tracing and what bare ``PartitionSpec``s
    resolve against. ``propagate`` runs shardc's propagation pipeline on every
    lowering (the default), so the module fixes every value's sharding before
    XLA sees it. ``strict`` (``True`` or a ``checks.strict.StrictOptions``)
    turns what shardc would do silently (padding, replicating around ops
    without a rule, implicit reshards) into a ``StrictModeError`` at the
    user's source line. ``propagation`` picks how conflicts are resolved:
    ``"shardy"`` (Shardy's heuristics, the default) or ``"cost-aware"``
    (fewest predicted collective bytes, ``shardc.compiler.cost_aware``).
    An ``AUTO`` leaf (or tree) of the shardings asks shardc to choose them
    (``shardc.compiler.auto``), within ``memory_budget`` bytes per device.
    """
    if isinstance(fun, _NotGiven):
        return functools.partial(
            jit, in_shardings=in_shardings, out_shardings=out_shardings,
            static_argnums=static_argnums, static_argnames=static_argnames,
            donate_argnums=donate_argnums, donate_argnames=donate_argnames,
            keep_unused=keep_unused, device=device, backend=backend, inline=inline,
            compiler_options=compiler_options, mesh=mesh, propagate=propagate, strict=strict,
            propagation=propagation, memory_budget=memory_budget,
        )  # fmt: skip
    jit_options.check_shardc_options(mesh, propagate, strict, propagation, memory_budget)
    if auto.has_auto(in_shardings, out_shardings) or memory_budget is not None:
        return auto.AutoJitFunction(
            fun, in_shardings, out_shardings, mesh=mesh, memory_budget=memory_budget,
            make_jit=lambda given_in, given_out, function=fun, on=mesh: jit(
                function, given_in, given_out, static_argnums=static_argnums,
                static_argnames=static_argnames, donate_argnums=donate_argnums,
                donate_argnames=donate_argnames, keep_unused=keep_unused, device=device,
                backend=backend, inline=inline, compiler_options=compiler_options, mesh=on,
                propagate=propagate, strict=strict, propagation=propagation))
    options = jit_options.parse(
        fun, in_shardings, out_shardings, static_argnums=static_argnums,
        static_argnames=static_argnames, donate_argnums=donate_argnums,
        donate_argnames=donate_argnames, keep_unused=keep_unused, device=device,
        backend=backend, inline=inline, compiler_options=compiler_options,
    )  # fmt: skip
    return JitFunction(
        fun,
        options=options,
        mesh=mesh,
        propagate=propagate,
        strict=strict,
        propagation=propagation,
    )


def _jit_of_flat(fun: Callable, in_shardings: tuple, out_shardings: tuple,
                 donate_argnums: tuple, compiler_options: tuple,
                 keep_unused: bool = False) -> JitFunction:
    """What executes an equation of shardc's jit primitive: shardc's jit of its jaxpr.

    The equation's shardings go in as they are: transformations write ones users
    may not (``vmap`` leaves the batch dimension ``UNCONSTRAINED``), which
    ``jit``'s own validation of user shardings would refuse.
    """
    options = jit_options.parse(
        fun, None, None, static_argnums=None, static_argnames=None,
        donate_argnums=donate_argnums, donate_argnames=None, keep_unused=keep_unused, device=None,
        backend=None, inline=False, compiler_options=dict(compiler_options))
    options = dataclasses.replace(options, in_shardings=in_shardings, out_shardings=out_shardings)
    # The equation's concrete mesh is its context mesh, as jax's jit executes it.
    mesh = next((s.mesh for s in (*in_shardings, *out_shardings)
                 if isinstance(s, NamedSharding) and isinstance(s.mesh, Mesh)
                 and s.mesh.axis_names), None)
    return JitFunction(fun, options=options, mesh=mesh, propagate=True)


SHARDC_JIT = binding.jit_primitive(_jit_of_flat)


def _parameter_names(fun: Callable) -> set[str]:
    try:
        return set(inspect.signature(fun).parameters)
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return set()
