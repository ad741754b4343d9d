"""lit configuration of shardc's FileCheck tests (test/lit).

RUN lines call the installed ``shardc-opt`` console script and ``filecheck``
(the PyPI FileCheck) from PATH. ``PYTHONSAFEPATH=1`` keeps the working directory
off Python's module search path so a bare ``compiler`` package can never shadow
``shardc.compiler``.
"""

import os
import shutil

import lit.formats

config.name = "shardc"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir"]
config.excludes = ["Output"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")

config.environment["PATH"] = os.environ.get("PATH", "")
config.environment["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
config.environment["PYTHONSAFEPATH"] = "1"
# Verify the module after every step inside shardc's passes, not only after each pass.
config.environment["SHARDC_VERIFY_STEPS"] = "1"
for name in ("HOME", "PYENV_ROOT", "PYENV_VERSION", "VIRTUAL_ENV", "LANG", "LC_ALL"):
    if name in os.environ:
        config.environment[name] = os.environ[name]

for tool in ("shardc-opt", "filecheck"):
    if shutil.which(tool) is None:
        lit_config.fatal(f"'{tool}' not found on PATH; run `pip install -e .[test]`")

config.substitutions.append(("%python", shutil.which("python3") or "python3"))

# A stuck parser or pass must not hang the whole suite (lit needs psutil for it,
# which the test extra installs).
config.maxIndividualTestTime = 60
