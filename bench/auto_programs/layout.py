"""How a configuration shards a train step: the baselines AUTO is measured against.

Logical names a program gives its dimensions map to mesh axes per
configuration, as MaxText's logical axis rules do:

* ``expert``: FSDP and tensor parallelism as MaxText writes them: the batch
  over every axis but ``model`` (``data``, and ``fsdp`` where the mesh has one),
  each weight's embedding dimension over the FSDP axis (``fsdp``, else
  ``data``), heads, MLP hidden units, experts and output channels over
  ``model``; the activations constrained likewise;
* ``dp``: plain data parallelism: the batch over every axis, weights replicated,
  nothing constrained;
* ``shardy``: the expert's parameter and batch shardings with every activation
  left open: what shardc's default propagation (Shardy's) makes of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

CONFIGS = ("expert", "dp", "shardy")
# Logical dimension names -> which of the layout's axis groups shards them.
EMBED, TENSOR, BATCH = "embed", "tensor", "batch"


@dataclass(frozen=True)
class Layout:
    """One configuration on one mesh (``jax.sharding.Mesh`` or ``AbstractMesh``)."""

    mesh: object
    config: str

    @property
    def batch_axes(self) -> tuple[str, ...]:
        names = self.mesh.axis_names
        if self.config == "dp":
            return tuple(names)
        return tuple(a for a in names if a != "model")

    @property
    def fsdp_axis(self) -> str:
        return "fsdp" if "fsdp" in self.mesh.axis_names else "data"

    def spec(self, logical: tuple[str | None, ...]) -> P:
        """The ``PartitionSpec`` of dimensions named ``logical``."""
        def axes(name):
            if name == BATCH:
                return self.batch_axes
            if self.config == "dp" or name is None:
                return None
            return {EMBED: self.fsdp_axis, TENSOR: "model"}[name]
        return P(*(axes(name) for name in logical))

    def param(self, shape: tuple[int, ...], logical: tuple[str | None, ...],
              dtype=jnp.float32) -> jax.ShapeDtypeStruct:
        """A weight of ``shape`` whose dimensions are named ``logical``."""
        spec = P() if self.config == "dp" else self.spec(logical)
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(self.mesh, spec))

    def batch(self, shape: tuple[int, ...], dtype=jnp.float32) -> jax.ShapeDtypeStruct:
        """An input whose leading dimension is the batch."""
        spec = self.spec((BATCH,) + (None,) * (len(shape) - 1))
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(self.mesh, spec))

    def constrain(self, x: jax.Array, logical: tuple[str | None, ...]) -> jax.Array:
        """Pin an activation as the expert does (left open by other configurations)."""
        if self.config != "expert":
            return x
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, self.spec(logical)))


def layout_for(mesh, config: str) -> Layout:
    if config not in CONFIGS:
        raise ValueError(f"config must be one of {CONFIGS}, got {config!r}")
    return Layout(mesh, config)


def sgd_step(loss):
    """``(params, batch) -> (params - lr * grads, loss)``."""
    def step(params, batch):
        value, grads = jax.value_and_grad(loss)(params, batch)
        return jax.tree.map(lambda w, g: w - 1e-3 * g, params, grads), value
    return step


def rms_norm(x, scale):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def cross_entropy(logits, labels):
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))
