"""Where XLA's dot handler moves the operand it replicates across device groups
(the layouts checked against compiled HLO in bench/comm_report.py's HANDWRITTEN cases)."""

from shardc.compiler.cost.dot_groups import regrouped_operand
from shardc.compiler.cost.op_comm import op_communication
from shardc.compiler.sharding.axes import full_axis
from shardc.compiler.sharding.rule import OpShardingRule
from shardc.compiler.sharding.tensor import DimSharding, Tensor, TensorSharding

MESH = (("data", 2), ("fsdp", 2), ("model", 2))
SIZES = dict(MESH)
# km,kn->mn on (16, 32) x (16, 32): factors m=0, n=1, k=2 (contracted).
TRANSPOSED_DOT = OpShardingRule(
    factor_sizes=(32, 32, 16),
    operand_mappings=(((2,), (0,)), ((2,), (1,))),
    result_mappings=(((0,), (1,)),),
    reduction_factors=(2,),
)


def tensor(*dims, shape=(16, 32)):
    sharding = TensorSharding("mesh", tuple(
        DimSharding(tuple(full_axis(a, SIZES[a]) for a in d), True) for d in dims))
    return Tensor(shape, 4, sharding)


def moved(lhs, rhs, out):
    found = regrouped_operand(TRANSPOSED_DOT, [tensor(*lhs), tensor(*rhs)],
                              [tensor(*out, shape=(32, 32))], MESH)
    if found is None:
        return None
    index, sharding = found
    return index, [[a.name for a in d.axes] for d in sharding.dims]


def test_other_operand_swaps_the_group_axis_with_its_replicated_axis():
    # Grouped on model; the rhs replicates fsdp only: its model dimension takes fsdp.
    assert moved([["data"], ["model"]], [["data"], ["model"]], [["model"], []]) == (
        1, [["data"], ["fsdp"]])
    # Symmetric: grouped on the rhs's model, the lhs moves.
    assert moved([["data"], ["model"]], [["data"], ["model"]], [[], ["model"]]) == (
        0, [["data"], ["fsdp"]])


def test_other_operand_takes_every_replicated_axis():
    # The rhs replicates data and fsdp: its model dimension takes both (more tiles).
    assert moved([[], ["model"]], [[], ["model"]], [["model"], []]) == (1, [[], ["data", "fsdp"]])


def test_nothing_moves_when_the_groups_already_hold_every_tile():
    assert moved([["data"], ["model"]], [["data"], ["fsdp"]], [["model"], []]) is None


def test_not_modelled_cases_keep_the_plain_reshard():
    # Fully tiled other operand: XLA groups on its matching dimension instead.
    assert moved([["data"], ["model"]], [["data"], ["fsdp", "model"]], [["model"], []]) is None
    # Both operands match the result.
    assert moved([["data"], ["model"]], [["data"], ["fsdp"]], [["model"], ["fsdp"]]) is None
    # The matching operand holds the result's axes in another order.
    assert moved([["data"], ["fsdp", "model"]], [["data"], []],
                 [["model", "fsdp"], []]) is None


def test_op_communication_permutes_before_the_gather():
    found = op_communication(TRANSPOSED_DOT, [tensor(["data"], ["model"]),
                                              tensor(["data"], ["model"])],
                             [tensor(["model"], [], shape=(32, 32))], MESH)
    steps = [(c.operand, c.collective.kind, c.collective.axes, c.collective.bytes_per_device)
             for c in found]
    assert steps == [
        (1, "collective-permute", ("data", "model"), 512),
        (1, "all-gather", ("fsdp",), 1024),
        (None, "all-reduce", ("data",), 2048),
    ]
