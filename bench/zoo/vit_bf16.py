"""A ViT-style classifier train step: bf16 compute, float32 master weights.

Images are cut into patches by a reshape, embedded by a patch projection with
a learned position embedding, run through one pre-LayerNorm transformer block
(multi-head attention + MLP), mean-pooled and classified. Mixed precision the
usual way: the float32 master parameters are cast to bfloat16 inside the step
(``jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)``), activations are
bfloat16, LayerNorm statistics and the softmax cross-entropy are float32, the
gradient flows back through the casts to float32 and the update is float32.
On a (data, model) mesh of 4 x 2: images on ``data``; heads and MLP units on
``model``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh, place, shardings

NAME = "vit_bf16"
SIZES = {
    "small": dict(batch=8, image=16, patch=4, channels=3, d_model=32, heads=4, mlp=64,
                  classes=10),
    "large": dict(batch=32, image=64, patch=8, channels=3, d_model=256, heads=8, mlp=1024,
                  classes=100),
}  # fmt: skip
LEARNING_RATE = 1e-3
COMPUTE_DTYPE = jnp.bfloat16
PARAM_SPECS = {
    "patch": P(), "position": P(),
    "ln1": {"scale": P(), "bias": P()},
    "w_q": P(None, "model"), "w_k": P(None, "model"), "w_v": P(None, "model"),
    "w_o": P("model", None),
    "ln2": {"scale": P(), "bias": P()},
    "w_up": P(None, "model"), "w_down": P("model", None),
    "ln_final": {"scale": P(), "bias": P()},
    "head": P(),
}  # fmt: skip


def layer_norm(x: jax.Array, params: dict) -> jax.Array:
    """Statistics in float32, result in the input's dtype."""
    x32 = x.astype(jnp.float32)
    mean = x32.mean(axis=-1, keepdims=True)
    variance = jnp.square(x32 - mean).mean(axis=-1, keepdims=True)
    normed = (x32 - mean) * jax.lax.rsqrt(variance + 1e-6)
    return (normed * params["scale"].astype(jnp.float32)
            + params["bias"].astype(jnp.float32)).astype(x.dtype)  # fmt: skip


def patches(images: jax.Array, size: int) -> jax.Array:
    batch, height, width, channels = images.shape
    grid = images.reshape(batch, height // size, size, width // size, size, channels)
    return grid.transpose(0, 1, 3, 2, 4, 5).reshape(batch, -1, size * size * channels)


def forward(params: dict, images: jax.Array, heads: int, patch: int) -> jax.Array:
    x = patches(images.astype(COMPUTE_DTYPE), patch) @ params["patch"] + params["position"]
    batch, tokens, d_model = x.shape
    head_dim = d_model // heads

    h = layer_norm(x, params["ln1"])
    q, k, v = ((h @ params[name]).reshape(batch, tokens, heads, head_dim)
               for name in ("w_q", "w_k", "w_v"))  # fmt: skip
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * head_dim**-0.5
    probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(COMPUTE_DTYPE)
    mixed = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, tokens, d_model)
    x = x + mixed @ params["w_o"]
    x = x + jax.nn.gelu(layer_norm(x, params["ln2"]) @ params["w_up"]) @ params["w_down"]
    pooled = layer_norm(x, params["ln_final"]).mean(axis=1)
    return (pooled @ params["head"]).astype(jnp.float32)


def make_train_step(optimizer: optax.GradientTransformation, heads: int, patch: int):
    def loss_fn(master, images, labels):
        params = jax.tree.map(lambda p: p.astype(COMPUTE_DTYPE), master)  # bf16 copies
        logits = forward(params, images, heads, patch)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    def train_step(master, opt_state, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(master, images, labels)  # float32 grads
        updates, opt_state = optimizer.update(grads, opt_state, master)
        return optax.apply_updates(master, updates), opt_state, loss

    return train_step


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((4, 2), ("data", "model"))
    rand = RandomArrays(seed=34)
    d_model, mlp = dims["d_model"], dims["mlp"]
    patch_dim = dims["patch"] ** 2 * dims["channels"]
    tokens = (dims["image"] // dims["patch"]) ** 2

    def norm():
        return {"scale": 1 + rand.normal((d_model,), 0.1), "bias": rand.normal((d_model,), 0.1)}

    params = {
        "patch": rand.weight((patch_dim, d_model)),
        "position": rand.normal((tokens, d_model), 0.02),
        "ln1": norm(),
        "w_q": rand.weight((d_model, d_model)), "w_k": rand.weight((d_model, d_model)),
        "w_v": rand.weight((d_model, d_model)), "w_o": rand.weight((d_model, d_model)),
        "ln2": norm(),
        "w_up": rand.weight((d_model, mlp)), "w_down": rand.weight((mlp, d_model)),
        "ln_final": norm(),
        "head": rand.weight((d_model, dims["classes"])),
    }  # fmt: skip
    optimizer = optax.adam(LEARNING_RATE)
    opt_state = optimizer.init(params)
    opt_specs = (
        optax.ScaleByAdamState(count=P(), mu=PARAM_SPECS, nu=PARAM_SPECS),
        optax.EmptyState(),
    )
    images = rand.normal((dims["batch"], dims["image"], dims["image"], dims["channels"]))
    labels = rand.integers(dims["classes"], (dims["batch"],))
    in_shardings = shardings(mesh, (PARAM_SPECS, opt_specs, P("data"), P("data")))
    return Program(
        name=NAME,
        description="ViT block classifier, bf16 compute from fp32 master weights, adam",
        fun=make_train_step(optimizer, dims["heads"], dims["patch"]),
        args=place((params, opt_state, images, labels), in_shardings),
        in_shardings=in_shardings,
        out_shardings=shardings(mesh, (PARAM_SPECS, opt_specs, P())),
        mesh=mesh,
    )
