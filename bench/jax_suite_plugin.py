"""pytest plugin for ``bench/jax_suite.py``: route the test files' jit calls, record outcomes.

Loaded with ``-p jax_suite_plugin`` (``bench/`` on ``PYTHONPATH``) into a pytest run
of JAX's own test files; configured by environment variables:

``JAX_SUITE_MODE``
    ``record`` (forward every intercepted call to the real ``jax.jit`` / ``pjit``,
    only noting that it happened) or ``shardc`` (forward every intercepted call,
    unchanged, to ``shardc.compiler.jit``: no fallback of any kind).
``JAX_SUITE_FILES``
    Comma-separated base names of the test files whose jit references are
    intercepted (default ``pjit_test.py,array_test.py,shard_map_test.py``).
``JAX_SUITE_OUT``
    A JSON-lines file this plugin appends to: ``{"event": "start", "nodeid"}``
    before each test runs and one ``{"event": "end", ...}`` record with its
    outcome after (so a run that crashes leaves the test it crashed in
    identifiable).
``JAX_SUITE_SKIP``
    Optional file of node ids (one a line) to deselect (tests already run
    before a crash).
``JAX_SUITE_JIT_TESTS_ONLY``
    When set, deselect the tests whose own function source never names ``jit``
    or ``pjit`` (a slow file's tests that cannot count, left out before they run).
``JAX_SUITE_COMPILE_AND_CHECK``
    When set, ``jax._src.test_util``'s ``JaxTestCase._CompileAndCheck`` jits through
    the ``jit`` adapter too (its module's ``api`` is the proxy of ``jax._src.api``):
    JAX's numerics files (``fft``, ``lax_numpy_reducers``, ``scipy_signal``...) call
    jit only there, each test comparing the jitted function with the same function
    run op by op. With ``JAX_SUITE_JIT_TESTS_ONLY`` a test whose source names
    ``_CompileAndCheck`` is kept too.

How calls *made from the test files* (and only those) are routed
----------------------------------------------------------------
``builtins.__import__`` is wrapped while pytest runs. An ``import`` statement
executed with the globals of one of the test files (at module level, in a class
body or inside a test function; ``globals["__file__"]`` names the file) gets,
instead of the real module, a *proxy* module when the module it would bind is
one of ``jax``, ``jax._src``, ``jax._src.api``, ``jax._src.pjit``,
``jax.experimental`` or ``jax.experimental.pjit``. A proxy delegates every
attribute to the real module, except:

* ``jax.jit`` and ``jax._src.api.jit``  -> the ``jit`` adapter,
* ``jax._src.pjit.pjit`` and ``jax.experimental.pjit.pjit`` -> the ``pjit`` adapter,
* a submodule that is itself proxied (``jax._src`` -> its proxy, and so on).

So in ``pjit_test.py``, ``import jax`` binds the proxy (``jax.jit`` is the
adapter, ``jax.numpy``, ``jax.Array``, ``jax.lax``... are the real objects) and
``from jax._src.pjit import pjit, _pjit_lower`` binds the ``pjit`` adapter and the
real ``_pjit_lower``. The adapters are therefore in place before the test
module's body runs (decorators and ``parameterized`` arguments evaluated at
import time included). Nothing of jax itself is patched: jax's own modules,
``jax._src.test_util`` (unless ``JAX_SUITE_COMPILE_AND_CHECK``) and shardc (which
traces with ``jax.jit`` internally) keep the real ``jax.jit``, so ``jnp`` functions
and every other library-internal jit are untouched. (``python -m bench.jax_suite
--self-check`` verifies exactly this.)
The test helpers the jax wheel leaves out (``jax._src.hypothesis_test_util``,
``jax._src.pallas.pallas_test_util``) become importable (``jax_suite_missing``).

An adapter notes that the running test called it (the count is reset before each
test's setup, so calls in ``setUp`` count) and forwards its positional and
keyword arguments unchanged: in ``record`` mode to the real function, in
``shardc`` mode to ``shardc.compiler.jit`` and ``shardc.compiler.pjit`` (a
keyword or form shardc does not take fails the test).
"""

