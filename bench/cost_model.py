"""The reshard cost model (``shardc.compiler.cost``) against XLA's compiled HLO.

Every case is a tensor shape, a mesh and two shardings: the program takes a
replicated input, constrains it to ``src`` (a free dynamic-slice), then to
``dst``, and XLA's SPMD partitioner inserts the collectives of the reshard.
The cases of one mesh compile as one program, each case under its own
``jax.named_scope``, so every collective of the partitioned HLO is
attributed to its case by the ``op_name`` in its metadata. The predicted
collectives (``reshard_collectives``) are compared with those parsed by
``shardc.runtime.collectives.find_collectives``: kind and bytes per device,
as multisets. A second, smaller table does the same for the collectives ops
need themselves (``op_communication``: dot_general with sharded contracting
dims, reductions over sharded dims, ...).

Run: ``python -m bench.cost_model [--json bench/cost_model.json] [--misses]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import pathlib
import random
import re
import sys
from collections import Counter
from collections.abc import Sequence

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.lax import with_sharding_constraint as wsc  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from shardc.compiler import jit as shardc_jit  # noqa: E402
from shardc.compiler.cost.op_comm import op_communication  # noqa: E402
from shardc.compiler.cost.reshard import reshard_collectives  # noqa: E402
from shardc.compiler.sharding.axes import full_axis  # noqa: E402
from shardc.compiler.sharding.rule import OpShardingRule  # noqa: E402
from shardc.compiler.sharding.tensor import (  # noqa: E402
    DimSharding,
    Tensor,  # noqa: E402
    TensorSharding,
)
from shardc.runtime.collectives import (  # noqa: E402
    find_collectives,
    shape_bytes,
    top_level_elements,
)

MESHES: dict[str, tuple[tuple[str, int], ...]] = {
    "8": (("x", 8),),
    "4x2": (("x", 4), ("y", 2)),
    "2x4": (("x", 2), ("y", 4)),
    "2x2x2": (("x", 2), ("y", 2), ("z", 2)),
}
SHAPES: dict[int, tuple[tuple[int, ...], ...]] = {
    1: ((64,), (30,)),
    2: ((16, 32), (15, 7)),
    3: ((8, 16, 4), (9, 6, 5)),
}
DTYPES = {"f32": (jnp.float32, 4), "bf16": (jnp.bfloat16, 2)}

Spec = tuple[tuple[str, ...], ...]  # per dimension, the mesh axes major to minor


@dataclasses.dataclass(frozen=True)
class Case:
    """One reshard: ``shape`` on ``mesh`` from ``src`` to ``dst``."""

    mesh: str
    shape: tuple[int, ...]
    src: Spec
    dst: Spec
    dtype: str = "f32"

    @property
    def args(self) -> tuple:
        return ((self.shape, self.dtype),)

    @property
    def name(self) -> str:
        dims = "x".join(map(str, self.shape))
        return f"{self.mesh}:{self.dtype}[{dims}]:{spec_text(self.src)}->{spec_text(self.dst)}"


def spec_text(spec: Spec) -> str:
    """``{x,y}{}``: the axes of each dimension."""
    return "".join("{" + ",".join(dim) + "}" for dim in spec)


def partition_spec(spec: Spec) -> P:
    """The JAX ``PartitionSpec`` of ``spec``."""
    return P(*[None if not dim else dim[0] if len(dim) == 1 else dim for dim in spec])


def tensor_sharding(mesh: str, spec: Spec) -> TensorSharding:
    """The shardc ``TensorSharding`` of ``spec`` (closed dimensions, full axes)."""
    sizes = dict(MESHES[mesh])
    dims = tuple(DimSharding(tuple(full_axis(a, sizes[a]) for a in dim), True) for dim in spec)
    return TensorSharding("mesh", dims)


def jax_mesh(mesh: str) -> jax.sharding.Mesh:
    """The JAX mesh (devices in order, Auto axes)."""
    names = tuple(a for a, _ in MESHES[mesh])
    sizes = tuple(n for _, n in MESHES[mesh])
    return jax.make_mesh(sizes, names, axis_types=(AxisType.Auto,) * len(names))


# -- cases -------------------------------------------------------------------------------------


def all_specs(mesh: str, rank: int) -> list[Spec]:
    """Every way to place the mesh's axes (each at most once, in any order) on ``rank`` dims."""
    axes = [a for a, _ in MESHES[mesh]]
    specs = set()
    for placement in itertools.product(range(-1, rank), repeat=len(axes)):
        per_dim: list[list[str]] = [[] for _ in range(rank)]
        for axis, dim in zip(axes, placement):
            if dim >= 0:
                per_dim[dim].append(axis)
        for orders in itertools.product(*[itertools.permutations(d) for d in per_dim]):
            specs.add(tuple(tuple(o) for o in orders))
    return sorted(specs, key=lambda s: (sum(map(len, s)), s))


