"""compiler/diagnostics.py: the source position inside an MLIR location."""

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import SourceLoc, source_loc_of


def test_source_loc_of_plain_and_escaped_paths():
    with ir.Context():
        plain = ir.Location.file("/src/model.py", 12, 3)
        assert source_loc_of(plain) == SourceLoc("/src/model.py", 12, 3)
        # the first file position inside a call site, as jax nests them
        nested = ir.Location.callsite(ir.Location.file("/src/layer.py", 7, 1), [plain])
        assert source_loc_of(ir.Location.name("jit(f)/dot", nested)) == SourceLoc(
            "/src/layer.py", 7, 1)
        # a backslash in the path is printed escaped, and read back unescaped
        escaped = ir.Location.file("C:\\src\\a.py", 5, 2)
        assert "\\\\" in str(escaped)
        assert source_loc_of(escaped) == SourceLoc("C:\\src\\a.py", 5, 2)
        assert source_loc_of(ir.Location.unknown()) is None
