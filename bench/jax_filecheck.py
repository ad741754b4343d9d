"""JAX's FileCheck tests (``tests/filecheck/*.filecheck.py``) through shardc.

Each file prints the modules of the functions it jits (``jit(f).lower(...)
.compiler_ir()``, module names, subcomputations, custom calls), checked by
FileCheck against the file's ``CHECK`` lines. Each runs twice, in a fresh process
each time: with ``jax.jit`` as it is, and with the ``jax`` the file and its helper
import being jax with ``jit`` routed to ``shardc.compiler.jit`` (jax itself, and
shardc, which traces with ``jax.jit``, keep jax's). A file counts when it passes as
it is; it passes through shardc when FileCheck accepts what it prints then.

    python -m bench.jax_filecheck ../jax/tests/filecheck [--filecheck PATH]
"""

from __future__ import annotations

import argparse
import builtins
import importlib.util
import pathlib
import shutil
import subprocess
import sys
import types

MODES = ("jax", "shardc")


def run_file(mode: str, path: str) -> None:
    """Run one filecheck file in this process, ``jax.jit`` routed as ``mode`` says."""
    import jax

    # The files import their helper as ``jax.tests.filecheck.jax_filecheck_helpers``
    # (the tests directory is not part of jax's wheel).
    helper = pathlib.Path(path).with_name("jax_filecheck_helpers.py")
    spec = importlib.util.spec_from_file_location(
        "jax.tests.filecheck.jax_filecheck_helpers", helper)
    module = importlib.util.module_from_spec(spec)
    for name in ("jax.tests", "jax.tests.filecheck"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    namespace = {"__name__": "__main__", "__file__": path}
    if mode == "shardc":
        routed = _routed_jax(jax)
        module.jax = routed

        def routed_import(name, globals=None, locals=None, fromlist=(), level=0):
            imported = builtins.__import__(name, globals, locals, fromlist, level)
            return routed if imported is jax else imported

        namespace["__builtins__"] = {**vars(builtins), "__import__": routed_import}
    sys.argv = [path]
    source = pathlib.Path(path).read_text()
    exec(compile(source, path, "exec"), namespace)


def _routed_jax(jax: types.ModuleType) -> types.ModuleType:
    """jax, but for ``jit``: shardc's."""
    from shardc.compiler import jit

    class Routed(types.ModuleType):
        def __getattr__(self, name: str):
            return getattr(jax, name)

    routed = Routed("jax")
    routed.jit = jit
    return routed


def check(mode: str, path: pathlib.Path, filecheck: str) -> bool:
    printed = subprocess.run(
        [sys.executable, "-m", "bench.jax_filecheck", "--run", mode, str(path)],
        capture_output=True, text=True, check=False)
    if printed.returncode != 0:
        return False
    checked = subprocess.run([filecheck, str(path)], input=printed.stdout,
                             capture_output=True, text=True, check=False)
    return checked.returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", nargs="?", help="jax's tests/filecheck")
    ap.add_argument("--filecheck", default=shutil.which("filecheck") or shutil.which("FileCheck"))
    ap.add_argument("--run", nargs=2, metavar=("MODE", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        run_file(*args.run)
        return
    if args.directory is None or args.filecheck is None:
        ap.error("give jax's tests/filecheck directory and a FileCheck (--filecheck)")
    files = sorted(pathlib.Path(args.directory).glob("*.filecheck.py"))
    counted = passed = 0
    print(f"{'file':<36} {'unmodified':>10} {'shardc':>7}")
    for path in files:
        results = {mode: check(mode, path, args.filecheck) for mode in MODES}
        counted += results["jax"]
        passed += results["jax"] and results["shardc"]
        print(f"{path.name:<36} {'pass' if results['jax'] else 'FAIL':>10} "
              f"{'pass' if results['shardc'] else 'FAIL':>7}")
    print(f"{passed} of {counted} files that pass unmodified pass through shardc")


if __name__ == "__main__":
    main()
