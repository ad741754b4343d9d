"""JAX's own sharding tests through shardc: the outside measure of "drop-in for jax.jit".

    python -m bench.jax_suite JAX_DIR [--only FILE_OR_CLASS ...] [--json PATH]
        [--jobs N] [--timeout S] [--reuse-baseline PATH] [--self-check]
    python -m bench.jax_suite --report PATH   # reprint an earlier run's table and causes
    ... [--readme README.md]   # also write the table between the README's markers

``JAX_DIR`` holds ``tests/pjit_test.py``, ``tests/array_test.py`` and
``tests/shard_map_test.py`` (unmodified copies from the JAX repository at the
version shardc pins, e.g. ``/work/shared/peer/jax-v0.10.2``). They are copied,
byte for byte, into a temporary directory (with an empty ``pytest.ini`` so no
outside pytest configuration applies) and run twice with pytest
(``--timeout S``, default 120, from pytest-timeout) on 8 CPU devices
(``JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=8``):

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

from bench import render_readme

BENCH = pathlib.Path(__file__).resolve().parent
ROOT = BENCH.parent

README_START, README_END = "<!-- jax-suite:start -->", "<!-- jax-suite:end -->"
FILES = ("pjit_test.py", "array_test.py", "shard_map_test.py")
SPLIT_CLASSES = ("ShardingInTypesTest", "ShardMapTest")
PASSING = ("passed", "xpassed")


# ----------------------------------------------------------------------------------
# Running pytest


def _env(mode: str, out: pathlib.Path, skip: pathlib.Path | None, files: str) -> dict:
    env = dict(os.environ)
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
        JAX_SUITE_MODE=mode,
        JAX_SUITE_OUT=str(out),
        JAX_SUITE_FILES=files,
        PYTHONPATH=os.pathsep.join(
            [str(BENCH)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
        PYTHONDONTWRITEBYTECODE="1",
    )
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
             tag: str, files: str = ",".join(FILES), max_restarts: int = 50) -> dict:
    """Run pytest on ``selectors`` in ``workdir`` (resuming after crashes); records by id."""
    log = workdir / f"log-{mode}-{tag}.jsonl"
    skip = workdir / f"skip-{mode}-{tag}.txt"
    for p in (log, skip):
        if p.exists():
            p.unlink()
    crashed: dict[str, dict] = {}
    for attempt in range(max_restarts + 1):
        ended, started = _read_log(log)
        done = set(ended) | set(crashed)
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
    return re.findall(r"^class (\w+)\(jtu\.\w*TestCase\):", path.read_text(), re.MULTILINE)


def resolve_units(only: list[str] | None, workdir: pathlib.Path, jobs: int) -> list[list[str]]:
    """pytest selectors, grouped into units (one pytest process each)."""
    selectors: list[str] = []
    if not only:
        if jobs > 1:
            selectors = [f"{f}::{c}" for f in FILES for c in _classes_of(workdir / f)]
        else:
            selectors = list(FILES)
    else:
        for sel in only:
            sel = sel.strip()
            if "::" in sel or sel.endswith(".py"):
                file = sel.split("::")[0]
                file = os.path.basename(file)
                if file not in FILES:
                    raise SystemExit(f"--only {sel}: not one of {FILES}")
                selectors.append("::".join([file] + sel.split("::")[1:]))
            else:
                owners = [f for f in FILES if sel in _classes_of(workdir / f)]
                if not owners:
                    raise SystemExit(f"--only {sel}: no test class of that name in {FILES}")
                selectors.append(f"{owners[0]}::{sel}")
    if jobs <= 1:
        return [selectors]
    return [[s] for s in selectors]


def run_pass(mode: str, units: list[list[str]], workdir: pathlib.Path, timeout: int,
             jobs: int) -> tuple[dict, float]:
    start = time.monotonic()
    results: dict[str, dict] = {}
    # Largest first (by source size of the selection, roughly), so jobs finish together.
    order = sorted(range(len(units)), key=lambda i: -_weight(units[i], workdir))

    def one(i: int) -> dict:
        t0 = time.monotonic()
        r = run_unit(mode, units[i], workdir, timeout, tag=str(i))
        print(f"  [{mode}] {' '.join(units[i])}: {len(r)} tests, "
              f"{sum(v['outcome'] in PASSING for v in r.values())} passed, "
              f"{time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
        return r

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for r in pool.map(one, order):
            results.update(r)
    return results, time.monotonic() - start


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


def build_rows(tests: list[dict]) -> dict:
    by_class: dict[str, dict] = collections.OrderedDict()
    for t in tests:
        c = by_class.setdefault(t["class"], {"tests": 0, "pass_unmodified": 0, "call_jit": 0,
                                             "pass_shardc": 0})
        c["tests"] += 1
        if t["unmodified"] in PASSING:
            c["pass_unmodified"] += 1
            if t["called_jit"]:
                c["call_jit"] += 1
                if t.get("shardc") in PASSING:
                    c["pass_shardc"] += 1
    return by_class


def _sum(rows) -> dict:
    out = {"tests": 0, "pass_unmodified": 0, "call_jit": 0, "pass_shardc": 0}
    for r in rows:
        for k in out:
            out[k] += r[k]
    return out


def _pct(r: dict) -> str:
    return f"{100.0 * r['pass_shardc'] / r['call_jit']:.1f}%" if r["call_jit"] else "-"


def format_table(by_class: dict) -> str:
    lines = []
    header = ("class", "tests", "pass unmod.", "call jit", "pass shardc", "%")
    labels = ["TOTAL", "outside " + " and ".join(SPLIT_CLASSES), " + ".join(SPLIT_CLASSES)]
    width = max(len(k) for k in [*by_class, *labels])
    fmt = f"{{:<{width}}} {{:>6}} {{:>12}} {{:>9}} {{:>12}} {{:>7}}"
    lines.append(fmt.format(*header))
    lines.append("-" * (width + 52))

    def row(name, r):
        lines.append(fmt.format(name, r["tests"], r["pass_unmodified"], r["call_jit"],
                                r["pass_shardc"], _pct(r)))

    for name, r in by_class.items():
        row(name, r)
    lines.append("-" * (width + 52))
    row("TOTAL", _sum(by_class.values()))
    split = [r for n, r in by_class.items() if n.split("::")[-1] in SPLIT_CLASSES]
    rest = [r for n, r in by_class.items() if n.split("::")[-1] not in SPLIT_CLASSES]
    row("outside " + " and ".join(SPLIT_CLASSES), _sum(rest))
    row(" + ".join(SPLIT_CLASSES), _sum(split))
    return "\n".join(lines)


def failure_causes(tests: list[dict]) -> list[dict]:
    groups: dict[tuple, dict] = {}
    for t in tests:
        if not (t["unmodified"] in PASSING and t["called_jit"]) or t.get("shardc") in PASSING:
            continue
        exc = t.get("shardc_exc") or {}
        etype = exc.get("type") or t.get("shardc") or "?"
        key = (etype, normalize(exc.get("message", "")))
        g = groups.setdefault(key, {"type": key[0], "message": key[1], "count": 0,
                                    "example": t["nodeid"],
                                    "example_message": exc.get("message", ""),
                                    "example_where": exc.get("where", ""),
                                    "example_test_line": exc.get("test_line", ""),
                                    "example_shardc_frame": exc.get("shardc_frame", "")})
        g["count"] += 1
    return sorted(groups.values(), key=lambda g: -g["count"])


# ----------------------------------------------------------------------------------
# Self check of the interception


SELF_CHECK_TEST = '''
import jax
import jax.numpy as jnp
import numpy as np
from functools import partial
from jax._src.pjit import pjit
import jax_suite_plugin as plugin
from shardc.compiler.api import JitFunction
from shardc.compiler.api import PjitFunction

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
        ok = proc.returncode == 0 and len(ended) == 6 and all(
            r["outcome"] == "passed" for r in ended.values())
        print("self-check:", "OK" if ok else "FAILED")
        return 0 if ok else 1


# ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("jax_dir", nargs="?",
                    help="directory holding tests/{pjit,array,shard_map}_test.py")
    ap.add_argument("--only", nargs="+", metavar="FILE_OR_CLASS")
    ap.add_argument("--json", default=os.path.join(tempfile.gettempdir(), "jax_suite.json"))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--reuse-baseline", metavar="PATH")
    ap.add_argument("--self-check", action="store_true")
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--report", metavar="PATH",
                    help="only print the table and causes of an earlier JSON")
    ap.add_argument("--readme", metavar="PATH",
                    help=f"also write the table between {README_START} and {README_END}")
    args = ap.parse_args(argv)

    if args.self_check:
        return self_check(args.timeout)
    if args.report:
        prev = json.loads(pathlib.Path(args.report).read_text())
        return write_report(prev, prev["tests"], None, args.readme)
    if not args.jax_dir:
        ap.error("jax_dir is required")
    src = pathlib.Path(args.jax_dir) / "tests"
    for f in FILES:
        if not (src / f).is_file():
            ap.error(f"{src / f} not found")

    work = pathlib.Path(tempfile.mkdtemp(prefix="jax_suite_"))
    try:
        for f in FILES:
            shutil.copyfile(src / f, work / f)  # byte for byte, never edited
        (work / "pytest.ini").write_text("[pytest]\n")
        units = resolve_units(args.only, work, args.jobs)
        print(f"jax_suite: {src} -> {work}; units: {units}", file=sys.stderr, flush=True)

        baseline_seconds = None
        if args.reuse_baseline:
            prev = json.loads(pathlib.Path(args.reuse_baseline).read_text())
            unmodified = {t["nodeid"]: {"outcome": t["unmodified"], "called_jit": t["called_jit"],
                                        "exc": t.get("unmodified_exc")}
                          for t in prev["tests"]}
            if args.only:
                wanted = set()
                for unit in units:
                    for sel in unit:
                        wanted |= {n for n in unmodified
                                   if n == sel or n.startswith(sel + "::")}
                unmodified = {n: v for n, v in unmodified.items() if n in wanted}
            baseline_seconds = prev.get("seconds", {}).get("unmodified")
            print(f"unmodified: reused {len(unmodified)} outcomes from {args.reuse_baseline}",
                  file=sys.stderr)
        else:
            unmodified, baseline_seconds = run_pass("record", units, work, args.timeout, args.jobs)
            print(f"unmodified pass: {len(unmodified)} tests in {baseline_seconds:.0f}s",
                  file=sys.stderr, flush=True)
        shardc, shardc_seconds = run_pass("shardc", units, work, args.timeout, args.jobs)
        print(f"shardc pass: {len(shardc)} tests in {shardc_seconds:.0f}s", file=sys.stderr,
              flush=True)
    finally:
        if not args.keep_workdir:
            shutil.rmtree(work, ignore_errors=True)

    tests = []
    for nodeid in sorted(set(unmodified) | set(shardc)):
        u = unmodified.get(nodeid, {})
        s = shardc.get(nodeid, {})
        tests.append({
            "nodeid": nodeid,
            "class": _class_of(nodeid),
            "unmodified": u.get("outcome", "missing"),
            "called_jit": bool(u.get("called_jit")),
            "unmodified_exc": u.get("exc"),
            "shardc": s.get("outcome", "missing"),
            "shardc_called_jit": s.get("called_jit"),
            "shardc_exc": s.get("exc") if s.get("outcome") not in PASSING else None,
            "shardc_seconds": s.get("seconds"),
        })

    report = {
        "jax_dir": str(pathlib.Path(args.jax_dir).resolve()),
        "only": args.only,
        "timeout": args.timeout,
        "jobs": args.jobs,
        "reused_baseline": args.reuse_baseline,
        "seconds": {"unmodified": baseline_seconds, "shardc": shardc_seconds},
    }
    report["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    report["git"] = _git_describe()
    return write_report(report, tests, args.json, args.readme)


def _git_describe() -> str:
    proc = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip() or "unknown"


def markdown_table(by_class: dict) -> str:
    """The per-class table in Markdown, with the totals and the two subtotals."""
    lines = ["| class | tests | pass unmodified | of those call jit | pass through shardc "
             "| % |", "|---|---:|---:|---:|---:|---:|"]

    def row(name: str, r: dict, bold: bool = False) -> None:
        name = f"**{name}**" if bold else f"`{name}`"
        lines.append(f"| {name} | {r['tests']} | {r['pass_unmodified']} | {r['call_jit']} "
                     f"| {r['pass_shardc']} | {_pct(r)} |")

    for name, r in by_class.items():
        row(name, r)
    split = [r for n, r in by_class.items() if n.split("::")[-1] in SPLIT_CLASSES]
    rest = [r for n, r in by_class.items() if n.split("::")[-1] not in SPLIT_CLASSES]
    row("total", _sum(by_class.values()), bold=True)
    row("outside " + " and ".join(SPLIT_CLASSES), _sum(rest), bold=True)
    row(" + ".join(SPLIT_CLASSES), _sum(split), bold=True)
    return "\n".join(lines)


def write_report(report: dict, tests: list[dict], json_path: str | None,
                 readme: str | None = None) -> int:
    """Print the table and the causes; with ``json_path``, write everything there;
    with ``readme``, the Markdown table between that file's markers."""
    by_class = build_rows(tests)
    table = format_table(by_class)
    causes = failure_causes(tests)
    outcome_counts = {
        "unmodified": dict(collections.Counter(t["unmodified"] for t in tests)),
        "shardc": dict(collections.Counter(t["shardc"] for t in tests)),
    }

    print()
    print(table)
    print()
    print("outcomes:", json.dumps(outcome_counts))
    secs = report.get("seconds", {})
    print(f"seconds: unmodified {secs.get('unmodified') and round(secs['unmodified'])}"
          f"{' (reused)' if report.get('reused_baseline') else ''}, "
          f"shardc {secs.get('shardc') and round(secs['shardc'])}")
    print()
    print(f"top failure causes (of {sum(g['count'] for g in causes)} shardc failures among "
          "tests that pass unmodified and call jit):")
    for g in causes[:25]:
        print(f"{g['count']:5d}  {g['type']}: {g['message']}")
        frames = [g.get("example_test_line"), g.get("example_shardc_frame")]
        if not (frames[1] or "").endswith(g["example_where"]):
            frames.append(g["example_where"])
        where = ", ".join(w for w in frames if w)
        print(f"       e.g. {g['example']}  [{where}]")

    all_rows = _sum(by_class.values())
    split = [r for n, r in by_class.items() if n.split("::")[-1] in SPLIT_CLASSES]
    rest = [r for n, r in by_class.items() if n.split("::")[-1] not in SPLIT_CLASSES]
    report = {
        **{k: v for k, v in report.items() if k not in ("classes", "totals", "outcomes",
                                                         "causes", "tests")},
        "classes": by_class,
        "totals": {"all": all_rows, "outside_split": _sum(rest), "split": _sum(split)},
        "outcomes": outcome_counts,
        "causes": causes,
        "tests": tests,
    }
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps(report, indent=1) + "\n")
        print(f"\nwrote {json_path}")
    if readme:
        header = (f"`python -m bench.jax_suite` (jax {_jax_version()}'s tests; shardc "
                  f"{report.get('git', 'unknown')}; {report.get('date', 'undated')}):")
        body = "\n".join(["", header, "", markdown_table(by_class), ""])
        path = pathlib.Path(readme)
        path.write_text(render_readme.splice(path.read_text(), body, README_START, README_END))
        print(f"wrote the table into {readme}")
    return 0


def _jax_version() -> str:
    return importlib.metadata.version("jax")


if __name__ == "__main__":
    sys.exit(main())
