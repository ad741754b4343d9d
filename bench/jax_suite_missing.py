"""Test helpers some of JAX's test files import that the jax wheel leaves out.

``state_test.py`` and ``pallas/tpu_pallas_pipeline_test.py`` import
``jax._src.hypothesis_test_util``; ``pallas/pallas_test.py``, ``tpu_pallas_test.py``,
``tpu_ops_test.py`` and ``ops_test.py`` import ``jax._src.pallas.pallas_test_util``.
Both live in JAX's source tree only, so against the installed wheel those files
cannot even be collected. ``install()`` (called by ``jax_suite_plugin`` in both
passes alike) makes each importable when jax itself does not provide it, with what
the test files use of it:

* ``hypothesis_test_util``: ``setup_hypothesis()`` loads a deterministic profile
  (derandomized, no example database, no deadline, at most 30 examples: JAX's
  default), ``hypothesis_is_thread_safe()``, and ``HypothesisShardedTestCase`` /
  ``HypothesisShardedTestLoader``, which only split examples across test shards
  and threads (one pytest process runs them all here, so a plain
  ``JaxTestCase`` and jax's loader).
* ``pallas_test_util``: ``PallasTest`` (runs a test in interpret mode on CPU
  only, compiled only on an accelerator, and its ``pallas_call`` passes
  ``interpret=INTERPRET``) and ``PallasTPUTest`` (compiled only on TPU).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types


def _hypothesis_test_util(module: types.ModuleType) -> None:
    import hypothesis as hp
    from jax._src import test_loader, test_util

    def hypothesis_is_thread_safe() -> bool:
        version = tuple(int(part) for part in hp.__version__.split(".")[:3])
        return version >= (6, 136, 9)

    def setup_hypothesis(max_examples: int = 30) -> None:
        checks = [hp.HealthCheck.differing_executors] if hasattr(
            hp.HealthCheck, "differing_executors") else []
        hp.settings.register_profile(
            "deterministic", database=None, derandomize=True, deadline=None,
            max_examples=max_examples, print_blob=True, suppress_health_check=checks)
        hp.settings.load_profile("deterministic")

    module.HypothesisShardedTestCase = test_util.JaxTestCase
    module.HypothesisShardedTestLoader = test_loader.JaxTestLoader
    module.hypothesis_is_thread_safe = hypothesis_is_thread_safe
    module.setup_hypothesis = setup_hypothesis


def _pallas_test_util(module: types.ModuleType) -> None:
    from jax._src import test_util as jtu
    from jax.experimental import pallas as pl

    @jtu.with_config(jax_traceback_filtering="off")
    class PallasTest(jtu.JaxTestCase):
        INTERPRET: bool = False

        def setUp(self):
            on_cpu = jtu.test_device_matches(["cpu"])
            if self.INTERPRET and not on_cpu:
                self.skipTest("Only run interpret tests on CPU.")
            if not self.INTERPRET and on_cpu:
                self.skipTest("On CPU the test works only in interpret mode")
            super().setUp()

        def pallas_call(self, *args, **kwargs):
            return pl.pallas_call(*args, **kwargs, interpret=self.INTERPRET)

    class PallasTPUTest(PallasTest):
        def setUp(self):
            if not self.INTERPRET and not jtu.test_device_matches(["tpu"]):
                self.skipTest("Test requires TPUs")
            super().setUp()

    module.PallasTest = PallasTest
    module.PallasTPUTest = PallasTPUTest


MISSING = {
    "jax._src.hypothesis_test_util": _hypothesis_test_util,
    "jax._src.pallas.pallas_test_util": _pallas_test_util,
}


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        MISSING[module.__name__](module)


class _Finder(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: finds a module of ``MISSING`` no other finder found
    (jax's own, where it has one, comes first)."""

    def find_spec(self, name, path, target=None):
        return importlib.util.spec_from_loader(name, _Loader()) if name in MISSING else None


def install() -> None:
    """Let the test files import ``MISSING``'s modules (once per process)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
