"""Predicted communication (``Lowered.comm_report()``) against XLA's real collectives.

For every program of ``bench/models`` plus a few hand-written reshard
programs, lower it with shardc *without* shardc's own propagation (so XLA
decides everything, as under ``jax.jit``), predict the collectives from a
propagated copy, compile, and read XLA's collectives back from the
partitioned HLO (``Compiled.collectives()``). Prints a table and JSON with
bytes per device per collective kind and the ratio predicted / XLA; a
program whose total is off by more than ``TOLERANCE`` must have an entry in
``EXPLAINED``. Run: ``python -m bench.comm_report [--size small|large]
[--json out.json] [names...]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import shardc.compiler as sc  # noqa: E402
from bench.models import REGISTRY  # noqa: E402
from bench.models.program import Program, make_mesh, place, shardings  # noqa: E402
from shardc.runtime.collectives import KINDS  # noqa: E402

TOLERANCE = 0.10
# Programs whose prediction is known to be off, with the reason (none at present:
# every program below matches XLA's totals per kind).
EXPLAINED: dict[str, str] = {}


@dataclasses.dataclass(frozen=True)
class Row:
    """One program: bytes per device per kind, predicted and measured."""

    name: str
    predicted: dict[str, int]
    xla: dict[str, int]
    predicted_counts: dict[str, int]
    xla_counts: dict[str, int]

    @property
    def ratio(self) -> float | None:
        """Predicted over XLA total bytes (1.0 when both are zero, None when XLA is)."""
        total, measured = sum(self.predicted.values()), sum(self.xla.values())
        if measured == 0:
            return 1.0 if total == 0 else None
        return total / measured

    @property
    def within_tolerance(self) -> bool:
        """Whether the totals agree to ``TOLERANCE``."""
        return self.ratio is not None and abs(self.ratio - 1.0) <= TOLERANCE


def lower(program: Program):
    """Lower with shardc but leave propagation to XLA (``propagate=False`` when supported)."""
    jitted = sc.jit(program.fun, in_shardings=program.in_shardings,
                    out_shardings=program.out_shardings)
    try:
        return jitted.lower(*program.args, propagate=False)
    except TypeError:  # a shardc without the propagate switch
        return jitted.lower(*program.args)


def compare(program: Program) -> Row:
    """Predict, compile and compare one program."""
    lowered = lower(program)
    report = lowered.comm_report()
    xla = lowered.compile().collectives()
    predicted = report.totals()
    return Row(
        name=program.name,
        predicted={k: predicted[k].bytes_per_device for k in KINDS},
        xla={k: xla[k].bytes_per_device for k in KINDS},
        predicted_counts={k: predicted[k].count for k in KINDS},
        xla_counts={k: xla[k].count for k in KINDS},
    )


def _reshard(src: P, dst: P, shape=(64, 64), mesh_shape=(4, 2), names=("x", "y")):
    def make(size: str = "small") -> Program:
        mesh = make_mesh(mesh_shape, names)
        rand = np.random.default_rng(0)
        x = rand.standard_normal(shape).astype(np.float32)
        ins = shardings(mesh, (src,))
        target = shardings(mesh, dst)
        return Program(name=f"reshard {src} -> {dst}", description="one constraint",
                       fun=lambda a: jax.lax.with_sharding_constraint(a * 2.0, target) + 1.0,
                       args=place((x,), ins), in_shardings=ins,
                       out_shardings=shardings(mesh, dst), mesh=mesh)
    return make


def _matmul(lhs: P, rhs: P, out: P):
    def make(size: str = "small") -> Program:
        mesh = make_mesh((4, 2), ("x", "y"))
        rand = np.random.default_rng(1)
        a = rand.standard_normal((32, 64)).astype(np.float32)
        b = rand.standard_normal((64, 48)).astype(np.float32)
        ins = shardings(mesh, (lhs, rhs))
        return Program(name=f"matmul {lhs} @ {rhs} -> {out}", description="one dot",
                       fun=lambda a, b: a @ b, args=place((a, b), ins), in_shardings=ins,
                       out_shardings=shardings(mesh, out), mesh=mesh)
    return make


def _grouped_dot(lhs: P, rhs: P, out: P, mesh_shape=(2, 2, 2), names=("data", "fsdp", "model")):
    """``lhs^T @ rhs`` (contracting the leading dimension, as a weight gradient does)."""
    def make(size: str = "small") -> Program:
        mesh = make_mesh(mesh_shape, names)
        rand = np.random.default_rng(4)
        a = rand.standard_normal((16, 32)).astype(np.float32)
        b = rand.standard_normal((16, 32)).astype(np.float32)
        ins = shardings(mesh, (lhs, rhs))
        return Program(name=f"grouped dot {lhs}^T @ {rhs} -> {out}", description="one dot",
                       fun=lambda a, b: a.T @ b, args=place((a, b), ins), in_shardings=ins,
                       out_shardings=shardings(mesh, out), mesh=mesh)
    return make


def _batched(name: str, fun, spec: P, out: P):
    """One op on an (8, 16, 8) batch whose operand is sharded ``spec``."""
    def make(size: str = "small") -> Program:
        mesh = make_mesh((4, 2), ("x", "y"))
        x = np.random.default_rng(2).standard_normal((8, 16, 8)).astype(np.float32)
        ins = shardings(mesh, (spec,))
        return Program(name=f"{name} {spec} -> {out}", description=f"one {name}",
                       fun=fun, args=place((x,), ins), in_shardings=ins,
                       out_shardings=shardings(mesh, out), mesh=mesh)
    return make


def _bf16_matmul(size: str = "small") -> Program:
    """A bf16 dot contracting over ``x``: XLA:CPU all-reduces the partial sums in f32."""
    program = _matmul(P(None, "x"), P("x", None), P())(size)
    args = tuple(a.astype(jax.numpy.bfloat16) for a in program.args)
    return dataclasses.replace(program, name="bf16 matmul all-reduce", args=args)


def _loop_carry(size: str = "small") -> Program:
    """A loop whose body returns its carry sharded otherwise than the loop carries it:
    XLA reshards it at the end of the body (and the result after the loop)."""
    mesh = make_mesh((4, 2), ("x", "y"))
    x = np.random.default_rng(3).standard_normal((16, 16)).astype(np.float32)
    ins = shardings(mesh, (P("x", "y"),))
    inner = shardings(mesh, P("y", "x"))

    def fun(a):
        body = lambda i, h: jax.lax.with_sharding_constraint(jax.numpy.tanh(h) * 2.0, inner)
        return jax.lax.fori_loop(0, 3, body, a)

    return Program(name="loop carry resharded in the body", description="one fori_loop",
                   fun=fun, args=place((x,), ins), in_shardings=ins,
                   out_shardings=shardings(mesh, P("x", "y")), mesh=mesh)


def _unit_window(name: str, grad_of, shape: tuple[int, ...], spec: P):
    """A lookup whose slices are windows of size 1 on the dimension the indices select
    (what ``vmap`` of ``dynamic_slice``, ``take_along_axis`` and named-axis libraries
    emit, unlike ``jnp.take``), differentiated: a scatter-add of the same windows into
    an operand sharded on that dimension, which XLA partitions as trivially sliced
    (each device masks the indices it does not hold; nothing is gathered)."""
    def make(size: str = "small") -> Program:
        mesh = make_mesh((4, 2), ("data", "model"))
        rand = np.random.default_rng(5)
        data = rand.standard_normal(shape).astype(np.float32)
        ids = rand.integers(0, 64, (8, 16)).astype(np.int32)
        ins = shardings(mesh, (spec, P("data")))
        return Program(name=name, description="size-1 windows on an indexed dim",
                       fun=grad_of, args=place((data, ids), ins), in_shardings=ins,
                       out_shardings=ins[0], mesh=mesh)
    return make


def _window_lookup_grad(table, ids):
    """``table[:, id]`` as one-column windows (a gather with slice sizes (rows, 1))."""
    column = lambda t, i: jax.lax.dynamic_slice_in_dim(t, i, 1, axis=1)[:, 0]  # noqa: E731
    lookup = lambda t: jax.vmap(jax.vmap(column, (None, 0)), (None, 0))(t, ids)  # noqa: E731
    return jax.grad(lambda t: (lookup(t) ** 2).sum())(table)


def _target_logit_grad(logits, ids):
    """Each position's target log-probability, picked out of vocab-sharded logits."""
    pick = lambda x: jax.numpy.take_along_axis(x, ids[..., None], axis=-1)  # noqa: E731
    return jax.grad(lambda x: pick(jax.nn.log_softmax(x)).sum())(logits)


