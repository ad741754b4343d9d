"""jraph's graph layers over a padded batch of graphs whose edge list is split over devices.

Six small graphs batched by ``jraph.batch_np`` and padded by ``jraph.pad_with_graphs`` (to
node / edge counts the mesh divides) run through ``jraph.GraphConvolution`` (self edges,
symmetric normalisation: ``segment_sum`` over receivers) and a ``jraph.GraphNetwork`` (edge,
node and global updates; ``jraph.segment_sum`` into nodes, ``jraph.segment_mean`` into
globals); a per-graph regression on the globals masked by ``jraph.get_graph_padding_mask``,
and its gradients with respect to the plain weight dict. The ``GraphsTuple``'s nodes and its
edge list (features, senders, receivers) are split over ``data`` of an 8-device mesh, the
per-graph counts and globals replicated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jraph
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "jraph_graph_network"
SIZES = {
    "small": dict(graphs=6, nodes=10, edges=20, f=16, pad_nodes=64, pad_edges=128),
    "large": dict(graphs=64, nodes=100, edges=400, f=64, pad_nodes=8192, pad_edges=32768),
}
EDGE_FEATURES = 4
GLOBAL_FEATURES = 2


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((8,), ("data",))
    rand = RandomArrays(seed=1508)
    graphs = []
    for i in range(dims["graphs"]):
        nodes, edges = dims["nodes"] - i % 3, dims["edges"] - 2 * (i % 4)
        graphs.append(jraph.GraphsTuple(
            nodes=rand.normal((nodes, dims["f"])), edges=rand.normal((edges, EDGE_FEATURES)),
            senders=rand.integers(nodes, (edges,)), receivers=rand.integers(nodes, (edges,)),
            n_node=np.array([nodes]), n_edge=np.array([edges]),
            globals=rand.normal((1, GLOBAL_FEATURES))))  # fmt: skip
    padded_graphs = dims["graphs"] + 2
    graph = jraph.pad_with_graphs(jraph.batch_np(graphs), dims["pad_nodes"], dims["pad_edges"],
                                  padded_graphs)  # fmt: skip
    split = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    graph_shardings = jraph.GraphsTuple(
        nodes=split, edges=split, senders=split, receivers=split,
        n_node=replicated, n_edge=replicated, globals=replicated)  # fmt: skip
    graph = jax.device_put(graph, graph_shardings)
    f = dims["f"]
    params = jax.device_put({
        "gcn": rand.weight((f, f)),
        "edge": rand.weight((EDGE_FEATURES + 2 * f + GLOBAL_FEATURES, f)),
        "node": rand.weight((2 * f + GLOBAL_FEATURES, f)),
        "global": rand.weight((f + GLOBAL_FEATURES, GLOBAL_FEATURES)),
        "out": rand.weight((GLOBAL_FEATURES, 1)),
    }, replicated)  # fmt: skip
    targets = jax.device_put(rand.normal((padded_graphs, 1)), replicated)

    def loss(params, graph, targets):
        gcn = jraph.GraphConvolution(update_node_fn=lambda n: jax.nn.relu(n @ params["gcn"]),
                                     add_self_edges=True)  # fmt: skip
        network = jraph.GraphNetwork(
            update_edge_fn=lambda e, s, r, g: jax.nn.relu(jnp.concatenate([e, s, r, g], -1) @ params["edge"]),
            update_node_fn=lambda n, sent, received, g: jax.nn.relu(
                jnp.concatenate([n, received, g], -1) @ params["node"]),
            update_global_fn=lambda n, e, g: jnp.concatenate([n, g], -1) @ params["global"],
            aggregate_edges_for_nodes_fn=jraph.segment_sum,
            aggregate_nodes_for_globals_fn=jraph.segment_mean)  # fmt: skip
        out = network(gcn(graph)._replace(edges=graph.edges))
        real = jraph.get_graph_padding_mask(graph)
        errors = jnp.where(real[:, None], (out.globals @ params["out"] - targets) ** 2, 0.0)
        return jnp.sum(errors) / jnp.sum(real)

    def step(params, graph, targets):
        return jax.value_and_grad(loss)(params, graph, targets)

    return Program(
        name=NAME,
        description="jraph GraphConvolution + GraphNetwork segment sums over an edge list split 8 ways, grads",
        fun=step,
        args=(params, graph, targets),
        in_shardings=(replicated, graph_shardings, replicated),
        out_shardings=None,
        mesh=mesh,
    )