def categories(case: Case) -> list[str]:
    """The kinds of change ``case`` makes (for coverage counts)."""
    src, dst = case.src, case.dst
    out = []
    src_axes = {a for d in src for a in d}
    dst_axes = {a for d in dst for a in d}
    if not src_axes:
        out.append("from-replicated")
    if not dst_axes:
        out.append("to-replicated")
    if dst_axes - src_axes:
        out.append("adds-axes")
    if src_axes - dst_axes:
        out.append("removes-axes")
    where_src = {a: i for i, d in enumerate(src) for a in d}
    where_dst = {a: i for i, d in enumerate(dst) for a in d}
    if any(where_src[a] != where_dst[a] for a in src_axes & dst_axes):
        out.append("moves-axes")
    if any(set(s) == set(d) and s != d and len(s) > 1 for s, d in zip(src, dst)):
        out.append("reorders-tuple")
    if any(len(s) != len(d) and (s[:len(d)] == d or d[:len(s)] == s) and s and d
           for s, d in zip(src, dst)):
        out.append("tuple-prefix")
    mesh_axes = {a for a, _ in MESHES[case.mesh]}
    if src_axes and src_axes != mesh_axes or dst_axes and dst_axes != mesh_axes:
        out.append("partial-replication")
    if any(n % max(1, _size(case.mesh, d)) for n, d in zip(case.shape, src + dst)):
        out.append("padded")
    if (sorted(_size(case.mesh, d) for d in src) == sorted(_size(case.mesh, d) for d in dst)
            and src_axes == dst_axes and src != dst):
        out.append("same-tiling-other-axes")
    return out


def _size(mesh: str, axes: Sequence[str]) -> int:
    sizes = dict(MESHES[mesh])
    total = 1
    for a in axes:
        total *= sizes[a]
    return total


def reshard_cases(per_shape: int = 10, seed: int = 12) -> list[Case]:
    """The reshard table: curated cases plus a seeded sample of pairs per mesh and shape."""
    rng = random.Random(seed)
    cases: list[Case] = []
    for mesh in MESHES:
        for rank, shapes in SHAPES.items():
            specs = all_specs(mesh, rank)
            for shape in shapes:
                pairs = [(s, d) for s in specs for d in specs if s != d]
                rng.shuffle(pairs)
                for src, dst in pairs[:per_shape]:
                    cases.append(Case(mesh, shape, src, dst))
    cases += curated_cases()
    seen, unique = set(), []
    for case in cases:
        if case not in seen:
            seen.add(case)
            unique.append(case)
    return unique


