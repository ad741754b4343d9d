"""``bench.jax_suite``: JAX's own tests through shardc.

The sample runs a few of JAX's own tests through the plugin in both modes; it
needs JAX's test files (``$SHARDC_JAX_TESTS``, or ``shared/peer/jax-v<version>``
beside the clone or above it) and ``pytest-timeout`` (``pip install -e
'.[jaxsuite]'``), and is skipped without them. The rest checks the report's
arithmetic and the classification of failures on made-up records.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from bench import jax_filecheck, jax_suite, jax_suite_multiprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _peer_dir() -> pathlib.Path | None:
    """Where JAX's pjit/array/shard_map tests are, if anywhere."""
    if os.environ.get("SHARDC_JAX_TESTS"):
        return pathlib.Path(os.environ["SHARDC_JAX_TESTS"])
    name = f"jax-v{importlib.metadata.version('jax')}"
    for parent in ROOT.parents:
        candidate = parent / "shared" / "peer" / name
        if (candidate / "tests" / "pjit_test.py").is_file():
            return candidate
    return None


PEER = _peer_dir()
needs_peer = pytest.mark.skipif(
    PEER is None or importlib.util.find_spec("pytest_timeout") is None,
    reason="JAX's test files (SHARDC_JAX_TESTS or ../shared/peer) or pytest-timeout missing")

# Tests of pjit_test.py (one file: two pytest processes) that call jit or pjit
# and pass through shardc: shardings on one and two mesh axes, pjit in pjit,
# lower/compile of Arrays, jax's error for a spec longer than the argument's rank.
SAMPLE = (
    "pjit_test.py::PJitTest::testBasic1D",
    "pjit_test.py::PJitTest::testBasic2D",
    "pjit_test.py::PJitTest::testNested",
    "pjit_test.py::ArrayPjitTest::test_array_lower_compile",
    "pjit_test.py::PJitErrorTest::testRankTooLowArgs",
)


@needs_peer
def test_sample_of_jax_tests_passes_in_both_modes(tmp_path, capsys):
    out = tmp_path / "sample.json"
    assert jax_suite.main([str(PEER), "--only", *SAMPLE, "--json", str(out),
                           "--timeout", "60"]) == 0
    report = json.loads(out.read_text())
    by_id = {t["nodeid"]: t for t in report["tests"]}
    assert sorted(by_id) == sorted(SAMPLE)
    for nodeid, t in by_id.items():
        # Unmodified the test passes and calls jit; through shardc it still
        # calls it (the plugin routed it) and passes.
        assert (t["unmodified"], t["called_jit"]) == ("passed", True), nodeid
        assert (t["shardc"], t["shardc_called_jit"]) == ("passed", True), (nodeid, t)
    assert report["totals"]["total"]["pass_shardc"] == len(SAMPLE)
    assert "TOTAL" in capsys.readouterr().out


MULTIPROCESS_PJIT = PEER / "tests" / "multiprocess" / "pjit_test.py" if PEER else None


@pytest.mark.skipif(MULTIPROCESS_PJIT is None or not MULTIPROCESS_PJIT.is_file(),
                    reason="JAX's multiprocess tests (a whole checkout in SHARDC_JAX_TESTS) missing")
def test_multiprocess_tests_run_through_shardc_in_two_processes(tmp_path):
    # Two pytest processes of 4 CPU devices each join jax's distributed runtime; the
    # tests' jit calls go to shardc: a program over both processes' devices, and
    # jax's error for numpy data given a sharding that splits it.
    outcomes = jax_suite_multiprocess.run(
        MULTIPROCESS_PJIT, "shardc", 2, 4, tmp_path,
        ["-k", "test_sharded_jit_add or test_numpy_input_error_with_non_trivial_sharding"], 600)
    assert outcomes == {
        f"pjit_test.py::ArrayPjitMultiHost::{name}": ("passed", True)
        for name in ("test_sharded_jit_add", "test_numpy_input_error_with_non_trivial_sharding")}


@needs_peer
def test_interception_self_check():
    assert jax_suite.main(["--self-check", "--timeout", "60"]) == 0


def test_units_are_one_file_each_or_one_class_each(tmp_path):
    (tmp_path / "a_test.py").write_text(
        "class ATest(jtu.JaxTestCase):\n  pass\nclass BTest(ATest):\n  pass\n"
        "class Helper(object):\n  pass\n")
    (tmp_path / "b_test.py").write_text("class CTest(jtu.BufferDonationTestCase):\n  pass\n")
    files = ("a_test.py", "b_test.py")
    assert jax_suite._classes_of(tmp_path / "a_test.py") == ["ATest", "BTest"]
    assert jax_suite.resolve_units(None, tmp_path, 1, files) == [["a_test.py"], ["b_test.py"]]
    assert jax_suite.resolve_units(None, tmp_path, 2, files) == [
        ["a_test.py::ATest"], ["a_test.py::BTest"], ["b_test.py::CTest"]]
    assert jax_suite.resolve_units(["CTest", "a_test.py::ATest::test_x"], tmp_path, 1,
                                   files) == [["b_test.py::CTest"], ["a_test.py::ATest::test_x"]]


