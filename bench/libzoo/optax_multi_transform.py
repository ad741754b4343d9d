"""optax's combinators on a parameter tree with ``None`` leaves: ``multi_transform``.

The parameters of a two-tower model are a nested dict in which some entries
are ``None`` (a layer without a bias, as flax and equinox trees have them); a
label tree of the same shape (``None`` where the parameters are ``None``) sends
the encoder to ``optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(...))``,
the head to ``optax.sgd`` with momentum and the frozen embedding to
``optax.set_to_zero()`` through ``optax.multi_transform``. Its state holds
``optax.MaskedNode``s where a branch does not apply and ``None`` where the
parameters are ``None``; the jitted step's ``in_shardings`` / ``out_shardings``
are trees of that very shape (the usual ``jax.tree.map`` over the state),
parameters tensor parallel over ``model``, the batch over ``data``; the state
is donated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place

NAME = "optax_multi_transform"
SIZES = {
    "small": dict(batch=16, vocab=64, features=32, hidden=64),
    "large": dict(batch=256, vocab=1024, features=512, hidden=2048),
}
LABELS = {
    "embedding": {"table": "frozen"},
    "encoder": {"w1": "adamw", "b1": None, "w2": "adamw", "b2": "adamw"},
    "head": {"w": "sgd", "b": None},
}


def make_optimizer() -> optax.GradientTransformation:
    return optax.multi_transform(
        {
            "adamw": optax.chain(optax.clip_by_global_norm(1.0),
                                 optax.adamw(1e-3, weight_decay=0.01)),
            "sgd": optax.sgd(1e-2, momentum=0.9),
            "frozen": optax.set_to_zero(),
        },
        LABELS,
    )  # fmt: skip


def loss_fn(params, tokens, targets):
    x = params["embedding"]["table"][tokens]  # (batch, features)
    hidden = jax.nn.gelu(x @ params["encoder"]["w1"])
    x = x + hidden @ params["encoder"]["w2"] + params["encoder"]["b2"]
    logits = x @ params["head"]["w"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def param_sharding_at(path, param_shardings: dict, otherwise: NamedSharding) -> NamedSharding:
    """The sharding of the parameter an optimizer state leaf mirrors (its key path ends
    in the parameter's two keys: ``...mu['encoder']['w1']``), else ``otherwise``."""
    keys = tuple(entry.key for entry in path if isinstance(entry, jax.tree_util.DictKey))
    group, name = keys[-2:] if len(keys) >= 2 else (None, None)
    found = param_shardings.get(group, {}).get(name) if group in param_shardings else None
    return found if found is not None else otherwise


def make_train_step(optimizer: optax.GradientTransformation):
    def train_step(params, opt_state, tokens, targets):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=46)
    vocab, features, hidden = dims["vocab"], dims["features"], dims["hidden"]
    params = {
        "embedding": {"table": rand.normal((vocab, features))},
        "encoder": {"w1": rand.weight((features, hidden)), "b1": None,
                    "w2": rand.weight((hidden, features)), "b2": rand.normal((features,), 0.1)},
        "head": {"w": rand.weight((features, vocab)), "b": None},
    }  # fmt: skip
    specs = {
        "embedding": {"table": P("model", None)},
        "encoder": {"w1": P(None, "model"), "b1": None, "w2": P("model", None), "b2": P()},
        "head": {"w": P(None, "model"), "b": None},
    }  # fmt: skip
    param_shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs,
                                   is_leaf=lambda leaf: isinstance(leaf, P))  # fmt: skip
    params = place(params, param_shardings)
    optimizer = make_optimizer()
    opt_state = optimizer.init(params)
    replicated = NamedSharding(mesh, P())
    opt_shardings = jax.tree_util.tree_map_with_path(
        lambda path, _: param_sharding_at(path, param_shardings, replicated), opt_state)
    opt_state = jax.device_put(opt_state, opt_shardings)
    data = NamedSharding(mesh, P("data"))
    tokens, targets = rand.integers(vocab, (dims["batch"],)), rand.integers(vocab, (dims["batch"],))
    return Program(
        name=NAME,
        description="optax.multi_transform (label tree with None leaves; chain(clip_by_global_norm,"
        " adamw) / sgd momentum / set_to_zero), MaskedNode state shardings, donated",
        fun=make_train_step(optimizer),
        args=(params, opt_state, *place((jnp.asarray(tokens), jnp.asarray(targets)), (data, data))),
        in_shardings=(param_shardings, opt_shardings, data, data),
        out_shardings=(param_shardings, opt_shardings, replicated),
        mesh=mesh,
        donate_argnums=(0, 1),
    )
