"""``Traced`` and ``Lowered``: a function traced, then lowered, by ``shardc.compiler.jit``.

``jit(f).trace(*args)`` (``shardc.compiler.api``) returns a ``Traced``, shaped
like ``jax.stages.Traced``: the jaxpr jax traced (with the arguments'
shardings, as jax.jit traces them), the output types and shardings, and
``lower()``, which lowers those same arguments with shardc.

``jit(f).lower(*args)`` returns a ``Lowered``. As jax's, its ``as_text()`` and
``compiler_ir()`` are the module as lowered, with the shardings the user gave
(jax.jit's text: the module handed to the compiler, which propagates).
``module`` is its own ``ir.Module`` after shardc's propagation, every value's
sharding decided (``as_text(propagated=True)``): what it compiles through XLA
(``compile``), exports and answers questions about before compiling:
``check``, ``comm_report``, ``explain`` and ``memory_estimate``, thin layers
over ``shardc.compiler.checks``, ``cost`` and ``explain``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
from jax.sharding import AbstractMesh, Mesh
from jaxlib.mlir import ir

from shardc.compiler import annotation, layouts
from shardc.compiler.checks.program import check_lowered
from shardc.compiler.cost import step_time
from shardc.compiler.cost_aware import Resolution
from shardc.compiler.effects import program_values
from shardc.compiler.explain import explain
from shardc.compiler.explain.reports import ProgramReports
from shardc.compiler.export import export_lowering
from shardc.compiler.function import options as jit_options
from shardc.compiler.function import unused_arguments
from shardc.compiler.function.annotated import copy_module
from shardc.compiler.signature import LeafSignature
from shardc.compiler.stages.shardy_pipeline import propagated_copy
from shardc.dialects import jax_private
from shardc.dialects.errors import InvalidArgumentError, PlatformMismatchError
from shardc.dialects.xla_form import module_for_xla
from shardc.runtime.compiled import Compiled, StaticArguments, compile_program, program_mesh
from shardc.runtime.compiled import device_assignment as program_devices
from shardc.runtime.effects import NO_EFFECTS, ProgramEffects
from shardc.runtime.stage import Stage


def _from_jax(name: str, doc: str) -> property:
    """A read-only attribute that jax's own ``Traced`` already answers."""
    return property(lambda self: getattr(self._jax_traced, name), doc=doc)


class Traced(jax.stages.Traced):
    """A traced function: ``jaxpr``, ``out_info``, ``args_info``, ``lower()``...

    A ``jax.stages.Traced`` (code that checks for one accepts it) whose every
    attribute is answered here: jax's own ``Traced`` it wraps, or shardc's
    lowering. jax's constructor is not run: its state is the wrapped object's.
    """

    jaxpr = _from_jax("jaxpr", "The closed jaxpr jax traced.")
    fun_name = _from_jax("fun_name", "The traced function's name.")
    in_avals = _from_jax(
        "in_avals", "The arguments' abstract values as traced, as ``(args, kwargs)``.")
    in_tree = _from_jax("in_tree", "The pytree structure of ``(args, kwargs)``.")
    args_info = _from_jax(
        "args_info", "Per argument, its abstract value and whether it is donated.")
    donate_argnums = _from_jax("donate_argnums", "The donated arguments' flat indices.")
    out_avals = _from_jax("out_avals", "The results' abstract values (no given shardings).")
    lojax = _from_jax("lojax", "The low-level form of the trace (jax's ``LoJax``).")

    def __init__(self, jax_traced: Any, lower: Callable[..., Any], out_info: Any) -> None:
        self._jax_traced = jax_traced
        self._lower = lower
        self._out_info = out_info

    @property
    def out_info(self) -> Any:
        """The results as ``jax.ShapeDtypeStruct``s carrying their given shardings."""
        return self._out_info

    @property
    def out_tree(self) -> Any:
        """The pytree structure of the results."""
        return jax.tree.structure(self._out_info)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Evaluate the traced jaxpr on these arguments (op by op), as jax's does."""
        return self._jax_traced(*args, **kwargs)

    def lower(self, *, lowering_platforms: Any = None, propagate: bool | None = None,
              _private_parameters: Any = None) -> Any:
        """Lower with shardc (a ``shardc.compiler.Lowered``), as ``jax.stages.Traced.lower``:
        ``lowering_platforms`` (e.g. ``("tpu",)``) lowers for other platforms than the
        arguments' devices'; ``propagate=`` as in ``jit(...).lower``;
        ``_private_parameters`` are jax's lowering parameters (``jax.export`` passes
        its own), used for jax's lowering of the traced program."""
        if propagate is not None:
            propagate = jit_options.propagate_flag(propagate)
        return self._lower(lowering_platforms=lowering_platforms, propagate=propagate,
                           lowering_parameters=_private_parameters)


