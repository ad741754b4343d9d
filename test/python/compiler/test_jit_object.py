"""The object ``jit`` returns behaves as ``jax.jit``'s: repr, pickling, methods, cache
counts and clearing (``jax.clear_caches()`` included), no reference cycle, static
argument keys, jax's errors, ``no_execution``, float0 arguments, ``Traced``."""

import functools
import gc
import pickle
import re
import weakref

import cloudpickle
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import config  # jax_jit_cpp_cache_obj: a user context of jax's, not public
from jax._src import test_util as jtu
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.compiler.function.caches import LRU
from shardc.dialects import jax_private

JITS = pytest.mark.parametrize("jitted", [jax.jit, jit], ids=["jax", "shardc"])


def test_repr_is_jax_jits():
    def my_function():
        return

    assert repr(jit(my_function)) == repr(jax.jit(my_function))

    class BadRepr:
        def __call__(self):
            pass

        def __repr__(self):
            raise ValueError("invalid repr")

    ours, theirs = jit(BadRepr()), jax.jit(BadRepr())
    assert repr(ours) == repr(theirs) == "<PjitFunction>"
    del ours.__wrapped__, theirs.__wrapped__
    assert repr(ours) == repr(theirs)


def test_wrapped_attributes_are_the_functions():
    def f(x: int) -> int:
        """docstring of f."""
        return x + 1

    class Callable:
        def __call__(self, x):
            return x

    f.some_value = 4
    attributes = ("__doc__", "__name__", "__module__", "__qualname__", "__annotations__",
                  "__wrapped__")
    ours, theirs = jit(f), jax.jit(f)
    for attr in (*attributes, "some_value"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    for fun in (functools.partial(f), Callable(), len):
        ours, theirs = jit(fun), jax.jit(fun)
        for attr in attributes:
            assert getattr(ours, attr) == getattr(theirs, attr), (fun, attr)


def test_state_names_the_function_as_jax_does():
    def my_function():
        return

    named = functools.partial(my_function)
    named.__name__ = "my_partial"
    for fun in (my_function, functools.partial(my_function),
                functools.partial(functools.partial(my_function)), named, lambda: None):
        ours = jit(fun).__getstate__()
        assert ours["function_name"] == jax.jit(fun).__getstate__()["function_name"]
        assert ours["fun"] is fun


def test_cloudpickle_round_trip_runs_as_jax_jits():
    def program(jitted):
        @jitted
        def f(x, y):
            return x * y

        @jitted
        def g(z):
            return f(z, z + 77)

        expected = g(32)
        return expected, pickle.loads(cloudpickle.dumps(g))

    expected, theirs = program(jax.jit)
    ours_expected, ours = program(jit)
    assert type(ours) is type(jit(abs))
    assert ours_expected == expected == ours(32) == theirs(32)


def _scale(a, n):
    return a * n


def test_pickled_state_keeps_the_options_not_the_executables():
    # (Shardings on concrete meshes hold devices, which pickle refuses, as for jax.jit.)
    options = {"in_shardings": (P("x"),), "static_argnums": 1}
    f = jit(_scale, **options)
    with jax.set_mesh(jax.make_mesh((4, 2), ("x", "y"))):
        f(np.ones(8, np.float32), 2)
        g = pickle.loads(pickle.dumps(f))
        # The same function and options share the dispatch and the caches, as jax's;
        # unpickled in another process, nothing compiled comes with it.
        assert g._cache_size() == 1 and g.cache_info().size == 1
        assert b"Compiled" not in pickle.dumps(f)
        out = g(np.ones(8, np.float32), 3)
        assert out.sharding == jax.jit(_scale, **options)(np.ones(8, np.float32), 3).sharding
    np.testing.assert_array_equal(out, jnp.full(8, 3.0))


@JITS
def test_jit_of_a_method_binds_the_instance(jitted):
    class A:
        def __init__(self, k):
            self.k = k

        def __hash__(self):
            return hash(self.k)

        def __eq__(self, other):
            return isinstance(other, A) and other.k == self.k

        @jitted(static_argnums=(0,))
        def add(self, x):
            return x + self.k

    assert A(2).add(3) == 5 and A(4).add(3) == 7
    assert isinstance(A.add, type(jitted(abs)))


@JITS
def test_cache_size_counts_signatures(jitted):
    f = jitted(lambda x: (x ** 2).sum())
    assert f._cache_size() == 0
    for _ in range(3):
        f(jnp.arange(5.0))
    assert f._cache_size() == 1
    f(jnp.arange(6.0))
    assert f._cache_size() == 2


def _live_executables() -> int:
    gc.collect()
    return len(jax.devices()[0].client.live_executables())


@JITS
def test_clear_cache_frees_the_executables(jitted):
    @jitted
    def f(x, y):
        return x + y

    before = _live_executables()
    f(1, 2).block_until_ready()
    assert _live_executables() == before + 1
    f.clear_cache()
    assert _live_executables() <= before
    assert f._cache_size() == 0
    assert f(1, 2) == 3


def test_jax_clear_caches_frees_shardcs_executables_and_lowerings():
    @jit
    def f(x, y):
        return x * y

    f(jnp.ones(3), 2.0).block_until_ready()
    assert f.cache_info().size == 1 and f.cache_info().compiled == 1
    before = _live_executables()
    jax.clear_caches()
    assert f.cache_info().size == 0 and f.cache_info().compiled == 0
    assert f._cache_size() == 0
    assert _live_executables() < before
    np.testing.assert_array_equal(f(jnp.ones(3), 2.0), jnp.full(3, 2.0))


@JITS
def test_jits_of_one_function_share_their_executables(jitted):
    # As jax.jit's objects share one cache per function and jit arguments: jit(f)
    # written again compiles nothing, also for calls that come back to Python every
    # time (typed PRNG keys); other jit arguments are another program.
    def f(key):
        return jax.random.normal(key, (4,))

    key = jax.random.key(0)
    expected = jax.jit(f)(key)
    jitted(f)(key).block_until_ready()
    before = _live_executables()
    for _ in range(3):
        np.testing.assert_array_equal(jitted(f)(key), expected)
    assert _live_executables() == before
    assert jitted(f)._cache_size() == 1
    assert jitted(f, donate_argnums=0)._cache_size() == 0
    # The shared caches keep nothing of the function alive.
    f = weakref.ref(f)
    gc.collect()
    assert f() is None


@JITS
def test_a_configured_dispatch_cache_holds_the_calls(jitted):
    # jax_jit_cpp_cache_obj, set while a jit is made, is the cache its calls go to:
    # here one of two signatures, so cycling through three misses every call.
    with config.jax_jit_cpp_cache_obj(jax_private.dispatch_cache(2)):
        f = jitted(lambda x: x * 2)
    with jtu.count_pjit_cpp_cache_miss() as misses:
        for _ in range(2):
            for n in range(3):
                np.testing.assert_array_equal(f(np.arange(n)), np.arange(n) * 2)
    assert misses() == 6
    assert f._cache_size() == 2
    g = jitted(lambda x: x * 2)  # made outside: the default cache
    for n in range(3):
        g(np.arange(n))
    assert g._cache_size() == 3


def test_caches_are_bounded_least_recently_used_first():
    cache = LRU(maxsize=2)
    cache["a"], cache["b"] = 1, 2
    assert cache.get("a") == 1  # "b" is now the least recently used
    cache["c"] = 3
    assert cache.get("b") is None and cache.get("a") == 1 and len(cache) == 2


@JITS
def test_no_reference_cycle_keeps_the_closure_alive(jitted):
    # As jax's own test: reference counting alone frees the closed-over array.
    gc.disable()
    try:
        x = jnp.ones(10)
        f = (lambda x: lambda: x)(x)
        g = jitted(f)
        x = weakref.ref(x)
        g()
        g()
        del f
        assert x() is not None
        g()
        del g
        assert x() is None
    finally:
        gc.enable()


@JITS
def test_static_arguments_of_equal_value_and_other_type_are_other_programs(jitted):
    traced = []

    @jitted(static_argnums=(0,))
    def f(k):
        traced.append(k)
        return k

    outputs = [(f(k), f(k)) for k in (1, True, 1.0)]
    assert traced == [1, True, 1.0]
    assert [(a.dtype, b.dtype) for a, b in outputs] == [
        (jnp.dtype("int32"),) * 2, (jnp.dtype("bool"),) * 2, (jnp.dtype("float32"),) * 2]
    lowered = jitted(lambda k: k, static_argnums=0)
    assert lowered.lower(True).out_info.dtype == jnp.dtype("bool")


def _error(call):
    with pytest.raises(Exception) as info:
        call()
    return info.value


@JITS
def test_static_arguments_that_cannot_be_compared_raise_jaxs_error(jitted):
    class HashableWithoutEq:
        def __hash__(self):
            return 1

        def __eq__(self, other):
            raise NotImplementedError("A Python error is as is, without stack trace")

    f = jitted(lambda x, y: x + 3, static_argnums=[1])
    f(1, 1)
    with pytest.raises(ValueError, match=re.escape(
            "static arguments should be comparable using __eq__")):
        f(1, HashableWithoutEq())
        f(1, HashableWithoutEq())


def test_static_argument_errors_are_jaxs():
    def unhashable(jitted):
        return _error(lambda: jitted(lambda x, y: x, static_argnums=1)(1, np.asarray(1)))

    ours, theirs = unhashable(jit), unhashable(jax.jit)
    assert isinstance(ours, type(theirs)) and str(ours) == str(theirs)

    class A:
        def __hash__(self):
            raise ValueError

    ours = _error(lambda: jit(lambda x: x, static_argnums=0)(A()))
    assert type(ours) is ValueError and str(ours) == ""


@pytest.mark.parametrize("fun", [3, staticmethod(lambda: 0), classmethod(lambda c: 0)])
def test_not_a_callable_is_jaxs_type_error(fun):
    ours, theirs = _error(lambda: jit(fun)), _error(lambda: jax.jit(fun))
    assert isinstance(ours, TypeError) and str(ours) == str(theirs)


def test_generator_function_is_jaxs_type_error():
    def gen(x):
        yield x

    ours, theirs = _error(lambda: jit(gen)), _error(lambda: jax.jit(gen))
    assert isinstance(ours, TypeError) and str(ours) == str(theirs)


def test_argument_that_is_not_an_array_is_jaxs_type_error():
    def f(x):
        return x

    ours, theirs = _error(lambda: jit(f)("foo")), _error(lambda: jax.jit(f)("foo"))
    assert isinstance(ours, TypeError)
    # jax's words, the function by its repr included.
    assert str(ours) == str(theirs)


def test_argument_that_overflows_is_jaxs_overflow_error():
    def f(x):
        return x

    ours, theirs = _error(lambda: jit(f)(2 ** 70)), _error(lambda: jax.jit(f)(2 ** 70))
    assert type(ours) is type(theirs) is OverflowError and str(ours) == str(theirs)


@JITS
def test_no_execution_refuses_to_run(jitted):
    @jitted
    def f():
        return jnp.ones(3)

    f()
    with pytest.raises(RuntimeError, match="no_execution"), jax.no_execution():
        f()
    np.testing.assert_array_equal(f(), jnp.ones(3))


def test_float0_arguments_run_as_jax_jits():
    primal, pullback = jax.vjp(lambda x, y: x + y, 2, 1)
    tangents = np.zeros((), jax.dtypes.float0)
    ours, theirs = jit(pullback)(tangents), jax.jit(pullback)(tangents)
    assert primal == 3
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype == jax.dtypes.float0 and a.shape == b.shape

    def g(x, t):
        return x * 2, t

    ours, theirs = jit(g)(jnp.ones(3), np.zeros(2, jax.dtypes.float0)), \
        jax.jit(g)(jnp.ones(3), np.zeros(2, jax.dtypes.float0))
    np.testing.assert_array_equal(ours[0], theirs[0])
    assert ours[1].dtype == theirs[1].dtype and ours[1].shape == theirs[1].shape


@JITS
def test_disable_jit_runs_python_each_call(jitted):
    calls = []

    @jitted
    def f(x):
        calls.append(x)
        return x

    with jax.disable_jit():
        f(2)
        f(2)
    assert len(calls) == 2
    f(2)
    f(2)
    assert len(calls) == 3


def test_traced_and_eval_shape_are_jaxs():
    def f(x, y):
        return x * y, x + 1

    args = (1.0, jnp.ones(3))
    ours, theirs = jit(f, donate_argnums=1).trace(*args), jax.jit(f, donate_argnums=1).trace(*args)
    for attr in ("args_info", "donate_argnums", "out_avals", "out_info", "in_avals",
                 "fun_name"):
        assert str(getattr(ours, attr)) == str(getattr(theirs, attr)), attr
    for a, b in zip(ours(2.0, jnp.ones(3)), theirs(2.0, jnp.ones(3))):
        np.testing.assert_array_equal(a, b)
    assert jit(f).eval_shape(*args) == jax.jit(f).eval_shape(*args)  # weak types included


@JITS
def test_compilations_are_logged_as_jaxs(jitted, caplog):
    def double(x):
        return x * 2

    f = jitted(double)
    f(jnp.ones(2))
    x = jnp.ones(3)
    with jax.log_compiles(), caplog.at_level("WARNING"):
        f(x)
        jitted(lambda v: v + 1)(x)
    # Named as jax names the program (``jit(double)``), not as its module (``jit_double``).
    finished = [r for r in caplog.records
                if r.getMessage().startswith("Finished XLA compilation of jit(double) in ")]
    assert len(finished) == 1 and finished[0].levelname == "WARNING"
    assert any(r.getMessage().startswith("Finished XLA compilation of jit(<lambda>) in ")
               for r in caplog.records)


def test_eval_shape_shows_a_single_device_out_sharding_as_jax():
    s = jax.sharding.SingleDeviceSharding(jax.devices()[0])

    def f(x):
        return x * 2

    ours, theirs = (jitted(f, out_shardings=s).eval_shape(np.arange(8)) for jitted in (jit, jax.jit))
    assert ours == theirs and ours.sharding == s


@JITS
def test_a_new_trace_context_is_a_new_program(jitted):
    traced = []

    @jitted
    def f(x, y):
        traced.append(1)
        return x @ y

    x = jnp.ones((4, 4))
    f(x, x)
    with jax.default_matmul_precision("highest"):
        f(x, x)
        assert "HIGHEST" in f.lower(x, x).as_text()
    f(x, x)
    assert len(traced) == 2


@JITS
def test_a_leaked_tracer_used_by_a_later_call_is_jax_unexpected_tracer_error(jitted):
    leaked = []

    @jitted
    def leak(x):
        leaked.append(x + 1)  # a side effect: the tracer escapes its trace
        return x

    leak(jnp.ones(3))

    def body(carry, _):
        return carry + leaked[0], None

    @jitted
    def uses_it(x):
        return jax.lax.scan(body, x, None, length=2)[0]

    with pytest.raises(jax.errors.UnexpectedTracerError, match="was created on line"):
        uses_it(jnp.ones(3))