def curated_cases() -> list[Case]:
    """Hand-picked reshards: one of each pattern the model distinguishes, on every mesh."""
    R: tuple = ()
    out = [
        # 1-D mesh
        Case("8", (64,), (("x",),), (R,)),
        Case("8", (64,), (R,), (("x",),)),
        Case("8", (30,), (("x",),), (R,)),
        Case("8", (16, 32), (("x",), R), (R, ("x",))),
        Case("8", (15, 7), (("x",), R), (R, ("x",))),
        Case("8", (8, 16, 4), (R, ("x",), R), (R, R, ("x",))),
        Case("8", (16, 32), (("x",), R), (R, ("x",)), "bf16"),
        Case("8", (16, 32), (("x",), R), (R, R), "bf16"),
        Case("8", (15, 7), (("x",), R), (R, ("x",)), "bf16"),
        Case("8", (8, 16, 4), (R, R, ("x",)), (R, R, R), "bf16"),
        # 4x2
        Case("4x2", (16, 32), (("x",), ("y",)), (("y",), ("x",))),
        Case("4x2", (16, 32), (("x",), R), (("y",), R)),
        Case("4x2", (16, 32), (("x", "y"), R), (("x",), R)),
        Case("4x2", (16, 32), (("x",), R), (("x", "y"), R)),
        Case("4x2", (16, 32), (("x", "y"), R), (("y", "x"), R)),
        Case("4x2", (16, 32), (("x", "y"), R), (R, ("x", "y"))),
        Case("4x2", (16, 32), (("x", "y"), R), (("x",), ("y",))),
        Case("4x2", (16, 32), (("x",), ("y",)), (("x", "y"), R)),
        Case("4x2", (16, 32), (("x",), ("y",)), (R, R)),
        Case("4x2", (15, 7), (("x",), ("y",)), (R, R)),
        Case("4x2", (15, 7), (("x", "y"), R), (("x",), R)),
        Case("4x2", (16, 32), (("y",), R), (R, ("y",))),
        Case("4x2", (16, 32), (("x",), R), (R, ("x",)), "bf16"),
        Case("4x2", (16, 32), (("x",), ("y",)), (("y",), ("x",)), "bf16"),
        Case("4x2", (16, 32), (("x",), R), (("y",), R), "bf16"),
        # 2x4
        Case("2x4", (16, 32), (("y",), R), (R, ("y",))),
        Case("2x4", (16, 32), (("x",), ("y",)), (("y",), ("x",))),
        Case("2x4", (16, 32), (("y", "x"), R), (("y",), R)),
        Case("2x4", (8, 16, 4), (("x",), ("y",), R), (R, R, ("x", "y"))),
        # 2x2x2
        Case("2x2x2", (16, 32), (("x",), ("y",)), (("y",), ("x",))),
        Case("2x2x2", (16, 32), (("x",), R), (("z",), R)),
        Case("2x2x2", (8, 16, 4), (("x",), ("y",), ("z",)), (("z",), ("x",), ("y",))),
        Case("2x2x2", (8, 16, 4), (("x", "y", "z"), R, R), (("x",), R, R)),
        Case("2x2x2", (8, 16, 4), (("x", "y"), R, R), (R, ("x", "y"), R)),
        Case("2x2x2", (9, 6, 5), (("x",), ("y",), ("z",)), (R, R, R)),
        Case("2x2x2", (8, 16, 4), (R, R, R), (("x",), ("y",), ("z",))),
    ]
    return out


# -- compiling and attributing -----------------------------------------------------------------

_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(.*)$")
_REFERENCE = re.compile(r"%([\w.\-]+)")
_PARAMETER = re.compile(r"\bparameter\((\d+)\)")


def parameters_reaching(hlo_text: str) -> dict[str, set[int]]:
    """For each instruction of the entry computation, the parameters it depends on."""
    entry = hlo_text[hlo_text.index("\nENTRY"):]
    deps: dict[str, list[str]] = {}
    params: dict[str, int] = {}
    for line in entry.splitlines()[1:]:
        match = _INSTRUCTION.match(line)
        if match is None:
            continue
        name, rest = match.groups()
        param = _PARAMETER.search(rest)
        if param is not None:
            params[name] = int(param.group(1))
        deps[name] = [r for r in _REFERENCE.findall(rest.split(", metadata=")[0]) if r != name]
    reach: dict[str, set[int]] = {}
    for name in deps:  # instructions are in def-before-use order
        found = {params[name]} if name in params else set()
        for ref in deps[name]:
            found |= reach.get(ref, set())
        reach[name] = found
    return reach


