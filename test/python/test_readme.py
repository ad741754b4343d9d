"""The README's tour prints what the README says it prints."""

import os
import pathlib
import re
import subprocess
import sys

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