from __future__ import annotations

import builtins
import inspect
import json
import linecache
import os
import re
import time
import types

import pytest

MODE = os.environ.get("JAX_SUITE_MODE", "record")
if MODE not in ("record", "shardc"):
    raise RuntimeError(f"JAX_SUITE_MODE must be 'record' or 'shardc', got {MODE!r}")
FILES = frozenset(
    f for f in os.environ.get(
        "JAX_SUITE_FILES", "pjit_test.py,array_test.py,shard_map_test.py").split(",") if f)
OUT = os.environ.get("JAX_SUITE_OUT")
COMPILE_AND_CHECK = bool(os.environ.get("JAX_SUITE_COMPILE_AND_CHECK"))

import jax
import jax._src.api
import jax._src.pjit
import jax._src.test_util
import jax.experimental
import jax_suite_missing

jax_suite_missing.install()

if MODE == "shardc":
    import shardc.compiler
    import shardc.dialects
    import shardc.runtime
    from shardc.compiler import jit as _shardc_jit
    from shardc.compiler import pjit as _shardc_pjit

    # Where shardc's source lives: a failure's last frame there is recorded too.
    _SHARDC_DIRS = tuple(os.path.dirname(m.__file__) + os.sep
                         for m in (shardc.compiler, shardc.dialects, shardc.runtime))
else:
    _shardc_jit = _shardc_pjit = None
    _SHARDC_DIRS = ()

# Calls of the adapters by the running test.
_calls = {"jit": 0, "pjit": 0}


def _make_adapter(name: str, real, shardc_version):
    def adapter(*args, **kwargs):
        _calls[name] += 1
        if shardc_version is not None:
            return shardc_version(*args, **kwargs)
        return real(*args, **kwargs)

    adapter.__name__ = adapter.__qualname__ = name
    adapter.__module__ = __name__
    adapter.__doc__ = f"jax_suite adapter for {name} (mode {MODE})"
    return adapter


jit_adapter = _make_adapter("jit", jax._src.api.jit, _shardc_jit)
# jax.experimental.pjit.pjit is jax._src.pjit.pjit (with a deprecation warning on
# attribute access); the same adapter stands for both.
pjit_adapter = _make_adapter("pjit", jax._src.pjit.pjit, _shardc_pjit)

# Real module name -> attributes replaced on its proxy.
_OVERRIDES: dict[str, dict[str, object]] = {
    "jax": {"jit": jit_adapter},
    "jax._src": {},
    "jax._src.api": {"jit": jit_adapter},
    "jax._src.pjit": {"pjit": pjit_adapter},
    "jax.experimental": {},
    "jax.experimental.pjit": {"pjit": pjit_adapter},
}


