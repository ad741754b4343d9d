"""Diagnostics of shardc passes and tools: records, MLIR-format printing, collection.

MLIR reports errors through ``ir.MLIRError`` (parse, verify and pass failures)
but the Python bindings offer no way to emit a warning or a remark, so this
module owns one record type for all of them. ``Diagnostic`` is what the driver
prints (in the format of MLIR's ``SourceMgrDiagnosticHandler``:
``file:L:C: warning: msg`` followed by the source line and a caret) and what
``--verify-diagnostics`` matches. Passes report through ``PassError`` (an error
at an op, turned into an MLIR error diagnostic plus a pass failure by the
adapter) and ``emit_warning`` / ``emit_remark`` (collected by the active sink).

A module that shardc itself made invalid is reported by ``verify_module`` as
an ``InternalError`` naming the step and the op. ``verify_step`` runs it after
every step of shardc's pipelines when step verification is on
(``verifying_steps()``, or ``SHARDC_VERIFY_STEPS=1`` in the environment, as the
test suites set): off by default, one verification of the finished module is
what the product pays for.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from jaxlib.mlir import ir

from shardc.dialects.errors import InternalError


class Severity(enum.Enum):
    """How serious a diagnostic is, spelled as MLIR prints it."""

    ERROR = "error"
    WARNING = "warning"
    REMARK = "remark"
    NOTE = "note"


_SEVERITY_FROM_MLIR = {
    ir.DiagnosticSeverity.ERROR: Severity.ERROR,
    ir.DiagnosticSeverity.WARNING: Severity.WARNING,
    ir.DiagnosticSeverity.REMARK: Severity.REMARK,
    ir.DiagnosticSeverity.NOTE: Severity.NOTE,
}

# The first file location inside any printed location (name, call site, fused
# locations nest it), which is what MLIR's findInstanceOf<FileLineColLoc> picks.
_FILE_LOC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')
_ESCAPED = re.compile(r"\\(.)")


@dataclass(frozen=True)
class SourceLoc:
    """A file:line:col position; line and column are 1-based, 0 meaning unknown."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic: severity, optional location, message and attached notes."""

    severity: Severity
    loc: SourceLoc | None
    message: str
    notes: tuple[Diagnostic, ...] = ()


LocationMap = Callable[[SourceLoc], SourceLoc]

_ACTIVE_LOCATION_MAP: ContextVar[LocationMap | None] = ContextVar(
    "shardc_location_map", default=None)


@contextlib.contextmanager
def mapping_locations(location_map: LocationMap | None) -> Iterator[None]:
    """Pass every position ``source_loc_of`` returns through ``location_map`` in a block
    (None: positions as the parser named them).

    The bindings parse from a string and name the buffer ``"-"``; a driver that
    knows the input file maps those positions back to it (``opt_driver``).
    """
    token = _ACTIVE_LOCATION_MAP.set(location_map)
    try:
        yield
    finally:
        _ACTIVE_LOCATION_MAP.reset(token)


def source_loc_of(location: ir.Location) -> SourceLoc | None:
    """Return the first file position inside an MLIR location, or None if it has none."""
    match = _FILE_LOC.search(str(location))
    if match is None:
        return None
    name = match.group(1)
    if "\\" in name:  # most paths have nothing escaped: no substitution to make
        name = _ESCAPED.sub(r"\1", name)
    loc = SourceLoc(name, int(match.group(2)), int(match.group(3)))
    location_map = _ACTIVE_LOCATION_MAP.get()
    return loc if location_map is None else location_map(loc)


def from_mlir(diagnostic: ir.DiagnosticInfo | ir.Diagnostic) -> Diagnostic:
    """Convert a diagnostic reported by MLIR (live or captured in an MLIRError)."""
    return Diagnostic(
        severity=_SEVERITY_FROM_MLIR.get(diagnostic.severity, Severity.ERROR),
        loc=source_loc_of(diagnostic.location),
        message=diagnostic.message,
        notes=tuple(from_mlir(note) for note in diagnostic.notes),
    )


class PassError(Exception):
    """A pass failure at an op or location; the adapter reports it as an MLIR error."""

    def __init__(self, op_or_location: ir.Operation | ir.OpView | ir.Location, message: str):
        super().__init__(message)
        self.location = (
            op_or_location
            if isinstance(op_or_location, ir.Location)
            else op_or_location.location
        )
        self.message = message


