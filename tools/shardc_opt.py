"""``shardc-opt``: the mlir-opt of shardc (command-line parsing only).

Pass flags (``-shardc-drop-shardings``, ``--cse``, ``-sdy-lift-inlined-meshes='k=v'``)
are generated from the pass registry and keep their command-line order; the
work itself happens in ``shardc.tools.opt_driver``. This module never imports
jax. Bad input never ends in a traceback: errors are printed as diagnostics.
"""

from __future__ import annotations

import argparse
import difflib
import io
import os
import sys
from collections.abc import Sequence

from shardc.compiler.passes import ALL_PASSES, PASSES_BY_NAME
from shardc.compiler.passes.base import format_value
from shardc.tools import opt_driver, pass_pipeline

PROG = "shardc-opt"
VERSION = "0.1.0"
STDIN_NAME = "<stdin>"
_VALUE_FLAGS = ("pass-pipeline", "o")
_SWITCHES = (
    "split-input-file",
    "verify-diagnostics",
    "list-passes",
    "help",
    "version",
    "mlir-print-debuginfo",
    "mlir-timing",
    "mlir-print-ir-after-all",
    "allow-unregistered-dialect",
    "comm-report",
    "explain",
    "strict",
)


class UsageError(Exception):
    """A command line shardc-opt cannot act on."""


def pass_flags_help() -> str:
    """Per-pass flags with their one-line summaries, generated from ALL_PASSES."""
    lines = ["pass flags (in command-line order, options as -NAME='opt=value ...'):"]
    for pass_class in ALL_PASSES:
        for name in (pass_class.name, *pass_class.aliases):
            suffix = "" if name == pass_class.name else f" (alias of {pass_class.name})"
            lines.append(f"  --{name:<30} {pass_class.summary()}{suffix}")
    generic = ", ".join(f"--{n}" for n in pass_pipeline.GENERIC_PASSES)
    lines.append(f"  generic MLIR passes are accepted too: {generic}, ...")
    return "\n".join(lines)


def list_passes() -> str:
    """The ``--list-passes`` text: names, aliases, summaries and typed options."""
    lines = []
    for pass_class in ALL_PASSES:
        lines.append(f"{pass_class.name}: {pass_class.summary()}")
        if pass_class.aliases:
            lines.append(f"    aliases: {', '.join(pass_class.aliases)}")
        for info in pass_class.option_infos():
            default = pipeline_value(info.default)
            lines.append(f"    {info.flag}: {info.type_name} = {default}  -- {info.help}")
    lines.append("generic MLIR passes: " + ", ".join(pass_pipeline.GENERIC_PASSES))
    return "\n".join(lines) + "\n"


def pipeline_value(value: object) -> str:
    """Print an option default as it would be written in a pipeline."""
    return format_value(value)


