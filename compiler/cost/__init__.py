"""The communication model: which collectives XLA needs for a module's shardings.

``reshard`` turns one tensor's sharding change into collectives (all-gather,
all-to-all, collective-permute, or a free slice) with bytes per device;
``op_comm`` derives, from an op's sharding rule and its result sharding,
the operand shardings the op needs and the all-reduce of sharded reductions;
``windows`` adds the halo or gather of a reduce_window's sharded windowed
dimensions and ``halos`` the halo exchanges of slices, pads, reverses,
rotations and convolution windows along sharded dimensions;
``report`` walks a module and lists every collective with its op and source
line (``comm_report``; ``Lowered.comm_report()`` runs it on a propagated
copy, ``stages.shardy_pipeline.propagated_copy``); ``flops`` counts each
device's operations as XLA's cost analysis does, and ``step_time`` turns
operations and collectives into seconds on a device kind
(``platforms.HARDWARE``; ``Lowered.step_time()``). Bytes are
counted like ``shardc.runtime.collectives`` counts XLA's instructions, so the
totals compare directly with ``Compiled.collectives()``.
"""

from shardc.compiler.cost.report import CommEntry, CommReport, CommTotal, comm_report
from shardc.compiler.cost.step_time import CommTime, StepTime, step_time

__all__ = ["CommEntry", "CommReport", "CommTime", "CommTotal", "StepTime", "comm_report",
           "step_time"]
