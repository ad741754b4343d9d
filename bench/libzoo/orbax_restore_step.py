"""A sharded train state checkpointed by orbax, restored onto its shardings, stepped.

The state (an MLP's parameters, FSDP over ``data`` and tensor parallel over
``model``; its ``optax.adamw`` state; the step count) is saved by
``ocp.PyTreeCheckpointer`` to a temporary directory and restored the way
orbax's docs restore a sharded state: ``ocp.checkpoint_utils.construct_restore_args``
of a target of ``jax.ShapeDtypeStruct``s carrying the shardings
(``ocp.utils.to_shape_dtype_struct``), given as ``ocp.args.PyTreeRestore``'s
``restore_args``. The jitted step's ``in_shardings`` / ``out_shardings`` are
the restored arrays' shardings, and the state is donated.
"""

from __future__ import annotations

import tempfile

import jax
import jax.numpy as jnp
import optax
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "orbax_restore_step"
SIZES = {
    "small": dict(batch=16, features=32, hidden=64),
    "large": dict(batch=256, features=512, hidden=2048),
}
PARAM_SPECS = {"w1": P("data", "model"), "b1": P("model"), "w2": P("model", "data"), "b2": P()}
LEARNING_RATE = 1e-3
OPTIMIZER = optax.adamw(LEARNING_RATE, weight_decay=0.01)


def loss_fn(params, x, y):
    hidden = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)


def train_step(state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, y)
    updates, opt_state = OPTIMIZER.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    return {"params": params, "opt_state": opt_state, "step": state["step"] + 1}, loss


def save_and_restore(state):
    """``state`` written by orbax and read back onto the shardings it had."""
    target = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/state"
        with ocp.PyTreeCheckpointer() as checkpointer:
            checkpointer.save(path, args=ocp.args.PyTreeSave(state))
        with ocp.PyTreeCheckpointer() as checkpointer:
            return checkpointer.restore(path, args=ocp.args.PyTreeRestore(
                item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target)))


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=44)
    features, hidden = dims["features"], dims["hidden"]
    params = place({
        "w1": rand.weight((features, hidden)), "b1": rand.normal((hidden,), 0.1),
        "w2": rand.weight((hidden, features)), "b2": rand.normal((features,), 0.1),
    }, shardings(mesh, PARAM_SPECS))  # fmt: skip
    replicated = NamedSharding(mesh, P())
    opt_state = OPTIMIZER.init(params)
    opt_state = jax.device_put(opt_state, optax.tree_map_params(
        OPTIMIZER, lambda _, leaf: leaf.sharding, opt_state, params,
        transform_non_params=lambda _: replicated))  # fmt: skip
    state = {"params": params, "opt_state": opt_state,
             "step": jax.device_put(jnp.zeros((), jnp.int32), replicated)}  # fmt: skip
    restored = save_and_restore(state)
    state_shardings = jax.tree.map(lambda leaf: leaf.sharding, restored)
    data = NamedSharding(mesh, P("data"))
    x, y = rand.normal((dims["batch"], features)), rand.normal((dims["batch"], features))
    return Program(
        name=NAME,
        description="orbax PyTreeCheckpointer save + restore with sharding restore_args of an "
        "FSDP x TP MLP state (adamw); jitted step on the restored shardings, donated",
        fun=train_step,
        args=(restored, *place((x, y), (data, data))),
        in_shardings=(state_shardings, data, data),
        out_shardings=(state_shardings, replicated),
        mesh=mesh,
        donate_argnums=(0,),
    )
