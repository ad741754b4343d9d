"""The libzoo (``bench/libzoo``) at its small sizes: both of shardc's routes against ``jax.jit``.

Each libzoo program is written the way another library's users write theirs
(equinox's ``filter_jit`` and ``eqx.partition``, diffrax, orbax-checkpoint,
penzai, optax's combinators, chex, jaxtyping, jax's shard_map / custom_vjp /
pure_callback, flax NNX's sharding guides, lineax and optimistix, haiku, NumPyro, BlackJAX,
jraph, einops, mctx, jaxopt, tinygp, flashbax, pgx, sympy2jax, jaxlie and e3nn-jax, and Gemma's library where the ``gemma`` extra is installed), with the user's jit call routed
to shardc's ``jit`` on the shardc routes (``bench/libzoo/equinox_jit.py`` /
``nnx_jit.py`` for equinox's and flax NNX's wrappers of ``jax.jit``). The rules are the zoo's
(``test_zoo.py``'s tests, run here on the libzoo's rows): every program must
compile and run on shardc's default and cost-aware routes, return jax.jit's
results (bit for bit where jax.jit is bitwise deterministic), jax.jit's output
shardings, and no more collective bytes per device. Programs in
``bench.libzoo.ISOLATED`` are measured in a child process (one that can abort
the process fails its tests instead of ending the session). The rows are
measured in a worker process while the other tests run (``zoo_rows``). A program of
``bench.libzoo.OPTIONAL`` is skipped, saying so, only where its library is not
installed.
"""

import functools
import importlib.util
import sys

import pytest
import test_zoo as zoo_rules
import zoo_rows

from bench.libzoo import ISOLATED, OPTIONAL, REGISTRY
from bench.zoo import report

PROGRAMS = (
    "eqx_filter_jit", "eqx_partition_jit", "diffrax_neural_ode", "orbax_restore_step",
    "penzai_named_lm", "optax_multi_transform", "optax_multisteps", "chex_dataclass_state",
    "jaxtyping_mlp", "jax_host_callback_scan", "flax_nnx_sharded", "flax_nnx_scan_explicit",
    "eqx_batchnorm_state", "orbax_manager_reshard", "optax_lookahead_inject", "penzai_kv_decode",
    "eqx_scan_layers", "linen_logical_attention", "diffrax_dense_adjoints",
    "jax_custom_partitioning_fft", "eqx_unet_frozen", "optax_dpsgd",
    "eqx_scan_train_loop", "nnx_scan_remat_optimizer", "linen_scan_logical_dropout",
    "optax_adafactor_fsdp", "optax_lion_masked_ema", "eqx_mha_filter_grad", "lineax_cg_batched",
    "optimistix_lm_fit", "nnx_jit_train", "linen_lm_clip_adamw", "nnx_resnet_batchnorm",
    "nnx_lora_finetune", "eqx_vit_dropout", "eqx_lstm_lm", "diffrax_lotka_volterra",
    "penzai_gpt_neox_grad", "chex_ppo_gae", "linen_remat_scan", "linen_vmap_ensemble",
    "linen_seq2seq_masks", "linen_ddpm_unet", "nnx_scan_dropout_split",
    "optimistix_dogleg_batched", "penzai_gemma2_stack", "eqx_shard_map_tp",
    "eqx_rope_mha_lm", "eqx_while_fixed_point", "diffrax_implicit_lineax", "nnx_bn_train_eval",
    "linen_selfattn_decode", "jax_assoc_scan_lru", "optax_prodigy_fsdp", "linen_scan_rnn_broadcast",
    "diffrax_shark_sde", "nnx_seq_remat_filters", "jax_topp_sampling", "jax_fft_long_conv",
    "linen_conv_gn_ae", "nnx_scan_rngs_switch", "linen_int8_dot_general", "eqx_gru_ensemble",
    "jax_beam_search", "penzai_select_edits", "haiku_layer_stack", "numpyro_nuts_kernel",
    "blackjax_hmc_adaptation", "jraph_graph_network", "einops_attention",
    "mctx_muzero_policy", "jaxopt_lbfgs_logreg", "tinygp_gp_grad", "flashbax_replay_dqn",
    "pgx_connect4_selfplay", "sympy2jax_fit", "jaxlie_pose_graph",
    "e3nn_equivariant_mp",
)  # fmt: skip
# The library each program is written with (besides jax, optax and numpy).
LIBRARIES = {
    "eqx_filter_jit": "equinox", "eqx_partition_jit": "equinox", "diffrax_neural_ode": "diffrax",
    "orbax_restore_step": "orbax-checkpoint", "penzai_named_lm": "penzai",
    "optax_multi_transform": "optax", "optax_multisteps": "optax",
    "chex_dataclass_state": "chex", "jaxtyping_mlp": "jaxtyping",
    "jax_host_callback_scan": "jax", "gemma_train_step": "gemma",
    "flax_nnx_sharded": "flax", "flax_nnx_scan_explicit": "flax",
    "eqx_batchnorm_state": "equinox", "orbax_manager_reshard": "orbax-checkpoint",
    "optax_lookahead_inject": "optax", "penzai_kv_decode": "penzai",
    "eqx_scan_layers": "equinox", "linen_logical_attention": "flax",
    "diffrax_dense_adjoints": "diffrax", "jax_custom_partitioning_fft": "jax",
    "eqx_unet_frozen": "equinox", "optax_dpsgd": "optax",
    "eqx_scan_train_loop": "equinox", "nnx_scan_remat_optimizer": "flax",
    "linen_scan_logical_dropout": "flax", "optax_adafactor_fsdp": "optax",
    "optax_lion_masked_ema": "optax", "eqx_mha_filter_grad": "equinox",
    "lineax_cg_batched": "lineax", "optimistix_lm_fit": "optimistix",
    "nnx_jit_train": "flax", "linen_lm_clip_adamw": "flax", "nnx_resnet_batchnorm": "flax",
    "nnx_lora_finetune": "flax", "eqx_vit_dropout": "equinox", "eqx_lstm_lm": "equinox",
    "diffrax_lotka_volterra": "diffrax", "penzai_gpt_neox_grad": "penzai",
    "chex_ppo_gae": "chex", "linen_remat_scan": "flax", "linen_vmap_ensemble": "flax",
    "linen_seq2seq_masks": "flax", "linen_ddpm_unet": "flax", "nnx_scan_dropout_split": "flax",
    "optimistix_dogleg_batched": "optimistix", "penzai_gemma2_stack": "penzai",
    "eqx_shard_map_tp": "equinox", "eqx_rope_mha_lm": "equinox",
    "eqx_while_fixed_point": "equinox", "diffrax_implicit_lineax": "diffrax",
    "nnx_bn_train_eval": "flax", "linen_selfattn_decode": "flax", "jax_assoc_scan_lru": "jax",
    "optax_prodigy_fsdp": "optax", "linen_scan_rnn_broadcast": "flax",
    "diffrax_shark_sde": "diffrax", "nnx_seq_remat_filters": "flax", "jax_topp_sampling": "jax",
    "jax_fft_long_conv": "jax", "linen_conv_gn_ae": "flax", "nnx_scan_rngs_switch": "flax",
    "linen_int8_dot_general": "flax", "eqx_gru_ensemble": "equinox", "jax_beam_search": "jax",
    "penzai_select_edits": "penzai", "haiku_layer_stack": "dm-haiku",
    "numpyro_nuts_kernel": "numpyro", "blackjax_hmc_adaptation": "blackjax",
    "jraph_graph_network": "jraph", "einops_attention": "einops",
    "mctx_muzero_policy": "mctx", "jaxopt_lbfgs_logreg": "jaxopt", "tinygp_gp_grad": "tinygp",
    "flashbax_replay_dqn": "flashbax", "pgx_connect4_selfplay": "pgx",
    "sympy2jax_fit": "sympy2jax", "jaxlie_pose_graph": "jaxlie", "e3nn_equivariant_mp": "e3nn-jax",
}  # fmt: skip
# A child process measuring one program at the small size takes well under this.
ISOLATED_TIMEOUT_SECONDS = 600


