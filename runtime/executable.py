"""A shardc-compiled program as jax's stages see it: loaded and unloaded executables.

jax's ``Compiled`` keeps its program in ``_executable`` (for jit, jax's
``MeshExecutable``) and the call's parameters in ``_params``; code written
against jax reads the executable's ``in_avals``, shardings and layouts there,
and ``jax.experimental.serialize_executable`` pickles its
``_unloaded_executable`` (XLA's executable, devices and client replaced by
references its pickler writes) so that ``deserialize_and_load``, in this
process or another, loads it (``load()``) and wraps what that returns in
jax's own ``Compiled``, which then calls it (``create_cpp_call``, ``call``).

``Executable`` is that view of a shardc ``Compiled`` (``Compiled._executable``),
and ``UnloadedExecutable`` what the program is made of apart from the
process: XLA's executable and the ``Compiled``'s own parts (the shardings,
layouts and effects it was built with, and what the ``Lowered`` that compiled
it said of its arguments). Loading builds the same ``Compiled`` around the
loaded XLA executable, so a deserialized program places, runs and wraps as
shardc's does. As jax's, a program that closes over a ``Ref`` is refused
(``mut.in_mut``); one that calls back into Python cannot leave the process
(its callbacks stay behind), so it has no unloaded form.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax

from shardc.dialects import jax_private

# What the ``Lowered`` that compiled a program sets on its ``Compiled``.
STAGE_ATTRIBUTES = ("args_info", "in_avals", "donates", "arg_names", "placed_by_jit")


class AllArguments(NamedTuple):
    """jax's ``AllArgsInfo``: the types of every argument, those the executable does
    not take among them."""

    in_avals: list
    debug_info: Any = None


class Mutations(NamedTuple):
    """The ``Ref``s a program updates, as jax's ``MutationData``: ``in_mut`` the
    closed-over ones (extra arguments after the call's), ``out_mut`` per result
    the argument whose ``Ref`` it updates (None: a result of the function)."""

    in_mut: list
    out_mut: list


class Executable:
    """jax's view of a shardc ``Compiled``: flat avals, shardings and layouts of its
    arguments and results, its XLA executable, its unloaded form, and calls."""

    def __init__(self, compiled: Any) -> None:
        self._compiled = compiled

    # -- what jax's Compiled and serialize_executable read -------------------

    @property
    def in_avals(self) -> list:
        """The types of the arguments it takes, flat (jax's: its constants passed as
        arguments first; shardc's programs keep their constants inside)."""
        avals = jax.tree.leaves(self._compiled.in_avals)
        kept = self._compiled._kept
        return avals if kept is None else [avals[i] for i in kept]

    @property
    def out_avals(self) -> list:
        """The results' types, flat, with the shardings they come back with."""
        compiled = self._compiled
        return [jax_private.typed_aval(info.aval, getattr(info, "type_sharding", None),
                                       canonical=False)
                for info in compiled._outputs]

    @property
    def _in_shardings(self) -> list:
        return list(self._compiled._input_shardings)

    @property
    def _out_shardings(self) -> list:
        return list(self._compiled._output_shardings)

    @property
    def _xla_in_layouts(self) -> list:
        return list(self._compiled._input_layouts[:len(self._compiled._input_shardings)])

    @property
    def _xla_out_layouts(self) -> list:
        return list(self._compiled._output_layouts)

    @property
    def _kept_var_idx(self) -> set[int]:
        kept = self._compiled._kept
        return set(range(len(self._compiled._input_shardings)) if kept is None else kept)

    @property
    def _all_args_info(self) -> AllArguments | None:
        """Every argument's type, for a program that does not take every argument
        (jax's ``Compiled.in_avals`` reads them here); None for the others."""
        if self._compiled._kept is None:
            return None
        return AllArguments(jax.tree.leaves(self._compiled.in_avals))

    @property
    def _mut(self) -> Mutations | None:
        return mutations(self._compiled.effects)

    @property
    def _unloaded_executable(self) -> UnloadedExecutable | None:
        """The program apart from this process, for ``serialize_executable``; None for
        one that calls back into this process's Python."""
        compiled = self._compiled
        if compiled._parts["uses_host_callbacks"]:
            return None
        return UnloadedExecutable(
            xla_executable=compiled.runtime_executable(),
            kind=type(compiled),
            parts=compiled._parts,
            stage={name: getattr(compiled, name) for name in STAGE_ATTRIBUTES})

    def xla_extension_executable(self) -> Any:
        return self._compiled.runtime_executable()

    def runtime_executable(self) -> Any:
        return self._compiled.runtime_executable()

    def as_text(self) -> str:
        return self._compiled.as_text()

    def cost_analysis(self) -> Any:
        return self._compiled.cost_analysis()

    def memory_analysis(self) -> Any:
        return self._compiled.memory_analysis()

    def input_shardings(self) -> list:
        return self._in_shardings

    def output_shardings(self) -> list:
        return self._out_shardings

    # -- calls -------------------------------------------------------------

    def call(self, *args_flat: Any) -> list:
        """Run on flat argument leaves (jax's ``Compiled.call``: ``(args, kwargs)``
        flattened, its constant arguments first: shardc's take none); the results
        flat."""
        compiled = self._compiled
        args, kwargs = compiled.in_tree.unflatten(args_flat)
        return compiled.out_tree.flatten_up_to(compiled(*args, **kwargs))

    def create_cpp_call(self, params: Any) -> Any:
        """The call jax's ``Compiled`` makes: shardc's own (through jax's C++ dispatch
        after the first call of a signature), or None where jax's parameters ask
        for more than the program takes (jax then calls ``call``)."""
        if params.no_kwargs or params.const_args or params.is_high:
            return None
        return self._compiled


def mutations(effects: Any) -> Mutations | None:
    """jax's ``MutationData`` of a program's effects, None where it updates no ``Ref``."""
    if not effects.mutates:
        return None
    return Mutations(list(effects.closed_refs), list(effects.writes))


@dataclasses.dataclass
class UnloadedExecutable:
    """A compiled program apart from the process that compiled it (what
    ``jax.experimental.serialize_executable`` pickles): XLA's executable, the class
    and parts of the shardc ``Compiled`` it was, and what its ``Lowered`` set."""

    xla_executable: Any
    kind: type
    parts: dict
    stage: dict

    @property
    def mut(self) -> Mutations | None:
        """The ``Ref``s the program updates (jax refuses to serialize closed-over ones)."""
        return mutations(self.parts["effects"])

    def __getstate__(self) -> dict:
        # XLA's executable as its bytes and client (jax's pickler writes a reference
        # to the client), to load onto the program's own devices; static arguments
        # stay behind, as jax's: the loaded program takes the dynamic ones only.
        executable = self.xla_executable
        parts = dict(self.parts, static=type(self.parts["static"])())
        return dict(self.__dict__, parts=parts, xla_executable=None,
                    serialized=(executable.client,
                                jax_private.serialized_executable(executable)))

    def __setstate__(self, state: dict) -> None:
        client, serialized = state.pop("serialized")
        self.__dict__.update(state)
        self.xla_executable = jax_private.deserialized_executable(
            client, serialized, self.parts["devices"])

    def load(self) -> Executable:
        """The program loaded again: a ``Compiled`` of the same class, parts and stage
        attributes around ``xla_executable`` (loaded onto this process's devices)."""
        compiled = self.kind(self.xla_executable, **self.parts)
        for name, value in self.stage.items():
            setattr(compiled, name, value)
        return compiled._executable
