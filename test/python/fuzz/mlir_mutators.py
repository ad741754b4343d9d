"""Seeded mutations of MLIR text, from byte noise to structure-aware edits.

Each mutator takes a ``random.Random`` and the input bytes and returns new
bytes; all randomness comes from the ``Random`` passed in, so a case is
reproduced from its seed alone. The structure-aware mutators aim at the
parts of the input shardc itself interprets (sharding attributes, meshes,
tensor shapes, nesting depth), where a bug is more likely than in MLIR's
own, heavily fuzzed, lexer.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

Mutator = Callable[[random.Random, bytes], bytes]

_SHARDING = re.compile(rb"<@[\w$.]+, \[[^\]]*\](?:, replicated=\{[^}]*\})?>")
_ATTR_ENTRY = re.compile(rb"\b[\w.]+ = (?:#[\w.]+<[^>{}]*>|\d+ : i\d+|\"[^\"]*\"|dense<[^>]*>)")
_MESH_AXES = re.compile(rb'"(\w+)"=(\d+)')
_TENSOR_DIMS = re.compile(rb"tensor<((?:\d+x)+)")
_NUMBER = re.compile(rb"\b\d+\b")
_AXIS_NAMES = (b"a", b"b", b"c", b"x", b"y", b"z", b"nope", b"")
_MESH_NAMES = (b"mesh", b"mesh_0", b"m", b"empty_mesh", b"nope", b"maximal_mesh_0")
_HUGE_NUMBERS = (
    b"0", b"1", b"3", b"2147483647", b"2147483648", b"4294967296",
    b"9223372036854775807", b"9223372036854775808", b"18446744073709551616",
    b"99999999999999999999999999999", b"-1",
)


def byte_flips(rng: random.Random, data: bytes) -> bytes:
    """Flip, replace or delete a handful of random bytes."""
    if not data:
        return bytes([rng.randrange(256)])
    buffer = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if not buffer:
            break
        position = rng.randrange(len(buffer))
        action = rng.random()
        if action < 0.4:
            buffer[position] ^= 1 << rng.randrange(8)
        elif action < 0.8:
            buffer[position] = rng.choice(b'{}[]()<>"@%#?:,=x0123456789\n\x00\xff')
        else:
            del buffer[position]
    return bytes(buffer)


def truncate(rng: random.Random, data: bytes) -> bytes:
    """Cut the input at a random offset (an unfinished op, string or region)."""
    return data[: rng.randrange(len(data) + 1)]


def shuffle_lines(rng: random.Random, data: bytes) -> bytes:
    """Shuffle a window of lines (uses before definitions, misplaced terminators)."""
    lines = data.split(b"\n")
    if len(lines) < 2:
        return data
    start = rng.randrange(len(lines) - 1)
    stop = min(len(lines), start + rng.randint(2, 8))
    window = lines[start:stop]
    rng.shuffle(window)
    lines[start:stop] = window
    return b"\n".join(lines)


def duplicate_or_drop_line(rng: random.Random, data: bytes) -> bytes:
    """Repeat one line (redefinitions) or drop one (missing values, symbols)."""
    lines = data.split(b"\n")
    index = rng.randrange(len(lines))
    if rng.random() < 0.5:
        lines.insert(index, lines[index])
    else:
        del lines[index]
    return b"\n".join(lines)


def _swap_spans(rng: random.Random, data: bytes, spans: Sequence[tuple[int, int]]) -> bytes:
    if len(spans) < 2:
        return data
    first, second = sorted(rng.sample(list(spans), 2))
    if first[1] > second[0]:
        return data
    return (
        data[: first[0]] + data[second[0] : second[1]] + data[first[1] : second[0]]
        + data[first[0] : first[1]] + data[second[1] :]
    )


def swap_attributes(rng: random.Random, data: bytes) -> bytes:
    """Swap two attribute entries or two shardings (wrong rank, wrong mesh, wrong place)."""
    pattern = _SHARDING if rng.random() < 0.5 else _ATTR_ENTRY
    spans = [match.span() for match in pattern.finditer(data)]
    return _swap_spans(rng, data, spans)


def random_axis_ref(rng: random.Random) -> bytes:
    """An axis reference: a name, maybe bogus, maybe a sub-axis ``"x":(pre)size``."""
    name = b'"' + rng.choice(_AXIS_NAMES) + b'"'
    if rng.random() < 0.2:
        pre, size = rng.choice([(1, 2), (2, 2), (1, 4), (4, 2), (0, 2), (1, 1), (3, 5)])
        name += b":(%d)%d" % (pre, size)
    return name


def random_dimension(rng: random.Random) -> bytes:
    """One dimension sharding: ``{"x", "y", ?}p1`` with random parts."""
    axes = [random_axis_ref(rng) for _ in range(rng.choice([0, 0, 1, 1, 2, 3]))]
    if rng.random() < 0.3:
        axes.append(b"?")
    text = b"{" + b", ".join(axes) + b"}"
    if rng.random() < 0.15:
        text += b"p%d" % rng.choice([0, 1, 2, 99, 2**40])
    return text


def random_sharding_body(rng: random.Random) -> bytes:
    """The inside of ``#sdy.sharding<...>``: a mesh, dimensions, maybe replicated axes."""
    mesh = b"@" + rng.choice(_MESH_NAMES)
    if rng.random() < 0.1:
        mesh = b'mesh<["x"=2, "y"=4]>'
    dims = b", ".join(random_dimension(rng) for _ in range(rng.choice([0, 1, 2, 2, 3, 5])))
    text = mesh + b", [" + dims + b"]"
    if rng.random() < 0.15:
        text += b", replicated={" + b", ".join(
            random_axis_ref(rng) for _ in range(rng.randint(1, 2))) + b"}"
    return b"<" + text + b">"