def test_a_file_in_a_subdirectory_is_copied_beside_the_others(tmp_path):
    src, work = tmp_path / "tests", tmp_path / "work"
    (src / "pallas").mkdir(parents=True)
    work.mkdir()
    (src / "a_test.py").write_text("A = 1\n")
    (src / "pallas" / "b_test.py").write_text("B = 2\n")
    assert jax_suite.copy_set(src, ("a_test.py", "pallas/b_test.py"), work) == (
        "a_test.py", "b_test.py")
    assert (work / "b_test.py").read_text() == "B = 2\n"
    (src / "b_test.py").write_text("B = 3\n")
    with pytest.raises(ValueError, match="share a base name"):
        jax_suite.copy_set(src, ("b_test.py", "pallas/b_test.py"), work)


def test_the_shardc_pass_starts_only_units_with_a_test_that_counts():
    units = [["a_test.py"], ["b_test.py::BTest", "b_test.py::CTest"], ["c_test.py"]]
    counted = ["b_test.py::CTest::test_x", "c_test.py::DTest::test_y"]
    assert jax_suite.units_that_count(units, counted) == units[1:]
    # A selector matches its own tests only, not a class whose name it begins.
    assert jax_suite.units_that_count([["b_test.py::C"]], counted) == []


def _test(nodeid, shardc="failed", exc=None, unmodified="passed", called_jit=True):
    return {"nodeid": nodeid, "class": jax_suite._class_of(nodeid), "unmodified": unmodified,
            "called_jit": called_jit, "shardc": shardc, "shardc_exc": exc}


def _exc(type_, message, frames=("test",), code="", uses=()):
    return {"type": type_, "message": message, "frames": list(frames), "test_code": code,
            "test_uses": list(uses), "where": "", "test_line": "", "shardc_frame": ""}


@pytest.mark.parametrize("exc, expected", [
    (_exc("AssertionError", "2 != 1", ("test", "framework"), "self.assertEqual(count(), 1)",
          ["jtu.count_jit_and_pmap_lowerings"]),
     (jax_suite.INTERNALS, "counts of jax's own traces, lowerings, compilations or caches")),
    (_exc("AssertionError", "Expected exactly 1 XLA compilations, but executed 2",
          ("test", "jax_test_util")),
     (jax_suite.INTERNALS, "counts of jax's own traces, lowerings, compilations or caches")),
    (_exc("AttributeError", "'JitFunction' object has no attribute '_cache_size'"),
     (jax_suite.INTERNALS, "private attribute of jax's jit objects")),
    (_exc("AssertionError", "x is not an instance of <class 'jax._src.stages.Compiled'>",
          ("test", "framework"), "self.assertIsInstance(c, jax.stages.Compiled)"),
     (jax_suite.INTERNALS, "isinstance of jax.stages classes")),
    (_exc("AttributeError", "'JitFunction' object has no attribute 'trace'"),
     (jax_suite.SHARDC, "public attribute missing on shardc's objects")),
    (_exc("NotImplementedError", "unsupported", ("test", "shardc")),
     (jax_suite.SHARDC, "shardc raised NotImplementedError")),
    (_exc("TypeError", "bad operand", ("test", "shardc", "jax")),
     (jax_suite.SHARDC, "jax raised TypeError under shardc")),
    (_exc("AssertionError", "ValueError not raised", ("test", "framework")),
     (jax_suite.SHARDC, "expected exception not raised")),
    (_exc("AssertionError", "\nNot equal to tolerance", ("test", "numpy")),
     (jax_suite.SHARDC, "result or observable differs (assertion in the test)")),
    (_exc("TypeError", "Traced.lower() got an unexpected keyword argument '_private_parameters'",
          ("test", "jax")),
     (jax_suite.SHARDC, "an argument jax's jit objects take and shardc's do not")),
    (_exc("AssertionError", '"Input\\ shapes\\ do\\ not" does not match "Traced.lower() got"'),
     (jax_suite.SHARDC, "another error message than jax's")),
    (_exc("_pytest.outcomes.Failed", "Timeout (>120.0s) from pytest-timeout."),
     (jax_suite.SHARDC, "timeout")),
])
def test_classify_tells_shardc_failures_from_assertions_on_jax_internals(exc, expected):
    assert jax_suite.classify(_test("a_test.py::ATest::test_x", exc=exc)) == expected