class _ModuleProxy(types.ModuleType):
    """A module that delegates to ``_real`` except for ``_overrides``."""

    def __init__(self, real: types.ModuleType, overrides: dict[str, object]):
        super().__init__(real.__name__, real.__doc__)
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_overrides", overrides)
        for attr in ("__package__", "__loader__", "__spec__", "__file__", "__path__"):
            if hasattr(real, attr):
                object.__setattr__(self, attr, getattr(real, attr))

    def __getattr__(self, name: str):
        overrides = object.__getattribute__(self, "_overrides")
        if name in overrides:
            return overrides[name]
        value = getattr(object.__getattribute__(self, "_real"), name)
        if isinstance(value, types.ModuleType):
            return _proxy(value)
        return value

    def __setattr__(self, name: str, value) -> None:
        setattr(object.__getattribute__(self, "_real"), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(object.__getattribute__(self, "_real"), name)

    def __dir__(self):
        return dir(object.__getattribute__(self, "_real"))

    def __repr__(self) -> str:
        return f"<jax_suite proxy of {object.__getattribute__(self, '_real')!r}>"


_proxies: dict[str, _ModuleProxy] = {}


def _proxy(module):
    """The proxy of ``module`` when it is one we intercept, else ``module``."""
    name = getattr(module, "__name__", None)
    if not isinstance(module, types.ModuleType) or name not in _OVERRIDES:
        return module
    if name not in _proxies:
        _proxies[name] = _ModuleProxy(module, _OVERRIDES[name])
    return _proxies[name]


_real_import = builtins.__import__


def _is_test_file_globals(globals_) -> bool:
    if not globals_:
        return False
    file = globals_.get("__file__")
    return bool(file) and os.path.basename(file) in FILES


def _import(name, globals=None, locals=None, fromlist=(), level=0):
    module = _real_import(name, globals, locals, fromlist, level)
    if _is_test_file_globals(globals):
        return _proxy(module)
    return module


builtins.__import__ = _import
if COMPILE_AND_CHECK:
    jax._src.test_util.api = _proxy(jax._src.api)


# ----------------------------------------------------------------------------------
# Outcome recording.

def _write(record: dict) -> None:
    if not OUT:
        return
    with open(OUT, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()


def _first_line(text: str) -> str:
    """A message's first line, at most 400 characters; of an ``assertRaisesRegex``
    mismatch the pattern is cut short so the message raised instead stays."""
    m = re.match(r'^"(.*)" does not match "(.*)"$', text.strip(), re.DOTALL)
    if m:
        pattern = m.group(1)[:80] + ("..." if len(m.group(1)) > 80 else "")
        text = f'"{pattern}" does not match "{_first_line(m.group(2))}"'
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:400]
    return ""


# A test function whose own source calls jit or pjit (``--jit-tests-only``), or
# ``_CompileAndCheck`` where that jits through the adapter.
_CALLS_JIT = re.compile(r"\b(jit|pjit|_CompileAndCheck)\b" if COMPILE_AND_CHECK
                        else r"\b(jit|pjit)\b")


def _source_calls_jit(item) -> bool:
    try:
        return bool(_CALLS_JIT.search(inspect.getsource(getattr(item, "obj", None)
                                                        or item.function)))
    except (OSError, TypeError):
        return True


def pytest_collection_modifyitems(session, config, items):
    path = os.environ.get("JAX_SUITE_SKIP")
    skip: set[str] = set()
    if path and os.path.exists(path):
        with open(path) as f:
            skip = {line.strip() for line in f if line.strip()}
    static = bool(os.environ.get("JAX_SUITE_JIT_TESTS_ONLY"))
    keep, drop = [], []
    for item in items:
        dropped = item.nodeid in skip or (static and not _source_calls_jit(item))
        (drop if dropped else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


_state: dict = {}


def pytest_runtest_logstart(nodeid, location):
    _calls["jit"] = _calls["pjit"] = 0
    _state.clear()
    _state.update(nodeid=nodeid, t0=time.monotonic(), outcome=None, phase=None, exc=None)
    _write({"event": "start", "nodeid": nodeid})


# What a test's source may use of jax's internals: jax's own cache and lowering
# counters, its private lowering functions and caches (a failure at such a line
# measures jax's implementation, not jit's behaviour).
_INTERNALS = re.compile(
    r"\bjtu\.(count_\w+|assert_num_jit_and_pmap_compilations|collect_lowered_jaxprs)"
    r"|\b_cache_size\b|\bcache_info\b|\bcache_clear\b|\b_clear_cache\b|\bclear_caches\b"
    r"|\b_pjit_lower\w*|\bpjit_p\b|\bjit_p\b|\b_infer_params\b|\b_cpp_pjit\w*"
    r"|\b_kept_var_idx\b|\b_executable\b|\bmake_jit_cpp_cache\b|\b_xla_computation\b"
    r"|\bpxla\.\w+|\bdispatch\.\w+|\bjax\.stages\.(Compiled|Lowered|Traced|Wrapped)\b")


def _frame_kind(path: str) -> str:
    """Which code a traceback frame is in: the test file, shardc, jax's test
    utilities, jax, numpy, the test frameworks, or other."""
    if os.path.basename(path) in FILES:
        return "test"
    if _SHARDC_DIRS and path.startswith(_SHARDC_DIRS):
        return "shardc"
    if path.endswith(os.path.join("jax", "_src", "test_util.py")):
        return "jax_test_util"
    if f"{os.sep}jax{os.sep}" in path or f"{os.sep}jaxlib{os.sep}" in path:
        return "jax"
    if f"{os.sep}numpy{os.sep}" in path:
        return "numpy"
    if any(f"{os.sep}{lib}{os.sep}" in path for lib in ("unittest", "absl", "_pytest", "pytest",
                                                         "pluggy")):
        return "framework"
    return "other"


def _test_source_markers(item) -> list[str]:
    """The jax internals the test function's source uses (sorted, unique)."""
    try:
        source = inspect.getsource(getattr(item, "obj", None) or item.function)
    except (OSError, TypeError):
        return []
    return sorted({m.group(0) for m in _INTERNALS.finditer(source)})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and _state.get("exc") is None and report.failed:
        exc = call.excinfo
        tb = exc.traceback
        where = ""
        if len(tb):
            entry = tb[-1]
            where = f"{os.path.basename(str(entry.path))}:{entry.lineno + 1}:{entry.name}"
        try:
            message = str(exc.value)
        except Exception as e:  # noqa: BLE001 - a broken __str__ is still a result
            message = f"<str() failed: {type(e).__name__}>"
        in_test = ""  # the test file's own line the failure went through (last such frame)
        test_code = ""  # that line's text
        in_shardc = ""  # the last frame in shardc's source, if any
        kinds: list[str] = []  # the frames' kinds, outermost first, repeats merged
        for entry in tb:
            path = str(entry.path)
            kind = _frame_kind(path)
            if not kinds or kinds[-1] != kind:
                kinds.append(kind)
            if kind == "test":
                in_test = f"{os.path.basename(path)}:{entry.lineno + 1}"
                test_code = linecache.getline(path, entry.lineno + 1).strip()[:300]
            if kind == "shardc":
                in_shardc = (f"{os.path.basename(os.path.dirname(path))}/"
                             f"{os.path.basename(path)}:{entry.lineno + 1}:{entry.name}")
        etype = exc.type
        _state["exc"] = {
            "type": f"{etype.__module__}.{etype.__qualname__}"
            if etype.__module__ not in ("builtins",) else etype.__qualname__,
            "message": _first_line(message),
            "where": where,
            "test_line": in_test,
            "test_code": test_code,
            "shardc_frame": in_shardc,
            "frames": kinds,
            "test_uses": _test_source_markers(item),
            "phase": call.when,
        }


def pytest_runtest_logreport(report):
    if report.nodeid != _state.get("nodeid"):
        return
    current = _state.get("outcome")
    if report.when == "call":
        if report.passed:
            new = "xpassed" if hasattr(report, "wasxfail") else "passed"
        elif report.skipped:
            new = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        else:
            new = "failed"
        if current is None:
            _state["outcome"] = new
    else:  # setup / teardown
        if report.failed:
            _state["outcome"] = "error" if current in (None, "passed") else current
        elif report.skipped and current is None:
            _state["outcome"] = "skipped"


def pytest_runtest_logfinish(nodeid, location):
    if nodeid != _state.get("nodeid"):
        return
    outcome = _state.get("outcome") or "error"
    record = {
        "event": "end",
        "nodeid": nodeid,
        "outcome": outcome,
        "jit_calls": _calls["jit"],
        "pjit_calls": _calls["pjit"],
        "called_jit": bool(_calls["jit"] or _calls["pjit"]),
        "seconds": round(time.monotonic() - _state["t0"], 3),
    }
    if outcome in ("failed", "error") and _state.get("exc"):
        record["exc"] = _state["exc"]
    _write(record)
