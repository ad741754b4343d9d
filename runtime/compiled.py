"""``Compiled``: a program compiled through XLA for a concrete device order, callable.

``compile_program`` turns an annotated module (the ``Lowered``
after shardc's pipeline) plus the description of its arguments and results
into an executable: SPMD partitioning with the Shardy partitioner, one
partition per device in the mesh's order (non-iota orders included). The
shardings the executable settled on are read back as jax.jit reads them
(``shardc.runtime.result_shardings``); result handlers are built once here,
and each call only places arguments, executes and wraps.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

import jax
import numpy as np
from jax.experimental.layout import Format
from jax.sharding import AbstractMesh, Mesh, NamedSharding, SingleDeviceSharding
from jaxlib.mlir import ir

from shardc.dialects import jax_private
from shardc.dialects.errors import (
    DeviceMismatchError,
    InvalidArgumentError,
    NotExecutableError,
    PytreeMismatchError,
)
from shardc.dialects.xla_form import module_for_xla
from shardc.runtime import arguments, collectives, layouts, result_shardings, results, tokens
from shardc.runtime.effects import NO_EFFECTS, ProgramEffects, execute_with_tokens
from shardc.runtime.executable import Executable
from shardc.runtime.result_shardings import concrete_mesh, is_open, requested_sharding
from shardc.runtime.stage import Stage
from shardc.runtime.verify import verify


class ValueInfo(Protocol):
    """What the compiler knows of one flattened argument or result."""

    path: str
    aval: jax.ShapeDtypeStruct
    sharding: NamedSharding | None
    # Its type's sharding (``jax.typeof(value).sharding``), on an abstract mesh; None
    # where unknown.
    type_sharding: NamedSharding | None


@dataclasses.dataclass(frozen=True)
class StaticArguments:
    """The static arguments a program was lowered with, by position and by name."""

    positions: tuple[int, ...] = ()
    values: tuple = ()
    keywords: tuple[tuple[str, object], ...] = ()


def program_mesh(meshes: Sequence[Mesh | AbstractMesh]) -> Mesh | AbstractMesh | None:
    """The mesh a program runs on: its first mesh with axes (an axis-less one, such as
    jax's ``@empty_mesh``, says nothing about devices)."""
    return next((m for m in meshes if m.axis_names), None)


def device_assignment(meshes: Sequence[Mesh | AbstractMesh], devices: Sequence | None) -> tuple:
    """The logical device order of a program: the partition ``i`` runs on entry ``i``.

    Explicit ``devices`` win; otherwise the first concrete mesh's order; an
    all-abstract program takes the first devices of the default backend; a
    program without any mesh runs on jax's default device (``jax.default_device``).
    """
    main = program_mesh(meshes)
    size = int(np.prod(main.axis_sizes)) if main is not None else 1
    concrete = [tuple(m.devices.flat) for m in meshes if m.axis_names and isinstance(m, Mesh)]
    if devices is not None:
        concrete.insert(0, tuple(devices))
    if any(order != concrete[0] for order in concrete):
        given = ("device_assignment passed to `.compile` must match the device_assignment "
                 "calculated from array shardings and out_shardings: "
                 if devices is not None else "")
        raise DeviceMismatchError(
            given + "the devices of this program are given in different orders: "
            + "; ".join(str([d.id for d in order]) for order in concrete)
        )
    if concrete:
        if len(concrete[0]) != size:
            raise DeviceMismatchError(
                f"The size of abstract mesh {size} in the program must match the length of "
                f"device assignment: {len(concrete[0])} (the program's mesh has {size} "
                f"devices but {len(concrete[0])} were given)"
            )
        return concrete[0]
    if main is None:
        return (jax_private.default_device(),)
    available = jax.devices()
    if len(available) < size:
        raise DeviceMismatchError(f"the program needs {size} devices; jax has {len(available)}")
    return tuple(available[:size])


class Compiled(Stage, jax.stages.Compiled):
    """A compiled program: call it like the lowered function.

    A ``jax.stages.Compiled`` (code that checks for one accepts it) that answers
    every attribute of jax's itself; jax's constructor is not run.
    """

    _no_kwargs = False  # as jax's for jit: keyword arguments are taken

    def __init__(
        self,
        executable: Any,
        *,
        devices: tuple,
        in_tree: Any,
        out_tree: Any,
        inputs: Sequence[ValueInfo],
        outputs: Sequence[ValueInfo],
        input_shardings: Sequence[jax.sharding.Sharding],
        output_shardings: Sequence[jax.sharding.Sharding],
        static: StaticArguments,
        uses_host_callbacks: bool,
        placed_on_request: bool = False,
        effects: ProgramEffects = NO_EFFECTS,
        input_layouts: Sequence[Any] | None = None,
        output_layouts: Sequence[Any] | None = None,
        placed_layouts: Sequence[Any] | None = None,
        kept: Sequence[int] | None = None,
    ) -> None:
        self._xla_executable = executable
        # What it is made of, as its unloaded form keeps it (``shardc.runtime.executable``).
        self._parts = dict(
            devices=devices, in_tree=in_tree, out_tree=out_tree, inputs=tuple(inputs),
            outputs=tuple(outputs), input_shardings=tuple(input_shardings),
            output_shardings=tuple(output_shardings), static=static,
            uses_host_callbacks=uses_host_callbacks, placed_on_request=placed_on_request,
            effects=effects, input_layouts=input_layouts, output_layouts=output_layouts,
            placed_layouts=placed_layouts, kept=kept)
        # The argument leaves the executable takes (None: every one), as jax's
        # ``kept_var_idx``: ``inputs`` are theirs; the others are neither placed nor
        # passed (``shardc.compiler.function.unused_arguments``).
        self._kept = None if kept is None else tuple(kept)
        # ``inputs`` and ``outputs`` are the program's own after its tokens: the
        # closed-over Refs follow the arguments, Refs' new values are among the
        # results (``effects``); the user's are the leading inputs and the results
        # that write no Ref.
        self._effects = effects
        own = [i for i, source in enumerate(effects.writes or [None] * len(outputs))
               if source is None]
        num_args = in_tree.num_leaves if kept is None else len(kept)
        # The layouts XLA compiled (None each where the backend does not say), and
        # per argument the one jax's C++ dispatch must place it in (None: default).
        # The user's are the leading inputs and the outputs that write no Ref.
        self._input_layouts = tuple(input_layouts or [None] * len(inputs))
        self._output_layouts = tuple((output_layouts or [None] * len(outputs))[i] for i in own)
        self._dispatch_layouts = layouts.dispatch_layouts(
            self._input_layouts, input_shardings, [_physical(i.aval) for i in inputs])
        self.devices = devices
        # False for a program compiled for a topology's devices, not attached here.
        self.runnable = not jax_private.is_compile_only(devices[0].client)
        self._in_tree = in_tree
        self._out_tree = out_tree
        self._static = static
        self._num_positional = len(in_tree.children()[0].children())
        self._with_tokens = uses_host_callbacks or bool(effects.ordered) or effects.unordered
        self._outputs = tuple(outputs[i] for i in own)
        self._input_shardings = tuple(input_shardings[:num_args])
        self._output_shardings = tuple(output_shardings[i] for i in own)
        self._extended_inputs = any(
            jax.dtypes.issubdtype(info.aval.dtype, jax.dtypes.extended) for info in inputs)
        device_set = frozenset(devices)
        self._expected = [
            arguments.ExpectedArgument(info.path, _physical(info.aval), sharding, device_set,
                                       layout=layout, default_layout=dispatch is None,
                                       placed_layout=placed)
            for info, sharding, layout, dispatch, placed in zip(
                inputs, input_shardings, self._input_layouts, self._dispatch_layouts,
                placed_layouts or [None] * len(inputs))
        ]
        self._expected_by_jit = [
            dataclasses.replace(expected, moves_committed=getattr(info, "moved_by_jit", False))
            for info, expected in zip(inputs, self._expected)]
        self._handlers = [
            results.result_handler(tokens.result_aval(info.aval, sharding), sharding)
            for info, sharding in zip(outputs, output_shardings)
        ]
        # A program without any sharding (one device) returns uncommitted arrays
        # when no argument is committed either, as jax.jit does: they may then
        # move to the devices of whatever they are passed to next. Not when a
        # SingleDeviceSharding asked for its device (``placed_on_request``).
        self._uncommitted_handlers = None
        if not placed_on_request and all(
                isinstance(s, SingleDeviceSharding) for s in (*input_shardings,
                                                              *output_shardings)) \
                and all(info.sharding is None for info in (*inputs, *outputs)):
            self._uncommitted_handlers = [
                results.result_handler(tokens.result_aval(info.aval, sharding), sharding,
                                       committed=False)
                for info, sharding in zip(outputs, output_shardings)
            ]
        self.placement = arguments.PlacementCounts()
        # True when ``propagation="cost-aware"`` compiled Shardy's choices instead
        # of its own, because XLA partitioned those with fewer collective bytes.
        self.kept_shardy = False

    _last_call_relaid = False  # whether the last call copied an argument into its layout

    # Whether any argument is donated (``args_info`` says which) and the arguments'
    # types with their shardings (as jax's); set, with ``args_info``, by whoever
    # compiled this (the ``Lowered``).
    donates: bool = False
    _donated: tuple[int, ...] | None = None  # donate_argnums, once asked
    placed_by_jit: bool = False  # jit(device=/backend=): every call moves its arguments
    in_avals: Any = None
    arg_names: tuple[str, ...] | None = None  # jax's names of the arguments

    @property
    def _executable(self) -> Executable:
        """jax's view of this program (``jax.stages.Executable``: what code written
        against jax's ``Compiled`` and ``jax.experimental.serialize_executable`` read)."""
        return Executable(self)

    @property
    def _params(self) -> Any:
        """jax's parameters of a call of this program (``CompiledCallParams``): no
        constants passed as arguments, shardc's keep theirs inside."""
        return jax_private.compiled_call_params(self._executable, self._no_kwargs,
                                                self._in_tree, self._out_tree, const_args=[])

    @property
    def effects(self) -> ProgramEffects:
        """The program's tokens and ``Ref``s (``shardc.runtime.effects``)."""
        return self._effects

    @property
    def in_tree(self) -> Any:
        """The pytree structure of ``(args, kwargs)`` (dynamic arguments)."""
        return self._in_tree

    def runtime_executable(self) -> Any:
        """XLA's loaded executable that runs this program (for debugging, as jax's)."""
        return self._xla_executable

    @property
    def out_info(self) -> Any:
        """The results as ``jax.ShapeDtypeStruct``s with the shardings they come back with."""
        return jax.tree.unflatten(self._out_tree, [
            jax.ShapeDtypeStruct(info.aval.shape, info.aval.dtype, sharding=Format(layout, sharding))
            for info, sharding, layout in zip(self._outputs, self._output_shardings,
                                              self._output_layouts)])

    @property
    def out_tree(self) -> Any:
        """The pytree structure of the results."""
        return self._out_tree

    # -- calling -----------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Place the arguments, execute, and return the outputs as ``jax.Array``s.

        As a compiled program's call in jax, a committed argument must already be
        where the executable wants it: the same devices, in the same order (unless
        ``jit(device=...)`` asked for the device: then it is moved there). As
        jax's compiled calls, repeated calls of one signature run in jax's C++
        dispatch; it comes back here (``_first_call``) for a signature it has not
        seen, or always where there is no fast path. A donating call deletes the
        caller's donated arrays after it, on either path."""
        if self._dispatch is None:
            # Weakly: the dispatch is held by this object.
            this = weakref.ref(self)
            self._dispatch = jax_private.compiled_dispatch(
                "compiled", lambda *a, **k: this()._first_call(a, k))
        if not self.donates or len(args) != self._num_positional:
            # (Calls passing the static arguments again run in Python, which releases.)
            return self._dispatch(*args, **kwargs)
        leaves = arguments.flatten((args, kwargs))[0]  # (before the call: cheaper than after)
        donated = [leaves[i] for i in self._donated or self._donated_leaves()]
        outputs = self._dispatch(*args, **kwargs)
        arguments.release_donated(donated)
        return outputs

    _dispatch: Any = None

    def _first_call(self, args: tuple, kwargs: dict) -> tuple[Any, Any, bool]:
        # jax's event for a compiled program's call its C++ dispatch had no entry for.
        jax_private.test_event("stages_compiled_call")
        expected = self._expected_by_jit if self.placed_by_jit else self._expected
        outputs = self._call(args, kwargs, expected)
        # Static arguments passed again are not the executable's: such calls stay here.
        if len(args) != self._num_positional or any(k in kwargs for k, _ in
                                                    self._static.keywords):
            return outputs, None, False
        return outputs, self.fast_path(outputs), False

    def call_as_jit(self, *args: Any, **kwargs: Any) -> Any:
        """The call of a jitted function that was lowered for these arguments: a
        committed argument that jit decides the place of (``moved_by_jit``: checked,
        when lowering, to be tiled as wanted) is moved from other devices or another
        device order, as jax.jit moves it."""
        return self._call(args, kwargs, self._expected_by_jit)

    def _call(self, args: tuple, kwargs: dict,
              expected: Sequence[arguments.ExpectedArgument]) -> Any:
        if not self.runnable:
            raise NotExecutableError(
                "'Executable' object has no attribute 'local_devices': the program was "
                f"compiled ahead of time for {self.devices[0].platform} devices this "
                f"process cannot address ({self.devices[0]}, ...: a topology's devices); "
                "read its memory_analysis(), cost_analysis() and as_text(), or compile it "
                "again for devices attached here to run it")
        jax_private.check_execution_allowed(self._xla_executable)
        leaves, tree = jax.tree.flatten(self._dynamic(args, kwargs))
        if tree != self._in_tree:
            raise PytreeMismatchError(jax_private.pytree_mismatch_message(self._in_tree, tree))
        if not jax_private.trace_state_clean() and any(map(jax_private.is_tracer, leaves)):
            # As jax's: a program compiled for one signature cannot be transformed.
            tracer = next(filter(jax_private.is_tracer, leaves))
            raise InvalidArgumentError(
                "Cannot apply JAX transformations to a function lowered and compiled for a "
                f"particular signature. Detected argument of Tracer type {type(tracer)}.")
        effects = self._effects
        values = effects.buffers(leaves) if effects.mutates else leaves  # Refs' arrays
        taken, names, unused = values, self.arg_names, ()
        if self._kept is not None:
            taken = [values[i] for i in self._kept]
            names = names and tuple(names[i] for i in self._kept)
            unused = [(values[i], aval, name) for i, aval, name in self._left_out]
        arguments.check_arguments(taken, expected, names, unused)
        relaid = self.placement.relaid
        placed = [
            arguments.place(value, want, self.placement)
            for value, want in zip(taken, expected)
        ]
        # jax's C++ dispatch would pass such an argument on as it lies (wrong values):
        # calls like this one always come back here (``fast_path``).
        self._last_call_relaid = self.placement.relaid != relaid
        handlers = self._handlers
        if self._uncommitted_handlers is not None and not any(
                getattr(leaf, "committed", False) for leaf in leaves):
            handlers = self._uncommitted_handlers
        if self._with_tokens:
            outputs = execute_with_tokens(self._xla_executable, placed, handlers, effects)
        else:
            outputs = self._xla_executable.execute_sharded(placed).consume_with_handlers(handlers)
        if self.donates:
            arguments.release_donated([values[i] for i in self._donated_leaves()])
        return jax.tree.unflatten(self._out_tree, effects.write_back(leaves, outputs))

    def _donated_leaves(self) -> tuple[int, ...]:
        if self._donated is None:
            self._donated = self.donate_argnums
        return self._donated

    def fast_path(self, outputs: Any) -> Any:
        """What jax's C++ dispatch needs to run this again without Python (given the
        outputs of a call), or None: programs with effects (their tokens and Refs
        are threaded in Python, as jax's are) and calls with an argument copied
        into the compiled layout always run through ``_call``. Host callbacks alone
        (``pure_callback``), PRNG keys (placed as their data, by their physical
        shardings, as jax.jit places them) and donated arguments take the fast
        path, as with jax.jit: the executable donates, and the caller
        (``__call__``, jit's) deletes the donated arrays after it.
        """
        effects = self._effects
        if effects.ordered or effects.unordered or effects.mutates or self._last_call_relaid:
            return None
        in_shardings = list(self._input_shardings)
        if self._extended_inputs:
            in_shardings = [
                jax_private.physical_sharding(info.aval, sharding)
                if jax.dtypes.issubdtype(info.aval.dtype, jax.dtypes.extended) else sharding
                for info, sharding in zip(self._parts["inputs"], in_shardings)]
        kept = None if self._kept is None else [
            i in self._kept for i in range(self._in_tree.num_leaves)]
        return jax_private.fast_path(self._xla_executable, outputs, in_shardings,
                                     list(self._output_shardings),
                                     self._dispatch_layouts[:len(self._input_shardings)], kept)

    @functools.cached_property
    def _left_out(self) -> tuple[tuple[int, Any, str], ...]:
        """``(position, aval, name)`` of each argument leaf the program leaves out (its
        type is still checked on calls), read once: ``in_avals`` and ``arg_names`` are
        set after construction."""
        kept = set(self._kept or ())
        return tuple((i, aval, self.arg_names[i] if self.arg_names else f"argument {i}")
                     for i, aval in enumerate(jax.tree.leaves(self.in_avals)) if i not in kept)

    def _dynamic(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Drop the static arguments if the caller passed them again (they must match)."""
        static = self._static
        given = [(f"static argument {name!r}", kwargs[name], value)
                 for name, value in static.keywords if name in kwargs]
        if static.positions and len(args) == self._num_positional + len(static.positions):
            given += [(f"static argument {position}", args[position], value)
                      for position, value in zip(static.positions, static.values)]
            args = tuple(a for i, a in enumerate(args) if i not in static.positions)
        for what, value, lowered_value in given:
            if value is not lowered_value and value != lowered_value:
                raise InvalidArgumentError(
                    f"{what} is {value!r} but the program was compiled for "
                    f"{lowered_value!r}; lower it again for the new value"
                )
        if static.keywords:
            names = {name for name, _ in static.keywords}
            kwargs = {k: v for k, v in kwargs.items() if k not in names}
        return tuple(args), kwargs

    # -- inspection ----------------------------------------------------------

    @property
    def input_shardings(self) -> Any:
        """The argument shardings the executable expects, as ``(args, kwargs)`` (None for
        an argument it does not take, as jax's)."""
        return jax.tree.unflatten(self._in_tree, self._per_argument(self._input_shardings))

    @property
    def output_shardings(self) -> Any:
        """The output shardings the executable produces, in the output pytree."""
        return jax.tree.unflatten(self._out_tree, list(self._output_shardings))

    @property
    def input_formats(self) -> Any:
        """Each argument's ``Format`` (the layout XLA compiled, the sharding), as
        ``(args, kwargs)``."""
        return jax.tree.unflatten(self._in_tree, [
            Format(layout, sharding) for layout, sharding in zip(
                self._per_argument(self._input_layouts[:len(self._input_shardings)]),
                self._per_argument(self._input_shardings))])

    def _per_argument(self, taken: Sequence[Any]) -> list:
        """One entry per argument leaf from those of the arguments the executable takes
        (None for the others)."""
        if self._kept is None:
            return list(taken)
        entries: list = [None] * self._in_tree.num_leaves
        for i, entry in zip(self._kept, taken):
            entries[i] = entry
        return entries

    @property
    def output_formats(self) -> Any:
        """Each result's ``Format`` (the layout XLA compiled, the sharding), in the
        output's pytree."""
        return jax.tree.unflatten(self._out_tree, [
            Format(layout, sharding)
            for layout, sharding in zip(self._output_layouts, self._output_shardings)])

    def as_text(self) -> str:
        """The optimised HLO module after SPMD partitioning (what runs)."""
        return self._xla_executable.hlo_modules()[0].to_string()

    def memory_analysis(self) -> Any:
        """XLA's per-device memory statistics (argument, output, temp, alias bytes)."""
        return self._xla_executable.get_compiled_memory_stats()

    def memory_bytes(self) -> int:
        """Bytes per device XLA allocates for the program: arguments, outputs and
        temporaries, less the aliased (donated) buffers."""
        stats = self.memory_analysis()
        return (stats.argument_size_in_bytes + stats.output_size_in_bytes
                + stats.temp_size_in_bytes - stats.alias_size_in_bytes)

    def cost_analysis(self) -> dict[str, float]:
        """XLA's cost estimate: flops, transcendentals, bytes accessed."""
        return dict(self._xla_executable.cost_analysis())

    # The unsharded program (``jax.jit`` of the function), set by ``Lowered.compile``.
    reference: Any = None

    def verify(self, *args: Any, rtol: float = 1e-5, atol: float = 1e-5,
               reference: Any = None, **kwargs: Any) -> Any:
        """Run sharded and unsharded on the same inputs; raise above tolerance.

        Returns a ``shardc.runtime.verify.VerifyReport`` (max abs/rel difference
        per output); ``reference`` overrides the unsharded program.
        """
        reference = reference or self.reference
        if reference is None:
            raise InvalidArgumentError("no unsharded reference: pass reference=")
        return verify(self, reference, args, kwargs, rtol=rtol, atol=atol)

    def collectives(self) -> dict[str, collectives.CollectiveSummary]:
        """Count and bytes per device of each collective kind in the partitioned HLO."""
        return collectives.summarize(collectives.find_collectives(self.as_text()))

    def explain_collectives(self) -> collectives.CollectiveTable:
        """Every collective of the partitioned HLO with the jax op and the source line it
        comes from (XLA's metadata), in program order."""
        return collectives.CollectiveTable(tuple(collectives.find_collectives(self.as_text())))

    def collective_bytes(self) -> int:
        """Bytes per device of all collectives in the partitioned HLO (loop bodies once)."""
        return sum(summary.bytes_per_device for summary in self.collectives().values())


# ----------------------------------------------------------------------------
# Compiling
# ----------------------------------------------------------------------------


def compile_program(
    module: ir.Module,
    *,
    in_tree: Any,
    out_tree: Any,
    inputs: Sequence[ValueInfo],
    outputs: Sequence[ValueInfo],
    meshes: Sequence[Mesh | AbstractMesh],
    devices: Sequence | None = None,
    static: StaticArguments = StaticArguments(),
    host_callbacks: Sequence = (),
    keepalive: Sequence = (),
    compiler_options: tuple[tuple[str, Any], ...] = (),
    placed_on_request: bool = False,
    effects: ProgramEffects = NO_EFFECTS,
    kept: Sequence[int] | None = None,
    name: str | None = None,
) -> Compiled:
    """Compile an annotated module for the program's devices and return ``Compiled``
    (``placed_on_request``: a ``SingleDeviceSharding`` chose the device, so the
    results are committed to it; ``effects``: the program's tokens and Refs, with
    ``inputs`` / ``outputs`` its values after the tokens; ``kept``: the argument leaves
    ``module`` takes, ``inputs`` being theirs, where it does not take every one;
    ``name``: the program's in jax's compile logs)."""
    order = device_assignment(meshes, devices)
    tokens = effects.tokens
    main = program_mesh(meshes)
    mesh = concrete_mesh(main, order) if main is not None else None
    jax_private.test_event("pxla_cached_compilation")
    executable = jax_private.compile_executable(
        module_for_xla(module),
        order,
        propagate_to_parameters=[False] * tokens + [is_open(info.sharding) for info in inputs],
        propagate_to_outputs=[False] * tokens + [is_open(info.sharding) for info in outputs],
        host_callbacks=list(host_callbacks),
        compiler_options=compiler_options,
        name=name,
    )
    if keepalive and hasattr(executable, "keep_alive"):  # a compile-only one never runs
        executable.keep_alive(list(keepalive))
    input_layouts, output_layouts, placed_layouts = layouts.compiled_layouts(
        executable, inputs, outputs, tokens)
    parameter_ops = _per_value(executable.get_parameter_shardings(), tokens + len(inputs))[tokens:]
    output_ops = _per_value(executable.get_output_shardings(), tokens + len(outputs))[tokens:]
    return Compiled(
        executable,
        devices=order,
        in_tree=in_tree,
        out_tree=out_tree,
        inputs=inputs,
        outputs=outputs,
        input_shardings=[
            _decided_sharding(info, op, order, mesh)
            for info, op in zip(inputs, parameter_ops)
        ],
        output_shardings=result_shardings.output_shardings(
            outputs, output_ops, [len(_physical(info.aval).shape) for info in outputs],
            order, inputs, mesh),
        static=static,
        uses_host_callbacks=bool(host_callbacks),
        placed_on_request=placed_on_request,
        effects=effects,
        input_layouts=input_layouts,
        output_layouts=output_layouts,
        placed_layouts=placed_layouts,
        kept=kept,
    )


def _per_value(op_shardings: Sequence | None, count: int) -> list:
    # XLA de-duplicates identical shardings of a tuple into a single entry.
    if not op_shardings:
        return [None] * count
    if len(op_shardings) == 1 and count > 1:
        return list(op_shardings) * count
    return list(op_shardings)


def _decided_sharding(info: ValueInfo, op_sharding: Any, devices: tuple, mesh: Mesh | None
                      ) -> jax.sharding.Sharding:
    """The sharding XLA settled on for one argument, on the user's mesh where possible."""
    ndim = len(_physical(info.aval).shape)
    if not is_open(info.sharding):
        return requested_sharding(info, op_sharding, devices, ndim)
    if mesh is None or op_sharding is None:
        return SingleDeviceSharding(devices[0])
    return jax_private.sharding_from_op_sharding(op_sharding, mesh, devices, ndim)


def _physical(aval: jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
    """The type a value has inside the module: an extended dtype's physical elements
    (PRNG keys are their uint32 data)."""
    if jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended):
        return jax_private.physical_type(aval)
    return aval
