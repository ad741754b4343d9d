"""flax linen's autoregressive decoding with ``nn.SelfAttention(decode=True)``'s cache.

The ``cache`` collection (``cached_key`` / ``cached_value`` / ``cache_index``)
is made by ``init`` on a full-length input; a greedy loop of single-token
``apply(..., mutable=['cache'])`` steps runs in a ``jax.lax.fori_loop`` (the
prompt forced first), the tied embedding's ``attend`` giving the logits; the
cache's heads sharded over ``model``, the batch over ``data`` of a 2x4 mesh,
the cache donated.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "linen_selfattn_decode"
SIZES = {
    "small": dict(batch=4, max_len=8, vocab=32, d=32, heads=4, layers=2, prompt=3),
    "large": dict(batch=32, max_len=128, vocab=1024, d=256, heads=8, layers=4, prompt=16),
}


class Block(nn.Module):
    d: int
    heads: int
    decode: bool

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        mask = None if self.decode else nn.make_causal_mask(jnp.ones(x.shape[:2]))
        x = x + nn.SelfAttention(num_heads=self.heads, qkv_features=self.d, decode=self.decode)(
            h, mask=mask
        )
        h = nn.LayerNorm()(x)
        return x + nn.Dense(self.d)(nn.gelu(nn.Dense(4 * self.d)(h)))


class Decoder(nn.Module):
    vocab: int
    d: int
    heads: int
    layers: int
    decode: bool = False

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(self.vocab, self.d)
        x = embed(tokens)
        for _ in range(self.layers):
            x = Block(self.d, self.heads, self.decode)(x)
        return embed.attend(nn.LayerNorm()(x))


def make(size="small"):
    check_size(size)
    d = SIZES[size]
    mesh = make_mesh((2, 4), ("data", "model"))
    model = Decoder(d["vocab"], d["d"], d["heads"], d["layers"], decode=True)
    full = jnp.zeros((d["batch"], d["max_len"]), jnp.int32)
    variables = model.init(jax.random.key(0), full)
    params, cache = variables["params"], variables["cache"]
    rep = NamedSharding(mesh, P())
    cache_sh = jax.tree.map(
        lambda c: NamedSharding(mesh, P("data", None, "model", None)) if c.ndim == 4 else rep, cache
    )
    p_sh = jax.tree.map(
        lambda p: (
            NamedSharding(mesh, P(None, "model"))
            if p.ndim == 2 and p.shape[1] == 4 * d["d"]
            else rep
        ),
        params,
    )
    prompt = jax.device_put(
        RandomArrays(seed=1208).integers(d["vocab"], (d["batch"], d["prompt"])),
        NamedSharding(mesh, P("data")),
    )
    params, cache = jax.device_put(params, p_sh), jax.device_put(cache, cache_sh)

    def generate(params, cache, prompt):
        def step(i, carry):
            cache, tok, out = carry
            logits, mutated = model.apply(
                {"params": params, "cache": cache}, tok[:, None], mutable=["cache"]
            )
            nxt = jnp.where(
                i + 1 < prompt.shape[1],
                prompt[:, jnp.minimum(i + 1, prompt.shape[1] - 1)],
                jnp.argmax(logits[:, -1], -1).astype(jnp.int32),
            )
            return mutated["cache"], nxt, out.at[:, i].set(nxt)

        out = jnp.zeros((prompt.shape[0], d["max_len"]), jnp.int32)
        cache, _, out = jax.lax.fori_loop(0, d["max_len"] - 1, step, (cache, prompt[:, 0], out))
        return out, cache

    return Program(
        name=NAME,
        description="linen SelfAttention(decode=True) cache, greedy fori_loop decode, heads over 'model', 2x4",
        fun=generate,
        args=(params, cache, prompt),
        in_shardings=(p_sh, cache_sh, NamedSharding(mesh, P("data"))),
        out_shardings=None,
        mesh=mesh,
        donate_argnums=(1,),
    )
