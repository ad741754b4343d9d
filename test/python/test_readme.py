"""The README's tour prints what the README says it prints."""

import json
import os
import pathlib
import re
import subprocess
import sys

from bench import speed_readme

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_tour_output_is_current():
    text = README.read_text()
    tour = text.split("## A short tour", 1)[1]
    code = "".join(re.findall(r"```python\n(.*?)```", tour, re.S))
    outputs = re.findall(r"```(?:mlir|text)\n(.*?)```", tour, re.S)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    run = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert len(outputs) == 2
    for expected in outputs:
        assert expected.strip() in run.stdout


def test_command_line_example_is_current():
    text = README.read_text()
    block = re.search(r"```console\n\$ (shardc-opt [^\n]*)\n(.*?)```", text, re.S)
    command, expected = block.group(1), block.group(2)
    run = subprocess.run(command.split(), capture_output=True, text=True, timeout=120,
                         cwd=README.parent)
    assert run.returncode == 0, run.stderr
    assert run.stderr + run.stdout == expected


def test_speed_section_renders_the_benchmarks_rows(tmp_path):
    """``bench.speed_readme`` splices the three speed benchmarks' JSON between the
    README's speed markers, keeping the rest of the file."""
    lowering = {"clock": "wall", "geomean": 1.5, "rows": [
        {"name": "lm_linen", "jax": 0.16, "shardc": 0.30, "ratio": 1.875,
         "shardy_pipeline": 0.04, "reference_ratio": 1.25},
        {"name": "conflict_mlp", "jax": 0.01, "shardc": 0.012, "ratio": 1.2,
         "shardy_pipeline": 0.004, "reference_ratio": 1.4}]}
    process = {"layers": 512, "ops": 47000, "ours_wall_ms": 3000.0, "native_wall_ms": 4000.0,
               "wall_ratio": 0.75, "ours_cpu_ms": 2900.0, "native_cpu_ms": 3900.0,
               "cpu_ratio": 0.74, "ours_cpu_us_per_op": 60.0, "native_cpu_us_per_op": 80.0,
               "ours_peak_mib": 250.0, "native_peak_mib": 160.0, "peak_ratio": 1.56,
               "identical_output": True}
    propagation = {"rows": [{"layers": 512, "ops": 47000, "ours_ms": 2300.0,
                             "native_ms": 2500.0, "ratio": 0.92, "identical_output": True}],
                   "whole_process": [process]}
    cost_aware = {"geomean": 3.0, "rows": [
        {"name": "lm_linen", "shardy": 0.3, "cost-aware": 0.9, "ratio": 3.0}]}
    paths = []
    for name, data in (("l", lowering), ("p", propagation), ("c", cost_aware)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(data))
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{speed_readme.START}\nold\n{speed_readme.END}\nafter\n")
    speed_readme.main(["--lowering", str(paths[0]), "--propagation", str(paths[1]),
                       "--cost-aware", str(paths[2]), "--readme", str(readme)])
    text = readme.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old" not in text
    assert "| lm_linen | 160.0 | 300.0 | 1.88× | 40.0 | 1.25× |" in text
    assert "**geometric mean, zoo** | | | **1.88×** | | **1.25×** |" in text
    assert "**geometric mean, bench/models** | | | **1.20×** | | **1.40×** |" in text
    assert "| 512 | 47000 | 3000 / 4000 ms = 0.75× | 0.74× | 60 / 80 | 250 / 160 = 1.56× | yes |" \
        in text
    assert "| **geometric mean** | | | **3.00×** |" in text


def test_speed_section_keeps_the_propagation_tables_without_their_benchmark(tmp_path):
    """Without ``--propagation`` the section's propagation tables stay as they are, named
    with the run that measured them, also when the section is rewritten again; each
    table says the clock and load its JSON records."""
    lowering = {"clock": "cpu", "load_average": 17.5, "geomean": 1.2, "rows": [
        {"name": "lm_linen", "jax": 0.16, "shardc": 0.2, "ratio": 1.25,
         "shardy_pipeline": 0.04, "reference_ratio": 1.25}]}
    cost_aware = {"clock": "cpu", "load_average": 18.25, "geomean": 2.0, "rows": [
        {"name": "lm_linen", "shardy": 0.3, "cost-aware": 0.6, "ratio": 2.0}]}
    paths = []
    for name, data in (("l", lowering), ("c", cost_aware)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(data))
    tables = (f"{speed_readme.PROPAGATION_TITLE} (in process):\n\n| layers |\n|---:|\n| 4 |\n\n"
              "As whole processes:\n\n| layers |\n|---:|\n| 0 |\n\n")
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{speed_readme.START}\nMeasured side by side in one run each "
                      f"(shardc abc1234; x86_64; 2026-11-27 03:34 UTC):\n\n{tables}"
                      f"{speed_readme.COST_AWARE_TITLE} (old):\n{speed_readme.END}\nafter\n")
    arguments = ["--lowering", str(paths[0]), "--cost-aware", str(paths[1]),
                 "--readme", str(readme)]
    speed_readme.main(arguments)
    speed_readme.main(arguments)
    text = readme.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "(old)" not in text
    assert ("The propagation tables are those of an earlier run "
            "(shardc abc1234; x86_64; 2026-11-27 03:34 UTC):") in text
    assert text.count(speed_readme.PROPAGATION_TITLE) == 1
    assert tables.strip() in text
    assert "(median cpu time, load average 17.5, `python -m bench.lowering --models`)" in text
    assert "(both shardc; median ms, cpu time; load average 18.2, " in text
    assert "| lm_linen | 300.0 | 600.0 | 2.00× |" in text
