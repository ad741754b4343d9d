"""A penzai (``pz.nn``) language model with named axes and a sharded embedding table.

Every array is a ``pz.nx.NamedArray``: the tied ``pz.nn.EmbeddingTable`` (axes
``vocabulary`` x ``embedding``) is looked up by ``pz.nn.EmbeddingLookup`` and
decoded by ``pz.nn.EmbeddingDecode``; between them a residual MLP of
``pz.nn.Affine`` layers over ``embedding`` -> ``neurons`` -> ``embedding``
with an ``RMSLayerNorm``. The step is written the way penzai's
``basic_training`` writes one: ``pz.unbind_params(model, freeze=True)`` into a
stateless model and a tuple of ``pz.ParameterValue``s, a jitted step that
``pz.bind_variables`` them back, takes the named cross-entropy's gradient and
updates with ``optax.adam``. The parameters' shardings come from their axis
names (``penzai.toolshed.sharding_util.name_to_name_sharding``:
``vocabulary`` and ``neurons`` over ``model``), the tokens split over
``data``; the parameters and optimizer state are donated.
"""

from __future__ import annotations

import jax
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from penzai import pz
from penzai.toolshed import sharding_util

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "penzai_named_lm"
SIZES = {
    "small": dict(batch=8, seq=16, vocab=64, embedding=32, neurons=64),
    "large": dict(batch=16, seq=128, vocab=1024, embedding=256, neurons=1024),
}
AXIS_TO_MESH = {"vocabulary": "model", "neurons": "model"}
LEARNING_RATE = 1e-3


def build_model(dims: dict, key: jax.Array) -> pz.nn.Layer:
    table = pz.nn.EmbeddingTable.from_config(
        name="embedding", init_base_rng=key, vocab_size=dims["vocab"],
        embedding_axes={"embedding": dims["embedding"]},
    )  # fmt: skip
    mlp = pz.nn.Sequential([
        pz.nn.RMSLayerNorm.from_config(name="norm", init_base_rng=key,
                                       across_axes={"embedding": dims["embedding"]}),
        pz.nn.Affine.from_config(name="up", init_base_rng=key,
                                 input_axes={"embedding": dims["embedding"]},
                                 output_axes={"neurons": dims["neurons"]}),
        pz.nn.Elementwise(jax.nn.gelu),
        pz.nn.Affine.from_config(name="down", init_base_rng=key,
                                 input_axes={"neurons": dims["neurons"]},
                                 output_axes={"embedding": dims["embedding"]}),
    ])  # fmt: skip
    return pz.nn.Sequential([
        pz.nn.EmbeddingLookup(table), pz.nn.Residual(mlp), pz.nn.EmbeddingDecode(table),
    ])  # fmt: skip


def make_train_step(stateless_model, optimizer: optax.GradientTransformation):
    def loss_fn(params, tokens):
        model = pz.bind_variables(stateless_model, params)
        named = pz.nx.wrap(tokens).tag("batch", "seq")
        inputs, targets = named[{"seq": pz.slice[:-1]}], named[{"seq": pz.slice[1:]}]
        logits = model(inputs)
        log_probs = pz.nx.nmap(jax.nn.log_softmax)(logits.untag("vocabulary")).tag("vocabulary")
        return -log_probs[{"vocabulary": targets}].unwrap("batch", "seq").mean()

    def train_step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    stateless_model, params = pz.unbind_params(build_model(dims, jax.random.key(2)), freeze=True)
    param_shardings = sharding_util.name_to_name_sharding(params, mesh, AXIS_TO_MESH)
    params = jax.device_put(params, param_shardings)
    optimizer = optax.adam(LEARNING_RATE)
    opt_state = optimizer.init(params)
    replicated = NamedSharding(mesh, P())
    opt_shardings = optax.tree_map_params(
        optimizer, lambda _, sharding: sharding, opt_state, param_shardings,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda leaf: isinstance(leaf, NamedSharding),
    )  # fmt: skip
    opt_state = jax.device_put(opt_state, opt_shardings)
    token_sharding = NamedSharding(mesh, P("data"))
    tokens = jax.device_put(
        RandomArrays(seed=45).integers(dims["vocab"], (dims["batch"], dims["seq"] + 1)),
        token_sharding)  # fmt: skip
    return Program(
        name=NAME,
        description="penzai pz.nn named-axis LM (tied EmbeddingTable, Affine MLP, RMSLayerNorm),"
        " unbind_params/bind_variables step, name_to_name_sharding, optax adam, donated",
        fun=make_train_step(stateless_model, optimizer),
        args=(params, opt_state, tokens),
        in_shardings=(param_shardings, opt_shardings, token_sharding),
        out_shardings=(param_shardings, opt_shardings, replicated),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
