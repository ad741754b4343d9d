"""What the cost-aware search prices a candidate at (``compiler/cost_aware/pricing.py``)."""

import jax.numpy as jnp
import numpy as np
from jaxlib.mlir import ir

from shardc.compiler import jit
from shardc.compiler.cost.fusion import fused_away
from shardc.compiler.cost_aware.pricing import memory_peak
from shardc.compiler.propagation.values import ModuleValues
from shardc.dialects import make_context


def test_fused_away_needs_a_fusible_producer_and_fusing_consumers():
    assert fused_away("stablehlo.broadcast_in_dim", ["stablehlo.add", "stablehlo.reduce"])
    assert not fused_away("stablehlo.broadcast_in_dim", ["stablehlo.dot_general"])
    assert not fused_away("stablehlo.dot_general", ["stablehlo.add"])
    assert not fused_away("stablehlo.add", ["func.return"])  # an output has a buffer
    assert not fused_away("stablehlo.add", [])


def test_memory_peak_skips_values_fused_into_their_consumers():
    # tanh(x + b): XLA fuses the broadcast of b and the add into the tanh, so only
    # the arguments (live together at the start) and the returned result hold memory.
    # The broadcast and the sum, both as big as x, used to be counted live next to x
    # (3x its bytes): a pin that replicated the broadcast scale vectors of a layer
    # norm looked heavier than Shardy's choice.
    x, b = np.ones((16, 32), np.float32), np.ones((32,), np.float32)
    text = jit(lambda x, b: jnp.tanh(x + b)).lower(x, b).as_text()
    module = ir.Module.parse(text, make_context())
    reader = ModuleValues(module.operation, missing_as_replicated=True)
    assert memory_peak(reader) == x.nbytes + b.nbytes