AnyMesh = Mesh | AbstractMesh


class UnpropagatedForms(Protocol):
    """The forms of a propagated program before propagation, made when first asked."""

    def annotated(self) -> ir.Module:
        """A new copy of jax's module with the given shardings (jax.jit's lowered
        module)."""

    def __call__(self) -> ir.Operation:
        """That module as XLA's import rewrites it: where propagation starts."""


def _dialect(dialect: str | None) -> str:
    if dialect in (None, "stablehlo"):
        return "stablehlo"
    if dialect == "hlo":
        return "hlo"
    raise ValueError(f"unknown dialect: {dialect}")


class Lowered(Stage, jax.stages.Lowered):
    """A function lowered to StableHLO with shardc's ``sdy`` shardings.

    ``module`` is this object's own ``ir.Module``, after shardc's propagation
    (unless lowered with ``propagate=False``): what ``compile`` compiles; passes
    may change it in place without touching the cache or other ``Lowered``
    objects. ``as_text()`` and ``compiler_ir()`` are jax's: the module as
    lowered, before propagation; ``propagated=True`` gives ``module``. A
    ``jax.stages.Lowered`` (code that checks for one accepts it) that answers
    every attribute of jax's itself; jax's constructor is not run.
    """

    # jax's flag for lowerings made by transformations that take no keyword
    # arguments (pmap's); jit's take them.
    _no_kwargs = False

    def __init__(
        self,
        module: ir.Module,
        in_tree: Any,
        args: Sequence[LeafSignature],
        out_tree: Any,
        results: Sequence[LeafSignature],
        meshes: Sequence[AnyMesh],
        static: StaticArguments = StaticArguments(),
        host_callbacks: Sequence = (),
        keepalive: Sequence = (),
        unpropagated: UnpropagatedForms | None = None,
        compiler_options: tuple = (),
        cost_aware_resolution: Resolution | None = None,
        effects: ProgramEffects = NO_EFFECTS,
        closed_refs: Sequence[LeafSignature] = (),
    ) -> None:
        self.module = module
        self._effects = effects
        self._closed_refs = tuple(closed_refs)
        self._cost_aware_resolution = cost_aware_resolution
        self._compiler_options = tuple(compiler_options)
        self._static = static
        self._host_callbacks = tuple(host_callbacks)
        self._keepalive = tuple(keepalive)
        self._unpropagated = unpropagated
        self._lowered_module: ir.Module | None = None
        self._program_reports: ProgramReports | None = None
        self._reports_read: ir.Module | None = None  # the ``module`` they were made for
        self._in_tree = in_tree
        self._args = tuple(args)
        self._out_tree = out_tree
        self._results = tuple(results)
        self._meshes = tuple(meshes)

    # What the search of AUTO shardings chose and why (``shardc.compiler.auto``'s
    # ``AutoReport``, set by the jit that made this); None without AUTO.
    auto: Any = None

    def auto_report(self) -> Any:
        """Why each AUTO sharding won and what the runner-up would have cost
        (``AutoReport``: ``choices``, ``format_text()``); None without AUTO."""
        return self.auto

    # Per argument leaf, whether it is donated, and jax's name for it (set by the jit
    # that made this).
    donated: tuple[bool, ...] = ()
    arg_names: tuple[str, ...] | None = None
    # The platforms given as ``Traced.lower(lowering_platforms=...)``; None: the devices'.
    platforms: tuple[str, ...] | None = None
    # Whether a SingleDeviceSharding given to jit, or jit(device=/backend=), chose the
    # device (results committed).
    placed_on_request: bool = False
    # The device jit(device=/backend=) or a SingleDeviceSharding asked for: compile()
    # runs there unless given devices.
    requested_devices: tuple | None = None
    # jit(device=/backend=): every argument is moved there, as by device_put, by the
    # compiled program's calls too (as jax's).
    placed_by_jit: bool = False
    # jit(keep_unused=True): the compiled program takes the arguments it never reads
    # too; without it, as jax.jit's, it leaves them out (``unused_arguments``).
    keep_unused: bool = True

    # Where the jit that made this keeps the executables of its lowering, shared by
    # its calls and every ``compile()`` of it (``function.caches.SharedExecutables``);
    # None: each compile() compiles.
    executables: Any = None

    # jax's lowering of the traced program shardc annotated (set by the jit that made
    # this): what ``_lowering`` is made from.
    jax_lowering: Any = None

    @property
    def _lowering(self) -> Any:
        """jax's lowering object for this program with shardc's module and shardings
        (what ``jax.export`` and code written against ``jax.stages.Lowered`` read:
        ``compile_args``, ``const_args``, ``stablehlo()``);
        ``shardc.compiler.export``."""
        return export_lowering(self.jax_lowering, self.module, self._args, self._results,
                               self._meshes)

    def as_text(self, dialect: str | None = None, *, debug_info: bool = False,
                propagated: bool = False) -> str:
        """The module as text, as ``jax.stages.Lowered.as_text``: MLIR (``"stablehlo"``,
        the default) or XLA's HLO (``"hlo"``); ``debug_info`` adds the source
        locations. The MLIR is the module as lowered, with the shardings given
        (jax.jit's text); ``propagated=True``: shardc's propagated ``module``.
        The HLO is always converted from the propagated module (``compiler_ir``)."""
        if _dialect(dialect) == "hlo":
            return jax_private.hlo_text(self.compiler_ir("hlo"), debug_info=debug_info)
        module = self.compiler_ir(propagated=propagated)
        return module.operation.get_asm(enable_debug_info=debug_info)

    def compiler_ir(self, dialect: str | None = None, *, propagated: bool = False) -> Any:
        """The module, as ``jax.stages.Lowered.compiler_ir``: ``"stablehlo"`` (the
        default) is an ``ir.Module``, the module as lowered with the shardings given
        and without the arguments the program never reads unless ``keep_unused``
        (as jax.jit's; this object's own copy), or with ``propagated=True`` this
        object's ``module``, after shardc's propagation. ``"hlo"`` is the
        ``XlaComputation`` of the propagated module as ``.compile()`` hands it to XLA
        (XLA's conversion can abort the process on the module as it is)."""
        if _dialect(dialect) == "hlo":
            return jax_private.xla_computation(module_for_xla(self.module))
        if propagated:
            return self.module
        if self._lowered_module is None:
            # Without propagation, ``module`` is the module as lowered. jax.jit's
            # lowering takes no argument its program never reads (unless
            # ``keep_unused``): that module is what its text shows. Those the
            # compiled program leaves out, where the module as lowered (whose calls
            # are not inlined) reads none of them either.
            lowered = self.module if self._unpropagated is None else self._unpropagated.annotated()
            dropped = set(self._unused_arguments(self.module)).intersection(
                self._unused_arguments(lowered))
            if dropped:
                lowered = unused_arguments.without(lowered, tuple(dropped))
            # jax.jit's lowering pins its scalar arguments replicated.
            scalars = annotation.unsharded_scalars(lowered)
            if scalars:
                if lowered is self.module:
                    lowered = copy_module(lowered)
                with lowered.context, ir.Location.unknown():
                    annotation.replicate_scalars(lowered, scalars)
            self._lowered_module = lowered
        return self._lowered_module

    def cost_analysis(self) -> Any:
        """XLA's cost estimate of the unoptimized module (see ``Compiled.cost_analysis``)."""
        return jax_private.hlo_cost_analysis(self.compiler_ir("hlo"))

    @property
    def in_tree(self) -> Any:
        """The pytree structure of ``(args, kwargs)`` (dynamic arguments)."""
        return self._in_tree

    @property
    def out_tree(self) -> Any:
        """The pytree structure of the results."""
        return self._out_tree

    @property
    def args_info(self) -> Any:
        """Per argument: its type as traced and whether it is donated
        (``jax.stages.ArgInfo``)."""
        donated = self.donated or (False,) * len(self._args)
        return jax_private.args_info(
            self._in_tree,
            [jax_private.typed_aval(leaf.aval, leaf.type_sharding, memory_space=leaf.memory_space)
             for leaf in self._args],
            donated)

    @property
    def in_avals(self) -> Any:
        """The arguments' types with the shardings they are lowered with, as
        ``(args, kwargs)`` (``jax.core.ShapedArray``s, as jax's)."""
        # An argument placed by a sharding of another class (read as a NamedSharding
        # to lower it) has no sharding in its type, as in jax's.
        return jax.tree.unflatten(jax_private.args_info_tree(self._in_tree), [
            jax_private.typed_aval(leaf.aval, None if leaf.placed_as is not None else leaf.sharding,
                                   memory_space=leaf.memory_space)
            for leaf in self._args])

    @property
    def out_info(self) -> Any:
        """The results as ``jax.ShapeDtypeStruct``s with their shardings (``Format``s where
        a concrete layout was asked for)."""
        return jax.tree.unflatten(self._out_tree, [
            jax.ShapeDtypeStruct(leaf.aval.shape, leaf.aval.dtype,
                                 sharding=layouts.described(leaf))
            for leaf in self._results])

    @property
    def in_shardings(self) -> Any:
        """Per-argument ``NamedSharding`` (``None`` if unspecified) as ``(args, kwargs)``."""
        return jax.tree.unflatten(self._in_tree, [leaf.sharding for leaf in self._args])

    @property
    def out_shardings(self) -> Any:
        """Per-result ``NamedSharding`` (``None`` if unspecified), in the output's pytree."""
        return jax.tree.unflatten(self._out_tree, [leaf.sharding for leaf in self._results])

    @property
    def out_avals(self) -> Any:
        """The results as ``jax.ShapeDtypeStruct``s, in the output's pytree."""
        return jax.tree.unflatten(self._out_tree, [leaf.aval for leaf in self._results])

    @property
    def meshes(self) -> tuple[AnyMesh, ...]:
        """Every mesh the shardings use, one per ``sdy.mesh`` symbol, concrete if known."""
        return self._meshes

    @property
    def mesh(self) -> AnyMesh | None:
        """The program's mesh (the first with axes, if it uses several of one device
        count; an axis-less one only when there is no other)."""
        main = program_mesh(self._meshes)
        if main is None and self._meshes:
            return self._meshes[0]
        return main

    @property
    def cost_aware_resolution(self) -> Resolution | None:
        """What ``propagation="cost-aware"`` decided: the search's
        ``shardc.compiler.cost_aware.Resolution`` (each conflict's alternatives
        and predicted bytes, the pins kept, Shardy's and the search's predicted
        bytes; ``format_text()`` prints it). None when the cost-aware search did
        not run: the default ``propagation="shardy"``, ``propagate=False``, or a
        program without shardings. Shared by every ``Lowered`` of one cached
        lowering: read it, do not change it."""
        return self._cost_aware_resolution

    def compile(self, compiler_options: dict[str, Any] | None = None, *,
                device_assignment: Sequence | None = None) -> Compiled:
        """Compile through XLA for the mesh's devices (or ``device_assignment``, in order),
        as ``jax.stages.Lowered.compile``: ``compiler_options`` are XLA's, added to
        those given to ``jit``.

        A program lowered for an ``AbstractMesh`` runs on ``device_assignment``
        when given, else on the first devices of the default backend.

        When ``propagation="cost-aware"`` changed Shardy's choices, those
        choices are compiled too and kept if XLA partitions them with fewer
        collective bytes or in less memory (the route promises neither more of
        one nor of the other than Shardy's choices, and the cost model and XLA
        can disagree on either); then ``Compiled.kept_shardy`` says so and
        ``as_text`` shows what runs.
        """
        if device_assignment is None:
            device_assignment = self.requested_devices
        elif isinstance(device_assignment, (str, bytes)) or not all(
                isinstance(d, jax.Device) for d in device_assignment):
            # A string would pass for a sequence of as many devices as it has characters.
            raise InvalidArgumentError(
                f"device_assignment must be a tuple of jax devices, got {device_assignment!r}")
        self._check_platforms(device_assignment)
        options = self._compiler_options + tuple((compiler_options or {}).items())
        if self.executables is not None:
            devices = program_devices(self._meshes, device_assignment)
            kept = self.executables.get(self.module, devices, options)
            if kept is not None:
                kept.reference = getattr(self, "reference", None)
                return kept
        compiled = self._compile(self.module, device_assignment, options)
        # Shardy's choices, exported now (the first compile) where the search changed them.
        fallback = (self._cost_aware_resolution.fallback
                    if self._cost_aware_resolution is not None else None)
        if fallback is not None:
            with self.module.context:
                shardy = self._compile(ir.Module.parse(fallback), device_assignment,
                                       options)
            if (shardy.collective_bytes() < compiled.collective_bytes()
                    or shardy.memory_bytes() < compiled.memory_bytes()):
                shardy.kept_shardy = True
                compiled = shardy
        if self.executables is not None:
            self.executables.put(self.module, devices, options, compiled)
        return compiled

    def _check_platforms(self, device_assignment: Sequence | None) -> None:
        """A lowering for given platforms on abstract meshes compiles only for given
        devices (as jax's; whichever platform they are on, as jax lets it)."""
        if self.platforms is None or device_assignment is not None:
            return
        if not any(isinstance(m, Mesh) for m in self._meshes):
            raise PlatformMismatchError(
                "device_assignment cannot be `None` during compilation. Please pass a tuple "
                "of devices to `.compile(device_assignment=)`: the program was lowered for "
                f"platforms {self.platforms} on abstract meshes, which name no devices")

    def _unused_arguments(self, module: ir.Module) -> tuple[int, ...]:
        """The argument leaves ``module`` never reads, which jax.jit's program leaves
        out unless ``keep_unused``. Read from the propagated ``module``, whose calls
        are inlined: an argument only passed on to a nested jit that ignores it is
        unread, as jax's DCE of the jaxpr finds it."""
        if self.keep_unused:
            return ()
        return unused_arguments.unused(module, self._effects, len(self._args))

    def _compile(self, module: ir.Module, device_assignment: Sequence | None,
                 compiler_options: tuple) -> Compiled:
        inputs, outputs = program_values(self._effects, self._args, self._results,
                                         self._closed_refs)
        kept = None
        dropped = self._unused_arguments(module)
        if dropped:
            module = unused_arguments.without(module, dropped)
            kept = tuple(i for i in range(len(inputs)) if i not in set(dropped))
            inputs = [inputs[i] for i in kept]
        compiled = compile_program(
            module,
            in_tree=self._in_tree,
            out_tree=self._out_tree,
            inputs=inputs,
            outputs=outputs,
            meshes=self._meshes,
            devices=device_assignment,
            static=self._static,
            host_callbacks=self._host_callbacks,
            keepalive=self._keepalive,
            compiler_options=compiler_options,
            placed_on_request=self.placed_on_request,
            effects=self._effects,
            kept=kept,
            name=jax_private.lowering_name(self.jax_lowering),
        )
        compiled.reference = getattr(self, "reference", None)  # for Compiled.verify
        compiled.args_info = self.args_info
        compiled.in_avals = self.in_avals
        compiled.donates = any(self.donated)
        compiled.arg_names = self.arg_names
        compiled.placed_by_jit = self.placed_by_jit
        return compiled

    def check(self, *, raise_on_error: bool = False, **options: Any) -> list:
        """Run the sharding checks; see ``shardc.compiler.checks.program.check_lowered``."""
        return check_lowered(self.module, raise_on_error=raise_on_error, **options)

    def comm_report(self, *, platform: str | None = None) -> Any:
        """Predict XLA's collectives per op and source line (a ``CommReport``) as XLA
        compiles them for ``platform`` ("cpu" or "tpu"; default the lowering's), of the
        choices ``compile`` is predicted to run (``_kept_reports``).

        Made once per platform, from one propagated read of ``module`` that
        ``memory_estimate`` shares (``compiler.explain.reports``): a ``module`` changed in
        place afterwards is not read again; one assigned anew is."""
        return self._reports().comm_report(platform or self.target_platform)

    def step_time(self, *, platform: str | None = None) -> Any:
        """Model one step's compute and communication time per device (a
        ``StepTime``) on ``platform`` ("cpu", "tpu", "gpu"; default the lowering's);
        ``shardc.compiler.cost.step_time``."""
        return step_time(propagated_copy(self.module, export=False),
                         platform=platform or self.target_platform)

    @property
    def target_platform(self) -> str:
        """The platform the predictions are for by default: the first of
        ``lower(lowering_platforms=...)``, else that of the devices the program
        compiles for (its mesh's, else the default backend's)."""
        if self.platforms:
            return self.platforms[0]
        devices = self.requested_devices or next(
            (tuple(m.devices.flat) for m in self._meshes if isinstance(m, Mesh)), None)
        return devices[0].platform if devices else jax.default_backend()

    # -- explain: thin layers over shardc.compiler.explain ---------
    def explain(self, **filters: Any) -> Any:
        """Why each value is sharded as it is (an ``ExplainTable``); ``filters`` as its ``filter``."""
        # The form before propagation, where kept: explain propagates a copy of it
        # (leaving it unchanged for the next call) and records each axis's origin
        # exactly ("recorded", not "derived").
        module = self.module if self._unpropagated is None else self._unpropagated()
        table = explain(module, user_args=[a.sharding is not None for a in self._args],
                        user_results=[r.sharding is not None for r in self._results])
        return table.filter(**filters) if filters else table

    def memory_estimate(self, *, platform: str | None = None) -> Any:
        """Per-device bytes of arguments, outputs, temporaries and donated buffers the
        outputs reuse, before compiling (a ``MemoryEstimate``), as XLA lays them out
        on ``platform`` ("cpu" or "tpu"; default the lowering's); read as
        ``comm_report`` reads ``module``."""
        return self._reports().memory_estimate(platform or self.target_platform,
                                               self.arg_names)

    def _reports(self) -> ProgramReports:
        """Both predictions' one read of the choices ``compile`` runs (read anew when
        ``module`` is another)."""
        if self._program_reports is None or self._reports_read is not self.module:
            self._reports_read = self.module
            self._program_reports = self._kept_reports()
        return self._program_reports

    def _kept_reports(self) -> ProgramReports:
        """The reports of ``module``, or, where the cost-aware search changed Shardy's
        choices, of whichever of the two ``compile`` is predicted to keep: Shardy's
        when they are predicted to compile to fewer collective bytes or in less memory
        per device for the target platform (``compile``'s rule, on the predictions:
        the search prices collectives alone, so Shardy's may take less memory)."""
        searched = ProgramReports(self.module)
        fallback = (self._cost_aware_resolution.fallback
                    if self._cost_aware_resolution is not None else None)
        if fallback is None:
            return searched
        with self.module.context:
            shardy = ProgramReports(ir.Module.parse(fallback))
        platform = self.target_platform

        def predicted(reports: ProgramReports) -> tuple[int, int]:
            totals = reports.comm_report(platform).totals().values()
            return (sum(t.bytes_per_device for t in totals),
                    reports.memory_estimate(platform, self.arg_names).net_bytes)

        searched_bytes, searched_memory = predicted(searched)
        shardy_bytes, shardy_memory = predicted(shardy)
        keeps_shardy = shardy_bytes < searched_bytes or shardy_memory < searched_memory
        return shardy if keeps_shardy else searched
