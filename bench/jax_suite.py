"""JAX's own tests through shardc: the outside measure of "drop-in for jax.jit".

    python -m bench.jax_suite JAX_DIR [--set peer|wide] [--only FILE_OR_CLASS ...]
        [--json PATH] [--jobs N] [--timeout S] [--reuse-baseline PATH ...]
        [--baseline-only] [--all-tests] [--self-check]
    python -m bench.jax_suite --report PATH ...   # reprint earlier runs' table and causes
    ... [--readme README.md]   # also write the table between the README's markers

``JAX_DIR`` holds (directly or in ``tests/``) the set's test files, unmodified,
from the JAX repository at the version shardc pins: for ``--set peer`` (the
default) ``pjit_test.py``, ``array_test.py`` and ``shard_map_test.py`` (e.g.
``../shared/peer/jax-v0.10.2``); for ``--set wide`` ``WIDE_FILES``, JAX's other
test files that call jit and run on CPU in minutes (a checkout of JAX at the
tag: this repository does not hold JAX's files; a file in a subdirectory,
``pallas/...``, is named by its path there). They are copied, byte for byte,
into one temporary directory (with an empty ``pytest.ini`` so no
outside pytest configuration applies) and run twice with pytest
(``--timeout S``, default 120, from pytest-timeout) on 8 CPU devices
(``JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=8``;
``--devices N`` for another count: JAX's Pallas interpret-mode files skip every
test unless there is one; ``--compile-and-check`` routes the jit of
``jax._src.test_util``'s ``_CompileAndCheck`` too, the only jit of JAX's numerics
files: ``fft``, ``lax_numpy_reducers``, ``scipy_signal``...):

1. *unmodified*: ``jax.jit`` / ``pjit`` as referenced by the test files are
   wrapped so the run records whether each test called them, and forward to the
   real functions;
2. *shardc*: the same references forward, unchanged (every keyword, every call,
   tracers included), to ``shardc.compiler.jit`` (``pjit`` to
   ``shardc.compiler.pjit``, pjit's semantics on shardc's jit). There is no fallback: where
   shardc lacks a keyword or a form, the test fails; that is the measurement.

How "the test files' references" are replaced without touching jax's own use of
``jax.jit`` (``jnp`` functions, ``jax._src.test_util``, shardc's own tracing):
see ``bench/jax_suite_plugin.py`` (an ``__import__`` hook hands the test modules
proxy modules ``jax``, ``jax._src.pjit``... whose ``jit`` / ``pjit`` are the
adapters). ``--self-check`` runs a small generated test file through the plugin
to verify it: a test's ``jax.jit`` and ``pjit`` reach shardc, ``jnp`` internals
and shardc's own ``jax.jit`` do not, the rest of ``jax`` is the real thing.

The measure: among the tests that PASS UNMODIFIED and CALL JIT (or pjit), how
many pass through shardc. Printed per test class (tests, pass unmodified, of
those call jit, of those pass through shardc, percentage), with totals, the
subtotal outside ``ShardingInTypesTest`` and ``ShardMapTest`` and the subtotal
of those two; then the top failure causes (exception type + first line of the
message with numbers, names and addresses normalized) with counts and an
example. ``--json`` (default ``$TMPDIR/jax_suite.json``) gets every test's
outcomes (``nodeid``, ``unmodified`` outcome, ``called_jit``, ``shardc``
outcome, and for shardc failures the exception type, first message line, the
innermost frame, the last frame in the test file and the last in shardc), the
table and the causes.

``--only`` selects files (``pjit_test.py``), classes (``pjit_test.py::PJitTest``
or just ``PJitTest``) or single tests (full node ids) for fast iteration.
``--reuse-baseline PATH`` takes the unmodified outcomes from an earlier JSON
(they do not depend on shardc) and runs only the shardc pass. ``--jobs N``
(default 1: the machines here have 2 cores) runs that many pytest processes
at once, one per test class.

The wide set's table has a row per file; its last row leaves out the failures
that assert jax internals. Every failure is classified (``classify``) by its
exception, the kinds of its frames (test file, shardc, jax, jax's test
utilities) and the failing line of the test: ``shardc`` (shardc raised, jax
raised under shardc, an expected error not raised, another message, a result
that differs, a timeout, a crash) or ``asserts jax internals`` (counts of jax's
own traces, lowerings and caches, private attributes of jax's jit objects,
``isinstance`` of ``jax.stages`` classes, jax's private functions).

Without ``--jobs`` each file is one pytest process, and the JSON is rewritten
as each ends (``"partial": true`` until the run finishes), so a long run's
finished files are usable and ``--reuse-baseline`` merges several runs'
JSONs. ``--baseline-only`` runs only the unmodified pass. The shardc pass runs
only the tests that count (pass unmodified, call jit) unless ``--all-tests``,
and starts no pytest process for a file (or class) none of whose tests count.

Each pytest process appends one JSON line per test to a log; if a process dies
(a crash in XLA, say), the test it died in is recorded as ``crashed`` and the
run resumes after it, so one crash costs one test, not a file.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import importlib.metadata
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable

from bench import render_readme

BENCH = pathlib.Path(__file__).resolve().parent
ROOT = BENCH.parent

README_START, README_END = "<!-- jax-suite:start -->", "<!-- jax-suite:end -->"
FILES = ("pjit_test.py", "array_test.py", "shard_map_test.py")
# The wide set: JAX's other test files that call jit and run on CPU in minutes,
# each as it is (a test that is slow or never calls jit just does not count).
WIDE_FILES = (
    "api_test.py", "jax_jit_test.py", "aot_test.py", "export_test.py",
    "debugging_primitives_test.py", "python_callback_test.py", "jaxpr_effects_test.py",
    "layout_test.py", "mutable_array_test.py", "random_test.py", "key_reuse_test.py",
    "linalg_sharding_test.py", "memories_test.py", "pickle_test.py", "shard_alike_test.py",
    "multi_device_test.py", "lax_control_flow_test.py", "custom_api_test.py",
    "checkify_test.py", "xla_metadata_test.py",
    # Measured later, as files the project had not run before (--jit-tests-only).
    "core_test.py", "custom_linear_solve_test.py", "custom_root_test.py",
    "debug_nans_test.py", "error_check_test.py", "hijax_test.py", "nn_test.py",
    "batching_test.py", "sparse_test.py", "x64_context_test.py", "transfer_guard_test.py",
    "name_stack_test.py", "logging_test.py", "stateful_rng_test.py", "cache_key_test.py",
    "traceback_test.py", "errors_test.py", "source_info_test.py", "dtypes_test.py",
    "compilation_cache_test.py", "custom_partitioning_test.py", "buffer_callback_test.py",
    "ffi_test.py", "string_array_test.py", "control_deps_test.py",
    "scheduling_groups_test.py", "metadata_test.py", "lax_autodiff_test.py",
    "lax_numpy_indexing_test.py", "shape_poly_test.py", "ode_test.py", "jet_test.py",
    "optimizers_test.py", "async_collectives_test.py", "sparsify_test.py",
    "scipy_optimize_test.py", "fused_test.py", "tree_util_test.py",
    "jax_numpy_error_test.py", "debugger_test.py", "jaxpr_util_test.py",
    "multibackend_test.py", "lax_numpy_hijax_test.py", "pmap_test.py",
    # First run in the ninth session, as held-out stand-ins (--jit-tests-only; the
    # pallas files in interpret mode on CPU).
    "lax_test.py", "lax_scipy_sparse_test.py", "export_serialization_back_compat_test.py",
    "pallas/fusion_test.py", "pallas/fuser_block_spec_test.py",
    "pallas/pallas_shape_poly_test.py", "pallas/tpu_pallas_interpret_distributed_test.py",
    # First run in the eleventh session: files that import test helpers the jax wheel
    # lacks (``jax_suite_missing``) and one more pallas file in interpret mode.
    "state_test.py", "pallas/pallas_test.py", "pallas/tpu_pallas_test.py",
    "pallas/indexing_test.py", "pallas/gpu_pallas_interpret_distributed_test.py",
    # First run in the fourteenth session, as held-out stand-ins (--jit-tests-only).
    "absl_cpp_logging_test.py", "ann_test.py", "export_back_compat_test.py",
    "lax_scipy_test.py", "profiler_test.py", "unary_ops_accuracy_test.py",
    "pytorch_interoperability_test.py", "pgle_test.py", "pallas/pallas_error_handling_test.py",
    "pallas/pallas_lowering_determinism_test.py", "pallas/tpu_pallas_async_test.py",
    "pallas/tpu_pallas_state_test.py", "pallas/tpu_pallas_random_test.py",
    "pallas/tpu_fusible_matmul_test.py", "pallas/tpu_pallas_distributed_test.py",
    # First run in the seventeenth session, as held-out stand-ins (--jit-tests-only
    # where large).
    "debug_info_test.py", "random_lax_test.py", "xla_transform_test.py", "typing_test.py",
    "sparse_bcoo_bcsr_test.py", "scaled_dot_test.py", "scaled_matmul_stablehlo_test.py",
    "fused_attention_stablehlo_test.py", "experimental_rnn_test.py", "roofline_test.py",
    "random_impl_test.py", "lax_numpy_vectorize_test.py", "lax_numpy_operators_test.py",
    "export_harnesses_multi_platform_test.py",
    # Also first run in the seventeenth session (--jit-tests-only; the pallas files in
    # interpret mode on one CPU device, --devices 1).
    "lax_numpy_test.py", "ragged_collective_test.py", "pallas/tpu_pallas_interpret_test.py",
    "pallas/tpu_pallas_pipeline_test.py", "pallas/tpu_pallas_mpmd_test.py",
    "pallas/tpu_pallas_memory_space_test.py", "pallas/tpu_pallas_call_print_test.py",
    "pallas/tpu_side_effects_test.py", "pallas/tpu_ops_test.py", "pallas/einshape_test.py",
    "pallas/tpu_splash_attention_kernel_sharded_test.py",
    "pallas/tpu_splash_attention_mask_test.py",
    "pallas/tpu_fusible_matmul_with_stateful_fusions_test.py",
    "pallas/gpu_pallas_interpret_test.py", "pallas/pallas_vmap_test.py", "pallas/ops_test.py",
    "linalg_test.py", "svd_test.py", "eigh_test.py", "qdwh_test.py",
    "lax_scipy_special_functions_test.py", "image_test.py", "scipy_stats_test.py",
    # First run in the eighteenth session: files that call jit directly, and those
    # whose only jit is ``_CompileAndCheck`` (``--compile-and-check``).
    "generated_fun_test.py", "clear_backends_test.py", "fft_test.py",
    "lax_numpy_einsum_test.py", "lax_numpy_reducers_test.py", "lax_numpy_setops_test.py",
    "lax_numpy_ufuncs_test.py", "polynomial_test.py", "scipy_fft_test.py",
    "scipy_interpolate_test.py", "scipy_signal_test.py", "scipy_spatial_test.py",
)
SETS = {"peer": FILES, "wide": WIDE_FILES}
# --jit-tests-only: both passes leave out the tests whose source never names jit.
JIT_TESTS_ONLY = False
# --compile-and-check: jax's test utilities' ``_CompileAndCheck`` jits through the
# adapters too (JAX's numerics files call jit only there).
COMPILE_AND_CHECK = False
# --devices: the CPU devices both passes run on (some files' tests need exactly one).
DEVICES = 8
MARKERS = {"peer": (README_START, README_END),
           "wide": ("<!-- jax-suite-wide:start -->", "<!-- jax-suite-wide:end -->")}
SPLIT_CLASSES = ("ShardingInTypesTest", "ShardMapTest")
PASSING = ("passed", "xpassed")


# ----------------------------------------------------------------------------------
# Running pytest


def _env(mode: str, out: pathlib.Path, skip: pathlib.Path | None, files: str) -> dict:
    env = dict(os.environ)
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES}",
        JAX_SUITE_MODE=mode,
        JAX_SUITE_OUT=str(out),
        JAX_SUITE_FILES=files,
        PYTHONPATH=os.pathsep.join(
            [str(BENCH)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
        PYTHONDONTWRITEBYTECODE="1",
    )
    if JIT_TESTS_ONLY:
        env["JAX_SUITE_JIT_TESTS_ONLY"] = "1"
    if COMPILE_AND_CHECK:
        env["JAX_SUITE_COMPILE_AND_CHECK"] = "1"
    if skip is not None:
        env["JAX_SUITE_SKIP"] = str(skip)
    else:
        env.pop("JAX_SUITE_SKIP", None)
    return env


def _read_log(path: pathlib.Path) -> tuple[dict[str, dict], list[str]]:
    """Finished records by node id, and node ids started (in order)."""
    ended: dict[str, dict] = {}
    started: list[str] = []
    if not path.exists():
        return ended, started
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a crash
            continue
        if record.get("event") == "start":
            started.append(record["nodeid"])
        elif record.get("event") == "end":
            ended[record["nodeid"]] = record
    return ended, started


def run_unit(mode: str, selectors: list[str], workdir: pathlib.Path, timeout: int,
             tag: str, files: str = ",".join(FILES), max_restarts: int = 50,
             skip_ids: frozenset[str] = frozenset()) -> dict:
    """Run pytest on ``selectors`` in ``workdir`` (resuming after crashes); records by id.

    ``skip_ids`` are deselected (tests that do not count, in the shardc pass)."""
    log = workdir / f"log-{mode}-{tag}.jsonl"
    skip = workdir / f"skip-{mode}-{tag}.txt"
    for p in (log, skip):
        if p.exists():
            p.unlink()
    crashed: dict[str, dict] = {}
    for attempt in range(max_restarts + 1):
        ended, started = _read_log(log)
        done = set(ended) | set(crashed) | skip_ids
        if done:
            skip.write_text("\n".join(sorted(done)) + "\n")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "jax_suite_plugin",
               "-p", "no:cacheprovider", f"--timeout={timeout}",
               "-o", "console_output_style=classic", "--rootdir", str(workdir), *selectors]
        proc = subprocess.run(cmd, cwd=workdir, env=_env(mode, log, skip if done else None, files),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              check=False)
        ended, started = _read_log(log)
        if proc.returncode in (0, 1, 5):  # all passed / some failed / none collected
            break
        # Killed or crashed: the test that started and never ended is the culprit.
        unfinished = [n for n in started if n not in ended and n not in crashed]
        if not unfinished:
            # Died outside a test (collection error, interpreter exit): nothing to resume.
            print(f"  [{mode} {tag}] pytest exited {proc.returncode}:\n"
                  + textwrap.indent("\n".join(proc.stdout.splitlines()[-20:]), "    "),
                  file=sys.stderr)
            break
        victim = unfinished[-1]
        crashed[victim] = {"event": "end", "nodeid": victim, "outcome": "crashed",
                           "called_jit": None, "exc": {
                               "type": f"crash (exit status {proc.returncode})",
                               "message": _crash_line(proc.stdout), "where": "", "phase": "call"}}
        print(f"  [{mode} {tag}] pytest exited {proc.returncode} in {victim}; resuming",
              file=sys.stderr)
    ended.update(crashed)
    return ended


def _crash_line(text: str) -> str:
    """The line of a crashed run's output that says why: XLA's fatal check, else Python's."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for pattern in (r"^F\d{4} |Check failed", r"^Fatal Python error", r"terminate called"):
        found = [line for line in lines if re.search(pattern, line)]
        if found:
            return found[-1][:400]
    return lines[-1][:400] if lines else ""


