"""The base class of shardc passes, their typed options and the adapter to MLIR.

A pass is a frozen dataclass subclassing ``ModulePass``: ``name`` (and optional
``aliases``) are class variables, options are fields declared with ``option()``
and the docstring's first line is the summary ``--help`` prints. Option values
written on the command line (``keep-meshes=true``) are converted to the field
types here, so every pass gets the same parsing and the same error messages.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import PassError, internal_message, verify_module
from shardc.compiler.propagation.preconditions import require_mesh_symbols
from shardc.dialects.errors import InternalError

_HELP_KEY = "shardc_help"


class OptionError(ValueError):
    """An option that a pass does not have, or a value its type does not accept."""


def option(default: Any, *, help: str) -> Any:  # noqa: A002 - mirrors MLIR's Option<> help
    """Declare a pass option: a dataclass field with a default and a help text."""
    return dataclasses.field(default=default, metadata={_HELP_KEY: help})


@dataclass(frozen=True)
class OptionInfo:
    """What ``--list-passes`` shows about one option."""

    flag: str
    field_name: str
    type_name: str
    default: Any
    help: str


@dataclass(frozen=True)
class ModulePass:
    """Base of every shardc pass; subclasses implement ``run`` on a builtin.module."""

    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    # Passes that read shardings through mesh symbols refuse an inline mesh at its op
    # (before ``run``), where reading it would fail without a location.
    needs_mesh_symbols: ClassVar[bool] = False

    def run(self, module: ir.Operation) -> None:
        """Transform ``module`` in place; raise ``PassError`` to fail at an op."""
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        """Return the first line of the class docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0].strip() if cls.__doc__ else ""

    @classmethod
    def option_infos(cls) -> tuple[OptionInfo, ...]:
        """Describe every option from the dataclass fields (type, default, help)."""
        hints = typing.get_type_hints(cls)
        return tuple(
            OptionInfo(
                flag=f.name.replace("_", "-"),
                field_name=f.name,
                type_name=_type_name(hints[f.name]),
                default=f.default,
                help=f.metadata.get(_HELP_KEY, ""),
            )
            for f in dataclasses.fields(cls)
        )

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ModulePass:
        """Build an instance from textual ``flag -> value`` options."""
        infos = {info.flag: info for info in cls.option_infos()}
        hints = typing.get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        for flag, text in options.items():
            info = infos.get(flag)
            if info is None:
                raise OptionError(_unknown_option_message(cls.name, flag, list(infos)))
            try:
                kwargs[info.field_name] = parse_value(hints[info.field_name], text)
            except ValueError as error:
                raise OptionError(
                    f"invalid value '{text}' for option '{flag}' of pass '{cls.name}': {error}"
                ) from None
        return cls(**kwargs)

    def option_text(self) -> str:
        """Print the non-default options in MLIR pipeline syntax (``{a=1 b=x}``)."""
        parts = [
            f"{info.flag}={format_value(getattr(self, info.field_name))}"
            for info in self.option_infos()
            if getattr(self, info.field_name) != info.default
        ]
        return "{" + " ".join(parts) + "}" if parts else ""

    def run_op(self, op: ir.Operation, external_pass: Any) -> None:
        """The callable given to ``PassManager.add``: run, map PassError to a failure.

        The module is verified after the pass, so that invalid IR the pass made
        is reported as shardc's own error naming the pass (and the step inside
        it), before MLIR's verifier reports it bare.
        """
        try:
            if self.needs_mesh_symbols:
                require_mesh_symbols(op, self.name)
            self.run(op)
            verify_module(op, f"pass '{self.name}'")
        except PassError as error:
            error.location.emit_error(error.message)
            external_pass.signal_pass_failure()
        except InternalError as error:
            step = f"pass '{self.name}'"
            if error.step != step:
                step = f"{error.step} of {step}"
            where = error.location if error.location is not None else op.location
            where.emit_error(internal_message(step, error.reason))
            external_pass.signal_pass_failure()


def _unknown_option_message(pass_name: str, flag: str, known: list[str]) -> str:
    message = f"pass '{pass_name}' has no option '{flag}'"
    close = difflib.get_close_matches(flag, known, n=3)
    if close:
        message += "; did you mean " + ", ".join(f"'{c}'" for c in close) + "?"
    elif known:
        message += "; its options are " + ", ".join(f"'{k}'" for k in known)
    else:
        message += "; it takes no options"
    return message


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _type_name(inner[0]) + "?"
    if origin is tuple:
        return "list<" + _type_name(typing.get_args(tp)[0]) + ">"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "|".join(str(m.value) for m in tp)
    return getattr(tp, "__name__", str(tp))


def parse_value(tp: Any, text: str) -> Any:
    """Convert option text to ``tp`` (bool, int, float, str, Enum, tuple of those, X | None)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if text in ("", "none") else parse_value(inner[0], text)
    if origin is tuple:
        element = typing.get_args(tp)[0]
        items = [item.strip() for item in _split_list(text)]
        return tuple(parse_value(element, item) for item in items if item)
    parser = _SCALAR_PARSERS.get(tp)
    if parser is not None:
        return parser(text)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(text)
        except ValueError:
            allowed = ", ".join(str(m.value) for m in tp)
            raise ValueError(f"expected one of {allowed}") from None
    raise ValueError(f"unsupported option type {tp!r}")


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("", "true", "1", "on"):
        return True
    if lowered in ("false", "0", "off"):
        return False
    raise ValueError("expected true or false")


def _parse_str(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


_SCALAR_PARSERS: dict[Any, Callable[[str], Any]] = {
    bool: _parse_bool,
    int: lambda text: int(text, 0),
    float: float,
    str: _parse_str,
}


def _split_list(text: str) -> list[str]:
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    return text.split(",") if text else []


def format_value(value: Any) -> str:
    """Print an option value so that ``parse_value`` reads it back unchanged."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, tuple):
        return ",".join(format_value(v) for v in value)
    if isinstance(value, str) and (not value or any(c in value for c in " {},=")):
        return '"' + value + '"'
    return str(value)
