"""An E(3)-equivariant message-passing layer with e3nn-jax, the way its NequIP-style examples write it.

Each graph's edge vectors become ``e3nn.spherical_harmonics`` up to ``l = 2`` (``IrrepsArray``
of ``1x0e + 1x1o + 1x2e``); species embeddings gathered at each edge's sender are combined
with them by ``e3nn.tensor_product`` (``filter_ir_out`` keeping ``0e + 1o + 2e``), each irrep
copy scaled by radial weights (``e3nn.soft_one_hot_linspace`` through a small MLP) and summed
back onto the receivers by ``e3nn.scatter_sum``. The energy reads out the scalar irreps; the
forces are its negative gradient with respect to the positions, taken with the parameters'
gradient. The graphs are vmapped and split eight ways over ``data``.
"""

from __future__ import annotations

import e3nn_jax as e3nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "e3nn_equivariant_mp"
SIZES = {
    "small": dict(graphs=8, nodes=6, basis=8),
    "large": dict(graphs=64, nodes=64, basis=16),
}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=1712)
    replicated, graphs = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    nodes = dims["nodes"]
    senders, receivers = np.nonzero(~np.eye(nodes, dtype=bool))
    positions = jax.device_put(rand.normal((dims["graphs"], nodes, 3)) * 1.5, graphs)
    species = jax.device_put(rand.integers(3, (dims["graphs"], nodes)), graphs)
    irreps_sh = e3nn.Irreps.spherical_harmonics(2)
    irreps_hidden = e3nn.Irreps("8x0e + 4x1o + 2x2e")
    irreps_message = e3nn.tensor_product(e3nn.Irreps("8x0e"), irreps_sh).filter(keep=irreps_hidden)
    params = jax.device_put({
        "embed": rand.normal((3, 8)),
        "radial_in": rand.normal((dims["basis"], 16)) * 0.3,
        "radial_out": rand.normal((16, irreps_message.num_irreps)) * 0.3,
        "readout": rand.normal((irreps_message.count("0e"), 1)) * 0.3,
    }, replicated)  # fmt: skip

    def energy(params, positions, species):
        vectors = positions[receivers] - positions[senders]
        harmonics = e3nn.spherical_harmonics(
            irreps_sh, e3nn.IrrepsArray("1o", vectors), normalize=True, normalization="component"
        )
        basis = e3nn.soft_one_hot_linspace(
            jnp.linalg.norm(vectors, axis=-1), start=0.0, end=5.0, number=dims["basis"],
            basis="smooth_finite", cutoff=True,
        )  # fmt: skip
        radial = jax.nn.silu(basis @ params["radial_in"]) @ params["radial_out"]
        features = e3nn.IrrepsArray("8x0e", params["embed"][species])
        messages = e3nn.tensor_product(features[senders], harmonics, filter_ir_out=irreps_hidden)
        summed = e3nn.scatter_sum(messages * radial, dst=receivers, output_size=nodes)
        summed = summed / jnp.sqrt(nodes - 1.0)
        scalars = summed.filter(keep="0e").array
        return jnp.sum(scalars @ params["readout"]), summed.filter(keep="1o").array

    def step(params, positions, species):
        def total(params, positions):
            energies, vectors = jax.vmap(lambda x, s: energy(params, x, s))(positions, species)
            return jnp.sum(energies), (energies, vectors)

        (_, (energies, vectors)), (param_grads, position_grads) = jax.value_and_grad(
            total, argnums=(0, 1), has_aux=True
        )(params, positions)
        return energies, -position_grads, vectors, param_grads

    return Program(
        name=NAME,
        description="e3nn-jax spherical harmonics + tensor_product messages + scatter_sum, forces, 8",
        fun=step,
        args=(params, positions, species),
        in_shardings=(replicated, graphs, graphs),
        out_shardings=(graphs, graphs, graphs, replicated),
        mesh=mesh,
    )