_COLLECTIVE = re.compile(r"=\s*(\(.*?\)|\S+)\s+([a-z\-]+?)(?:-start)?\(([^)]*)\)")


def attribute(hlo_text: str, owner: Sequence[int]) -> dict[int, list[tuple[str, int]]]:
    """XLA's collectives per case, by data flow from the entry parameters.

    ``owner[p]`` is the case of entry parameter ``p``. A collective XLA's
    combiners merged across cases (a tuple all-reduce or all-gather) is
    split back: each operand, with its result element, goes to its case.
    """
    reach = {name: {owner[p] for p in params}
             for name, params in parameters_reaching(hlo_text).items()}
    found: dict[int, list[tuple[str, int]]] = {i: [] for i in set(owner)}
    for collective in find_collectives(hlo_text):
        name = _INSTRUCTION.match(collective.line).group(1)
        owners = reach[name]
        if len(owners) == 1:
            found[next(iter(owners))].append((collective.kind, collective.bytes_per_device))
            continue
        match = _COLLECTIVE.search(collective.line)
        results = top_level_elements(match.group(1).strip()[1:-1])
        operands = top_level_elements(match.group(3))
        per_case: dict[int, int] = {}
        for result, operand in zip(results, operands):
            ref = _REFERENCE.search(operand).group(1)
            if shape_bytes(result) <= 8 and len(reach[ref]) != 1:
                continue  # scalar sums of the probes, merged by a multi-output fusion
            if len(reach[ref]) != 1:
                raise AssertionError(f"operand {ref} of {sorted(reach[ref])} cases: "
                                     f"{collective.line}")
            (case,) = reach[ref]
            size = max(shape_bytes(result), shape_bytes(operand))
            per_case[case] = per_case.get(case, 0) + size
        for case, size in per_case.items():
            found[case].append((collective.kind, size))
    return found


def _compile_group(mesh: str, cases: Sequence, build) -> dict[int, list[tuple[str, int]]]:
    """Compile ``build(args, case, mesh)`` for every case in one program; collectives per case.

    A case lists its arguments in ``case.args`` ((shape, dtype) pairs); each
    enters replicated, so any communication comes from the case's own ops.
    """
    jm = jax_mesh(mesh)
    owner: list[int] = []
    args = []
    for i, case in enumerate(cases):
        for shape, dtype in case.args:
            owner.append(i)
            args.append(jax.ShapeDtypeStruct(shape, DTYPES[dtype][0]))

    def program(*xs):
        outs, k = [], 0
        for i, case in enumerate(cases):
            n = len(case.args)
            with jax.named_scope(f"c{i}"):
                outs.append(build(xs[k:k + n], case, jm))
            k += n
        return outs

    replicated = NamedSharding(jm, P())
    compiled = jax.jit(program, in_shardings=[replicated] * len(args)).lower(*args).compile()
    return attribute(compiled.as_text(), owner)


def _reshard(xs, case: Case, jm):
    (x,) = xs
    x = wsc(x, NamedSharding(jm, partition_spec(case.src)))
    x = wsc(x, NamedSharding(jm, partition_spec(case.dst)))
    # Return a scalar: an indivisible sharded result would be gathered at the
    # function boundary, and returning the value unused would let XLA drop it.
    # The max costs one all-reduce of a scalar (max, not sum: a sum of bf16 accumulates in f32
    # and XLA would move that convert before the collectives), removed in `_drop_probe`.
    return jnp.max(x)


def _drop_probe(found: list[tuple[str, int]], case) -> list[tuple[str, int]]:
    """Remove the scalar all-reduces of the final max (none when the value is replicated)."""
    return [item for item in found if not (item[0] == "all-reduce" and item[1] <= 8)]


# -- known misses ------------------------------------------------------------------------------
# Each class: a predicate over the case and the reason the model is off there. A miss
# outside every class is a bug (test_cost_model_table fails).


