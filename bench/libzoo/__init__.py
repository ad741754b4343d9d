"""The libzoo: JAX programs written the way other libraries' users write them.

Where ``bench/zoo`` holds flax / optax programs, the libzoo holds programs of
equinox (an ``eqx.nn`` transformer trained under ``eqx.filter_jit`` with
``eqx.filter_shard``, and a model split by ``eqx.partition`` / ``eqx.combine``
under ``jax.jit``), diffrax (a neural ODE, Tsit5 with an adaptive step and
``SaveAt``, its loss differentiated), orbax-checkpoint (a sharded train state
saved and restored onto its shardings, then stepped), penzai (a named-axis
``pz.nn`` model with a sharded embedding table), optax's combinators
(``multi_transform`` with a label tree and ``None`` parameters, ``chain`` of
``clip_by_global_norm`` and ``adamw``, ``MultiSteps``), chex (a
``chex.dataclass`` state and chex's shape asserts) and jaxtyping (a model typed
with ``Float[Array, "batch features"]`` and checked under ``jaxtyped``),
jax's own extension points (``shard_map``, ``custom_vjp``, ``pure_callback``,
``lax.scan`` with ``jax.checkpoint``); then flax NNX as its sharding guides
write it (``nnx.with_partitioning`` kernels pinned to
``nnx.get_partition_spec`` inside ``nnx.jit``, an ``nnx.Optimizer`` step
through ``nnx.split`` / ``nnx.merge``; blocks made by ``nnx.vmap`` and run by
``nnx.scan`` + ``nnx.remat`` on a mesh of Explicit axes), equinox's stateful
``BatchNorm`` (``eqx.nn.make_with_state``, ``vmap(axis_name=...)``), a flax
linen ``TrainState`` saved by orbax's ``CheckpointManager`` and restored
with ``ArrayRestoreArgs`` onto another mesh, ``optax.lookahead`` over
``inject_hyperparams``, and penzai's KV-cached sampling mode decoding
greedily; equinox layers stacked by ``eqx.filter_vmap`` and scanned
(``eqx.partition`` / ``combine``, ``eqx.nn.Shared``, ``StateIndex``), a flax
linen decoder sharded by logical names (``MultiHeadDotProductAttention``,
``with_logical_constraint``, a ``TrainState``), and diffrax's dense output,
``BacksolveAdjoint`` and stiff ``Kvaerno3`` on a sharded batch; a spectral layer
whose FFT is a ``jax.experimental.custom_partitioning`` op (jax docs' partition
rule with a ``sharding_rule`` for Shardy) and an equinox U-Net (``Conv2d``,
``GroupNorm``, pooling, ``ConvTranspose2d``) trained with its head frozen by
``eqx.tree_at`` + ``eqx.partition``; optax's differentially private SGD
(``optax.contrib.dpsgd``) on per-example gradients (``vmap`` of ``grad``) over a
batch split eight ways; an equinox model trained by a ``lax.scan`` of optax steps
over stacked batches in one jitted call (``eqx.partition`` / ``eqx.combine`` carry); flax NNX
blocks built by ``nnx.vmap`` and run by ``nnx.scan`` over ``nnx.remat`` with an
``nnx.Optimizer`` on a warmup-cosine schedule, and flax linen's ``nn.scan(nn.remat(...))``
with dropout sharded by ``nn.logical_to_mesh_sharding``; optax's ``adafactor`` under
``apply_if_finite`` on an FSDP MLP, and Lion with masked weight decay and an EMA of
the parameters; an equinox ``MultiheadAttention`` encoder trained by ``eqx.filter_grad``;
lineax's conjugate gradients and optimistix's Levenberg-Marquardt, vmapped over
sharded batches; and flax NNX's ``nnx.jit`` over the modules it updates in place
(``nnx.Optimizer``, ``nnx.MultiMetric``, ``BatchNorm``, ``Dropout``); a flax linen LM
sharded by ``nn.with_logical_partitioning`` with dropout and ``clip_by_global_norm`` +
``adamw``, an NNX ResNet (``BatchNorm``) on a batch split over two axes, NNX LoRA
fine-tuning (``nnx.LoRALinear``, ``wrt=nnx.LoRAParam``), an equinox ViT
(``MultiheadAttention``, ``Dropout``) and an ``LSTMCell`` LM scanned, diffrax's Lotka-Volterra
solved for a batch with ``jacfwd`` through ``ForwardMode``, penzai's GPT-NeoX builder
differentiated by axis name and a PPO update in ``chex.dataclass`` state; a flax linen MLP
stacked by ``nn.remat_scan`` on a batch over two axes, an ``nn.vmap`` critic ensemble sharded
over its ensemble axis, a linen encoder-decoder under
padding / causal / cross-attention masks and a DDPM U-Net (``GroupNorm``, ``ConvTranspose``),
NNX blocks with per-layer ``Dropout`` streams made by ``nnx.vmap`` and scanned under
``nnx.split`` / ``nnx.merge`` in a plain ``jax.jit``, optimistix's ``Dogleg`` fits vmapped
over a batch, penzai's Llama-like builder configured like Gemma 2 in a ``LayerStack``, and
an equinox LM whose MLP is a ``jax.shard_map`` inside the module; an equinox LM with
rotary ``MultiheadAttention`` and a vocabulary-sharded ``Embedding``, a deep-equilibrium
layer differentiated through ``eqx.internal.while_loop(kind='checkpointed')``, diffrax's
``ImplicitEuler`` with an ``optimistix.Newton`` / ``lineax.LU`` root finder fitted by its
gradient, an NNX ``BatchNorm`` CNN trained and evaluated in one ``nnx.jit`` under the
sharding guide's ``get_partition_spec`` constraint, linen's ``SelfAttention(decode=True)``
cache decoding greedily in a ``fori_loop``, linear recurrent units over complex64 by
``lax.associative_scan``, ``optax.contrib.prodigy`` on an FSDP MLP and linen's
``nn.Bidirectional`` GRUs with an ``nn.scan`` cell taking an ``nn.broadcast`` input; diffrax's
``ShARK`` on a space-time Levy-area ``VirtualBrownianTree``, NNX blocks under ``nnx.remat``
trained through filters (``nnx.DiffState``, ``wrt=nnx.All(...)``), top-p / top-k sampling
(``argsort``, ``cumsum``, ``top_k``) over typed key arrays, an FFT long convolution with a
``custom_jvp`` gate and a linen ``nn.Sequential`` conv autoencoder (``GroupNorm``,
``max_pool``, ``ConvTranspose``); NNX blocks made by ``nnx.vmap`` over split RNG streams,
scanned and branching by ``nnx.switch`` / ``nnx.cond``, a linen classifier whose ``nn.Dense``
layers run an injected int8 ``dot_general`` (``preferred_element_type=int32``) with an
``nn.Einsum`` head, an ensemble of equinox ``GRUCell`` classifiers trained by
``eqx.filter_vmap(in_axes=eqx.if_array(0))`` under ``eqx.error_if`` and evaluated in
``eqx.nn.inference_mode``, beam search by ``lax.top_k`` and a multi-operand ``lax.sort``, and
a penzai MLP edited by ``pz.select`` (dropout and ``LayerNorm`` inserted); a haiku LM whose
``hk.remat`` blocks are stacked by ``hk.experimental.layer_stack``, NumPyro's NUTS
``sample_kernel`` scanned, BlackJAX's HMC under dual-averaging step-size adaptation, jraph's
``GraphConvolution`` and ``GraphNetwork`` over an edge list split eight ways and an attention
block written with einops (``rearrange``, ``einsum``, ``pack``); mctx's ``muzero_policy``
search over an MLP ``recurrent_fn`` distilled into the policy net, jaxopt's ``LBFGS`` with an
implicit-differentiation hypergradient and vmapped ``ProjectedGradient`` box QPs, tinygp's
``GaussianProcess`` log-likelihood gradients vmapped over datasets, a flashbax replay buffer
donated through a DQN step and pgx's Connect Four self-play by vmapped ``init`` / ``step``; sympy
expressions' constants fitted by a ``lax.scan`` of adam steps through sympy2jax's
``SymbolicModule`` and jaxlie's ``SE3`` pose graphs descended on the manifold
(``manifold.grad`` / ``rplus``); an e3nn-jax equivariant message-passing layer
(``spherical_harmonics``, ``tensor_product``, ``scatter_sum``) whose forces are its energy's
gradient. Where the
``gemma`` extra is installed (it needs tensorflow), Gemma's library (a small ``gm.nn.Transformer``
trained with optax). Each module holds one
program, with the zoo's interface (``NAME``, ``SIZES``, ``make(size) ->
Program``); the user's jit call goes to the route's jit: ``jax.jit`` itself, or
``eqx.filter_jit`` / ``nnx.jit`` built on it (``equinox_jit``, ``nnx_jit``). ``python -m bench.zoo --zoo
libzoo`` measures them; ``test/python/test_libzoo.py`` holds shardc to jax.jit
on them. A program in ``ISOLATED`` is measured in a child process.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterable

from bench.libzoo import (
    blackjax_hmc_adaptation,
    chex_dataclass_state,
    chex_ppo_gae,
    diffrax_dense_adjoints,
    diffrax_implicit_lineax,
    diffrax_lotka_volterra,
    diffrax_neural_ode,
    diffrax_shark_sde,
    e3nn_equivariant_mp,
    einops_attention,
    eqx_batchnorm_state,
    eqx_filter_jit,
    eqx_gru_ensemble,
    eqx_lstm_lm,
    eqx_mha_filter_grad,
    eqx_partition_jit,
    eqx_rope_mha_lm,
    eqx_scan_layers,
    eqx_scan_train_loop,
    eqx_shard_map_tp,
    eqx_unet_frozen,
    eqx_vit_dropout,
    eqx_while_fixed_point,
    flashbax_replay_dqn,
    flax_nnx_scan_explicit,
    flax_nnx_sharded,
    haiku_layer_stack,
    jax_assoc_scan_lru,
    jax_beam_search,
    jax_custom_partitioning_fft,
    jax_fft_long_conv,
    jax_host_callback_scan,
    jax_topp_sampling,
    jaxlie_pose_graph,
    jaxopt_lbfgs_logreg,
    jaxtyping_mlp,
    jraph_graph_network,
    lineax_cg_batched,
    linen_conv_gn_ae,
    linen_ddpm_unet,
    linen_int8_dot_general,
    linen_lm_clip_adamw,
    linen_logical_attention,
    linen_remat_scan,
    linen_scan_logical_dropout,
    linen_scan_rnn_broadcast,
    linen_selfattn_decode,
    linen_seq2seq_masks,
    linen_vmap_ensemble,
    mctx_muzero_policy,
    nnx_bn_train_eval,
    nnx_jit_train,
    nnx_lora_finetune,
    nnx_resnet_batchnorm,
    nnx_scan_dropout_split,
    nnx_scan_remat_optimizer,
    nnx_scan_rngs_switch,
    nnx_seq_remat_filters,
    numpyro_nuts_kernel,
    optax_adafactor_fsdp,
    optax_dpsgd,
    optax_lion_masked_ema,
    optax_lookahead_inject,
    optax_multi_transform,
    optax_multisteps,
    optax_prodigy_fsdp,
    optimistix_dogleg_batched,
    optimistix_lm_fit,
    orbax_manager_reshard,
    orbax_restore_step,
    penzai_gemma2_stack,
    penzai_gpt_neox_grad,
    penzai_kv_decode,
    penzai_named_lm,
    penzai_select_edits,
    pgx_connect4_selfplay,
    sympy2jax_fit,
    tinygp_gp_grad,
)
from bench.models import make_programs as _make_programs
from bench.models.program import SIZES, Program

_MODULES = (
    eqx_filter_jit,
    eqx_partition_jit,
    diffrax_neural_ode,
    orbax_restore_step,
    penzai_named_lm,
    optax_multi_transform,
    optax_multisteps,
    chex_dataclass_state,
    jaxtyping_mlp,
    jax_host_callback_scan,
    flax_nnx_sharded,
    flax_nnx_scan_explicit,
    eqx_batchnorm_state,
    orbax_manager_reshard,
    optax_lookahead_inject,
    penzai_kv_decode,
    eqx_scan_layers,
    linen_logical_attention,
    diffrax_dense_adjoints,
    jax_custom_partitioning_fft,
    eqx_unet_frozen,
    optax_dpsgd,
    eqx_scan_train_loop,
    nnx_scan_remat_optimizer,
    linen_scan_logical_dropout,
    optax_adafactor_fsdp,
    optax_lion_masked_ema,
    eqx_mha_filter_grad,
    lineax_cg_batched,
    optimistix_lm_fit,
    nnx_jit_train,
    linen_lm_clip_adamw,
    nnx_resnet_batchnorm,
    nnx_lora_finetune,
    eqx_vit_dropout,
    eqx_lstm_lm,
    diffrax_lotka_volterra,
    penzai_gpt_neox_grad,
    chex_ppo_gae,
    linen_remat_scan,
    linen_vmap_ensemble,
    linen_seq2seq_masks,
    linen_ddpm_unet,
    nnx_scan_dropout_split,
    optimistix_dogleg_batched,
    penzai_gemma2_stack,
    eqx_shard_map_tp,
    eqx_rope_mha_lm,
    eqx_while_fixed_point,
    diffrax_implicit_lineax,
    nnx_bn_train_eval,
    linen_selfattn_decode,
    jax_assoc_scan_lru,
    optax_prodigy_fsdp,
    linen_scan_rnn_broadcast,
    diffrax_shark_sde,
    nnx_seq_remat_filters,
    jax_topp_sampling,
    jax_fft_long_conv,
    linen_conv_gn_ae,
    nnx_scan_rngs_switch,
    linen_int8_dot_general,
    eqx_gru_ensemble,
    jax_beam_search,
    penzai_select_edits,
    haiku_layer_stack,
    numpyro_nuts_kernel,
    blackjax_hmc_adaptation,
    jraph_graph_network,
    einops_attention,
    mctx_muzero_policy,
    jaxopt_lbfgs_logreg,
    tinygp_gp_grad,
    flashbax_replay_dqn,
    pgx_connect4_selfplay,
    sympy2jax_fit,
    jaxlie_pose_graph,
    e3nn_equivariant_mp,
)
# Programs of a library too heavy for the ``libzoo`` extra (gemma brings kauldron and
# tensorflow: the ``gemma`` extra), registered only where it is installed: program name
# -> the module it needs.
OPTIONAL = {"gemma_train_step": "gemma"}
_MODULES += tuple(
    importlib.import_module(f"bench.libzoo.{name}")
    for name, library in OPTIONAL.items() if importlib.util.find_spec(library) is not None
)  # fmt: skip
REGISTRY: dict[str, Callable[[str], Program]] = {module.NAME: module.make for module in _MODULES}
# Programs measured in a child process of their own (``report.measure_isolated``) by
# ``python -m bench.zoo --zoo libzoo`` and the test: diffrax's solve is a while loop
# whose partitioned module XLA has aborted the process on (a failed RET_CHECK).
ISOLATED = ("diffrax_neural_ode", "diffrax_dense_adjoints", "diffrax_lotka_volterra",
            "diffrax_implicit_lineax")


def make_programs(size: str = "small", only: Iterable[str] | None = None) -> list[Program]:
    """Build the libzoo programs named in ``only`` (all when ``None``), in registry order."""
    return _make_programs(size, only, registry=REGISTRY)


__all__ = ["ISOLATED", "OPTIONAL", "REGISTRY", "SIZES", "Program", "make_programs"]
