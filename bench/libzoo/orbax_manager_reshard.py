"""A flax linen TrainState saved by orbax's CheckpointManager, restored onto a new mesh.

A linen MLP whose kernels are created with ``nn.with_logical_partitioning``;
its abstract state comes from ``jax.eval_shape`` of the init, its shardings
from ``nn.get_partition_spec`` and ``nn.logical_to_mesh_sharding`` under
logical axis rules (``batch`` / ``embed`` -> ``data``, ``mlp`` -> ``model``),
as flax's "Scale up Flax Modules on multiple devices" guide builds them; the
``flax.training.train_state.TrainState`` (``optax.adamw``) is initialised by
``jax.jit`` with those ``out_shardings``. An ``ocp.CheckpointManager`` saves
it (``ocp.args.StandardSave``) on a 4x2 mesh; it is restored with
``ocp.args.PyTreeRestore`` and per-leaf ``ocp.ArrayRestoreArgs(sharding=...)``
onto a 2x4 mesh laid out by the same rules (a restore that reshards), and the
step (``state.apply_gradients``) is jitted on the restored shardings with
the state donated.
"""

from __future__ import annotations

import tempfile

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import orbax.checkpoint as ocp
from flax.training import train_state
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "orbax_manager_reshard"
SIZES = {
    "small": dict(batch=16, features=32, hidden=64),
    "large": dict(batch=256, features=512, hidden=2048),
}
RULES = (("batch", "data"), ("embed", "data"), ("mlp", "model"))
OPTIMIZER = optax.adamw(1e-3, weight_decay=0.01)


class MLP(nn.Module):
    features: int
    hidden: int

    @nn.compact
    def __call__(self, x):
        init = nn.initializers.lecun_normal()
        x = nn.Dense(self.hidden, kernel_init=nn.with_logical_partitioning(
            init, ("embed", "mlp")), name="up")(x)
        x = nn.with_logical_constraint(jax.nn.gelu(x), ("batch", "mlp"))
        return nn.Dense(self.features, kernel_init=nn.with_logical_partitioning(
            init, ("mlp", "embed")), name="down")(x)


def create_state(model: MLP, features: int, mesh) -> tuple[train_state.TrainState, object]:
    """The sharded TrainState, initialised by ``jax.jit`` with the logical shardings."""
    def init(key):
        params = model.init(key, jnp.ones((1, features)))["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=OPTIMIZER)

    with jax.set_mesh(mesh), nn.logical_axis_rules(RULES):
        abstract = jax.eval_shape(init, jax.random.key(0))
        state_shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh,
                                                      RULES)  # fmt: skip
        state = jax.jit(init, out_shardings=state_shardings)(jax.random.key(0))
    return nn.meta.unbox(state), nn.meta.unbox(state_shardings)


def save_then_restore(state, new_shardings):
    """``state`` saved by a CheckpointManager, restored onto ``new_shardings``."""
    with tempfile.TemporaryDirectory() as folder:
        options = ocp.CheckpointManagerOptions(max_to_keep=2)
        with ocp.CheckpointManager(folder, options=options) as manager:
            manager.save(0, args=ocp.args.StandardSave(state))
            manager.wait_until_finished()
        with ocp.CheckpointManager(folder, options=options) as manager:
            target = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
            restore_args = jax.tree.map(
                lambda sharding: ocp.ArrayRestoreArgs(sharding=sharding), new_shardings)
            return manager.restore(manager.latest_step(), args=ocp.args.PyTreeRestore(
                item=target, restore_args=restore_args))


def make_train_step(model: MLP):
    def train_step(state: train_state.TrainState, x, y):
        def loss_fn(params):
            with nn.logical_axis_rules(RULES):
                out = state.apply_fn({"params": params}, x)
            return jnp.mean((out - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    model = MLP(dims["features"], dims["hidden"])
    saved_mesh = make_mesh((4, 2), ("data", "model"))
    state, _ = create_state(model, dims["features"], saved_mesh)
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=saved_mesh.axis_types,
                         devices=jax.devices()[::-1])  # fmt: skip
    _, new_shardings = create_state(model, dims["features"], mesh)
    restored = save_then_restore(state, new_shardings)
    state_shardings = jax.tree.map(lambda leaf: leaf.sharding, restored)
    batch = NamedSharding(mesh, P("data"))
    rand = RandomArrays(seed=73)
    x = jax.device_put(rand.normal((dims["batch"], dims["features"])), batch)
    y = jax.device_put(rand.normal((dims["batch"], dims["features"])), batch)
    return Program(
        name=NAME,
        description="flax linen TrainState (with_logical_partitioning, logical_to_mesh_sharding)"
        " saved by ocp.CheckpointManager on 4x2, restored by ArrayRestoreArgs onto 2x4, stepped",
        fun=make_train_step(model),
        args=(restored, x, y),
        in_shardings=(state_shardings, batch, batch),
        out_shardings=(state_shardings, NamedSharding(mesh, P())),
        mesh=mesh,
        donate_argnums=(0,),
        mesh_context=True,
    )