def random_sharding(rng: random.Random, data: bytes) -> bytes:
    """Replace an existing sharding by a random one, or attach one to a function argument."""
    matches = list(_SHARDING.finditer(data))
    if matches and rng.random() < 0.8:
        match = rng.choice(matches)
        return data[: match.start()] + random_sharding_body(rng) + data[match.end() :]
    arguments = list(re.finditer(rb"%arg\d+: tensor<[^>]*>", data))
    if not arguments:
        return data
    match = rng.choice(arguments)
    attr = b" {sdy.sharding = #sdy.sharding" + random_sharding_body(rng) + b"}"
    return data[: match.end()] + attr + data[match.end() :]


def random_mesh(rng: random.Random, data: bytes) -> bytes:
    """Change a mesh axis: a size of 0, 1, odd or huge, or a renamed/duplicated axis."""
    matches = list(_MESH_AXES.finditer(data))
    if not matches:
        return data
    match = rng.choice(matches)
    if rng.random() < 0.5:
        start, stop = match.span(2)
        return data[:start] + rng.choice(_HUGE_NUMBERS) + data[stop:]
    start, stop = match.span(1)
    return data[:start] + rng.choice(_AXIS_NAMES) + data[stop:]


def huge_dims(rng: random.Random, data: bytes) -> bytes:
    """Give a tensor dimension (or any number) an extreme value: 0, 2**31, 2**64, ..."""
    matches = list(_TENSOR_DIMS.finditer(data))
    if matches and rng.random() < 0.8:
        match = rng.choice(matches)
        dims = match.group(1).split(b"x")[:-1]
        dims[rng.randrange(len(dims))] = rng.choice(_HUGE_NUMBERS)
        replacement = b"tensor<" + b"x".join(dims) + b"x"
        return data[: match.start()] + replacement + data[match.end() :]
    numbers = list(_NUMBER.finditer(data))
    if not numbers:
        return data
    match = rng.choice(numbers)
    return data[: match.start()] + rng.choice(_HUGE_NUMBERS) + data[match.end() :]


def deep_nesting(rng: random.Random, data: bytes) -> bytes:
    """Insert deeply nested brackets, types or regions (around the parser's depth limit)."""
    depth = rng.choice([10, 100, 999, 1000, 1001, 3000])
    kind = rng.randrange(4)
    if kind == 0:
        nested = b"[" * depth + b"1" + b"]" * depth
        insert = b"  %nest = arith.constant {deep = " + nested + b"} 0 : i32\n"
    elif kind == 1:
        insert = b"!t = " + b"tuple<" * depth + b"i32" + b">" * depth + b"\n"
    elif kind == 2:
        insert = b'"test.op"() ({\n' * depth + b"}) : () -> ()\n" * depth
    else:
        insert = b"(" * depth  # unbalanced: must be refused, not crash
    lines = data.split(b"\n")
    index = rng.randrange(len(lines) + 1)
    return b"\n".join(lines[:index]) + b"\n" + insert + b"\n".join(lines[index:])


def splice(rng: random.Random, data: bytes, donor: bytes) -> bytes:
    """Insert a random run of lines from another seed (foreign ops, symbols, meshes)."""
    donor_lines = donor.split(b"\n")
    start = rng.randrange(len(donor_lines))
    piece = donor_lines[start : start + rng.randint(1, 6)]
    lines = data.split(b"\n")
    index = rng.randrange(len(lines) + 1)
    return b"\n".join(lines[:index] + piece + lines[index:])


MUTATORS: dict[str, Mutator] = {
    "byte_flips": byte_flips,
    "truncate": truncate,
    "shuffle_lines": shuffle_lines,
    "duplicate_or_drop_line": duplicate_or_drop_line,
    "swap_attributes": swap_attributes,
    "random_sharding": random_sharding,
    "random_mesh": random_mesh,
    "huge_dims": huge_dims,
    "deep_nesting": deep_nesting,
}
# Structure-aware mutators are drawn more often than byte noise.
MUTATOR_WEIGHTS: dict[str, int] = {
    "byte_flips": 2, "truncate": 1, "shuffle_lines": 1, "duplicate_or_drop_line": 1,
    "swap_attributes": 2, "random_sharding": 4, "random_mesh": 2, "huge_dims": 2,
    "deep_nesting": 1,
}
SPLICE_WEIGHT = 1


def mutate(rng: random.Random, data: bytes, donors: Sequence[bytes]) -> tuple[bytes, list[str]]:
    """Apply one to three weighted random mutations; return the bytes and their names."""
    names = [*MUTATORS, "splice"]
    weights = [*(MUTATOR_WEIGHTS[n] for n in MUTATORS), SPLICE_WEIGHT]
    applied = []
    for name in rng.choices(names, weights, k=rng.choice([1, 1, 1, 2, 3])):
        if name == "splice":
            data = splice(rng, data, rng.choice(donors))
        else:
            data = MUTATORS[name](rng, data)
        applied.append(name)
    return data, applied
