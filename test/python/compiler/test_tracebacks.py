"""Tracebacks of errors raised through shardc's jit leave out jax's and shardc's frames,
in each form ``jax_traceback_filtering`` names, as jax.jit's do."""

import functools
import inspect
import os
import sys
import traceback

import jax
import jax.numpy as jnp
import pytest
from jax._src import config, traceback_util

import shardc.compiler as shardc_compiler
from shardc.compiler import jit as shardc_jit

SHARDC_DIR = os.path.dirname(os.path.dirname(shardc_compiler.__file__))


def _raised(call):
    with pytest.raises(Exception) as info:
        call()
    return info.value


def _frames(error):
    """(file, function) of each frame of the traceback, innermost last."""
    return [(frame.f_code.co_filename, frame.f_code.co_name)
            for frame, _ in traceback.walk_tb(error.__traceback__)]


def _nested(jit):
    @jit
    def innermost(x):
        assert False  # noqa: B011

    @jit
    def outermost(x):
        return 2 + innermost(x)

    return lambda: outermost(jnp.array([1, 2]))


def _bad_argument(jit):
    return lambda: jit(lambda a: a + 1)(object())


def _lowering(jit):
    def f(x):
        raise ValueError("in f")
    return lambda: jit(f).lower(1.0)


@pytest.mark.parametrize("program", [_nested, _bad_argument, _lowering])
@pytest.mark.parametrize("mode", ["remove_frames", "quiet_remove_frames"])
def test_filtered_frames_match_jax_jit(program, mode):
    with config.traceback_filtering(mode):
        ours = _raised(program(shardc_jit))
        theirs = _raised(program(jax.jit))
    assert type(ours) is type(theirs) or isinstance(ours, type(theirs))
    assert not any(f.startswith(SHARDC_DIR) and "/test/" not in f for f, _ in _frames(ours))
    assert _frames(ours) == _frames(theirs)
    if mode == "quiet_remove_frames":
        assert any("For simplicity" in note for note in ours.__notes__)
    else:
        assert isinstance(ours.__cause__, traceback_util.UnfilteredStackTrace)


def _user_error(jit):
    def helper(x):
        raise ValueError("in helper")

    def f(x):
        return helper(x)
    return lambda: jit(f)(1.0)


def _unfiltered_causes(error):
    causes = []
    while error.__cause__ is not None:
        error = error.__cause__
        causes.append(type(error))
    return causes


@pytest.mark.parametrize("program", [_nested, _user_error, _lowering])
@pytest.mark.parametrize("mode", ["remove_frames", "quiet_remove_frames"])
def test_told_once_as_by_jax_jit(program, mode):
    """jax's own boundary under shardc's (its trace of the function) filters first; the
    error still carries one note, or one ``UnfilteredStackTrace`` with the whole stack,
    as from jax.jit."""
    with config.traceback_filtering(mode):
        ours = _raised(program(shardc_jit))
        theirs = _raised(program(jax.jit))
    assert getattr(ours, "__notes__", []) == getattr(theirs, "__notes__", [])
    assert _unfiltered_causes(ours) == _unfiltered_causes(theirs)
    if mode == "remove_frames":  # the whole stack's user frames, as jax.jit's
        def user_frames(error):
            return [(file, name) for file, name in _frames(error.__cause__)
                    if file == __file__]
        assert user_frames(ours) == user_frames(theirs)


def test_unfiltered_keeps_shardc_frames():
    with config.traceback_filtering("off"):
        error = _raised(_nested(shardc_jit))
    assert any(f.startswith(SHARDC_DIR) and "/test/" not in f for f, _ in _frames(error))
    assert not isinstance(error.__cause__, traceback_util.UnfilteredStackTrace)


def _visible(error):
    """(file, function) of the frames ``tracebackhide`` leaves shown."""
    return [(f.f_code.co_filename, f.f_code.co_name)
            for f, _ in traceback.walk_tb(error.__traceback__)
            if "__tracebackhide__" not in f.f_locals]


