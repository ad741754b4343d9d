"""The programs the two-process test runs, shared by the parent (reference) and workers.

Besides the small programs below, the zoo's flax.linen language-model train step
(``bench/zoo/lm_linen.py``: logical axis rules, adamw, donated train state) runs
as ``ZOO_PROGRAM``: every process builds the same program from the same seeds.
"""

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bench.zoo import lm_linen

ZOO_PROGRAM = lm_linen.NAME


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    fun: Callable
    shapes: tuple  # argument shapes (float32), made by data()
    arg_specs: tuple  # how the global arguments are laid out
    in_shardings: Any = None
    out_shardings: Any = None


def make_mesh():
    # Process 0 owns devices 0-3, the rows x=0,1; process 1 the rows x=2,3.
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def data(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _shard_map_total(a):
    mesh = make_mesh()
    local = lambda b: jax.lax.psum(b.sum(0), ("x", "y"))  # noqa: E731
    return jax.shard_map(local, mesh=mesh, in_specs=P("x", "y"), out_specs=P("y"))(a)


PROGRAMS = [
    Program("sharded_across_processes", lambda a: jnp.sin(a) * 2, ((16, 8),), (P("x", "y"),),
            out_shardings=P("x", "y")),
    Program("matmul_all_reduce", lambda a, b: a @ b, ((16, 8), (8, 4)), (P("y", "x"), P("x"))),
    Program("replicated_output", lambda a: (a.sum(), a.mean(0)), ((16, 8),), (P("x", "y"),),
            out_shardings=(P(), P())),
    Program("shard_map_psum", _shard_map_total, ((16, 8),), (P("x", "y"),)),
    Program("pytree_reshape", lambda p: {"t": p["a"].T.reshape(4, 32), "s": p["a"] + p["b"]},
            ({"a": (16, 8), "b": (16, 8)},), ({"a": P("x"), "b": P(None, "y")},),
            out_shardings={"t": P(None, "x"), "s": P("x", "y")}),
]


def host_arguments(program):
    """The arguments as numpy arrays (same values in every process)."""
    seeds = iter(range(100))
    return jax.tree.map(lambda shape: data(shape, next(seeds)), program.shapes,
                        is_leaf=lambda s: isinstance(s, tuple) and all(isinstance(d, int) for d in s))


def global_arguments(program, mesh):
    """The arguments as global jax.Arrays laid out by ``arg_specs``."""
    def make(value, spec):
        sharding = NamedSharding(mesh, spec)
        return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

    return jax.tree.map(make, host_arguments(program), program.arg_specs,
                        is_leaf=lambda x: isinstance(x, np.ndarray))


def reference_outputs(mesh):
    """Every program's outputs from single-process jax.jit, keyed 'name/leaf index'."""
    expected = {}
    for program in PROGRAMS:
        args = global_arguments(program, mesh)
        to_named = lambda s: NamedSharding(mesh, s) if isinstance(s, P) else s  # noqa: E731
        outs = jax.jit(program.fun, out_shardings=jax.tree.map(
            to_named, program.out_shardings, is_leaf=lambda s: isinstance(s, P)))(*args)
        for index, out in enumerate(jax.tree.leaves(outs)):
            expected[f"{program.name}/{index}"] = np.asarray(out)
    zoo = lm_linen.make("small")
    with jax.set_mesh(zoo.mesh):
        outs = jax.jit(zoo.fun, in_shardings=zoo.in_shardings, out_shardings=zoo.out_shardings,
                       donate_argnums=zoo.donate_argnums)(*zoo.args)
    for index, out in enumerate(jax.tree.leaves(outs)):
        expected[f"{ZOO_PROGRAM}/{index}"] = np.asarray(out)
    return expected


def run_zoo_program(jit):
    """The zoo's language-model train step through ``jit`` (shardc's), on this process."""
    zoo = lm_linen.make("small")
    with jax.set_mesh(zoo.mesh):
        step = jit(zoo.fun, zoo.in_shardings, zoo.out_shardings, mesh=zoo.mesh,
                   donate_argnums=zoo.donate_argnums)
        return jax.block_until_ready(step(*zoo.args))