# ----------------------------------------------------------------------------------
# Selecting tests


def _classes_of(path: pathlib.Path) -> list[str]:
    """The test classes of a file: ``jtu.*TestCase`` subclasses and their subclasses."""
    classes: list[str] = []
    for name, base in re.findall(r"^class (\w+)\(([\w.]+)\):", path.read_text(), re.MULTILINE):
        if re.fullmatch(r"jtu\.\w*TestCase", base) or base in classes:
            classes.append(name)
    return classes


def resolve_units(only: list[str] | None, workdir: pathlib.Path, jobs: int,
                  files: tuple[str, ...] = FILES) -> list[list[str]]:
    """pytest selectors, grouped into units (one pytest process each): one file a
    unit (so a long run's finished files are usable while it goes on), or with
    ``jobs > 1`` one test class a unit."""
    selectors: list[str] = []
    if not only:
        if jobs > 1:
            selectors = [f"{f}::{c}" for f in files for c in _classes_of(workdir / f)]
        else:
            selectors = list(files)
    else:
        for sel in only:
            sel = sel.strip()
            if "::" in sel or sel.endswith(".py"):
                file = sel.split("::")[0]
                file = os.path.basename(file)
                if file not in files:
                    raise SystemExit(f"--only {sel}: not one of {files}")
                selectors.append("::".join([file] + sel.split("::")[1:]))
            else:
                owners = [f for f in files if sel in _classes_of(workdir / f)]
                if not owners:
                    raise SystemExit(f"--only {sel}: no test class of that name in {files}")
                selectors.append(f"{owners[0]}::{sel}")
    if jobs <= 1:
        by_file: dict[str, list[str]] = {}
        for sel in selectors:
            by_file.setdefault(sel.split("::")[0], []).append(sel)
        return list(by_file.values())
    return [[s] for s in selectors]


