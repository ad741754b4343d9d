"""bench/plan_speed.py: planning on an AbstractMesh of 16,384 devices, without devices."""

import json
import math
import pathlib

import jax
import pytest

from bench import plan_speed

# shapes the mesh (data=1024, model=16) divides; their sizes cost nothing to plan
TINY = dict(d=1024, ffn=2048, vocab=2048, seq=16, batch=1024)


def _shard_bytes(leaf):
    return leaf.dtype.itemsize * math.prod(leaf.sharding.shard_shape(leaf.shape))


@pytest.mark.parametrize("variant", plan_speed.VARIANTS)
def test_plan_on_16384_devices(variant):
    row = plan_speed.plan(variant, 16384, 2, heads=4, **TINY)
    assert row["devices"] == 16384 and row["total_s"] > 0
    # the arguments' per-device bytes are what jax's own shard shapes give
    args = plan_speed.abstract_args(variant, plan_speed.mesh_of(16384), 2, **TINY)
    step = plan_speed.jit(plan_speed.make_step(variant, 2, 4, args[1].sharding.mesh))
    lowered = step.trace(*args).lower(lowering_platforms=("cpu",))
    estimate = lowered.memory_estimate()
    assert estimate.argument_bytes == sum(map(_shard_bytes, jax.tree.leaves(args)))
    report = lowered.comm_report()
    runs = {e.runs for e in report.entries}
    assert runs == ({1} if variant == "unrolled" else {1, 2})
    assert row["step_bytes"] >= row["body_once_bytes"] > 0


def test_readme_table_shows_before_and_after(tmp_path):
    row = {"variant": "unrolled", "devices": 4096, "lowering_s": 2.5, "comm_s": 0.75,
           "memory_s": 0.5, "total_s": 3.75, "step_bytes": 2 * 2**30,
           "body_once_bytes": 2**30, "net_bytes": 3 * 2**30}
    after = {"layers": 32, "dtype": "f32", "clock": "cpu", "load": 2.0, "rows": [row]}
    before = {"rows": [dict(row, lowering_s=4.0, comm_s=2.0, memory_s=3.0, total_s=9.0)]}
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- plan:start -->old<!-- plan:end -->\nrest\n")
    text = plan_speed.readme_table(after, before)
    assert "| unrolled | 4096 | 4.00 / 2.00 / 3.00 / 9.00 | 2.50 / 0.75 / 0.50 / 3.75 " \
           "| 2.00 (1.00) | 3.00 |" in text
    assert "cpu seconds, 32 layers, f32; load average 2.0" in text
    assert "before" not in plan_speed.readme_table(after)
    readme.write_text(plan_speed.splice(readme.read_text(), text, *plan_speed.README_MARKERS))
    assert readme.read_text().startswith("intro\n<!-- plan:start -->\ncpu seconds")
    assert readme.read_text().endswith("<!-- plan:end -->\nrest\n")


def test_plan_outputs_compares_dumps(tmp_path):
    """bench.plan_outputs: a program's answers, dumped twice, compare equal; a changed
    answer or a missing program is named."""
    from bench import plan_outputs

    first = plan_outputs.dump(["mlp_megatron"])
    assert first["mlp_megatron"]["cpu"]["comm"] and first["mlp_megatron"]["cpu"]["memory"]
    paths = []
    for name, results in (("a", first), ("b", plan_outputs.dump(["mlp_megatron"]))):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps({"root": str(plan_outputs.ROOT), "results": results}))
    assert plan_outputs.main(["compare", *map(str, paths)]) == 0
    changed = json.loads(json.dumps(first))
    changed["mlp_megatron"]["tpu"]["memory"]["temp_bytes"] += 1
    assert plan_outputs.compare(first, changed) == ["mlp_megatron"]
    assert plan_outputs.compare(first, {}) == ["mlp_megatron"]


def test_plan_outputs_reads_installed_packages_alike_under_any_environment(tmp_path):
    """A worktree whose environment is another checkout's (so its packages sit under that
    checkout's root, not its own) dumps the same answers: paths of installed packages read
    alike under any ``site-packages``, sources under either dump's own root alike."""
    from bench import plan_outputs

    def dumped(root: str, site: str) -> pathlib.Path:
        where = (f'loc("{site}/flax/linen/linear.py":287:8) then '
                 f'loc("{root}/bench/zoo/lm_linen.py":40:3)')
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps({"root": root, "results": {"lm": {"text": where}}}))
        return path

    main_dump = dumped("/work/main", "/work/main/.venv/lib/python3.11/site-packages")
    worktree_dump = dumped("/work/wt/x", "/work/main/.venv/lib/python3.11/site-packages")
    other_site = dumped("/work/wt/x", "/opt/env/lib/python3.11/site-packages")
    assert plan_outputs.load(str(main_dump)) == plan_outputs.load(str(worktree_dump))
    assert plan_outputs.load(str(main_dump)) == plan_outputs.load(str(other_site))
    assert "SITE/flax/linen/linear.py" in plan_outputs.load(str(main_dump))["lm"]["text"]