def test_wide_table_rows_per_file_and_total_without_internals():
    internal = _exc("AttributeError", "'JitFunction' object has no attribute '_cache_size'")
    tests = [
        _test("a_test.py::ATest::test_1", shardc="passed"),
        _test("a_test.py::BTest::test_2", exc=internal),
        _test("a_test.py::BTest::test_3", unmodified="failed"),
        _test("b_test.py::CTest::test_4", exc=_exc("ValueError", "no", ("test", "shardc"))),
        _test("b_test.py::CTest::test_5", called_jit=False, shardc="not run"),
    ]
    rows, totals = jax_suite.table_rows(tests, "wide")
    assert rows == {
        "a_test.py": {"tests": 3, "pass_unmodified": 2, "call_jit": 2, "pass_shardc": 1},
        "b_test.py": {"tests": 2, "pass_unmodified": 2, "call_jit": 1, "pass_shardc": 0},
    }
    assert dict(totals) == {
        "total": {"tests": 5, "pass_unmodified": 4, "call_jit": 3, "pass_shardc": 1},
        "total without tests asserting jax internals":
            {"tests": 4, "pass_unmodified": 3, "call_jit": 2, "pass_shardc": 1},
    }
    categories = jax_suite.failure_categories(tests)
    assert [(g["kind"], g["count"], g["example"]) for g in categories] == [
        (jax_suite.SHARDC, 1, "b_test.py::CTest::test_4"),
        (jax_suite.INTERNALS, 1, "a_test.py::BTest::test_2"),
    ]


def test_reports_merge_with_the_later_record_winning():
    first = {"set": "wide", "tests": [_test("a_test.py::A::t1"), _test("a_test.py::A::t2")],
             "seconds": {"unmodified": 10.0, "unmodified_units": {"a_test.py": 10.0}}}
    second = {"set": "wide", "tests": [_test("a_test.py::A::t2", shardc="passed"),
                                       _test("b_test.py::B::t3")],
              "seconds": {"unmodified": 5.0, "unmodified_units": {"b_test.py": 5.0}}}
    merged = jax_suite.merge_reports([first, second])
    assert [(t["nodeid"], t["shardc"]) for t in merged["tests"]] == [
        ("a_test.py::A::t1", "failed"), ("a_test.py::A::t2", "passed"),
        ("b_test.py::B::t3", "failed")]
    assert merged["seconds"] == {"unmodified": 15.0,
                                 "unmodified_units": {"a_test.py": 10.0, "b_test.py": 5.0}}


@pytest.mark.skipif(importlib.util.find_spec("pytest_timeout") is None,
                    reason="pytest-timeout missing")
def test_jit_tests_only_leaves_out_tests_that_never_name_jit(tmp_path, monkeypatch):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "a_test.py").write_text(
        "import jax\n"
        "def test_calls_jit():\n    assert jax.jit(lambda x: x + 1)(1) == 2\n"
        "def test_no_jit():\n    assert jax.numpy.add(1, 1) == 2\n")
    monkeypatch.setattr(jax_suite, "JIT_TESTS_ONLY", True)
    records = jax_suite.run_unit("record", ["a_test.py"], tmp_path, 60, tag="t",
                                 files="a_test.py")
    assert {n: (r["outcome"], r["called_jit"]) for n, r in records.items()} == {
        "a_test.py::test_calls_jit": ("passed", True)}


@pytest.mark.skipif(importlib.util.find_spec("pytest_timeout") is None,
                    reason="pytest-timeout missing")
