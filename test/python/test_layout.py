"""Packaging guards: the wheel must contain every package the source tree has."""

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
