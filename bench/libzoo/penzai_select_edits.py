"""A penzai MLP edited with ``pz.select``, trained with dropout and evaluated without it.

The model is a ``pz.nn.Sequential`` of ``pz.nn.Affine`` and ``pz.nn.Elementwise`` layers
over named axes (``features`` -> ``hidden`` -> ``features`` -> ``classes``), then edited the
way penzai's guides edit models: ``pz.select(...).at_instances_of(pz.nn.Elementwise)``
swaps every ReLU for a GELU and ``insert_after`` puts a ``pz.nn.StochasticDropout`` after each,
and ``pick_nth_selected`` + ``insert_before`` adds a ``pz.nn.LayerNorm`` before the classifier.
The step unbinds the parameters (``pz.unbind_params(freeze=True)``), binds them in the loss,
feeds the dropouts a ``pz.RandomStream`` side input, takes the named cross-entropy through
``pz.nx.nmap``, updates with ``optax.adamw`` and evaluates a copy whose dropouts are disabled
(``.at_instances_of(pz.nn.StochasticDropout).apply(disable)``). Parameters are sharded by
their axis names (``name_to_name_sharding``: ``hidden`` over ``model``, ``features`` over
``fsdp``), the batch over ``data`` of a 2x2x2 mesh; parameters and optimizer state donated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from penzai import pz
from penzai.toolshed import sharding_util

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "penzai_select_edits"
SIZES = {
    "small": dict(batch=16, features=32, hidden=64, classes=8),
    "large": dict(batch=128, features=512, hidden=2048, classes=100),
}
AXIS_TO_MESH = {"hidden": "model", "features": "fsdp"}


def build_model(dims: dict, key: jax.Array) -> pz.nn.Layer:
    def affine(name, inputs, outputs):
        return pz.nn.Affine.from_config(name=name, init_base_rng=key, input_axes=inputs,
                                        output_axes=outputs)  # fmt: skip

    features, hidden = {"features": dims["features"]}, {"hidden": dims["hidden"]}
    mlp = pz.nn.Sequential([
        affine("in", features, hidden), pz.nn.Elementwise(jax.nn.relu),
        affine("mid", hidden, features), pz.nn.Elementwise(jax.nn.relu),
        affine("out", features, {"classes": dims["classes"]}),
    ])  # fmt: skip
    activations = pz.select(mlp).at_instances_of(pz.nn.Elementwise)
    mlp = activations.apply(lambda _: pz.nn.Elementwise(jax.nn.gelu))
    mlp = pz.select(mlp).at_instances_of(pz.nn.Elementwise).insert_after(
        pz.nn.StochasticDropout(drop_rate=0.1))
    classifier = pz.select(mlp).at_instances_of(pz.nn.Affine).pick_nth_selected(2)
    return classifier.insert_before(
        pz.nn.LayerNorm.from_config(name="norm", init_base_rng=key, across_axes=features))


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 2, 2), ("data", "fsdp", "model"))
    stateless_model, params = pz.unbind_params(build_model(dims, jax.random.key(4)), freeze=True)
    param_shardings = sharding_util.name_to_name_sharding(params, mesh, AXIS_TO_MESH)
    params = jax.device_put(params, param_shardings)
    optimizer = optax.adamw(1e-3, weight_decay=1e-4)
    replicated = NamedSharding(mesh, P())
    opt_shardings = optax.tree_map_params(
        optimizer, lambda _, sharding: sharding, optimizer.init(params), param_shardings,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda leaf: isinstance(leaf, NamedSharding),
    )  # fmt: skip
    opt_state = jax.device_put(optimizer.init(params), opt_shardings)
    rand = RandomArrays(seed=1414)
    batch = NamedSharding(mesh, P("data"))
    x = jax.device_put(rand.normal((dims["batch"], dims["features"])), batch)
    labels = jax.device_put(rand.integers(dims["classes"], (dims["batch"],)), batch)
    key = jax.device_put(jax.random.key(9), replicated)

    def train_step(params, opt_state, x, labels, key):
        inputs = pz.nx.wrap(x).tag("batch", "features")
        targets = pz.nx.wrap(labels).tag("batch")

        def loss_fn(params):
            model = pz.bind_variables(stateless_model, params)
            logits = model(inputs, random_stream=pz.RandomStream.from_base_key(key))
            log_probs = pz.nx.nmap(jax.nn.log_softmax)(logits.untag("classes")).tag("classes")
            return -log_probs[{"classes": targets}].unwrap("batch").mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        evaluated = pz.select(pz.bind_variables(stateless_model, params)).at_instances_of(
            pz.nn.StochasticDropout).apply(lambda dropout: dropout.disable())
        predicted = pz.nx.nmap(jnp.argmax)(evaluated(inputs).untag("classes"))
        accuracy = pz.nx.nmap(jnp.mean)((predicted == targets).untag("batch")).unwrap()
        return params, opt_state, loss, accuracy

    return Program(
        name=NAME,
        description="penzai MLP edited by pz.select (GELU swap, StochasticDropout and LayerNorm"
        " inserted), RandomStream, named cross-entropy, adamw, dropouts disabled to evaluate,"
        " 2x2x2",
        fun=train_step,
        args=(params, opt_state, x, labels, key),
        in_shardings=(param_shardings, opt_shardings, batch, batch, replicated),
        out_shardings=(param_shardings, opt_shardings, replicated, replicated),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
