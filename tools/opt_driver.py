"""The engine behind ``shardc-opt``: parse, run a pipeline, print, report diagnostics.

``run_opt`` does what ``mlir::MlirOptMain`` does for one input buffer: split it
(optionally), and for each chunk parse it, run the pass pipeline, print the
result with the MLIR printer and report diagnostics in MLIR's format (or, with
``--verify-diagnostics``, match them against ``expected-*`` comments). The
bindings parse from a string, so locations come back as ``"-":L:C`` relative to
the chunk; they are mapped back to the real file name and line here (in
diagnostics, printed ``loc(...)`` and the ``--explain`` table).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TextIO

import numpy as np
from jaxlib.mlir import ir

from shardc.compiler.checks.strict import strict_diagnostics
from shardc.compiler.cost.report import comm_report
from shardc.compiler.diagnostics import (
    Diagnostic,
    DiagnosticSink,
    LocationMap,
    PassError,
    Severity,
    SourceLoc,
    collecting,
    format_diagnostic,
    from_mlir,
    mapping_locations,
    source_loc_of,
)
from shardc.compiler.explain import explain
from shardc.compiler.propagation.preconditions import require_mesh_symbols
from shardc.dialects import make_context
from shardc.dialects.sdy import MeshAttr, MeshAxisAttr
from shardc.tools import pass_pipeline
from shardc.tools.split_input import OUTPUT_SPLIT_MARKER, Chunk, split_input
from shardc.tools.verify_diagnostics import DiagnosticVerifier

PARSER_NAME = "-"
# MLIR's parser recurses once per nesting level and overflows the C stack a few
# thousand levels down (a crash, not a diagnostic), so deeper input is refused.
MAX_NESTING = 1000
# Strings and comments, whose brackets do not nest. What is left of a chunk once
# they are cut out and every byte but a bracket is deleted is its bracket tokens.
_NOT_A_BRACKET_TOKEN = re.compile(rb'"(?:[^"\\\n]|\\.)*"|//[^\n]*')
_NESTING_TOKEN = re.compile(_NOT_A_BRACKET_TOKEN.pattern + rb"|[\[\]{}()]")
_NOT_A_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}()")))
# The reports model every device of a mesh (shard grids, per-device tiles): a
# mesh past this many devices, far beyond any machine, would take hours and
# gigabytes, so the reports refuse it at the mesh instead.
MAX_REPORTED_DEVICES = 2**17
_PRINTED_LOC = re.compile(r'loc\("-":(\d+):(\d+)')
# The note MLIR attaches to op diagnostics; mlir-opt turns it off under
# --verify-diagnostics (printOpOnDiagnostic(false)), the bindings cannot.
_CURRENT_OP_NOTE = "see current operation:"


@dataclass(frozen=True)
class OptConfig:
    """What one ``shardc-opt`` invocation asks for."""

    specs: tuple[pass_pipeline.PassSpec, ...] = ()
    split_input_file: bool = False
    verify_diagnostics: bool = False
    print_debuginfo: bool = False
    timing: bool = False
    print_ir_after_all: bool = False
    allow_unregistered_dialect: bool = False
    comm_report: bool = False
    explain: bool = False
    strict: bool = False


@dataclass(frozen=True)
class ChunkResult:
    """The printed module (None on failure) and the diagnostics of one chunk."""

    output: str | None
    diagnostics: tuple[Diagnostic, ...]
    failed: bool


class _ChunkLocations:
    """Maps chunk-relative parser locations back to the input file."""

    def __init__(self, file_name: str, chunk: Chunk) -> None:
        self.file_name = file_name
        self.chunk = chunk

    def loc(self, loc: SourceLoc | None) -> SourceLoc | None:
        if loc is None or loc.file != PARSER_NAME:
            return loc
        if loc.line == 0:
            return replace(loc, file=self.file_name)
        column_shift = self.chunk.col - 1 if loc.line == 1 else 0
        return SourceLoc(self.file_name, loc.line + self.chunk.line - 1, loc.col + column_shift)

    def diagnostic(self, diagnostic: Diagnostic) -> Diagnostic:
        notes = tuple(self.diagnostic(n) for n in diagnostic.notes)
        return replace(diagnostic, loc=self.loc(diagnostic.loc), notes=notes)

    def printed(self, text: str) -> str:
        def sub(match: re.Match[str]) -> str:
            loc = self.loc(SourceLoc(PARSER_NAME, int(match.group(1)), int(match.group(2))))
            name = self.file_name.replace("\\", "\\\\").replace('"', '\\"')
            return f'loc("{name}":{loc.line}:{loc.col}'

        return _PRINTED_LOC.sub(sub, text)


def _chunk_error(chunk: Chunk, offset: int, message: str) -> Diagnostic:
    line = chunk.text.count(b"\n", 0, offset) + 1
    column = offset - (chunk.text.rfind(b"\n", 0, offset) + 1) + 1
    return Diagnostic(Severity.ERROR, SourceLoc(PARSER_NAME, line, column), message)


def encoding_error(chunk: Chunk) -> Diagnostic | None:
    """Return an error at the first byte that is not UTF-8.

    MLIR text is UTF-8. jaxlib aborts the whole process (a nanobind string
    conversion in C++) when a parse error message quotes invalid bytes, e.g.
    an axis name ``"\xe1"``, so such input is refused before it is parsed.
    """
    try:
        chunk.text.decode("utf-8")
    except UnicodeDecodeError as error:
        return _chunk_error(
            chunk, error.start, f"invalid UTF-8 byte 0x{chunk.text[error.start]:02X} in the input"
        )
    return None


def max_nesting(text: bytes) -> int:
    """The deepest bracket nesting of ``text`` (strings and comments skipped).

    A closing bracket at depth 0 is ignored, as in ``nesting_error``. Computed
    on the whole chunk at once (a Python loop over every bracket of a large
    module costs as much as parsing it): the depth after each bracket is the
    running sum of +1/-1 steps minus its running minimum (taken with 0).
    """
    brackets = _NOT_A_BRACKET_TOKEN.sub(b"", text).translate(None, _NOT_A_BRACKET)
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    opening = (codes == ord("[")) | (codes == ord("{")) | (codes == ord("("))
    depth = np.cumsum(np.where(opening, 1, -1), dtype=np.int64)
    return int((depth - np.minimum(np.minimum.accumulate(depth), 0)).max())


def nesting_error(chunk: Chunk) -> Diagnostic | None:
    """Return an error if the chunk nests brackets deeper than the parser can take."""
    if max_nesting(chunk.text) <= MAX_NESTING:
        return None
    depth = 0
    for token in _NESTING_TOKEN.finditer(chunk.text):
        char = token.group()
        if char in (b"[", b"{", b"("):
            depth += 1
            if depth > MAX_NESTING:
                line = chunk.text.count(b"\n", 0, token.start()) + 1
                column = token.start() - (chunk.text.rfind(b"\n", 0, token.start()) + 1) + 1
                loc = SourceLoc(PARSER_NAME, line, column)
                message = f"nesting deeper than {MAX_NESTING} levels is not supported"
                return Diagnostic(Severity.ERROR, loc, message)
        elif char in (b"]", b"}", b")"):
            depth = max(depth - 1, 0)
    return None


def require_reportable_meshes(module: ir.Module) -> None:
    """Raise ``PassError`` at an ``sdy.mesh`` with more devices than the reports model."""
    for op in module.body.operations:
        if op.operation.name != "sdy.mesh":
            continue
        sizes = [MeshAxisAttr(axis).size for axis in MeshAttr(op.attributes["mesh"]).axes]
        devices = int(np.prod(sizes, dtype=object)) if sizes else 1
        if devices > MAX_REPORTED_DEVICES:
            name = ir.StringAttr(op.attributes["sym_name"]).value
            raise PassError(op, f"mesh @{name} has {devices} devices; the reports model at "
                                f"most {MAX_REPORTED_DEVICES}")


def _print_module(module: ir.Module, config: OptConfig) -> str:
    return module.operation.get_asm(enable_debug_info=config.print_debuginfo, assume_verified=True)


def process_chunk(chunk: Chunk, context: ir.Context, config: OptConfig,
                  location_map: LocationMap | None = None) -> ChunkResult:
    """Parse one chunk, run the pipeline on it and print it (diagnostics chunk-relative).

    ``location_map`` maps the parser's chunk-relative positions to the input
    file for the explain table, which prints positions, not MLIR locations.
    """
    guard = encoding_error(chunk) or nesting_error(chunk)
    if guard is not None:
        return ChunkResult(None, (guard,), True)
    try:
        module = ir.Module.parse(chunk.text, context)
    except ir.MLIRError as error:
        return ChunkResult(None, tuple(from_mlir(d) for d in error.error_diagnostics), True)
    except (ValueError, MemoryError, OverflowError) as error:
        # The parser itself gave up (e.g. "SmallVector unable to grow" for a
        # dimension index of 2**32): still the input's fault, so a diagnostic.
        message = f"the MLIR parser could not build this input: {error}"
        return ChunkResult(None, (_chunk_error(chunk, 0, message),), True)
    sink = DiagnosticSink()
    failed = False
    with context, collecting(sink):
        try:
            pm = pass_pipeline.build(
                config.specs,
                pass_pipeline.BuildOptions(
                    timing=config.timing,
                    print_ir_after_all=config.print_ir_after_all,
                    print_debuginfo=config.print_debuginfo,
                ),
            )
            # C++ instrumentation (timing, IR printing) writes to the same descriptors.
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:  # a closed standard stream
                    stream.flush()
            pm.run(module.operation)
        except ir.MLIRError as error:
            sink.diagnostics.extend(from_mlir(d) for d in error.error_diagnostics)
            failed = True
    output = None if failed else _print_module(module, config)
    if output is not None:
        try:
            output += _reports(module, config, location_map, sink)
        except PassError as error:  # the module is outside what the reports read
            label = " / ".join(_report_flags(config))
            message = error.message if error.message.startswith(label) else \
                f"{label}: {error.message}"
            sink.diagnostics.append(
                Diagnostic(Severity.ERROR, source_loc_of(error.location), message))
            output, failed = None, True
    return ChunkResult(output, tuple(sink.diagnostics), failed)


def _report_flags(config: OptConfig) -> list[str]:
    return [flag for flag, wanted in (("--comm-report", config.comm_report),
                                      ("--explain", config.explain),
                                      ("--strict", config.strict)) if wanted]


def _reports(module: ir.Module, config: OptConfig, location_map: LocationMap | None,
             sink: DiagnosticSink) -> str:
    """The report comments asked for (strict mode's findings go to ``sink``); raises
    ``PassError`` where the module is one the reports cannot read."""
    flags = _report_flags(config)
    if not flags:
        return ""
    require_mesh_symbols(module.operation, " / ".join(flags))
    require_reportable_meshes(module)
    text = ""
    if config.comm_report:
        text += "".join(f"// {line}\n" for line in comm_report(module).format_text().splitlines())
    if config.explain:
        with mapping_locations(location_map):
            table = explain(module)
        text += "".join(f"// {line}\n" for line in table.format_text().splitlines())
    if config.strict:
        sink.diagnostics.extend(d.to_diagnostic() for d in strict_diagnostics(module))
    return text


class _InputLines(Mapping[str, Sequence[str]]):
    """The input's lines under its file name, for quoting in diagnostics.

    Split on first use: only a diagnostic needs them, and splitting a large
    module into lines costs as much as one of its passes.
    """

    def __init__(self, file_name: str, data: bytes) -> None:
        self._file_name = file_name
        self._data = data
        self._lines: dict[str, Sequence[str]] | None = None

    def _split(self) -> dict[str, Sequence[str]]:
        if self._lines is None:
            text = self._data.decode("utf-8", errors="replace")
            self._lines = {self._file_name: text.split("\n")}
        return self._lines

    def __getitem__(self, file_name: str) -> Sequence[str]:
        return self._split()[file_name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._split())

    def __len__(self) -> int:
        return 1


def _strip_current_op_notes(diagnostic: Diagnostic) -> Diagnostic:
    notes = tuple(n for n in diagnostic.notes if not n.message.startswith(_CURRENT_OP_NOTE))
    return replace(diagnostic, notes=notes)


def run_opt(data: bytes, file_name: str, config: OptConfig, out: TextIO, err: TextIO) -> bool:
    """Process one input buffer; write the output and diagnostics; return success."""
    for spec in config.specs:
        pass_pipeline.resolve(spec)  # unknown passes and options fail before any parsing
    sources = _InputLines(file_name, data)
    chunks, warnings = split_input(data, file_name, enabled=config.split_input_file)
    for warning in warnings:
        err.write(format_diagnostic(warning, sources))
    context = make_context()
    context.allow_unregistered_dialects = config.allow_unregistered_dialect
    outputs: list[str] = []
    all_ok = True
    for chunk in chunks:
        locations = _ChunkLocations(file_name, chunk)
        result = process_chunk(chunk, context, config, locations.loc)
        diagnostics = [locations.diagnostic(d) for d in result.diagnostics]
        if config.verify_diagnostics:
            ok = _verify(chunk, file_name, sources, diagnostics, err)
        else:
            for diagnostic in diagnostics:
                err.write(format_diagnostic(diagnostic, sources))
            has_error = any(d.severity == Severity.ERROR for d in diagnostics)
            ok = not result.failed and not has_error
        all_ok = all_ok and ok
        outputs.append(locations.printed(result.output) if result.output is not None else "")
    out.write((OUTPUT_SPLIT_MARKER + "\n").join(outputs))
    return all_ok


def _verify(
    chunk: Chunk,
    file_name: str,
    sources: Mapping[str, Sequence[str]],
    diagnostics: Sequence[Diagnostic],
    err: TextIO,
) -> bool:
    lines = chunk.text.decode("utf-8", errors="replace").split("\n")
    verifier = DiagnosticVerifier.from_source(lines, file_name, chunk.line)
    for diagnostic in diagnostics:
        verifier.process(_strip_current_op_notes(diagnostic))
    failures = verifier.finish()
    for failure in failures:
        err.write(format_diagnostic(failure, sources))
    return not failures
