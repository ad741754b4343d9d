"""AUTO's textbook seeds: each weight's roles read off how the program uses it, as experts
shard it (an LSTM's weights read in a scan's body, an input embedding, a position table)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType

from shardc.compiler import AUTO, jit
from shardc.compiler.auto.candidates import (
    UNSPLIT,
    model_width,
    structured_seeds,
    weight_roles,
)
from shardc.compiler.auto.evaluate import Evaluator
from shardc.compiler.cost.platforms import hardware

D, H, VOCAB, SEQ, BATCH, PATCH = 16, 32, 128, 8, 8, 12


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def _lstm(params, tokens, labels):
    """An LSTM language model: the gates widen the input (D -> 4H), the recurrent
    weight is read in the scan's body, the vocabulary (4H long, the commonest length)
    is a gathered table."""
    xs = params["tok"][tokens] @ params["wx"] + params["b"]

    def cell(carry, x):
        h, c = carry
        i, f, g, o = jnp.split(x + h @ params["wh"], 4, -1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    zeros = jnp.zeros((tokens.shape[0], H), xs.dtype)
    _, hs = jax.lax.scan(cell, (zeros, zeros), jnp.swapaxes(xs, 0, 1))
    logits = jnp.swapaxes(hs, 0, 1) @ params["head"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], -1))


def _patches(params, images):
    """A ViT's stem: raw patch features embedded (fewer than the width), a position
    table added, then an MLP."""
    x = images @ params["patch"] + params["position"]
    return jnp.mean((jnp.tanh(x @ params["fc"]) @ params["out"]) ** 2)


def _lstm_args():
    rng = np.random.default_rng(0)
    params = {"tok": rng.normal(size=(VOCAB, D)), "wx": rng.normal(size=(D, 4 * H)) / 4,
              "wh": rng.normal(size=(H, 4 * H)) / 6, "b": np.zeros(4 * H),
              "head": rng.normal(size=(H, VOCAB)) / 6}
    params = jax.tree.map(lambda a: a.astype(np.float32), params)
    tokens = rng.integers(0, VOCAB, size=(BATCH, SEQ)).astype(np.int32)
    return params, tokens, rng.integers(0, VOCAB, size=(BATCH, SEQ)).astype(np.int32)


def _patch_args():
    rng = np.random.default_rng(1)
    params = {"patch": rng.normal(size=(PATCH, 4 * D)), "position": rng.normal(size=(SEQ, 4 * D)),
              "fc": rng.normal(size=(4 * D, 4 * H)) / 8, "out": rng.normal(size=(4 * H, 4 * D)) / 8}
    params = jax.tree.map(lambda a: a.astype(np.float32), params)
    return params, rng.normal(size=(BATCH, SEQ, PATCH)).astype(np.float32)


def _seeds(mesh, loss, args):
    """Per parameter name, its roles and its FSDP x tensor-parallel seed."""
    step = jax.grad(loss)
    lowered = jit(step, mesh=mesh).trace(*args).lower(propagate=False)
    evaluator = Evaluator(lowered.module, hardware("cpu"), mesh)
    reader = evaluator.reader()
    names = sorted(args[0])  # the flattened parameter dict, then the data
    values = [evaluator.arguments[k] for k in range(len(names))]
    shapes = [args[0][n].shape for n in names]
    updated = [True] * len(names)
    width = model_width(shapes, updated)
    roles = [weight_roles(reader, v, width, frozenset(values)) for v in values]
    _, specs = structured_seeds(shapes, updated, list(mesh.shape.items()), roles)[3]
    return {n: (r, s) for n, r, s in zip(names, roles, specs)}


def test_an_lstms_weights_take_the_roles_its_dots_give_them(mesh):
    # 4H = VOCAB is the commonest length, yet no weight's embedding: the widening
    # gates contract the input (FSDP) and split their gates (tensor parallel), the
    # recurrent weight read inside the scan the same, the table its vocabulary.
    seeds = _seeds(mesh, _lstm, _lstm_args())
    assert seeds["wx"][1] == (("data",), ("model",))
    assert seeds["wh"][1] == (("data",), ("model",))
    assert seeds["head"][1] == (("data",), ("model",))
    assert seeds["tok"][1] == (("model",), ("data",))


def test_an_input_embedding_writes_the_width_though_it_widens(mesh):
    # The patch projection reads the data alone: it writes into the residual stream
    # (its free dimension the embedding), though it widens its few raw features as
    # an MLP's first layer widens the embedding.
    seeds = _seeds(mesh, _patches, _patch_args())
    assert seeds["patch"] == ((1, 0), (("model",), ("data",)))
    assert seeds["fc"][1] == (("data",), ("model",))
    assert seeds["out"][1] == (("model",), ("data",))


def test_a_table_added_to_the_activations_is_not_split_over_the_model_axis(mesh):
    # The position table lies along the activations it is added to (patches, width):
    # neither dimension is heads or hidden units. Split over the model axis by its
    # lengths, it had split every activation's patches there (a ViT on 4x2: MaxText's
    # state priced 1.17x the expert's, who writes it (None, embed)).
    seeds = _seeds(mesh, _patches, _patch_args())
    assert seeds["position"] == ((1, UNSPLIT), ((), ("data",)))


def _time_mlp(params, t):
    """A diffusion model's time embedding: sinusoidal features of the timesteps, then
    an MLP."""
    freqs = jnp.exp(-jnp.arange(2 * D) / (2 * D))
    emb = jnp.concatenate([jnp.sin(t[:, None] * freqs), jnp.cos(t[:, None] * freqs)], -1)
    return jnp.mean((jax.nn.silu(emb @ params["w1"]) @ params["w2"]) ** 2)


def test_features_computed_from_the_data_feed_an_ordinary_mlp(mesh):
    # Only raw data (reshaped at most) is an input embedding's operand: the sinusoidal
    # features are computed, and their MLP's first layer contracts the embedding.
    rng = np.random.default_rng(2)
    params = {"w1": rng.normal(size=(4 * D, 4 * D)).astype(np.float32) / 8,
              "w2": rng.normal(size=(4 * D, 4 * D)).astype(np.float32) / 8}
    seeds = _seeds(mesh, _time_mlp, (params, rng.uniform(size=(BATCH,)).astype(np.float32)))
    assert seeds["w1"][1] == (("data",), ("model",))


def _latent_moe(params, x):
    """Attention's K/V through a low-rank latent (width -> width/2 -> width), and a
    router's few experts weighting the experts' MLPs."""
    x = jnp.tanh(x @ params["embed"])
    latent = x @ params["down"]
    k, v = latent @ params["up_k"], latent @ params["up_v"]
    q = x @ params["q"]
    attended = jax.nn.softmax(jnp.einsum("bsd,btd->bst", q, k), -1) @ v
    h = x + attended @ params["o"]
    gates = jax.nn.softmax(h @ params["router"], -1)  # (b, s, experts)
    hidden = jax.nn.relu(jnp.einsum("bsd,edf->bsef", h, params["w_in"])) * gates[..., None]
    return jnp.mean((h + jnp.einsum("bsef,efd->bsd", hidden, params["w_out"])) ** 2)


def test_a_low_rank_factor_and_a_router_are_not_split_over_the_model_axis(mesh):
    # The latent's rank (width/2) is narrower than the width and contracted again by
    # the up projection; the router writes 4 experts (width/16): neither is worth
    # splitting over the model axis (MaxText's (embed, None)), though each contracts
    # the embedding as q does. The experts' own weights keep expert parallelism.
    rng = np.random.default_rng(3)
    width, experts = 4 * D, 4
    shapes = {"embed": (D, width), "down": (width, width // 2),
              "up_k": (width // 2, width), "up_v": (width // 2, width),
              "q": (width, width), "o": (width, width), "router": (width, experts),
              "w_in": (experts, width, H), "w_out": (experts, H, width)}
    params = {name: (rng.normal(size=shape) / 8).astype(np.float32)
              for name, shape in shapes.items()}
    seeds = _seeds(mesh, _latent_moe, (params, rng.normal(size=(BATCH, SEQ, D)).astype(np.float32)))
    assert seeds["down"][1] == (("data",), ())
    assert seeds["router"][1] == (("data",), ())
    assert seeds["q"][1] == (("data",), ("model",))
    assert seeds["up_k"][1][1] == seeds["up_v"][1][1] == ("model",)
    assert seeds["w_in"][1] == (("model",), ("data",), ())


def test_auto_on_an_lstm_runs_as_jax_jit_given_its_shardings(mesh):
    args = _lstm_args()
    step = jax.value_and_grad(_lstm)
    lowered = jit(step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(*args)
    got = lowered.compile()(*args)
    want = jax.jit(step, in_shardings=lowered.in_shardings[0],
                   out_shardings=lowered.out_shardings)(*args)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        assert a.sharding.is_equivalent_to(b.sharding, a.ndim)
