"""Attention whose queries are head-sharded but keys, values and output sequence-sharded.

The mirror image of ``conflict_attention``: the output must come back
sequence-sharded, so the heads-vs-sequence conflict of the score einsum
decides how much of the score matrix has to move.
"""

from __future__ import annotations

from jax.sharding import PartitionSpec as P

from bench.models.conflict_attention import attention
from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "conflict_attention_seq"
SIZES = {
    "small": dict(seq=256, heads=8, head_dim=32),
    "large": dict(seq=1024, heads=16, head_dim=64),
}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("x",))
    rand = RandomArrays(seed=23)
    shape = (dims["seq"], dims["heads"], dims["head_dim"])
    args = tuple(rand.normal(shape) for _ in range(3))
    seq = P("x", None, None)
    in_shardings = shardings(mesh, (P(None, "x", None), seq, seq))
    return Program(
        name=NAME,
        description="attention: queries head-sharded, keys/values/output sequence-sharded",
        fun=attention,
        args=place(args, in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, seq),
        mesh=mesh,
    )
