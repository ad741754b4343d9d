"""The module a lowering keeps from before propagation, made only when asked for."""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from shardc.compiler import jit
from shardc.compiler.function import annotated


def _loop(w, x):
    # A loop with an invariant carry: XLA's import rewrites it before propagation.
    return jax.lax.fori_loop(0, 3, lambda i, c: (c[0], jnp.tanh(c[1] @ c[0])), (w, x))[1]


def test_the_kept_module_is_the_one_propagation_started_from(monkeypatch):
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    seen = []
    propagate = annotated.propagation_pipeline

    def recording(module, **options):
        seen.append(module.get_asm(enable_debug_info=True))
        return propagate(module, **options)

    monkeypatch.setattr(annotated, "propagation_pipeline", recording)
    jitted = jit(_loop, in_shardings=(P(None, "y"), P("x")), mesh=mesh)
    lowered = jitted.lower(jnp.ones((8, 8)), jnp.ones((16, 8)))
    kept = lowered._unpropagated
    assert len(seen) == 1 and kept().get_asm(enable_debug_info=True) == seen[0]
    # Made once, and left as it is by explain().
    assert kept() == kept()
    lowered.explain()
    assert kept().get_asm(enable_debug_info=True) == seen[0]