def _padded(case: Case) -> bool:
    return any(n % _size(case.mesh, s) or n % _size(case.mesh, d)
               for n, s, d in zip(case.shape, case.src, case.dst))


RESHARD_MISS_CLASSES = {
    "padded": (
        _padded,
        "uneven shards: XLA pads, masks and exchanges halo slices (ReshardDataForPad/"
        "Slicing) and, for indivisible dims, picks other routes (replication instead of "
        "merge/split all-to-all, extra collective-permutes of the tail); the model only "
        "pads shard shapes."),
}


def _dot_partial_contracting(case: OpCase) -> bool:
    if case.op != "matmul":
        return False
    lhs_k, rhs_k = case.operands[0][1], case.operands[1][0]
    used = {a for a in lhs_k}
    return bool(lhs_k) != bool(rhs_k) and _size(case.mesh, list(used or rhs_k)) < _size(
        case.mesh, [a for a, _ in MESHES[case.mesh]])


OP_MISS_CLASSES = {
    "dot-partially-replicated-contracting": (
        _dot_partial_contracting,
        "one dot operand sharded on the contracting dim over part of the mesh, the other "
        "replicated, result replicated: XLA all-gathers the sharded operand instead of a "
        "local dot + all-reduce (the model predicts the all-reduce; it lacks the mesh size "
        "in op_comm)."),
}


def miss_class(case, classes) -> str | None:
    """The first known-miss class whose predicate holds for ``case``."""
    for name, (predicate, _) in classes.items():
        if predicate(case):
            return name
    return None


def xla_reshards(cases: Sequence[Case]) -> dict[Case, list[tuple[str, int]]]:
    """XLA's collectives for every case (one compile per mesh)."""
    out: dict[Case, list[tuple[str, int]]] = {}
    for mesh in MESHES:
        group = [c for c in cases if c.mesh == mesh]
        if group:
            found = _compile_group(mesh, group, _reshard)
            out.update({c: _drop_probe(found[i], c) for i, c in enumerate(group)})
    return out


def predict_reshard(case: Case) -> list[tuple[str, int]]:
    """The cost model's collectives for ``case``."""
    found = reshard_collectives(case.shape, DTYPES[case.dtype][1],
                                tensor_sharding(case.mesh, case.src),
                                tensor_sharding(case.mesh, case.dst), MESHES[case.mesh],
                                dtype=case.dtype)
    return [(c.kind, c.bytes_per_device) for c in found]


@dataclasses.dataclass(frozen=True)
class Row:
    """One case of a table: predicted and XLA collectives."""

    case: str
    predicted: tuple[tuple[str, int], ...]
    xla: tuple[tuple[str, int], ...]
    categories: tuple[str, ...] = ()
    known_miss: str | None = None  # the class the case belongs to, if any

    @property
    def match(self) -> bool:
        """Same kinds and bytes (as multisets)."""
        return Counter(self.predicted) == Counter(self.xla)


def reshard_table(cases: Sequence[Case] | None = None) -> list[Row]:
    """Every reshard case with its prediction and XLA's collectives."""
    cases = list(cases) if cases is not None else reshard_cases()
    xla = xla_reshards(cases)
    return [Row(c.name, tuple(predict_reshard(c)), tuple(xla[c]), tuple(categories(c)),
                miss_class(c, RESHARD_MISS_CLASSES)) for c in cases]


