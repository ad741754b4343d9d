"""The seed corpus of the CLI fuzzer: every ``.mlir`` file of the lit suite.

Lit's ``Output/`` folders (generated files, some of them megabytes of
garbage) and our own saved regressions are left out, so the corpus only
holds hand-written, mostly valid MLIR. Files are read as bytes and sorted
by path so that a seed number always means the same inputs.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
LIT_ROOT = REPO_ROOT / "test" / "lit"
_SKIPPED_DIRS = {"Output", "regressions"}
# Larger seeds only slow every case down without adding new syntax.
MAX_SEED_BYTES = 64 * 1024


def seed_paths() -> list[Path]:
    """The lit ``.mlir`` files used as seeds, sorted by path."""
    return sorted(
        path
        for path in LIT_ROOT.rglob("*.mlir")
        if not _SKIPPED_DIRS.intersection(path.relative_to(LIT_ROOT).parts)
        and path.stat().st_size <= MAX_SEED_BYTES
    )


def load_seeds() -> list[tuple[str, bytes]]:
    """``(path relative to the repo, contents)`` of every seed file."""
    return [(str(path.relative_to(REPO_ROOT)), path.read_bytes()) for path in seed_paths()]