def _pair(name: str, fun, shapes, specs, outs):
    """``fun`` of float32 arrays of ``shapes`` sharded ``specs`` on a 4x2 (data, model)
    mesh, its results sharded ``outs``."""
    def make(size: str = "small") -> Program:
        mesh = make_mesh((4, 2), ("data", "model"))
        rand = np.random.default_rng(6)
        ins = shardings(mesh, tuple(specs))
        args = place(tuple(rand.standard_normal(s).astype(np.float32) for s in shapes), ins)
        return Program(name=name, description=name, fun=fun, args=args, in_shardings=ins,
                       out_shardings=shardings(mesh, outs), mesh=mesh)
    return make


def _host_tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(x).astype(x.dtype)


def _host_callback(x):
    """A host callback on a sharded operand: XLA runs it on one device, so it gathers the
    operand there first (all-gathers) and broadcasts its result (an all-reduce)."""
    return jax.pure_callback(_host_tanh, jax.ShapeDtypeStruct(x.shape, x.dtype), x * 2.0)


def _checked_in_branch(x):
    """A host callback in one branch of a ``cond`` (what ``eqx.error_if`` lowers to): its
    result, on one device, is broadcast to the conditional's sharding in the branch."""
    total = x.sum()
    branch = lambda t: jax.pure_callback(_host_tanh, jax.ShapeDtypeStruct((), t.dtype), t)  # noqa: E731
    return x * jax.lax.cond(total > 0, branch, lambda t: t, total)


