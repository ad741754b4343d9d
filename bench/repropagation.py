"""Re-propagation after one changed sharding against a full propagation, and their identity.

Speed: the unrolled transformer of ``bench/propagation.py`` (128 layers by
default, about 8.8k ops) is read once (``propagation.SharedRead``) and
propagated with user priorities, recorded (``SharedRead.recorded``). Then,
for ``--changes`` ops drawn at random (seeded), the op's result is given one
closed sharding (one mesh axis on one dimension, as a cost-aware pin is) and
the module is propagated both ways from those starts: from scratch
(``SharedRead.propagate``) and re-propagated from the recorded run
(``Propagation.repropagate``), interleaved, each ``--rounds`` times. Both read
the same step memo, warm. The table gives the medians over the changes, the
ratio, the worst change's ratio, the share of the recorded visits the
re-propagations computed again, and how many changes reached too far to be
followed (propagated from scratch after following them to ``budget``).

Identity (``--check``): for every zoo and ``bench/models`` program (imported,
as the cost-aware search reads it) and the transformer, ``--changes`` random
single-sharding changes are re-propagated and compared with a propagation from
scratch: shardings, interned ids and written slots must be equal, every change
followed however far it reaches (no run from scratch for cost; the random
programs of ``test/python/compiler/propagation/test_incremental.py`` check the
same). Prints a table and writes JSON (default ``bench/repropagation.json``).

    python -m bench.repropagation [--layers 128] [--changes 20] [--rounds 3] [--check]
                                  [--json PATH]
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from jaxlib.mlir import ir  # noqa: E402

from bench import e2e_measure, zoo  # noqa: E402
from bench import propagation as transformer_bench  # noqa: E402
from bench.models import REGISTRY, REGRESSIONS, make_programs  # noqa: E402
from shardc.compiler.propagation import SharedRead  # noqa: E402
from shardc.compiler.propagation.graph import ReadMemo  # noqa: E402
from shardc.compiler.propagation.ir_access import PER_VALUE  # noqa: E402
from shardc.compiler.stages import import_pipeline  # noqa: E402
from shardc.dialects import make_context  # noqa: E402
from shardc.dialects.sdy import SHARDING_ATTR  # noqa: E402

PLAN = "user-priority"


def startable(read: SharedRead) -> list[int]:
    """Ops whose one result's sharding is read from their own ``sdy.sharding`` (the ops a
    pin can start differently), with a static shape of rank >= 1."""
    graph, store = read.graph, read.store
    return [op for op, results in enumerate(graph.op_results)
            if len(results) == 1 and store.slot_of[results[0]] >= 0
            and store.where[store.slot_of[results[0]]] == (PER_VALUE, op, SHARDING_ATTR, 0)
            and graph.value_shape[results[0]]]


def one_axis(read: SharedRead, op: int, rng: random.Random) -> ir.Attribute | None:
    """A closed sharding of ``op``'s result with one mesh axis on one dimension it divides."""
    mesh_name, mesh = next(iter(read.store.meshes.items()))
    shape = read.graph.value_shape[read.graph.op_results[op][0]]
    choices = [(d, axis) for d, size in enumerate(shape)
               for axis, axis_size in mesh.sizes.items() if size % axis_size == 0]
    if not choices:
        return None
    dim, axis = rng.choice(choices)
    dims = ", ".join(f'{{"{axis}"}}' if d == dim else "{}" for d in range(len(shape)))
    return ir.Attribute.parse(f"#sdy.sharding_per_value<[<@{mesh_name}, [{dims}]>]>",
                              read.graph.module.context)


def changes(read: SharedRead, count: int, seed: int) -> list[dict[int, ir.Attribute]]:
    """``count`` single-op starts drawn with ``seed``."""
    rng = random.Random(seed)
    ops = startable(read)
    out = []
    while ops and len(out) < count:
        op = rng.choice(ops)
        attribute = one_axis(read, op, rng)
        if attribute is not None:
            out.append({op: attribute})
    return out


def identical(read: SharedRead, base, starts: dict[int, ir.Attribute]) -> bool:
    store = base.repropagate(starts)
    expected = read.propagate(PLAN, starts)
    return (store.value == expected.value and store.sid == expected.sid
            and store.dirty == expected.dirty
            and store.sharding_attrs == expected.sharding_attrs)


def transformer_read(layers: int) -> SharedRead:
    text = transformer_bench.lowered_text(transformer_bench.unpropagated_text(layers))
    module = ir.Module.parse(text, make_context())
    return SharedRead(module.operation, memo=ReadMemo())