# -- op collectives ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OpCase:
    """One op (``matmul``, ``sum0``/``sum1``: a reduction, ``add``) with operand and
    result shardings; operands enter replicated and are constrained first."""

    mesh: str
    op: str
    shapes: tuple[tuple[int, ...], ...]
    operands: tuple[Spec, ...]
    result: Spec

    @property
    def args(self) -> tuple:
        return tuple((shape, "f32") for shape in self.shapes)

    @property
    def name(self) -> str:
        ins = ",".join("x".join(map(str, s)) + spec_text(o)
                       for s, o in zip(self.shapes, self.operands))
        return f"{self.mesh}:{self.op}({ins})->{spec_text(self.result)}"

    def rule(self) -> OpShardingRule:
        """The op's factor rule (what ``shardc.compiler.sharding.rules`` gives the op)."""
        if self.op == "matmul":  # factors m, n, k
            (m, k), (_, n) = self.shapes
            return OpShardingRule((m, n, k), (((0,), (2,)), ((2,), (1,))), (((0,), (1,)),),
                                  reduction_factors=(2,))
        if self.op in ("sum0", "sum1"):
            (a, b), = self.shapes
            kept = 1 if self.op == "sum0" else 0
            return OpShardingRule((a, b), (((0,), (1,)),), (((kept,),),),
                                  reduction_factors=(1 - kept,))
        if self.op == "add":
            rank = len(self.shapes[0])
            mapping = tuple((i,) for i in range(rank))
            return OpShardingRule(self.shapes[0], (mapping, mapping), (mapping,))
        raise ValueError(self.op)

    def result_shape(self) -> tuple[int, ...]:
        if self.op == "matmul":
            return (self.shapes[0][0], self.shapes[1][1])
        if self.op == "sum0":
            return (self.shapes[0][1],)
        if self.op == "sum1":
            return (self.shapes[0][0],)
        return self.shapes[0]


def _op(xs, case: OpCase, jm):
    xs = [wsc(x, NamedSharding(jm, partition_spec(spec))) for x, spec in zip(xs, case.operands)]
    if case.op == "matmul":
        y = xs[0] @ xs[1]
    elif case.op == "sum0":
        y = jnp.sum(xs[0], axis=0)
    elif case.op == "sum1":
        y = jnp.sum(xs[0], axis=1)
    else:
        y = xs[0] + xs[1]
    y = wsc(y, NamedSharding(jm, partition_spec(case.result)))
    return jnp.max(y)


def op_cases() -> list[OpCase]:
    """The op table: dots with sharded contracting / non-contracting dims, reductions."""
    R: tuple = ()
    x, y, z = ("x",), ("y",), ("z",)
    mm = ((32, 64), (64, 16))
    out = []
    for mesh in MESHES:
        out += [
            OpCase(mesh, "matmul", mm, ((R, x), (x, R)), (R, R)),      # contracting -> AR
            OpCase(mesh, "matmul", mm, ((x, R), (R, R)), (x, R)),      # batch-like: local
            OpCase(mesh, "matmul", mm, ((R, R), (R, x)), (R, x)),      # local
            OpCase(mesh, "matmul", mm, ((R, x), (R, R)), (R, R)),      # one side contracting
            OpCase(mesh, "sum1", ((32, 64),), ((R, x),), (R,)),        # reduce sharded dim -> AR
            OpCase(mesh, "sum0", ((32, 64),), ((x, R),), (R,)),
            OpCase(mesh, "sum1", ((32, 64),), ((x, R),), (x,)),        # reduce local dim
            OpCase(mesh, "add", ((32, 64), (32, 64)), ((x, R), (R, x)), (x, R)),
        ]
    for mesh in ("4x2", "2x4"):
        out += [
            OpCase(mesh, "matmul", mm, ((x, y), (y, R)), (x, R)),      # Megatron row-parallel
            OpCase(mesh, "matmul", mm, ((R, y), (y, x)), (R, x)),
            OpCase(mesh, "matmul", mm, ((x, y), (y, R)), (x, y)),      # AR then slice
            OpCase(mesh, "matmul", mm, ((R, ("x", "y")), (("x", "y"), R)), (R, R)),
            OpCase(mesh, "sum1", ((32, 64),), ((x, y),), (x,)),
            OpCase(mesh, "sum0", ((32, 64),), ((("x", "y"), R),), (R,)),
            OpCase(mesh, "add", ((32, 64), (32, 64)), ((x, y), (y, x)), (x, y)),
        ]
    out += [
        OpCase("2x2x2", "matmul", mm, ((x, ("y", "z")), (("y", "z"), R)), (x, R)),
        OpCase("2x2x2", "matmul", mm, ((z, y), (y, x)), (z, x)),
        OpCase("2x2x2", "sum1", ((32, 64),), ((x, ("y", "z")),), (x,)),
        OpCase("2x2x2", "matmul", ((30, 36), (36, 10)), ((R, x), (x, R)), (R, R)),
        OpCase("8", "matmul", ((30, 36), (36, 10)), ((R, x), (x, R)), (R, R)),
        OpCase("8", "sum1", ((30, 36),), ((R, x),), (R,)),
    ]
    return out