def _host_value_on_mesh(x):
    """A host callback's result used by an op on the mesh (diffrax's checked solve
    broadcasts its callback's unbatched result over the batch): the result lives on one
    device, so XLA broadcasts it to every device (an all-reduce) before the op."""
    row = jax.pure_callback(_host_tanh, jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                            jax.numpy.ones(x.shape[1:], x.dtype))
    return x * row


def _argmax(x):
    """An argmax over a sharded axis: a reduce of values and indices together."""
    return jax.numpy.argmax(x, axis=-1)


HANDWRITTEN = {
    "all-gather": _reshard(P("x", "y"), P()),
    "all-to-all": _reshard(P("x", None), P(None, "x")),
    "partial gather": _reshard(P(("x", "y"), None), P("x", None)),
    "collective-permute": _reshard(P("a", "b"), P("b", "a"), mesh_shape=(2, 2, 2),
                                   names=("a", "b", "c")),
    "matmul gather rhs": _matmul(P("x", None), P(None, "x"), P("x", None)),
    "matmul all-reduce": _matmul(P(None, "x"), P("x", None), P()),
    "matmul reduce-scatter": _matmul(P(None, "x"), P("x", None), P("x", None)),
    "bf16 matmul all-reduce": _bf16_matmul,
    # XLA replicates top_k's and fft's operands whatever their sharding.
    "top_k batch-sharded": _batched("top_k", lambda a: jax.lax.top_k(a, 2)[0],
                                    P("x", None, None), P("x")),
    "top_k sort-dim-sharded": _batched("top_k", lambda a: jax.lax.top_k(a, 2)[0],
                                       P("x", "y", None), P("x", "y")),
    "loop carry": _loop_carry,
    # XLA groups these dots on the lhs's non-contracting axes and first moves the rhs
    # onto devices where every group holds all of it (a collective-permute), keeping
    # its tile count on a 2x2x2 mesh and doubling it on 4x2.
    "dot regroups the other operand": _grouped_dot(P("data", "model"), P("data", "model"),
                                                   P("model", None)),
    "dot regroups onto more tiles": _grouped_dot(P(None, "y"), P(None, "y"), P("y", None),
                                                 mesh_shape=(4, 2), names=("x", "y")),
    "fft": _batched("fft", lambda a: jax.numpy.fft.fft(a, axis=-1).real,
                    P("x", "y", None), P("x", "y")),
    "window-of-one lookup gradient": _unit_window(
        "window-of-one lookup gradient", _window_lookup_grad, (32, 64), P(None, "model")),
    "target logit gradient": _unit_window(
        "target logit gradient", _target_logit_grad, (8, 16, 64), P("data", None, "model")),
    "host callback": _pair("host callback", _host_callback, [(16, 32)],
                           [P("data", "model")], P("data", "model")),
    "host callback in a branch": _pair("host callback in a branch", _checked_in_branch,
                                       [(16, 32)], [P("data", "model")], P("data", "model")),
    "host callback result on the mesh": _pair(
        "host callback result on the mesh", _host_value_on_mesh, [(16, 32)],
        [P("data", "model")], P("data", "model")),
    "argmax over a sharded axis": _pair("argmax over a sharded axis", _argmax, [(16, 64)],
                                        [P("data", "model")], P("data")),
    "sum over two sharded dimensions": _pair(
        "sum over two sharded dimensions", lambda x: x.sum() + x.max(), [(16, 32)],
        [P("data", "model")], P()),
}


