"""Beam search decoding with ``lax.top_k`` and a multi-operand ``lax.sort``.

A small recurrent LM decodes a batch greedily-by-beams in a ``lax.fori_loop``: the carry holds
each batch element's beams (tokens so far, scores, finished flags, lengths, hidden states);
every step scores ``beams x vocabulary`` candidates with ``log_softmax``, keeps the best by
``lax.top_k`` over the flattened candidates, follows the parent beams with
``jnp.take_along_axis`` and keeps finished beams on the end-of-sequence token. The beams are
ranked by length-normalised score with ``lax.sort`` over (score, length, beam index) and
``num_keys=2``. Hidden states over ``data``, the vocabulary projection over ``model`` of a
2x4 mesh.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.models.program import Program, RandomArrays, check_size, make_mesh

NAME = "jax_beam_search"
SIZES = {
    "small": dict(batch=8, beams=4, vocab=64, d=32, steps=6),
    "large": dict(batch=32, beams=8, vocab=4096, d=256, steps=16),
}
END_OF_SEQUENCE = 1


def make(size: str = "small") -> Program:
    check_size(size)
    dims = SIZES[size]
    batch, beams, vocab = dims["batch"], dims["beams"], dims["vocab"]
    mesh = make_mesh((2, 4), ("data", "model"))
    rand = RandomArrays(seed=1413)

    def sharding(*spec):
        return NamedSharding(mesh, P(*spec))

    params = jax.device_put(
        {"embed": rand.weight((vocab, dims["d"])), "w": rand.weight((dims["d"], dims["d"])),
         "out": rand.weight((dims["d"], vocab))},
        {"embed": sharding(), "w": sharding(), "out": sharding(None, "model")},
    )  # fmt: skip
    h0 = jax.device_put(rand.normal((batch, dims["d"])), sharding("data"))

    def decode(params, h0):
        tokens = jnp.zeros((batch, beams, dims["steps"] + 1), jnp.int32)
        scores = jnp.concatenate([jnp.zeros((batch, 1)), jnp.full((batch, beams - 1), -1e9)], 1)
        finished = jnp.zeros((batch, beams), bool)
        lengths = jnp.zeros((batch, beams), jnp.int32)
        h = jnp.broadcast_to(h0[:, None], (batch, beams, dims["d"]))

        def step(t, carry):
            tokens, scores, finished, lengths, h = carry
            h = jnp.tanh(h @ params["w"] + params["embed"][tokens[:, :, t]])
            log_probs = jax.nn.log_softmax(h @ params["out"], axis=-1)
            only_end = jnp.where(jnp.arange(vocab) == END_OF_SEQUENCE, 0.0, -1e9)
            log_probs = jnp.where(finished[..., None], only_end, log_probs)
            candidates = (scores[..., None] + log_probs).reshape(batch, beams * vocab)
            scores, best = lax.top_k(candidates, beams)
            parent, token = best // vocab, best % vocab
            tokens = jnp.take_along_axis(tokens, parent[..., None], axis=1)
            tokens = tokens.at[:, :, t + 1].set(token)
            was_finished = jnp.take_along_axis(finished, parent, axis=1)
            lengths = jnp.take_along_axis(lengths, parent, axis=1) + (~was_finished)
            h = jnp.take_along_axis(h, parent[..., None], axis=1)
            return tokens, scores, was_finished | (token == END_OF_SEQUENCE), lengths, h

        tokens, scores, finished, lengths, _ = lax.fori_loop(
            0, dims["steps"], step, (tokens, scores, finished, lengths, h))
        normalised = scores / jnp.maximum(lengths, 1).astype(jnp.float32) ** 0.6
        beam_ids = jnp.broadcast_to(jnp.arange(beams), (batch, beams))
        ranked, _, order = lax.sort((-normalised, -lengths, beam_ids), dimension=1, num_keys=2)
        best = jnp.take_along_axis(tokens, order[:, :1, None], axis=1)[:, 0]
        return best, -ranked, finished

    return Program(
        name=NAME,
        description="beam search in a fori_loop: lax.top_k over beams x vocabulary,"
        " take_along_axis parents, multi-operand lax.sort (num_keys=2), 2x4",
        fun=decode,
        args=(params, h0),
        in_shardings=None,
        out_shardings=None,
        mesh=mesh,
    )