def units_that_count(units: list[list[str]], counted: list[str]) -> list[list[str]]:
    """The units holding a test that counts (``counted``: node ids): the shardc pass
    starts no pytest process for the others (one costs tens of seconds on a loaded
    machine, to deselect every test)."""
    return [unit for unit in units
            if any(n == sel or n.startswith(sel + "::") for sel in unit for n in counted)]


def copy_set(src: pathlib.Path, paths: tuple[str, ...], work: pathlib.Path) -> tuple[str, ...]:
    """Copy the set's files, byte for byte, into ``work``; their names there. A file
    in a subdirectory of JAX's tests (``pallas/...``) is copied beside the others and
    named by its base name from then on (the set's base names are unique)."""
    files = tuple(os.path.basename(f) for f in paths)
    if len(set(files)) != len(files):
        raise ValueError(f"two files of the set share a base name: {sorted(paths)}")
    for path, name in zip(paths, files):
        shutil.copyfile(src / path, work / name)  # never edited
    return files


def run_pass(mode: str, units: list[list[str]], workdir: pathlib.Path, timeout: int,
             jobs: int, files: tuple[str, ...] = FILES,
             on_unit: Callable[[dict, dict], None] | None = None,
             skip_ids: frozenset[str] = frozenset()) -> tuple[dict, float, dict]:
    """Records by node id, the pass's seconds, and the seconds of each unit.

    ``on_unit`` gets the records and the units' seconds so far after each unit ends;
    ``skip_ids`` are not run."""
    start = time.monotonic()
    results: dict[str, dict] = {}
    unit_seconds: dict[str, float] = {}
    # Largest first (by source size of the selection, roughly), so jobs finish together.
    order = sorted(range(len(units)), key=lambda i: -_weight(units[i], workdir))

    def one(i: int) -> dict:
        t0 = time.monotonic()
        r = run_unit(mode, units[i], workdir, timeout, tag=str(i), files=",".join(files),
                     skip_ids=skip_ids)
        unit_seconds[" ".join(units[i])] = round(time.monotonic() - t0, 1)
        print(f"  [{mode}] {' '.join(units[i])}: {len(r)} tests, "
              f"{sum(v['outcome'] in PASSING for v in r.values())} passed, "
              f"{time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
        return r

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for r in pool.map(one, order):
            results.update(r)
            if on_unit is not None:
                on_unit(results, unit_seconds)
    return results, time.monotonic() - start, unit_seconds


def _weight(unit: list[str], workdir: pathlib.Path) -> int:
    total = 0
    for sel in unit:
        parts = sel.split("::")
        text = (workdir / parts[0]).read_text()
        if len(parts) == 1:
            total += len(text)
        else:
            m = re.search(rf"^class {parts[1]}\(.*?(?=^class |\Z)", text, re.MULTILINE | re.DOTALL)
            total += len(m.group(0)) if m else 1
    return total


# ----------------------------------------------------------------------------------
# Report


def _class_of(nodeid: str) -> str:
    parts = nodeid.split("::")
    return f"{parts[0]}::{parts[1]}" if len(parts) > 2 else parts[0]


def normalize(text: str) -> str:
    """A message's first line with the parts that vary per test replaced.

    Numbers, addresses and short quoted names become placeholders; an
    ``assertRaisesRegex`` mismatch (``"pattern" does not match "message"``) is
    grouped by the message that was raised instead.
    """
    m = re.match(r'^"(.*)" does not match "(.*?)"?$', text)
    if m:
        text = f"raised instead: {m.group(2)}"
    m = re.match(r"^('[^']*') not found in 'module ", text)
    if m:
        text = f"{m.group(1)} not found in the lowered module's text"
    text = re.sub(r"0x[0-9a-fA-F]+", "0x_", text)
    # unittest's abbreviated reprs ("Named[55 chars]s=(Explicit...") cut at varying places.
    text = re.sub(r"\[\d+ chars\][^,)]*", "[...]", text)
    text = re.sub(r"\bNamed(Sharding)?\[\.\.\.\][^!]*", "NamedSharding(...) ", text)
    text = re.sub(r"\bP\((?:[^()]|\([^()]*\))*\)", "P(...)", text)
    text = re.sub(r"axis_types=\((?:[^()])*\)", "axis_types=(...)", text)
    text = re.sub(r"'[^'\n]{0,2}'", "'_'", text)  # axis names
    text = re.sub(r'"[^"\n]{0,2}"', '"_"', text)
    text = re.sub(r"\b\d+(\.\d+)?\b", "N", text)
    text = re.sub(r"<[^<>]*>", "<_>", text)
    text = re.sub(r"\s+", " ", text)
    return text[:200]


def _file_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def _counted(t: dict) -> bool:
    """Whether a test counts: it passes unmodified and calls jit."""
    return t["unmodified"] in PASSING and t["called_jit"]


def build_rows(tests: list[dict], by: Callable[[str], str] | None = None) -> dict:
    """Counts per row: per test class (``by`` None) or per ``by(nodeid)``."""
    rows: dict[str, dict] = collections.OrderedDict()
    for t in tests:
        c = rows.setdefault(by(t["nodeid"]) if by else t["class"],
                            {"tests": 0, "pass_unmodified": 0, "call_jit": 0, "pass_shardc": 0})
        c["tests"] += 1
        if t["unmodified"] in PASSING:
            c["pass_unmodified"] += 1
            if t["called_jit"]:
                c["call_jit"] += 1
                if t.get("shardc") in PASSING:
                    c["pass_shardc"] += 1
    return rows


def _sum(rows) -> dict:
    out = {"tests": 0, "pass_unmodified": 0, "call_jit": 0, "pass_shardc": 0}
    for r in rows:
        for k in out:
            out[k] += r[k]
    return out


def _pct(r: dict) -> str:
    return f"{100.0 * r['pass_shardc'] / r['call_jit']:.1f}%" if r["call_jit"] else "-"


def table_rows(tests: list[dict], set_name: str) -> tuple[dict, list[tuple[str, dict]]]:
    """The table's rows (per class for the peer set, per file for the wide set) and
    its totals: for the peer set the two subtotals in and outside ``SPLIT_CLASSES``;
    for the wide set the total again without the tests whose only failure is an
    assertion on jax's internals."""
    rows = build_rows(tests, _file_of if set_name == "wide" else None)
    totals = [("total", _sum(rows.values()))]
    if set_name == "wide":
        internal = {t["nodeid"] for t in tests
                    if _counted(t) and t.get("shardc") not in PASSING
                    and classify(t)[0] == INTERNALS}
        kept = [t for t in tests if t["nodeid"] not in internal]
        totals.append(("total without tests asserting jax internals",
                       _sum(build_rows(kept).values())))
    else:
        split = [r for n, r in rows.items() if n.split("::")[-1] in SPLIT_CLASSES]
        rest = [r for n, r in rows.items() if n.split("::")[-1] not in SPLIT_CLASSES]
        totals.append(("outside " + " and ".join(SPLIT_CLASSES), _sum(rest)))
        totals.append((" + ".join(SPLIT_CLASSES), _sum(split)))
    return rows, totals


def format_table(rows: dict, totals: list[tuple[str, dict]], set_name: str = "peer") -> str:
    lines = []
    header = ("file" if set_name == "wide" else "class", "tests", "pass unmod.", "call jit",
              "pass shardc", "%")
    width = max(len(k) for k in [*rows, *(label for label, _ in totals)])
    fmt = f"{{:<{width}}} {{:>6}} {{:>12}} {{:>9}} {{:>12}} {{:>7}}"
    lines.append(fmt.format(*header))
    lines.append("-" * (width + 52))

    def row(name, r):
        lines.append(fmt.format(name, r["tests"], r["pass_unmodified"], r["call_jit"],
                                r["pass_shardc"], _pct(r)))

    for name, r in rows.items():
        row(name, r)
    lines.append("-" * (width + 52))
    for label, r in totals:
        row(label.upper() if label == "total" else label, r)
    return "\n".join(lines)


# ----------------------------------------------------------------------------------
# Failure causes: what went wrong, and whether it is shardc's


SHARDC, INTERNALS = "shardc", "asserts jax internals"

# A shardc object lacking a private attribute jax's own objects have.
_PRIVATE_ATTRIBUTE = re.compile(r"object has no attribute '_(?!_)\w*'")
# What a failing test line that measures jax's implementation mentions.
_COUNTERS = re.compile(r"\bjtu\.(count_\w+|assert_num_jit_and_pmap_compilations)|_cache_size"
                       r"|cache_info|\bcount\w*\(\)|\bcount\w*\[|cache_miss|tracing_count")
_PRIVATE_JAX = re.compile(r"\b_pjit_lower\w*|\b_infer_params\b|\b_cpp_pjit\w*|\b_kept_var_idx\b"
                          r"|\bmake_jit_cpp_cache\b|\b_executable\b|\bpxla\.\w+"
                          r"|\bdispatch\.\w+|\bjit_p\b|\bpjit_p\b")
_STAGES_CLASS = re.compile(r"jax\.stages\.(Compiled|Lowered|Traced|Wrapped)\b"
                           r"|not an instance of <class 'jax\._src\.stages\.")


def classify(t: dict) -> tuple[str, str]:
    """A shardc failure's kind (``SHARDC``: shardc's bug or gap; ``INTERNALS``: the
    test asserts something of jax's implementation that a drop-in jit cannot
    share) and its cause, from the exception, its frames and the failing line."""
    exc = t.get("shardc_exc") or {}
    etype = exc.get("type") or ""
    message = exc.get("message", "")
    code = exc.get("test_code", "")
    uses = " ".join(exc.get("test_uses", []))
    frames = [k for k in exc.get("frames", []) if k not in ("framework", "numpy", "other")]
    last = frames[-1] if frames else ""
    if t.get("shardc") == "missing":
        return SHARDC, "not run in the shardc pass (collection error or pytest exit)"
    if t.get("shardc") == "crashed" or etype.startswith("crash"):
        return SHARDC, "crash of the process"
    if "Timeout" in message and "Failed" in etype:
        return SHARDC, "timeout"
    if etype == "AttributeError" and _PRIVATE_ATTRIBUTE.search(message):
        return INTERNALS, "private attribute of jax's jit objects"
    if last == "jax_test_util" or (_COUNTERS.search(code) and _COUNTERS.search(uses)):
        return INTERNALS, "counts of jax's own traces, lowerings, compilations or caches"
    if _STAGES_CLASS.search(code) or _STAGES_CLASS.search(message):
        return INTERNALS, "isinstance of jax.stages classes"
    if _PRIVATE_JAX.search(code):
        return INTERNALS, "jax's private functions or primitives (_pjit_lower, pxla, jit_p...)"
    if etype == "TypeError" and re.search(r"unexpected keyword argument|positional argument",
                                          message):
        # jax's own API (export, stages) calling shardc's objects with what jax's take.
        return SHARDC, "an argument jax's jit objects take and shardc's do not"
    if "shardc" in frames:
        after = frames[frames.index("shardc"):]
        if after[-1] == "shardc":
            return SHARDC, f"shardc raised {etype}"
        return SHARDC, f"jax raised {etype} under shardc"
    if etype == "AssertionError" and message.endswith("not raised"):
        return SHARDC, "expected exception not raised"
    # (A pattern of re.escape'd text long enough to cut the line before "does not
    # match" still starts the message in quotes with escaped blanks.)
    if etype == "AssertionError" and re.match(r'^".*(" does not match |\\ )', message):
        return SHARDC, "another error message than jax's"
    if etype == "AttributeError":
        return SHARDC, "public attribute missing on shardc's objects"
    if etype in ("AssertionError",) or etype.startswith("numpy"):
        return SHARDC, "result or observable differs (assertion in the test)"
    return SHARDC, f"{etype or t.get('shardc')} (not under shardc's frames)"


def failure_causes(tests: list[dict]) -> list[dict]:
    """Failures grouped by kind, exception type and normalized message, largest first."""
    groups: dict[tuple, dict] = {}
    for t in tests:
        if not _counted(t) or t.get("shardc") in (*PASSING, "not run"):
            continue
        exc = t.get("shardc_exc") or {}
        etype = exc.get("type") or t.get("shardc") or "?"
        kind, category = classify(t)
        key = (kind, etype, normalize(exc.get("message", "")))
        g = groups.setdefault(key, {"type": key[1], "message": key[2], "count": 0,
                                    "kind": kind, "category": category,
                                    "example": t["nodeid"],
                                    "example_message": exc.get("message", ""),
                                    "example_where": exc.get("where", ""),
                                    "example_test_line": exc.get("test_line", ""),
                                    "example_test_code": exc.get("test_code", ""),
                                    "example_shardc_frame": exc.get("shardc_frame", "")})
        g["count"] += 1
    return sorted(groups.values(), key=lambda g: -g["count"])


def failure_categories(tests: list[dict]) -> list[dict]:
    """Failures by kind and cause (``classify``), largest first, one example each."""
    groups: dict[tuple, dict] = {}
    for t in tests:
        if not _counted(t) or t.get("shardc") in (*PASSING, "not run"):
            continue
        kind, category = classify(t)
        exc = t.get("shardc_exc") or {}
        g = groups.setdefault((kind, category), {
            "kind": kind, "category": category, "count": 0, "files": {},
            "example": t["nodeid"], "example_type": exc.get("type", t.get("shardc")),
            "example_message": exc.get("message", ""),
            "example_test_line": exc.get("test_line", ""),
            "example_shardc_frame": exc.get("shardc_frame", "")})
        g["count"] += 1
        g["files"][_file_of(t["nodeid"])] = g["files"].get(_file_of(t["nodeid"]), 0) + 1
    return sorted(groups.values(), key=lambda g: (g["kind"] != SHARDC, -g["count"]))


# ----------------------------------------------------------------------------------
# Self check of the interception


SELF_CHECK_TEST = '''
import jax
import jax.numpy as jnp
import numpy as np
from functools import partial
from jax._src.pjit import pjit
# The other forms JAX's test files import jit in (api_test.py, random_test.py,
# python_callback_test.py...).
from jax import jit
from jax._src import api as src_api
from jax.experimental import pjit as pjit_module
import jax_suite_plugin as plugin
from shardc.compiler.api import JitFunction
from shardc.compiler.function.pjit import PjitFunction

AT_IMPORT = [jax.jit]

def test_jax_jit_reaches_shardc():
    plugin._calls["jit"] = 0
    f = jax.jit(lambda x: x * 2)
    assert isinstance(f, JitFunction), type(f)
    assert plugin._calls["jit"] == 1
    np.testing.assert_allclose(f(np.arange(4.0)), np.arange(4.0) * 2)
    # shardc's own tracing uses the real jax.jit: still one call.
    assert plugin._calls["jit"] == 1

def test_import_time_reference_is_the_adapter():
    assert AT_IMPORT[0] is plugin.jit_adapter

def test_pjit_reaches_shardc():
    plugin._calls["pjit"] = 0
    f = partial(pjit, in_shardings=None, out_shardings=None)(lambda x: x + 1)
    assert isinstance(f, PjitFunction)
    assert plugin._calls["pjit"] == 1

def test_jnp_internals_do_not():
    plugin._calls["jit"] = plugin._calls["pjit"] = 0
    x = jnp.arange(8.0)
    jnp.sin(x), jnp.linalg.norm(x), jnp.cumsum(x), jax.nn.softmax(x)
    jax.random.normal(jax.random.key(0), (3,))
    assert plugin._calls == {"jit": 0, "pjit": 0}, plugin._calls

def test_rest_of_jax_is_real():
    import jax._src.api as api
    assert jax.numpy is jnp and jax.Array is __import__("jax").Array
    assert isinstance(jnp.ones(2), jax.Array)
    assert jax.lax.add is __import__("jax").lax.add
    assert api.jit is plugin.jit_adapter   # imported from a test file: the proxy
    import sys
    assert sys.modules["jax"].jit is not plugin.jit_adapter  # jax itself untouched
    assert sys.modules["jax._src.api"].jit is not plugin.jit_adapter

def test_other_import_forms_reach_shardc():
    assert jit is plugin.jit_adapter
    assert src_api.jit is plugin.jit_adapter
    assert jax._src.api.jit is plugin.jit_adapter
    assert pjit_module.pjit is plugin.pjit_adapter
    plugin._calls["jit"] = plugin._calls["pjit"] = 0
    fs = [jit(lambda x: x + 1), src_api.jit(lambda x: x + 2), jax._src.api.jit(lambda x: x + 3)]
    assert all(isinstance(f, JitFunction) for f in fs), [type(f) for f in fs]
    np.testing.assert_allclose([f(1.0) for f in fs], [2.0, 3.0, 4.0])
    g = pjit_module.pjit(lambda x: x * 2, in_shardings=None, out_shardings=None)
    assert isinstance(g, PjitFunction)
    assert plugin._calls == {"jit": 3, "pjit": 1}, plugin._calls

def test_import_inside_a_test_reaches_shardc():
    from jax import jit as local_jit
    import jax.experimental.pjit
    assert local_jit is plugin.jit_adapter
    assert jax.experimental.pjit.pjit is plugin.pjit_adapter

def test_tracer_calls_reach_shardc():
    plugin._calls["jit"] = 0
    inner = jax.jit(lambda x: x * 3)
    out = jax.grad(lambda x: inner(x).sum())(jnp.ones(3))
    np.testing.assert_allclose(out, 3 * np.ones(3))
    assert plugin._calls["jit"] == 1
'''


def self_check(timeout: int) -> int:
    with tempfile.TemporaryDirectory(prefix="jax_suite_check_") as tmp:
        work = pathlib.Path(tmp)
        (work / "pytest.ini").write_text("[pytest]\n")
        (work / "selfcheck_test.py").write_text(SELF_CHECK_TEST)
        log = work / "log.jsonl"
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "jax_suite_plugin", "-p",
             "no:cacheprovider", f"--timeout={timeout}", "--rootdir", tmp, "selfcheck_test.py"],
            cwd=work, env=_env("shardc", log, None, "selfcheck_test.py"),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        print(proc.stdout[-4000:])
        ended, _ = _read_log(log)
        expected = SELF_CHECK_TEST.count("\ndef test_")
        ok = proc.returncode == 0 and len(ended) == expected and all(
            r["outcome"] == "passed" for r in ended.values())
        print("self-check:", "OK" if ok else "FAILED")
        return 0 if ok else 1


# ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("jax_dir", nargs="?",
                    help="directory holding the set's test files (directly or in tests/)")
    ap.add_argument("--set", choices=sorted(SETS), default="peer",
                    help="peer: pjit/array/shard_map tests; wide: JAX's other jit tests")
    ap.add_argument("--only", nargs="+", metavar="FILE_OR_CLASS")
    ap.add_argument("--json", default=None,
                    help="where the outcomes go (default $TMPDIR/jax_suite[_wide].json)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--reuse-baseline", nargs="+", metavar="PATH",
                    help="take the unmodified outcomes from earlier JSONs (merged)")
    ap.add_argument("--baseline-only", action="store_true",
                    help="run only the unmodified pass (for --reuse-baseline later)")
    ap.add_argument("--all-tests", action="store_true",
                    help="in the shardc pass also run the tests that do not count")
    ap.add_argument("--jit-tests-only", action="store_true",
                    help="leave out (both passes) tests whose source never names jit or "
                         "pjit: for files too slow to run whole")
    ap.add_argument("--compile-and-check", action="store_true",
                    help="also route the jit of jax's test utilities' _CompileAndCheck "
                         "(both passes): the numerics files call jit only there")
    ap.add_argument("--devices", type=int, default=8,
                    help="CPU devices both passes run on (the Pallas interpret-mode "
                         "files skip every test unless there is one)")
    ap.add_argument("--self-check", action="store_true")
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--report", nargs="+", metavar="PATH",
                    help="only print the table and causes of earlier JSONs (merged)")
    ap.add_argument("--readme", metavar="PATH",
                    help="also write the table between the README's markers for the set")
    args = ap.parse_args(argv)

    global JIT_TESTS_ONLY, COMPILE_AND_CHECK, DEVICES
    JIT_TESTS_ONLY = args.jit_tests_only
    COMPILE_AND_CHECK = args.compile_and_check
    DEVICES = args.devices
    if args.self_check:
        return self_check(args.timeout)
    if args.report:
        prev = merge_reports([json.loads(pathlib.Path(p).read_text()) for p in args.report])
        return write_report(prev, prev["tests"], None, args.readme)
    if not args.jax_dir:
        ap.error("jax_dir is required")
    paths = SETS[args.set]
    src = pathlib.Path(args.jax_dir)
    if (src / "tests" / paths[0]).is_file():
        src = src / "tests"
    for f in paths:
        if not (src / f).is_file():
            ap.error(f"{src / f} not found")
    json_path = args.json or os.path.join(
        tempfile.gettempdir(), "jax_suite.json" if args.set == "peer" else "jax_suite_wide.json")
    report = {
        "set": args.set,
        "jax_dir": str(src.resolve()),
        "only": args.only,
        "timeout": args.timeout,
        "jobs": args.jobs,
        "reused_baseline": args.reuse_baseline,
        "baseline_only": args.baseline_only,
        "jit_tests_only": args.jit_tests_only,
        "compile_and_check": args.compile_and_check,
        "devices": args.devices,
        "git": _git_describe(),
    }

    work = pathlib.Path(tempfile.mkdtemp(prefix="jax_suite_"))
    try:
        files = copy_set(src, paths, work)
        (work / "pytest.ini").write_text("[pytest]\n")
        units = resolve_units(args.only, work, args.jobs, files)
        print(f"jax_suite: {src} -> {work}; units: {units}", file=sys.stderr, flush=True)

        def progress(unmodified: dict, shardc: dict | None, seconds: dict,
                     not_run: frozenset[str] = frozenset()) -> None:
            """Write what is finished so far: a long run's files are usable as they end."""
            if shardc is not None:
                ran = {_file_of(n) for n in shardc}
                shardc = {**{n: {"outcome": "not run"} for n in not_run}, **shardc}
            tests = assemble(unmodified, shardc)
            if shardc is not None:
                tests = [t for t in tests if _file_of(t["nodeid"]) in ran]
            partial = {**report, "partial": True, "seconds": seconds,
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
            write_json(partial, tests, json_path)

        seconds: dict = {}
        if args.reuse_baseline:
            prev = merge_reports([json.loads(pathlib.Path(p).read_text())
                                  for p in args.reuse_baseline])
            unmodified = {t["nodeid"]: {"outcome": t["unmodified"], "called_jit": t["called_jit"],
                                        "exc": t.get("unmodified_exc")}
                          for t in prev["tests"]}
            wanted = {sel for unit in units for sel in unit}
            unmodified = {n: v for n, v in unmodified.items()
                          if any(n == sel or n.startswith(sel + "::") for sel in wanted)}
            # The baseline's seconds of this run's units only (merged runs add up).
            names = {" ".join(unit) for unit in units}
            seconds["unmodified_units"] = {
                u: sec for u, sec in (prev["seconds"].get("unmodified_units") or {}).items()
                if u in names}
            seconds["unmodified"] = sum(seconds["unmodified_units"].values()) or None
            print(f"unmodified: reused {len(unmodified)} outcomes from {args.reuse_baseline}",
                  file=sys.stderr)
        else:
            unmodified, seconds["unmodified"], seconds["unmodified_units"] = run_pass(
                "record", units, work, args.timeout, args.jobs, files,
                on_unit=lambda r, units_s: progress(
                    r, None, {**seconds, "unmodified_units": units_s}))
            print(f"unmodified pass: {len(unmodified)} tests in {seconds['unmodified']:.0f}s",
                  file=sys.stderr, flush=True)
        shardc = None
        if not args.baseline_only:
            # Tests that fail unmodified or never call jit do not count: with
            # --all-tests they run anyway (their outcomes go to the JSON).
            uncounted = frozenset() if args.all_tests else frozenset(
                n for n, u in unmodified.items()
                if not (u["outcome"] in PASSING and u["called_jit"]))
            shardc_units = units if args.all_tests else units_that_count(
                units, [n for n in unmodified if n not in uncounted])
            shardc, seconds["shardc"], seconds["shardc_units"] = run_pass(
                "shardc", shardc_units, work, args.timeout, args.jobs, files,
                on_unit=lambda r, units_s: progress(
                    unmodified, r, {**seconds, "shardc_units": units_s}, uncounted),
                skip_ids=uncounted)
            shardc.update({n: {"outcome": "not run"} for n in uncounted if n not in shardc})
            print(f"shardc pass: {len(shardc)} tests in {seconds['shardc']:.0f}s",
                  file=sys.stderr, flush=True)
    finally:
        if not args.keep_workdir:
            shutil.rmtree(work, ignore_errors=True)

    report["seconds"] = seconds
    report["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return write_report(report, assemble(unmodified, shardc), json_path, args.readme)


def assemble(unmodified: dict, shardc: dict | None) -> list[dict]:
    """One record per test from the two passes' records (``shardc`` None: not run)."""
    tests = []
    for nodeid in sorted(set(unmodified) | set(shardc or {})):
        u = unmodified.get(nodeid, {})
        s = (shardc or {}).get(nodeid, {})
        outcome = s.get("outcome", "missing" if shardc is not None else "not run")
        tests.append({
            "nodeid": nodeid,
            "class": _class_of(nodeid),
            "unmodified": u.get("outcome", "missing"),
            "called_jit": bool(u.get("called_jit")),
            "unmodified_exc": u.get("exc"),
            "shardc": outcome,
            "shardc_called_jit": s.get("called_jit"),
            "shardc_exc": s.get("exc") if outcome not in PASSING else None,
            "shardc_seconds": s.get("seconds"),
        })
    return tests


def merge_reports(reports: list[dict]) -> dict:
    """Several runs' JSONs as one (a later run's record of a test wins)."""
    merged = dict(reports[0])
    by_id: dict[str, dict] = {}
    seconds: dict = {}
    for r in reports:
        for t in r["tests"]:
            by_id[t["nodeid"]] = t
        for k, v in (r.get("seconds") or {}).items():
            if isinstance(v, dict):
                seconds.setdefault(k, {}).update(v)
            elif v is not None:
                seconds[k] = (seconds.get(k) or 0) + v
    merged["tests"] = [by_id[n] for n in sorted(by_id)]
    merged["seconds"] = seconds
    merged["date"] = max((r.get("date") or "" for r in reports), default="") or None
    return merged


def _git_describe() -> str:
    proc = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip() or "unknown"


def markdown_table(rows: dict, totals: list[tuple[str, dict]], set_name: str = "peer") -> str:
    """The table in Markdown, with its totals."""
    lines = [f"| {'file' if set_name == 'wide' else 'class'} | tests | pass unmodified "
             "| of those call jit | pass through shardc | % |",
             "|---|---:|---:|---:|---:|---:|"]

    def row(name: str, r: dict, bold: bool = False) -> None:
        name = f"**{name}**" if bold else f"`{name}`"
        lines.append(f"| {name} | {r['tests']} | {r['pass_unmodified']} | {r['call_jit']} "
                     f"| {r['pass_shardc']} | {_pct(r)} |")

    for name, r in rows.items():
        row(name, r)
    for label, r in totals:
        row(label, r, bold=True)
    return "\n".join(lines)


def markdown_categories(categories: list[dict]) -> str:
    """The failure causes by kind in Markdown, one example test each."""
    lines = ["| kind | cause | tests | example |", "|---|---|---:|---|"]
    for g in categories:
        lines.append(f"| {g['kind']} | {g['category']} | {g['count']} | `{g['example']}` |")
    return "\n".join(lines)


def summarize(report: dict, tests: list[dict]) -> dict:
    """``report`` with the tests and everything the tables and causes are made of."""
    set_name = report.get("set", "peer")
    rows, totals = table_rows(tests, set_name)
    return {
        **{k: v for k, v in report.items() if k not in (
            "classes", "rows", "totals", "outcomes", "causes", "categories", "tests")},
        "rows": rows,
        "totals": dict(totals),
        "outcomes": {
            "unmodified": dict(collections.Counter(t["unmodified"] for t in tests)),
            "shardc": dict(collections.Counter(t["shardc"] for t in tests)),
        },
        "categories": failure_categories(tests),
        "causes": failure_causes(tests),
        "tests": tests,
    }


def write_json(report: dict, tests: list[dict], json_path: str) -> dict:
    """Write the summary of ``tests`` to ``json_path`` (whole or not at all: a
    reader of a long run's partial JSON never sees half of one); return it."""
    summary = summarize(report, tests)
    path = pathlib.Path(json_path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    os.replace(tmp, path)
    return summary


def write_report(report: dict, tests: list[dict], json_path: str | None,
                 readme: str | None = None) -> int:
    """Print the table and the causes; with ``json_path``, write everything there;
    with ``readme``, the Markdown table (and for the wide set the causes by kind)
    between that file's markers for the set."""
    summary = write_json(report, tests, json_path) if json_path else summarize(report, tests)
    set_name = summary.get("set", "peer")
    rows, totals = summary["rows"], list(summary["totals"].items())

    print()
    print(format_table(rows, totals, set_name))
    print()
    print("outcomes:", json.dumps(summary["outcomes"]))
    secs = summary.get("seconds") or {}
    print(f"seconds: unmodified {secs.get('unmodified') and round(secs['unmodified'])}"
          f"{' (reused)' if summary.get('reused_baseline') else ''}, "
          f"shardc {secs.get('shardc') and round(secs['shardc'])}")
    for unit, sec in sorted({**(secs.get("unmodified_units") or {})}.items(),
                            key=lambda kv: -kv[1])[:10]:
        shardc_sec = (secs.get("shardc_units") or {}).get(unit)
        print(f"  {unit}: unmodified {sec:.0f}s"
              + (f", shardc {shardc_sec:.0f}s" if shardc_sec is not None else ""))
    categories, causes = summary["categories"], summary["causes"]
    failures = sum(g["count"] for g in categories)
    print()
    print(f"failure causes by kind (of {failures} shardc failures among tests that pass "
          "unmodified and call jit):")
    for g in categories:
        print(f"{g['count']:5d}  [{g['kind']}] {g['category']}")
        print(f"       e.g. {g['example']}: {g['example_type']}: {g['example_message'][:150]}")
    print()
    print("top failure causes by message:")
    for g in causes[:25]:
        print(f"{g['count']:5d}  [{g['kind']}] {g['type']}: {g['message']}")
        frames = [g.get("example_test_line"), g.get("example_shardc_frame")]
        if not (frames[1] or "").endswith(g["example_where"]):
            frames.append(g["example_where"])
        where = ", ".join(w for w in frames if w)
        print(f"       e.g. {g['example']}  [{where}]")

    if json_path:
        print(f"\nwrote {json_path}")
    if readme:
        start, end = MARKERS[set_name]
        header = (f"`python -m bench.jax_suite{' --set wide' if set_name == 'wide' else ''}` "
                  f"(jax {_jax_version()}'s tests; shardc {summary.get('git', 'unknown')}; "
                  f"{summary.get('date', 'undated')}):")
        parts = ["", header, "", markdown_table(rows, totals, set_name), ""]
        if set_name == "wide":
            parts += [f"The {failures} failures by kind and cause:", "",
                      markdown_categories(categories), ""]
        path = pathlib.Path(readme)
        path.write_text(render_readme.splice(path.read_text(), "\n".join(parts), start, end))
        print(f"wrote the table into {readme}")
    return 0


def _jax_version() -> str:
    return importlib.metadata.version("jax")


if __name__ == "__main__":
    sys.exit(main())