def xla_ops(cases: Sequence[OpCase]) -> dict[OpCase, list[tuple[str, int]]]:
    """XLA's collectives for every op case (one compile per mesh)."""
    out: dict[OpCase, list[tuple[str, int]]] = {}
    for mesh in MESHES:
        group = [c for c in cases if c.mesh == mesh]
        if group:
            found = _compile_group(mesh, group, _op)
            out.update({c: _drop_probe(found[i], c) for i, c in enumerate(group)})
    return out


def predict_op(case: OpCase) -> list[tuple[str, int]]:
    """The cost model's collectives for the op itself (operand reshards included)."""
    operands = [Tensor(shape, 4, tensor_sharding(case.mesh, spec))
                for shape, spec in zip(case.shapes, case.operands)]
    result = Tensor(case.result_shape(), 4, tensor_sharding(case.mesh, case.result))
    found = op_communication(case.rule(), operands, [result], MESHES[case.mesh])
    return [(c.collective.kind, c.collective.bytes_per_device) for c in found]


def op_table(cases: Sequence[OpCase] | None = None) -> list[Row]:
    """Every op case with its prediction and XLA's collectives."""
    cases = list(cases) if cases is not None else op_cases()
    xla = xla_ops(cases)
    return [Row(c.name, tuple(predict_op(c)), tuple(xla[c]), (),
                miss_class(c, OP_MISS_CLASSES)) for c in cases]


def _fmt(collectives: Sequence[tuple[str, int]]) -> str:
    return " ".join(f"{k}:{b}" for k, b in collectives) or "-"


def summary(rows: Sequence[Row]) -> dict:
    """Cases, hits, and misses per known class (``None``: unexplained)."""
    misses = Counter(r.known_miss for r in rows if not r.match)
    in_class = Counter(r.known_miss for r in rows if r.known_miss)
    return {"cases": len(rows), "hits": sum(r.match for r in rows),
            "misses": {str(k): v for k, v in misses.items()},
            "cases_per_class": dict(in_class)}


def print_table(rows: Sequence[Row], title: str, misses_only: bool = False) -> None:
    """One line per case: case, predicted, XLA, match (or the known-miss class)."""
    info = summary(rows)
    print(f"== {title}: {info['hits']}/{info['cases']} match; misses by class: "
          f"{info['misses']}")
    for r in rows:
        if misses_only and r.match:
            continue
        mark = "ok  " if r.match else "MISS"
        note = f"  [{r.known_miss}]" if not r.match else ""
        print(f"{mark} {r.case:<58} pred {_fmt(r.predicted):<40} xla {_fmt(r.xla)}{note}")


@dataclasses.dataclass(frozen=True)
class IndexedCase:
    """An embedding lookup (``take``) or its gradient (``scatter-add``) on 4x2.

    Table ``f32[64, 32]``, indices ``s32[8, 16]``, updates / output
    ``f32[8, 16, 32]``; ``miss`` names what the model does not follow yet.
    """

    op: str  # "take" or "scatter-add"
    table: Spec
    indices: Spec
    output: Spec  # take: the output; scatter-add: the result (the table's sharding)
    miss: str | None = None

    @property
    def name(self) -> str:
        return (f"4x2 {self.op} table{spec_text(self.table)} idx{spec_text(self.indices)} "
                f"-> {spec_text(self.output)}")


def _indexed_fun(case: IndexedCase):
    if case.op == "take":
        return lambda t, i: jnp.take(t, i, axis=0)
    return lambda t, i, u: t.at[i].add(u)