def measure(layers: int, count: int, rounds: int, seed: int = 0) -> dict:
    """Median ms of a full propagation and of a re-propagation after one change."""
    read = transformer_read(layers)
    base = read.recorded(PLAN, {})
    drawn = changes(read, count, seed)
    full, again, same, scratch = [], [], 0, 0
    for starts in drawn:
        read.propagate(PLAN, starts)  # the steps of this change memoised: both warm
        fallbacks = base.fallbacks
        base.repropagate(starts)
        scratch += base.fallbacks > fallbacks
        times = {"full": [], "again": []}
        for _ in range(rounds):
            start = time.perf_counter()
            read.propagate(PLAN, starts)
            times["full"].append(time.perf_counter() - start)
            start = time.perf_counter()
            base.repropagate(starts)
            times["again"].append(time.perf_counter() - start)
        full.append(statistics.median(times["full"]))
        again.append(statistics.median(times["again"]))
        same += identical(read, base, starts)
    full_ms, again_ms = statistics.median(full) * 1e3, statistics.median(again) * 1e3
    return {"layers": layers, "ops": len(read.graph.ops), "changes": len(drawn),
            "full_ms": full_ms, "repropagate_ms": again_ms, "ratio": again_ms / full_ms,
            "worst_ratio": max(a / f for a, f in zip(again, full)),
            "visits_computed": base.events / max(1, base.ticks),
            "from_scratch": scratch, "identical": same}


def imported_read(program) -> SharedRead | None:
    """The program's module after the import steps (what the cost-aware search reads)."""
    jitted, args, _ = e2e_measure.prepare(program, "shardc")
    module = ir.Module.parse(jitted.lower(*args, propagate=False).as_text(), make_context())
    with module.context:
        import_pipeline(module.operation)
    read = SharedRead(module.operation, memo=ReadMemo())
    return read if read.usable else None


def check(count: int, layers: int) -> list[dict]:
    """Identity of re-propagation and propagation from scratch on every program."""
    programs = zoo.make_programs("small") + make_programs("small", None,
                                                          {**REGISTRY, **REGRESSIONS})
    rows = []
    for program in programs:
        read = imported_read(program)
        rows.append(_check_read(program.name, read, count))
        print(_check_text(rows[-1]), flush=True)
    rows.append(_check_read(f"transformer_{layers}_layers", transformer_read(layers), count))
    print(_check_text(rows[-1]), flush=True)
    return rows


def _check_read(name: str, read: SharedRead | None, count: int) -> dict:
    if read is None:
        return {"name": name, "changes": 0, "identical": 0, "note": "not shared (usable)"}
    base = read.recorded(PLAN, {})
    base.budget = 1.0  # every change followed to its end, however far it reaches
    drawn = changes(read, count, seed=len(name))
    same = sum(identical(read, base, starts) for starts in drawn)
    return {"name": name, "changes": len(drawn), "identical": same,
            "fallbacks": base.fallbacks, "visits_computed": base.events / max(1, base.ticks)}


def _check_text(row: dict) -> str:
    note = row.get("note") or (f"{row['visits_computed']:.1%} of visits computed, "
                               f"{row['fallbacks']} from scratch")
    return f"{row['name']:26} {row['identical']:>3}/{row['changes']:<3} identical  {note}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.repropagation",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=128)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--check", action="store_true",
                        help="also compare with propagations from scratch on every program")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__),
                                                       "repropagation.json"))
    options = parser.parse_args(argv)
    row = measure(options.layers, options.changes, options.rounds)
    print(f"{'layers':>6} {'ops':>6} {'full ms':>9} {'repropagate ms':>15} {'ratio':>6} "
          f"{'worst':>6} {'visits computed':>16} {'from scratch':>13} {'identical':>10}")
    print(f"{row['layers']:>6} {row['ops']:>6} {row['full_ms']:>9.1f} "
          f"{row['repropagate_ms']:>15.2f} {row['ratio']:>6.3f} {row['worst_ratio']:>6.3f} "
          f"{row['visits_computed']:>16.1%} {row['from_scratch']:>13} "
          f"{row['identical']:>4}/{row['changes']}")
    out = {"plan": PLAN, "speed": row}
    if options.check:
        out["identity"] = check(options.changes, options.layers)
    with open(options.json, "w") as handle:
        json.dump(out, handle, indent=1)
        handle.write("\n")
    failed = row["identical"] < row["changes"] or any(
        r["identical"] < r["changes"] for r in out.get("identity", []))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
