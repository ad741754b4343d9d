"""The predictions of a cost-aware lowering describe the choices ``compile()`` runs.

Where the search changed Shardy's choices, ``compile()`` compiles both and keeps
Shardy's when XLA partitions them with fewer collective bytes or in less memory.
``comm_report`` and ``memory_estimate`` answer before compiling: they apply that rule
to the predictions of both (``Lowered._kept_reports``)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from optax import contrib

from shardc.compiler import jit


def _sam_step():
    """An FSDP x TP regression step under ``optax.contrib.sam`` (the adversarial
    update, then the real one), the step taking both: the search keeps one weight
    gathered once where Shardy's choices gather it twice, in more memory."""
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "model"), axis_types=(AxisType.Auto,) * 3)
    spec = {"w1": P("fsdp", "model"), "b1": P("model"), "w2": P("model", "fsdp"), "b2": P()}
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((32, 64)) / 8, "b1": np.zeros(64),
              "w2": rng.standard_normal((64, 4)) / 8, "b2": np.zeros(4)}
    params = jax.device_put(jax.tree.map(lambda a: a.astype(np.float32), params),
                            jax.tree.map(lambda s: NamedSharding(mesh, s), spec))
    outer = optax.chain(optax.scale_by_adam(), optax.add_decayed_weights(1e-4),
                        optax.scale_by_learning_rate(1e-2))
    opt = contrib.sam(outer, optax.chain(contrib.normalize(), optax.sgd(0.05)), sync_period=2)
    state = jax.jit(opt.init)(params)
    batch = NamedSharding(mesh, P(("data", "fsdp")))
    x = jax.device_put(rng.standard_normal((16, 32)).astype(np.float32), batch)
    y = jax.device_put(rng.standard_normal((16, 4)).astype(np.float32), batch)

    def loss(p, x, y):
        return jnp.mean((jax.nn.silu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"] - y) ** 2)

    def step(params, state, x, y):
        for _ in range(2):
            grads = jax.grad(loss)(params, x, y)
            updates, state = opt.update(grads, state, params)
            params = optax.apply_updates(params, updates)
        return params, state

    return step, (params, state, x, y)


def test_predictions_are_of_the_choices_compile_keeps():
    step, args = _sam_step()
    lowered = jit(step, propagation="cost-aware").lower(*args)
    assert lowered.cost_aware_resolution.pins
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    estimate = lowered.memory_estimate().net_bytes
    compiled = lowered.compile()
    assert compiled.kept_shardy
    assert predicted == {k: c.bytes_per_device for k, c in compiled.collectives().items()
                         if c.count}
    assert estimate == jit(step).lower(*args).memory_estimate().net_bytes
