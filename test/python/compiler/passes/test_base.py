"""Typed pass options: parsing, printing and error messages."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

import pytest

from shardc.compiler.passes.base import ModulePass, OptionError, format_value, option, parse_value


class Direction(enum.Enum):
    FORWARD = "forward"
    BACKWARD = "backward"


@dataclass(frozen=True)
class ToyPass(ModulePass):
    """Do nothing, with options of every supported type"""

    name: ClassVar[str] = "shardc-toy"

    flag: bool = option(False, help="a switch")
    count: int = option(3, help="a number")
    scale: float = option(1.5, help="a float")
    label: str = option("x", help="a string")
    direction: Direction = option(Direction.FORWARD, help="an enum")
    axes: tuple[str, ...] = option((), help="a list")
    limit: int | None = option(None, help="optional")


def test_option_infos_come_from_fields() -> None:
    infos = {info.flag: info for info in ToyPass.option_infos()}
    assert list(infos) == ["flag", "count", "scale", "label", "direction", "axes", "limit"]
    assert infos["count"].type_name == "int" and infos["count"].default == 3
    assert infos["direction"].type_name == "forward|backward"
    assert infos["axes"].type_name == "list<str>"
    assert infos["limit"].type_name == "int?"
    assert infos["flag"].help == "a switch"


def test_from_options_converts_types() -> None:
    toy = ToyPass.from_options(
        {"flag": "true", "count": "0x10", "scale": "2", "label": '"a b"',
         "direction": "backward", "axes": "x,y", "limit": "4"}
    )
    assert toy == ToyPass(True, 16, 2.0, "a b", Direction.BACKWARD, ("x", "y"), 4)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"flga": "1"}, "has no option 'flga'; did you mean 'flag'?"),
        ({"flag": "maybe"}, "invalid value 'maybe' for option 'flag'"),
        ({"count": "many"}, "invalid value 'many' for option 'count'"),
        ({"direction": "sideways"}, "expected one of forward, backward"),
    ],
)
def test_bad_options_raise(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("?", r"\?")):
        ToyPass.from_options(options)


def test_option_text_round_trips() -> None:
    toy = ToyPass(flag=True, label="a b", axes=("x", "y"))
    text = toy.option_text()
    assert text == '{flag=true label="a b" axes=x,y}'
    assert parse_value(bool, format_value(True)) is True
    assert parse_value(tuple[str, ...], format_value(("x", "y"))) == ("x", "y")


def test_summary_is_first_docstring_line() -> None:
    assert ToyPass.summary() == "Do nothing, with options of every supported type"