def make_parser() -> argparse.ArgumentParser:
    """The argparse parser for everything except the per-pass flags."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run shardc and generic MLIR passes over MLIR (StableHLO + Shardy) files.",
        epilog=pass_flags_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
        add_help=False,
    )
    parser.add_argument("input", nargs="?", default="-", help="input file, '-' for stdin")
    parser.add_argument("-o", dest="output", default="-", help="output file (default stdout)")
    parser.add_argument("--pass-pipeline", help="MLIR pipeline, e.g. 'builtin.module(a,b{k=v})'")
    parser.add_argument("--split-input-file", action="store_true", help="split on '// -----'")
    parser.add_argument("--verify-diagnostics", action="store_true",
                        help="check diagnostics against expected-* comments")
    parser.add_argument("--list-passes", action="store_true", help="list passes and options")
    parser.add_argument("--help", "-h", action="help", help="show this help and exit")
    parser.add_argument("--version", action="version", version=f"{PROG} {VERSION}")
    parser.add_argument("--mlir-print-debuginfo", action="store_true", help="print locations")
    parser.add_argument("--mlir-timing", action="store_true", help="report per-pass timing")
    parser.add_argument("--mlir-print-ir-after-all", action="store_true",
                        help="print the IR after every pass (to stderr)")
    parser.add_argument("--allow-unregistered-dialect", action="store_true",
                        help="accept operations of unregistered dialects")
    parser.add_argument("--comm-report", action="store_true",
                        help="after the passes, append the predicted collectives as // comments")
    parser.add_argument("--explain", action="store_true",
                        help="after the passes, append the explain table (per value: sharding, "
                             "shard bytes, origin, collectives) as // comments")
    parser.add_argument("--strict", action="store_true",
                        help="after the passes, report padding, ops without a sharding rule "
                             "and implicit reshards as errors")
    return parser


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[pass_pipeline.PassSpec]]:
    """Separate pass flags (kept in order) from the other arguments (normalised to --x)."""
    rest: list[str] = []
    specs: list[pass_pipeline.PassSpec] = []
    for arg in argv:
        if not arg.startswith("-") or arg in ("-", "--", "-o", "-h"):
            rest.append(arg)
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if name in _SWITCHES or name in _VALUE_FLAGS:
            rest.append(f"--{name}{eq}{value}")
        elif name in PASSES_BY_NAME or (
            not name.startswith("sdy-") and pass_pipeline.is_native_pass(name)
        ):
            options = pass_pipeline.parse_options(_unquote(value)) if eq else ()
            specs.append(pass_pipeline.PassSpec(name, options))
        elif name.startswith(("sdy-", "shardc-")):
            specs.append(pass_pipeline.PassSpec(name))  # resolve() explains what is wrong
        else:
            known = [*_SWITCHES, *_VALUE_FLAGS, *PASSES_BY_NAME, *pass_pipeline.GENERIC_PASSES]
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            hint = ("; did you mean " + ", ".join(f"'--{c}'" for c in close) + "?" if close
                    else f"; {pass_pipeline.LIST_PASSES_HINT} and '--help' the options")
            raise UsageError(f"unknown pass or option '{arg}'{hint}")
    return rest, specs


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _run(argv: Sequence[str]) -> int:
    rest, specs = split_argv(argv)
    args = make_parser().parse_args(rest)
    # A closed standard stream is None in Python, not a stream that fails.
    if sys.stdout is None and (args.list_passes or args.output == "-"):
        raise UsageError("could not write to standard output: it is closed (pass -o FILE)")
    if args.list_passes:
        sys.stdout.write(list_passes())
        return 0
    if args.pass_pipeline is not None:
        if specs:
            raise UsageError("'--pass-pipeline' cannot be combined with individual pass flags")
        specs = list(pass_pipeline.parse_pipeline(args.pass_pipeline))
    config = opt_driver.OptConfig(
        specs=tuple(specs),
        split_input_file=args.split_input_file,
        verify_diagnostics=args.verify_diagnostics,
        print_debuginfo=args.mlir_print_debuginfo,
        timing=args.mlir_timing,
        print_ir_after_all=args.mlir_print_ir_after_all,
        allow_unregistered_dialect=args.allow_unregistered_dialect,
        comm_report=args.comm_report,
        explain=args.explain,
        strict=args.strict,
    )
    try:
        if args.input == "-":
            if sys.stdin is None:
                raise UsageError("could not read standard input: it is closed")
            data, name = sys.stdin.buffer.read(), STDIN_NAME
        else:
            with open(args.input, "rb") as handle:
                data, name = handle.read(), args.input
    except OSError as error:
        raise UsageError(f"could not open input file '{args.input}': {error.strerror}") from None
    to_file = args.output != "-"
    output = io.StringIO() if to_file else sys.stdout
    ok = opt_driver.run_opt(data, name, config, output, sys.stderr)
    # Decided by the flag, not by the stream's type: under a redirected stdout
    # (in-process callers) sys.stdout is a StringIO too.
    if ok and to_file:
        # Like mlir-opt, an output file is only kept when everything succeeded.
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(output.getvalue())
        except OSError as error:
            raise UsageError(f"could not open output file '{args.output}': {error.strerror}")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``shardc-opt`` console script; returns the exit status."""
    if sys.stderr is None:  # closed: diagnostics go nowhere, the exit status still tells
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - open for the process's life
    try:
        status = _run(sys.argv[1:] if argv is None else argv)
    except (UsageError, pass_pipeline.PipelineError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        status = 1
    except SystemExit as exit_:  # argparse: --help, --version, bad flags
        status = 0 if exit_.code in (0, None) else 1
    except Exception as error:  # noqa: BLE001 - a bug must still not print a traceback
        print(f"{PROG}: internal error: {type(error).__name__}: {error}", file=sys.stderr)
        if os.environ.get("SHARDC_DEBUG"):
            import traceback

            traceback.print_exc()
        status = 1
    if sys.stdout is not None:
        sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
