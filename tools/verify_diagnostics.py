"""``--verify-diagnostics``: match ``expected-*`` comments against produced diagnostics.

This follows MLIR's ``SourceMgrDiagnosticVerifierHandler``
(mlir/lib/IR/Diagnostics.cpp): the same comment syntax
(``expected-error@+1 {{...}}``, ``-re`` for ``{{regex}}`` parts, ``@-N``,
``@above``, ``@below``, ``@unknown``), the same matching (same line, message
contains the text, same severity; notes are matched like diagnostics) and the
same failure messages (``unexpected error: ...``, ``expected error "..." was
not produced``, ``'warning' diagnostic emitted when expecting a 'error'``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from shardc.compiler.diagnostics import Diagnostic, Severity, SourceLoc

_EXPECTED = re.compile(
    r"expected-(error|note|remark|warning)(-re)? *(@([+-][0-9]+|above|below|unknown))? *\{\{(.*)\}\}$"
)


@dataclass
class ExpectedDiagnostic:
    """One ``expected-*`` comment: what it wants, where, and whether it was seen."""

    severity: Severity
    line: int
    loc: SourceLoc
    text: str
    pattern: re.Pattern[str] | None = None
    matched: bool = False

    def matches(self, message: str) -> bool:
        """Whether ``message`` satisfies this expectation (substring or regex search)."""
        if self.pattern is not None:
            return self.pattern.search(message) is not None
        return self.text in message


def _compile(text: str) -> re.Pattern[str] | str:
    """Turn ``a {{re}} b`` into a regex; return an error message if it is malformed."""
    parts = []
    rest = text
    while rest:
        start = rest.find("{{")
        if start < 0:
            parts.append(re.escape(rest))
            break
        parts.append(re.escape(rest[:start]))
        rest = rest[start + 2 :]
        end = rest.find("}}")
        if end < 0:
            return "found start of regex with no end '}}'"
        try:
            re.compile(rest[:end])
        except re.error as error:
            return f"invalid regex: {error}"
        parts.append(f"({rest[:end]})")
        rest = rest[end + 2 :]
    return re.compile("".join(parts))


@dataclass
class DiagnosticVerifier:
    """Expectations of one input chunk, and the failures found while matching."""

    expected: list[ExpectedDiagnostic] = field(default_factory=list)
    unknown_loc: list[ExpectedDiagnostic] = field(default_factory=list)
    failures: list[Diagnostic] = field(default_factory=list)

    @classmethod
    def from_source(cls, lines: Sequence[str], file_name: str, first_line: int) -> DiagnosticVerifier:
        """Scan ``lines`` (the chunk, starting at ``first_line`` of the file)."""
        verifier = cls()
        last_plain_line = first_line
        waiting_for_next_line: list[ExpectedDiagnostic] = []
        last_line = first_line + len(lines) - 1
        for index, raw in enumerate(lines):
            line_no = first_line + index
            match = _EXPECTED.search(raw.rstrip())
            if match is None:
                for pending in waiting_for_next_line:
                    pending.line = line_no
                waiting_for_next_line.clear()
                last_plain_line = line_no
                continue
            loc = SourceLoc(file_name, line_no, match.start() + 1)
            record = ExpectedDiagnostic(Severity(match.group(1)), line_no, loc, match.group(5))
            if match.group(2):
                compiled = _compile(record.text)
                if isinstance(compiled, str):
                    verifier.failures.append(Diagnostic(Severity.ERROR, loc, compiled))
                    continue
                record.pattern = compiled
            offset = match.group(4)
            if offset is None:
                verifier.expected.append(record)
            elif offset == "unknown":
                verifier.unknown_loc.append(record)
            elif offset == "above":
                record.line = last_plain_line
                verifier.expected.append(record)
            elif offset == "below":
                record.line = last_line  # where a dangling @below ends up, as in MLIR
                waiting_for_next_line.append(record)
                verifier.expected.append(record)
            else:
                record.line += int(offset)
                verifier.expected.append(record)
        return verifier

    def process(self, diagnostic: Diagnostic) -> None:
        """Match one produced diagnostic (then each of its notes) against expectations."""
        self._process_one(diagnostic)
        for note in diagnostic.notes:
            self._process_one(note)

    def _process_one(self, diagnostic: Diagnostic) -> None:
        loc = diagnostic.loc
        candidates = self.expected if loc is not None else self.unknown_loc
        near_miss = None
        for expected in candidates:
            if loc is not None and loc.line != expected.line:
                continue
            if expected.matches(diagnostic.message):
                if expected.severity == diagnostic.severity:
                    # Like MLIR, one comment may absorb several identical diagnostics.
                    expected.matched = True
                    return
                near_miss = expected
        if near_miss is not None:
            self.failures.append(
                Diagnostic(
                    Severity.ERROR,
                    near_miss.loc,
                    f"'{diagnostic.severity.value}' diagnostic emitted when expecting a "
                    f"'{near_miss.severity.value}'",
                )
            )
        else:
            self.failures.append(
                Diagnostic(
                    Severity.ERROR,
                    loc,
                    f"unexpected {diagnostic.severity.value}: {diagnostic.message}",
                )
            )

    def finish(self) -> list[Diagnostic]:
        """Return all failures, adding one per expectation that was never produced."""
        for expected in [*self.expected, *self.unknown_loc]:
            if not expected.matched:
                self.failures.append(
                    Diagnostic(
                        Severity.ERROR,
                        expected.loc,
                        f'expected {expected.severity.value} "{expected.text}" was not produced',
                    )
                )
        return self.failures