def indexed_row(case: IndexedCase) -> Row:
    """One indexed case compiled alone: shardc's comm report against XLA's collectives."""
    jm = jax_mesh("4x2")
    table, indices = jnp.zeros((64, 32)), jnp.zeros((8, 16), jnp.int32)
    args, specs = [table, indices], [case.table, case.indices]
    if case.op == "scatter-add":
        args.append(jnp.zeros((8, 16, 32)))
        specs.append(case.indices + ((),) * (3 - len(case.indices)))
    fun = shardc_jit(_indexed_fun(case),
                     in_shardings=tuple(NamedSharding(jm, partition_spec(s)) for s in specs),
                     out_shardings=NamedSharding(jm, partition_spec(case.output)))
    lowered = fun.lower(*args)
    predicted = tuple(sorted((k, t.bytes_per_device)
                             for k, t in lowered.comm_report().totals().items() if t.count))
    xla = tuple(sorted((k, s.bytes_per_device)
                       for k, s in lowered.compile().collectives().items() if s.count))
    return Row(case.name, predicted, xla, (), case.miss)


def indexed_cases() -> list[IndexedCase]:
    """Embedding lookups and gradients: each of XLA's gather/scatter methods once."""
    R, x, y = (), ("x",), ("y",)
    X, Y = (x,), (y,)  # a 1-D spec (indices) or the batch dim of the output
    return [
        IndexedCase("take", (y, x), X, X),      # operand pass-through, then trivially sliced
        IndexedCase("take", (R, R), X, X),      # replicated table: local
        IndexedCase("take", (y, x), (), ()),    # replicate the table
        IndexedCase("take", (x, R), (), ()),    # trivially sliced: mask + all-reduce
        IndexedCase("take", (x, R), Y, Y),      # index pass-through, then trivially sliced
        IndexedCase("take", (R, y), X, (x, R, y)),  # pass-through on both: local
        IndexedCase("take", (R, y), X, X),      # pass-through, then gather the output
        IndexedCase("take", (y, R), X, X),      # index pass-through, then trivially sliced
        IndexedCase("take", (y, R), X, (x, R, y)),
        IndexedCase("take", (R, x), Y, Y),
        IndexedCase("scatter-add", (R, x), X, (R, x)),  # operand pass-through + identity
        IndexedCase("scatter-add", (y, x), (), (y, x)),  # replicated indices: local
        IndexedCase("take", (x, R), X, X),      # operand and indices on the same axis
        IndexedCase("take", (x, y), X, X),
        # trivially sliced inside the operand pass-through groups loses to index
        # pass-through once the dry run costs the per-group output (XLA gathers the table)
        IndexedCase("take", (y, x), Y, Y),
        IndexedCase("scatter-add", (y, x), X, (y, x)),  # real operand: gathered, then summed
        IndexedCase("scatter-add", (x, y), X, (x, y)),
    ]


def indexed_table(cases: Sequence[IndexedCase] | None = None) -> list[Row]:
    """Every indexed case with its prediction and XLA's collectives."""
    return [indexed_row(c) for c in (cases if cases is not None else indexed_cases())]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the tables as JSON here")
    parser.add_argument("--misses", action="store_true", help="print only mismatching cases")
    args = parser.parse_args(argv)
    rows = reshard_table()
    print_table(rows, "reshards", args.misses)
    ops = op_table()
    print_table(ops, "op collectives", args.misses)
    indexed = indexed_table()
    print_table(indexed, "gather / scatter (whole program)", args.misses)
    if args.json:
        data = {"reshards": [dataclasses.asdict(r) | {"match": r.match} for r in rows],
                "ops": [dataclasses.asdict(r) | {"match": r.match} for r in ops],
                "summary": {"reshards": summary(rows), "ops": summary(ops)},
                "miss_classes": {k: v[1] for k, v in
                                 (RESHARD_MISS_CLASSES | OP_MISS_CLASSES).items()}}
        pathlib.Path(args.json).write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