def all_programs(size: str = "small", only=None) -> list[Program]:
    """The model suite, then the hand-written reshard programs."""
    makers = {**REGISTRY, **HANDWRITTEN}
    names = list(makers) if not only else list(only)
    return [makers[name](size) for name in names]


def format_table(rows: list[Row]) -> str:
    """One line per program: predicted and XLA bytes per device by kind, and the ratio."""
    short = {"all-gather": "AG", "all-reduce": "AR", "all-to-all": "A2A",
             "collective-permute": "CP", "reduce-scatter": "RS"}
    head = f"{'program':<44}" + "".join(f"{short[k]:>16}" for k in KINDS) + f"{'ratio':>8}  ok"
    lines = [head, " " * 44 + "".join(f"{'pred/xla':>16}" for _ in KINDS)]
    for row in rows:
        cells = "".join(f"{row.predicted[k]:>7}/{row.xla[k]:<8}" for k in KINDS)
        ratio = "inf" if row.ratio is None else f"{row.ratio:.3f}"
        ok = "yes" if row.within_tolerance else ("explained" if row.name in EXPLAINED else "NO")
        lines.append(f"{row.name:<44}{cells}{ratio:>8}  {ok}")
    for name, why in EXPLAINED.items():
        lines.append(f"note {name}: {why}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the comparison table and JSON; exit 1 if an unexplained program is off."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--size", default="small")
    parser.add_argument("--json", help="also write the JSON here")
    args = parser.parse_args(argv)
    rows = [compare(p) for p in all_programs(args.size, args.names)]
    print(format_table(rows))
    data = [dict(dataclasses.asdict(r), ratio=r.ratio, within_tolerance=r.within_tolerance,
                 explanation=EXPLAINED.get(r.name)) for r in rows]
    text = json.dumps(data, indent=1)
    print(text)
    if args.json:
        pathlib.Path(args.json).write_text(text + "\n")
    bad = [r.name for r in rows if not r.within_tolerance and r.name not in EXPLAINED]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