@dataclass
class DiagnosticSink:
    """Collects the warnings and remarks passes emit while a pipeline runs."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    def add(self, diagnostic: Diagnostic) -> None:
        """Record one diagnostic."""
        self.diagnostics.append(diagnostic)


_ACTIVE_SINK: ContextVar[DiagnosticSink | None] = ContextVar("shardc_diagnostic_sink", default=None)


@contextlib.contextmanager
def collecting(sink: DiagnosticSink) -> Iterator[DiagnosticSink]:
    """Route ``emit_warning`` / ``emit_remark`` to ``sink`` for the duration of a block."""
    token = _ACTIVE_SINK.set(sink)
    try:
        yield sink
    finally:
        _ACTIVE_SINK.reset(token)


def _emit(severity: Severity, where: ir.Operation | ir.OpView | ir.Location, message: str) -> None:
    location = where if isinstance(where, ir.Location) else where.location
    diagnostic = Diagnostic(severity, source_loc_of(location), message)
    sink = _ACTIVE_SINK.get()
    if sink is None:
        # Outside a driver (a pass called from a script) nobody collects: say it.
        print(format_diagnostic(diagnostic, {}), end="", file=sys.stderr)
    else:
        sink.add(diagnostic)


def emit_warning(where: ir.Operation | ir.OpView | ir.Location, message: str) -> None:
    """Report a warning at an op or location (MLIR has no Python warning emitter)."""
    _emit(Severity.WARNING, where, message)


def emit_remark(where: ir.Operation | ir.OpView | ir.Location, message: str) -> None:
    """Report a remark at an op or location."""
    _emit(Severity.REMARK, where, message)


def format_message(
    loc: SourceLoc | None,
    severity: Severity,
    message: str,
    sources: dict[str, Sequence[str]],
) -> str:
    """Render one message the way llvm::SourceMgr prints it, with source line and caret."""
    if loc is None:
        return f"{severity.value}: {message}\n"
    text = f"{loc}: {severity.value}: {message}\n"
    lines = sources.get(loc.file)
    if lines is None or loc.line < 1 or loc.col < 1 or loc.line > len(lines):
        return text
    source_line = lines[loc.line - 1]
    if not _is_text(source_line):
        return text  # binary input: never echo its raw bytes to a terminal
    # Tabs stay tabs in the caret line so the caret lines up in a terminal.
    indent = "".join(ch if ch == "\t" else " " for ch in source_line[: loc.col - 1])
    return f"{text}{source_line}\n{indent}^\n"


def _is_text(line: str) -> bool:
    return "\ufffd" not in line and line.replace("\t", " ").isprintable()


def format_diagnostic(diagnostic: Diagnostic, sources: dict[str, Sequence[str]]) -> str:
    """Render a diagnostic and its notes in MLIR's textual format."""
    parts = [format_message(diagnostic.loc, diagnostic.severity, diagnostic.message, sources)]
    parts += [format_diagnostic(note, sources) for note in diagnostic.notes]
    return "".join(parts)


# ------------------------------------------------------------------ verification
_VERIFY_STEPS: ContextVar[bool | None] = ContextVar("shardc_verify_steps", default=None)
_CURRENT_OP = re.compile(r"see current operation: (?:%[^=]*= )?\"?([\w.]+)")


def steps_verified() -> bool:
    """Whether ``verify_step`` verifies (``verifying_steps`` or ``SHARDC_VERIFY_STEPS``)."""
    enabled = _VERIFY_STEPS.get()
    if enabled is None:
        return os.environ.get("SHARDC_VERIFY_STEPS", "") not in ("", "0")
    return enabled


@contextlib.contextmanager
def verifying_steps(enabled: bool = True) -> Iterator[None]:
    """Verify the module after every pipeline step inside this block (or not)."""
    token = _VERIFY_STEPS.set(enabled)
    try:
        yield
    finally:
        _VERIFY_STEPS.reset(token)


def verify_module(module: ir.Operation, step: str) -> None:
    """Verify ``module``; an invalid one is shardc's fault: raise ``InternalError``.

    ``step`` says what made the module, as the message puts it ("step 'x'",
    "pass 'y'", "the propagation pipeline").
    """
    try:
        module.verify()
    except ir.MLIRError as error:
        raise internal_error(error, step) from None


def verify_step(module: ir.Operation, step: str) -> None:
    """After pipeline step ``step``: ``verify_module`` when step verification is on."""
    if steps_verified():
        verify_module(module, f"step '{step}'")


def internal_error(error: ir.MLIRError, step: str) -> InternalError:
    """Turn the verifier's complaint about a module shardc made into an ``InternalError``."""
    first = error.error_diagnostics[0] if error.error_diagnostics else None
    if first is None:
        return InternalError(internal_message(step, str(error)), step=step, reason=str(error))
    op = None
    for note in first.notes:
        match = _CURRENT_OP.search(note.message)
        if match:
            op = match.group(1)
            break
    reason = first.message
    if op and not reason.startswith(f"'{op}'"):
        reason = f"'{op}' op {reason}"
    loc = source_loc_of(first.location)
    return InternalError(internal_message(step, reason, loc), step=step, reason=reason, op=op,
                         location=first.location)


def internal_message(step: str, reason: str, loc: SourceLoc | None = None) -> str:
    """The text of an ``InternalError``: the step, where, what the verifier said."""
    where = f" at {loc}" if loc is not None else ""
    return (f"shardc internal error: {step} produced an invalid module{where}: {reason} "
            "(a bug in shardc, not in the program: please report it with the program)")
