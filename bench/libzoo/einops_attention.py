"""A transformer block written with einops, the way its users write attention.

A class token made by ``einops.repeat`` and prepended by ``einops.pack`` (``"b * d"``); a
pre-LN layer norm from ``einops.reduce`` means; the fused QKV projection split into heads by
``rearrange("b n (three h d) -> three b h n d")``; scores and values by ``einops.einsum``
under a causal mask; heads merged back by ``rearrange``, the class token taken out again by
``einops.unpack`` and added to the tokens' ``reduce`` mean-pool for a classifier head. One
plain SGD step on the cross entropy, parameters donated. The QKV projection's output features
and the output projection's input features over ``model``, the batch over ``data`` of a 2x4
mesh.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from einops import einsum, pack, rearrange, reduce, repeat, unpack
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "einops_attention"
SIZES = {
    "small": dict(batch=8, seq=15, d=32, heads=4, classes=8),
    "large": dict(batch=64, seq=255, d=512, heads=8, classes=1000),
}


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    mesh = make_mesh((2, 4), ("data", "model"))
    rand = RandomArrays(seed=1510)
    d, heads = dims["d"], dims["heads"]

    def sharding(*spec):
        return NamedSharding(mesh, P(*spec))

    param_shardings = {"cls": sharding(), "ln": sharding(), "qkv": sharding(None, "model"),
                       "o": sharding("model"), "head": sharding()}  # fmt: skip
    params = jax.device_put({
        "cls": rand.normal((d,)) * 0.02, "ln": np.ones(d, np.float32),
        "qkv": rand.weight((d, 3 * d)), "o": rand.weight((d, d)),
        "head": rand.weight((d, dims["classes"])),
    }, param_shardings)  # fmt: skip
    x = jax.device_put(rand.normal((dims["batch"], dims["seq"], d)), sharding("data"))
    labels = jax.device_put(rand.integers(dims["classes"], (dims["batch"],)), sharding("data"))

    def forward(p, x):
        cls = repeat(p["cls"], "d -> b 1 d", b=x.shape[0])
        h, packed_shapes = pack([cls, x], "b * d")
        centred = h - reduce(h, "b n d -> b n 1", "mean")
        normed = centred * jax.lax.rsqrt(reduce(centred**2, "b n d -> b n 1", "mean") + 1e-6) * p["ln"]
        q, k, v = rearrange(normed @ p["qkv"], "b n (three h d) -> three b h n d", three=3, h=heads)
        scores = einsum(q, k, "b h i d, b h j d -> b h i j") / np.sqrt(d // heads)
        scores = jnp.where(jnp.tril(jnp.ones((scores.shape[-1],) * 2, bool)), scores, -1e9)
        attended = einsum(jax.nn.softmax(scores, -1), v, "b h i j, b h j d -> b h i d")
        h = h + rearrange(attended, "b h n d -> b n (h d)") @ p["o"]
        cls_out, tokens = unpack(h, packed_shapes, "b * d")
        pooled = reduce(tokens, "b n d -> b d", "mean") + rearrange(cls_out, "b 1 d -> b d")
        return pooled @ p["head"]

    def step(p, x, labels):
        def loss_fn(p):
            log_probs = jax.nn.log_softmax(forward(p, x))
            return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], 1))

        loss, grads = jax.value_and_grad(loss_fn)(p)
        return jax.tree.map(lambda w, g: w - 0.1 * g, p, grads), loss

    return Program(
        name=NAME,
        description="einops rearrange / einsum / reduce / repeat / pack attention block, SGD, donated params, 2x4",
        fun=step,
        args=(params, x, labels),
        in_shardings=(param_shardings, sharding("data"), sharding("data")),
        out_shardings=(param_shardings, sharding()),
        mesh=mesh,
        donate_argnums=(0,),
    )
