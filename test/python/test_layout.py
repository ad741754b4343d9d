"""Packaging guards: the wheel must contain every package the source tree has."""

import ast
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOP_LEVEL = {"compiler", "dialects", "runtime", "tools"}


def declared():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(config["packages"]), config["package-dir"]


def test_every_package_directory_is_listed_in_pyproject():
    packages, package_dir = declared()
    assert {f"shardc.{name}": name for name in TOP_LEVEL} == package_dir
    on_disk = {
        "shardc." + ".".join(init.parent.relative_to(ROOT).parts)
        for top in TOP_LEVEL
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk == packages, "add missing subpackages to [tool.setuptools] packages"


def test_tests_are_not_a_package():
    # An __init__.py under test/ would shadow the standard library's `test` package.
    assert not list((ROOT / "test").rglob("__init__.py"))


# The layers of the source tree, top to bottom: a module imports only from its own
# unit or from units in lower layers (units sharing a layer do not import each other).
LAYERS = (
    ("tools",),
    ("compiler",),  # the top-level modules: jit, its stages and options
    ("compiler.passes",),
    ("compiler.pipelines",),
    ("compiler.cost_aware", "compiler.checks", "compiler.explain"),
    ("compiler.cost", "compiler.stages", "compiler.export"),
    ("compiler.propagation",),
    ("compiler.sharding",),
    ("compiler.diagnostics", "runtime"),
    ("dialects",),
)
LAYER = {unit: depth for depth, units in enumerate(LAYERS) for unit in units}


def _unit(module: str) -> str:
    """The layering unit of a dotted ``shardc.*`` module name."""
    parts = module.split(".")[1:]
    if parts[0] == "compiler" and len(parts) > 1 and f"compiler.{parts[1]}" in LAYER:
        return f"compiler.{parts[1]}"
    return parts[0]


def _imports(path: pathlib.Path) -> set[str]:
    """The ``shardc`` modules a source file imports (submodules named by ``from``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("shardc."):
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("shardc.")}
    return found


def test_dependencies_run_one_way():
    wrong = []
    for top in TOP_LEVEL:
        for path in (ROOT / top).rglob("*.py"):
            module = "shardc." + ".".join(path.relative_to(ROOT).with_suffix("").parts)
            source = _unit(module)
            for target in map(_unit, _imports(path)):
                if target != source and LAYER[target] <= LAYER[source]:
                    wrong.append(f"{path.relative_to(ROOT)} ({source}) imports {target}")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_compiler_top_level_holds_at_most_nine_modules():
    modules = [p.name for p in (ROOT / "compiler").glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= 9, sorted(modules)
