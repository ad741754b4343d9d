"""Pass pipelines: MLIR pipeline text <-> pass specs, and one PassManager to run them.

``parse_pipeline("builtin.module(a,b{k=v})")`` gives ``PassSpec``s; ``build``
resolves every spec against ``ALL_PASSES`` (names and aliases, so
``sdy-lift-inlined-meshes`` means our pass) or, failing that, against the
generic upstream passes jaxlib registers (``canonicalize``, ``cse``, ...), and
puts all of them into one ``PassManager("builtin.module")``. Shardy's native
``sdy-*`` passes are never run by product code: they serve tests as an oracle.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from jaxlib.mlir import ir, passmanager

from shardc.compiler.passes import PASSES_BY_NAME
from shardc.compiler.passes.base import ModulePass, OptionError
from shardc.dialects import make_context

ANCHOR = "builtin.module"

# Native passes of other projects (Shardy, StableHLO, XLA) that jaxlib links:
# product pipelines must not reach them, only the generic MLIR ones.
_FOREIGN_PREFIXES = ("sdy-", "stablehlo-", "chlo-", "shlo-", "mhlo-", "xla-", "hlo-", "jax-")

# Suggested in "did you mean" messages next to our own pass names.
GENERIC_PASSES = ("canonicalize", "cse", "inline", "symbol-dce", "symbol-privatize", "sccp")

# Options of generic passes whose values are pipelines: MLIR parses them only
# when the pass is created, prints an error and runs the pass anyway.
_PIPELINE_OPTIONS = {"inline": ("default-pipeline",)}

_NAME = re.compile(r"[A-Za-z_][\w.\-]*")


class PipelineError(ValueError):
    """Pipeline text that does not parse, or names a pass nobody provides."""


@dataclass(frozen=True)
class PassSpec:
    """One pipeline element: a pass name, its textual options, or a nested pipeline."""

    name: str
    options: tuple[tuple[str, str], ...] = ()
    nested: tuple[PassSpec, ...] | None = None

    def __str__(self) -> str:
        if self.nested is not None:
            return f"{self.name}({','.join(str(s) for s in self.nested)})"
        if not self.options:
            return self.name
        return self.name + "{" + " ".join(f"{k}={v}" for k, v in self.options) + "}"


def format_pipeline(specs: Sequence[PassSpec]) -> str:
    """Print specs as an anchored MLIR pipeline (the reproducer form)."""
    return f"{ANCHOR}({','.join(str(s) for s in specs)})"


def parse_pipeline(text: str) -> tuple[PassSpec, ...]:
    """Parse ``builtin.module(a,b{k=v})`` (or a bare ``a,b{k=v}`` list) into specs."""
    parser = _Parser(text)
    specs = parser.elements()
    parser.expect_end()
    if len(specs) == 1 and specs[0].name == ANCHOR and specs[0].nested is not None:
        return specs[0].nested
    if any(s.nested is not None and s.name == ANCHOR for s in specs):
        raise PipelineError(f"'{ANCHOR}(...)' must be the whole pipeline")
    return specs


def parse_options(text: str) -> tuple[tuple[str, str], ...]:
    """Parse the inside of ``{...}`` (or a flag's ``='k=v k2=v2'``) into pairs."""
    parser = _Parser(text)
    pairs = parser.option_pairs(closing=None)
    parser.expect_end()
    return pairs


class _Parser:
    """A small recursive-descent parser for MLIR's textual pipeline syntax."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def _fail(self, message: str) -> PipelineError:
        return PipelineError(f"{message} at position {self.pos} of pipeline '{self.text}'")

    def expect_end(self) -> None:
        self._skip()
        if self.pos != len(self.text):
            raise self._fail(f"unexpected '{self.text[self.pos]}'")

    def elements(self) -> tuple[PassSpec, ...]:
        specs = [self.element()]
        self._skip()
        while self.text.startswith(",", self.pos):
            self.pos += 1
            specs.append(self.element())
            self._skip()
        return tuple(specs)

    def element(self) -> PassSpec:
        self._skip()
        match = _NAME.match(self.text, self.pos)
        if match is None:
            raise self._fail("expected a pass name")
        self.pos = match.end()
        self._skip()
        if self.text.startswith("(", self.pos):
            self.pos += 1
            self._skip()
            nested = () if self.text.startswith(")", self.pos) else self.elements()
            self._skip()
            if not self.text.startswith(")", self.pos):
                raise self._fail("expected ')'")
            self.pos += 1
            return PassSpec(match.group(), nested=nested)
        if self.text.startswith("{", self.pos):
            self.pos += 1
            return PassSpec(match.group(), self.option_pairs(closing="}"))
        return PassSpec(match.group())

    def option_pairs(self, closing: str | None) -> tuple[tuple[str, str], ...]:
        pairs = []
        while True:
            self._skip()
            if self.pos == len(self.text):
                if closing is not None:
                    raise self._fail(f"expected '{closing}'")
                return tuple(pairs)
            if closing is not None and self.text.startswith(closing, self.pos):
                self.pos += 1
                return tuple(pairs)
            match = re.compile(r"[\w\-.]+").match(self.text, self.pos)
            if match is None:
                raise self._fail("expected an option name")
            self.pos = match.end()
            value = "true"
            if self.text.startswith("=", self.pos):
                self.pos += 1
                value = self.value()
            pairs.append((match.group(), value))

    def value(self) -> str:
        start, depth = self.pos, 0
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in "\"'":
                end = self.text.find(ch, self.pos + 1)
                if end < 0:
                    raise self._fail("unterminated string")
                self.pos = end + 1
                continue
            if ch == "{":
                depth += 1
            elif ch == "}":
                if depth == 0:
                    break
                depth -= 1
            elif ch.isspace() and depth == 0:
                break
            self.pos += 1
        return self.text[start : self.pos]


def resolve(spec: PassSpec) -> ModulePass | str:
    """Return our pass instance for a spec, or the native pipeline text it stands for."""
    pass_class = PASSES_BY_NAME.get(spec.name)
    if pass_class is not None:
        if spec.nested is not None:
            raise PipelineError(f"'{spec.name}' is a pass, not an op anchor")
        try:
            return pass_class.from_options(dict(spec.options))
        except OptionError as error:
            raise PipelineError(str(error)) from None
    if spec.nested is not None:
        for inner in spec.nested:
            if isinstance(resolve(inner), ModulePass):
                raise PipelineError(f"shardc pass '{inner.name}' runs on '{ANCHOR}' only")
        return str(spec)
    if not is_native_pass(str(spec)):
        if spec.options and is_native_pass(spec.name):
            options = " ".join(f"{k}={v}" for k, v in spec.options)
            raise PipelineError(
                f"invalid options '{options}' for pass '{spec.name}': MLIR's pass options "
                "parser rejects them")
        raise PipelineError(unknown_pass_message(spec.name))
    for key, value in spec.options:
        if key in _PIPELINE_OPTIONS.get(spec.name, ()) and not is_native_pass(value):
            raise PipelineError(
                f"invalid value '{value}' for option '{key}' of pass '{spec.name}': "
                "expected a pipeline of known passes")
    if spec.name.startswith(_FOREIGN_PREFIXES):
        raise PipelineError(unknown_pass_message(spec.name, native_rejected=True))
    return str(spec)


@functools.lru_cache(maxsize=256)
def is_native_pass(element: str) -> bool:
    """Whether MLIR's own pipeline parser accepts ``element`` (name plus options)."""
    # jaxlib registers its upstream passes while it sets up the dialect registry.
    try:
        with make_context():
            passmanager.PassManager.parse(f"{ANCHOR}({element})")
    except (ValueError, ir.MLIRError):
        return False
    return True


def unknown_pass_message(name: str, *, native_rejected: bool = False) -> str:
    """Explain an unknown pass name, listing close matches among the usable passes."""
    known = sorted(PASSES_BY_NAME) + list(GENERIC_PASSES)
    if native_rejected:
        message = (
            f"pass '{name}' is a native pass of another project; shardc pipelines may "
            "only use shardc passes and generic MLIR passes"
        )
    else:
        message = f"unknown pass '{name}'"
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    if close:
        message += "; did you mean " + ", ".join(f"'{c}'" for c in close) + "?"
    else:
        message += f"; {LIST_PASSES_HINT}"
    return message


LIST_PASSES_HINT = "'shardc-opt --list-passes' lists the passes"


@dataclass(frozen=True)
class BuildOptions:
    """Instrumentation switches of a PassManager (mlir-opt's -mlir-* flags)."""

    timing: bool = False
    print_ir_after_all: bool = False
    print_debuginfo: bool = False
    verify_each: bool = True


def build(
    specs: Sequence[PassSpec], options: BuildOptions = BuildOptions()
) -> passmanager.PassManager:
    """Put every spec into one PassManager on builtin.module (needs an active context)."""
    elements = [resolve(spec) for spec in specs]
    pm = passmanager.PassManager(ANCHOR)
    for element in elements:
        if isinstance(element, ModulePass):
            pm.add(
                element.run_op,
                name=type(element).__name__,
                argument=element.name,
                description=element.summary(),
                op_name="",  # "builtin.module" here fails to schedule in jaxlib 0.10.2
            )
        else:
            pm.add(element)
    pm.enable_verifier(options.verify_each)
    if options.timing:
        pm.enable_timing()
    if options.print_ir_after_all:
        pm.enable_ir_printing(
            print_after_all=True, enable_debug_info=options.print_debuginfo
        )
    return pm

