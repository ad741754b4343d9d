"""Lowered.comm_report() and memory_estimate() read one propagated copy of the module once."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import shardc.compiler as sc
from shardc.compiler.cost import comm_report
from shardc.compiler.explain import memory_estimate
from shardc.compiler.stages.shardy_pipeline import propagated_copy
from shardc.dialects import jax_private


def _layer(params, x):
    for w1, w2 in params:
        x = jnp.tanh(x @ w1) @ w2
    return jnp.sum(x * x)


@pytest.fixture
def program():
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    w1 = jax.device_put(jnp.ones((16, 32)), NamedSharding(mesh, P(None, "model")))
    w2 = jax.device_put(jnp.ones((32, 16)), NamedSharding(mesh, P("model", None)))
    x = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P("data", None)))
    return jax.grad(_layer), ([(w1, w2)] * 3, x)


def _reports(lowered, platform):
    """Each prediction on its own copy, as the standalone functions make them."""
    report = comm_report(propagated_copy(lowered.module, export=False), platform=platform)
    estimate = memory_estimate(lowered.module, arg_names=lowered.arg_names, platform=platform)
    return report, estimate


@pytest.mark.parametrize("memory_first", [False, True])
def test_shared_read_answers_as_separate_copies(program, memory_first):
    fun, args = program
    lowered = sc.jit(fun).lower(*args)
    for platform in ("cpu", "tpu"):
        if memory_first:
            estimate = lowered.memory_estimate(platform=platform)
            report = lowered.comm_report(platform=platform)
        else:
            report = lowered.comm_report(platform=platform)
            estimate = lowered.memory_estimate(platform=platform)
        expected_report, expected_estimate = _reports(lowered, platform)
        assert report.entries and report == expected_report
        assert estimate == expected_estimate
    # each platform answered once and kept; a report does not change the next one
    assert lowered.comm_report(platform="cpu") is lowered.comm_report(platform="cpu")
    assert lowered.comm_report(platform="cpu") == _reports(lowered, "cpu")[0]
    # the estimate's arguments are what XLA allocates for them
    compiled = jax.jit(fun).lower(*args).compile()
    stats = compiled.memory_analysis()
    assert lowered.memory_estimate().argument_bytes == stats.argument_size_in_bytes


def test_another_module_is_read_anew(program):
    fun, args = program
    lowered = sc.jit(fun).lower(*args)
    first = lowered.comm_report()
    unsharded = sc.jit(fun).lower(*args, propagate=False)
    lowered.module = unsharded.module
    assert lowered.comm_report() == _reports(lowered, "cpu")[0]
    assert lowered.comm_report() is not first


def test_argument_names_made_once_per_signature(program, monkeypatch):
    # jax's names of every argument leaf come from one call; asked once per leaf they
    # made lowering quadratic in the leaves (a 7B step's 290). They are made only where
    # something names an argument (an error, the committed arguments' check).
    calls = []
    names = jax_private.argument_names

    def counted(*args, **kwargs):
        calls.append(1)
        return names(*args, **kwargs)

    monkeypatch.setattr(jax_private, "argument_names", counted)
    fun, (params, x) = program
    params = [params[0]] * 20
    sc.jit(fun).lower(params, x)
    assert len(calls) <= 2
