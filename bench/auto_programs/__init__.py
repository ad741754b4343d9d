"""Train steps for the AUTO-sharding benchmark (``bench/auto_sharding.py``), each
written once and sharded by a ``Layout``: a Llama-like decoder (``llama``, dense
and ``moe``), a ViT (``vit``), a CNN (``cnn``) and, held out from AUTO's
tuning, an MLP-Mixer (``mixer``), GPT-2 with tied embeddings (``gpt2``), a
T5-like encoder-decoder (``t5``) and a ResNet with BatchNorm (``resnet``).

Each module holds ``NAME``, ``SIZES`` (``"small"`` for the 8 CPU devices the
benchmark compiles for, ``"large"`` for the 256- and 1024-device
``AbstractMesh``es it only predicts) and ``make(layout, size) -> (step, args)``:
the step ``(params, batch) -> (params, loss)`` (loss, gradients, an SGD
update) and its arguments as ``jax.ShapeDtypeStruct``s carrying the layout's
shardings (``layout.param`` / ``layout.batch``). ``layout.constrain`` marks the
activations an expert pins (a no-op where the layout leaves them open).
"""

from __future__ import annotations

from bench.auto_programs import cnn, gpt2, llama, mixer, moe, resnet, t5, vit
from bench.auto_programs.layout import CONFIGS, Layout, layout_for

PROGRAMS = {module.NAME: module for module in (llama, moe, vit, cnn, mixer, gpt2, t5, resnet)}

__all__ = ["CONFIGS", "PROGRAMS", "Layout", "layout_for"]