@pytest.mark.parametrize("program", [_nested, _bad_argument])
def test_hidden_frames_match_jax_jit(program):
    """Under ``tracebackhide`` (IPython's form) the frames left visible are jax.jit's."""
    with config.traceback_filtering("tracebackhide"):
        ours = _raised(program(shardc_jit))
        theirs = _raised(program(jax.jit))
    assert isinstance(ours, type(theirs))
    assert _visible(ours) == _visible(theirs)


@pytest.mark.parametrize("mode", ["remove_frames", "tracebackhide"])
def test_donated_again_on_the_fast_path_shows_the_caller(mode):
    """Passing a donated array again fails on the C++ fast path, whose error leaves
    with the callers' frames alone (jax.jit's own fast path crashes the process there)."""
    donating = shardc_jit(lambda x: x * 2, donate_argnums=0)
    x = jnp.ones(4)
    donating(jnp.ones(4))  # the signature's fast path, in place
    donating(x)
    with config.traceback_filtering(mode):
        error = _raised(lambda: donating(x))
    assert "Array has been deleted" in str(error)
    frames = _frames(error) if mode == "remove_frames" else _visible(error)
    assert [name for _, name in frames] == ["_raised", "<lambda>"]


def test_steady_call_has_no_boundary_wrapper():
    """A repeated call runs jax's C++ dispatch from the jitted function's ``__call__``
    alone, with no API boundary wrapper around it (the boundary is ``__call__``'s own
    handler); a donating call then deletes what it consumed (``release_donated``)."""
    def double(x):
        return x * 2

    for donate, expected in (((), ["__call__"]), ((0,), ["__call__", "release_donated"])):
        jitted = shardc_jit(double, donate_argnums=donate)
        jitted(jnp.ones(4))
        x = jnp.ones(4)
        called = []
        sys.setprofile(lambda frame, event, _: called.append(frame.f_code.co_name)
                       if event == "call" else None)
        try:
            jitted(x)
        finally:
            sys.setprofile(None)
        assert [name for name in called if name != "<lambda>"] == expected


def _frames_below_call(jit, arguments, how=lambda f, *xs: f(*xs), **options):
    """How many Python frames run between the caller of a jitted function and the
    function itself while it is traced (what ``inspect.stack()``, a debugger's
    ``where`` and the recursion limit see)."""
    depths = []

    def outer():
        depth = len(inspect.stack())

        @functools.partial(jit, **options)
        def traced(*xs):
            depths.append(len(inspect.stack()) - depth - 1)
            return xs[0] * 2

        how(traced, *arguments())
    outer()
    return depths[0]


@pytest.mark.parametrize("arguments, options", [
    (lambda: (1.0,), {}),
    (lambda: (jnp.ones(4), 2), {"static_argnums": 1}),
    (lambda: (jnp.ones(4),), {"donate_argnums": 0}),
])
def test_traced_as_few_frames_below_the_call_as_jax_jit(arguments, options):
    """The function is traced from the frame jax's C++ dispatch calls on a miss, as
    jax.jit's is from its cache-miss handler: no frames of shardc's in between."""
    theirs = _frames_below_call(jax.jit, arguments, **options)
    assert _frames_below_call(shardc_jit, arguments, **options) == theirs


@pytest.mark.parametrize("how", [
    lambda f, x: f.trace(x),
    lambda f, x: f.lower(x),
    lambda f, x: jax.jit(lambda y: f(y) + 1)(x),
    lambda f, x: jax.grad(f)(x),
    lambda f, x: jax.vmap(f)(jnp.stack([x, x])),
], ids=["trace", "lower", "inside_jit", "grad", "vmap"])
def test_traced_as_few_frames_below_as_jax_jit_when_staged(how):
    """So is it from ``trace()``/``lower()`` and under jax's transformations."""
    theirs = _frames_below_call(jax.jit, lambda: (1.0,), how)
    assert _frames_below_call(shardc_jit, lambda: (1.0,), how) == theirs
