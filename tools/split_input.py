"""Split an input buffer on ``// -----`` exactly as mlir-opt's --split-input-file does.

The rules follow ``mlir::splitAndProcessBuffer`` (mlir/lib/Support/ToolUtilities.cpp):
split on ``// ---``, accept a split only when the next two characters are
``--`` and more text follows, and report anything else as a "near miss with file
split marker" warning while keeping the text in the current chunk. Current
MLIR reports diagnostics of a chunk at their line in the original file, so
each chunk remembers where it starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardc.compiler.diagnostics import Diagnostic, Severity, SourceLoc

SPLIT_MARKER = "// -----"
OUTPUT_SPLIT_MARKER = "// -----"
_CHECK_LEN = 2


@dataclass(frozen=True)
class Chunk:
    """A slice of the input: its text and the 1-based line and column it starts at."""

    text: bytes
    line: int
    col: int


def _position(data: bytes, offset: int, newlines_before: list[int]) -> tuple[int, int]:
    """Line and column (1-based) of ``offset``; ``newlines_before`` is a sorted list."""
    import bisect

    line_index = bisect.bisect_left(newlines_before, offset)
    line_start = newlines_before[line_index - 1] + 1 if line_index else 0
    return line_index + 1, offset - line_start + 1


def split_input(
    data: bytes, file_name: str, *, enabled: bool
) -> tuple[list[Chunk], list[Diagnostic]]:
    """Return the chunks of ``data`` and the near-miss warnings found on the way."""
    if not enabled:
        return [Chunk(data, 1, 1)], []
    newline_offsets = [i for i, byte in enumerate(data) if byte == 0x0A]
    marker = SPLIT_MARKER.encode()
    prefix = marker[:-_CHECK_LEN]
    suffix = marker[-_CHECK_LEN:]

    # (start, end) byte ranges of the raw pieces between `// ---` prefixes.
    pieces: list[tuple[int, int]] = []
    start = 0
    while True:
        found = data.find(prefix, start)
        if found < 0:
            pieces.append((start, len(data)))
            break
        pieces.append((start, found))
        start = found + len(prefix)

    warnings: list[Diagnostic] = []
    chunks: list[tuple[int, int]] = []
    previous: tuple[int, int] | None = None
    for piece_start, piece_end in pieces:
        if previous is None or previous[0] == previous[1]:
            previous = (piece_start, piece_end)
            continue
        piece = data[piece_start:piece_end]
        if piece.startswith(suffix) and len(piece) > _CHECK_LEN and piece[_CHECK_LEN] != ord("0"):
            chunks.append(previous)
            previous = (piece_start + _CHECK_LEN, piece_end)
        else:
            line, col = _position(data, piece_start, newline_offsets)
            warnings.append(
                Diagnostic(
                    Severity.WARNING,
                    SourceLoc(file_name, line, col),
                    "near miss with file split marker",
                )
            )
            previous = (previous[0], piece_end)
    if previous is not None and previous[0] != previous[1]:
        chunks.append(previous)
    result = []
    for chunk_start, chunk_end in chunks:
        line, col = _position(data, chunk_start, newline_offsets)
        result.append(Chunk(data[chunk_start:chunk_end], line, col))
    return result, warnings
