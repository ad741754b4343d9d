"""Tracebacks of errors raised through shardc's jit leave out jax's and shardc's frames,
in each form ``jax_traceback_filtering`` names, as jax.jit's do."""

import os
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


def test_unfiltered_keeps_shardc_frames():
    with config.traceback_filtering("off"):
        error = _raised(_nested(shardc_jit))
    assert any(f.startswith(SHARDC_DIR) and "/test/" not in f for f, _ in _frames(error))
    assert not isinstance(error.__cause__, traceback_util.UnfilteredStackTrace)