def test_compile_and_check_routes_the_jit_of_jax_test_utilities(tmp_path, monkeypatch):
    """JAX's numerics files jit only in ``jtu.JaxTestCase._CompileAndCheck``: with
    ``--compile-and-check`` that jit is the adapter's (the test counts, and its jit is
    shardc's in the shardc pass), and ``--jit-tests-only`` keeps the test."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "a_test.py").write_text(
        "import os\n"
        "import jax.numpy as jnp\n"
        "import numpy as np\n"
        "from jax._src import test_util as jtu\n"
        "class T(jtu.JaxTestCase):\n"
        "    def test_sin(self):\n"
        "        self._CompileAndCheck(jnp.sin, lambda: [np.ones(3, np.float32)])\n"
        "    def test_whose_jit(self):\n"
        "        shardc = os.environ['JAX_SUITE_MODE'] == 'shardc'\n"
        "        assert type(jtu.api.jit(jnp.sin)).__module__ == (\n"
        "            'shardc.compiler.api' if shardc else 'jaxlib._jax')\n")
    records = jax_suite.run_unit("record", ["a_test.py::T::test_sin"], tmp_path, 120,
                                 tag="plain", files="a_test.py")
    assert records["a_test.py::T::test_sin"]["called_jit"] is False
    monkeypatch.setattr(jax_suite, "COMPILE_AND_CHECK", True)
    monkeypatch.setattr(jax_suite, "JIT_TESTS_ONLY", True)
    for mode in ("record", "shardc"):
        records = jax_suite.run_unit(mode, ["a_test.py"], tmp_path, 120, tag=mode,
                                     files="a_test.py")
        assert {n: (r["outcome"], r["called_jit"]) for n, r in records.items()} == {
            "a_test.py::T::test_sin": ("passed", True),
            "a_test.py::T::test_whose_jit": ("passed", True)}, mode


@pytest.mark.skipif(importlib.util.find_spec("pytest_timeout") is None,
                    reason="pytest-timeout missing")
def test_devices_sets_the_cpu_devices_both_passes_run_on(tmp_path, monkeypatch):
    """JAX's Pallas interpret-mode tests skip unless there is one device."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "a_test.py").write_text(
        "import jax\n"
        "def test_one_device():\n    assert jax.jit(lambda x: x)(1) == jax.device_count()\n")
    monkeypatch.setattr(jax_suite, "DEVICES", 1)
    for mode in ("record", "shardc"):
        records = jax_suite.run_unit(mode, ["a_test.py"], tmp_path, 60, tag=mode,
                                     files="a_test.py")
        assert records["a_test.py::test_one_device"]["outcome"] == "passed"


def test_test_helpers_the_wheel_leaves_out_are_importable(tmp_path):
    """``state_test.py`` and five pallas files import helpers of JAX's source tree
    (``jax._src.hypothesis_test_util``, ``jax._src.pallas.pallas_test_util``) the
    wheel lacks: without them none of their tests can be collected."""
    import subprocess
    import sys

    script = tmp_path / "use.py"
    script.write_text(
        "import jax_suite_missing\n"
        "jax_suite_missing.install()\n"
        "from jax._src import hypothesis_test_util as htu\n"
        "from jax._src.pallas import pallas_test_util as ptu\n"
        "import hypothesis as hp\n"
        "htu.setup_hypothesis(max_examples=7)\n"
        "assert hp.settings.default.max_examples == 7 and hp.settings.default.derandomize\n"
        "assert isinstance(htu.hypothesis_is_thread_safe(), bool)\n"
        "class Interpreted(ptu.PallasTPUTest):\n"
        "    INTERPRET = True\n"
        "    def test_it(self):\n"
        "        self.ran = True\n"
        "class Compiled(ptu.PallasTest):\n"
        "    def test_it(self):\n"
        "        self.ran = True\n"
        "import unittest\n"
        "result = unittest.TestResult()\n"
        "unittest.TestSuite([Interpreted('test_it'), Compiled('test_it')]).run(result)\n"
        "assert not result.errors and not result.failures, result.errors\n"
        "assert [case.id().split('.')[-2] for case, _ in result.skipped] == ['Compiled']\n")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT / "bench"))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_filecheck_files_get_shardcs_jit_and_jax_keeps_its_own(tmp_path):
    """``bench.jax_filecheck``: the file and its helper call shardc's jit (shardc mode),
    jax's modules and shardc keep jax's; FileCheck checks what the file prints."""
    (tmp_path / "jax_filecheck_helpers.py").write_text(
        "import jax\n"
        "def print_ir(x):\n"
        "  def lower(f):\n"
        "    print('helper', type(jax.jit(f)).__module__)\n"
        "    print(jax.jit(f).lower(x).compiler_ir())\n"
        "  return lower\n")
    test = tmp_path / "tiny.filecheck.py"
    test.write_text(
        "# CHECK: module @jit_double\n"
        "import jax\n"
        "import jax.numpy as jnp\n"
        "from jax.tests.filecheck.jax_filecheck_helpers import print_ir\n"
        "def double(x):\n"
        "  return x * 2\n"
        "print('file', jax.jit.__module__, jnp.sin.__module__)\n"
        "print_ir(jnp.ones(3))(double)\n")
    printed = {}
    for mode in jax_filecheck.MODES:
        run = subprocess.run([sys.executable, "-m", "bench.jax_filecheck", "--run", mode,
                              str(test)], capture_output=True, text=True, cwd=ROOT, check=True)
        printed[mode] = run.stdout
    assert "file shardc.compiler.api jax.numpy" in printed["shardc"]
    assert "helper shardc.compiler.api" in printed["shardc"]
    assert "helper jax" in printed["jax"] and "shardc" not in printed["jax"]
    filecheck = shutil.which("filecheck")  # the PyPI FileCheck test/lit runs with
    assert all(jax_filecheck.check(mode, test, filecheck) for mode in jax_filecheck.MODES)