def measure(name: str) -> dict:
    """One program measured on jax.jit and both shardc routes, in this process or
    (``ISOLATED``) in a child (never raises: the tests fail on the row)."""
    if name in ISOLATED:
        return report.measure_isolated("libzoo", name, ["--no-call-timing"],
                                       timeout=ISOLATED_TIMEOUT_SECONDS)  # fmt: skip
    return report.measure(REGISTRY[name]("small"))


@functools.cache
def measure_program(name: str) -> dict:
    """``measure(name)``, once per session: by the worker measuring the rows beside the
    other tests where it has (``zoo_rows``), else here."""
    return zoo_rows.take(__file__, name, measure)


@pytest.fixture(scope="module", params=[*PROGRAMS, *OPTIONAL])
def row(request) -> dict:
    name = request.param
    if name not in REGISTRY:
        pytest.skip(f"{OPTIONAL[name]} is not installed (the {OPTIONAL[name]} extra)")
    return measure_program(name)


# The zoo's rules, on the libzoo's rows (the ``row`` fixture above).
test_compiles_and_runs = zoo_rules.test_compiles_and_runs
test_jax_jit_runs_and_its_determinism_is_known = (
    zoo_rules.test_jax_jit_runs_and_its_determinism_is_known)
test_results_equal_jax_jit = zoo_rules.test_results_equal_jax_jit
test_output_shardings_equal_jax_jit = zoo_rules.test_output_shardings_equal_jax_jit
test_collective_bytes_at_most_jax_jit = zoo_rules.test_collective_bytes_at_most_jax_jit
test_cost_aware_never_more_bytes_or_memory_than_shardys_choices = (
    zoo_rules.test_cost_aware_never_more_bytes_or_memory_than_shardys_choices)


def test_libzoo_has_every_program_from_six_libraries():
    installed = tuple(name for name, library in OPTIONAL.items()
                      if importlib.util.find_spec(library) is not None)  # fmt: skip
    assert tuple(REGISTRY) == PROGRAMS + installed
    assert set(LIBRARIES) == set(PROGRAMS) | set(OPTIONAL)
    assert len(set(LIBRARIES[name] for name in PROGRAMS) - {"optax", "flax", "jax"}) >= 6


def test_isolated_child_reports_how_it_died(tmp_path, monkeypatch):
    """A child that aborts is a row naming the signal and the line that says why."""
    script = tmp_path / "abort.py"
    script.write_text("import os, sys\n"
                      "print('noise', file=sys.stderr)\n"
                      "print('F0000 RET_CHECK failure: leaf_count == 3', file=sys.stderr)\n"
                      "print('*** End stack trace ***', file=sys.stderr)\n"
                      "sys.stderr.flush(); os.abort()\n")  # fmt: skip
    # The child's interpreter, which runs the script whatever it is asked to run.
    launcher = tmp_path / "python-abort"
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    launcher.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(launcher))
    failed = report.measure_isolated("libzoo", "jaxtyping_mlp")
    assert failed["error"] == "process aborted by SIGABRT: RET_CHECK failure: leaf_count == 3"
    assert failed["jax_error"].startswith("not measured: process aborted by SIGABRT")
    assert "*** End stack trace ***" in failed["traceback"]
    assert "**failed**: process aborted by SIGABRT" in report.format_row(failed)
