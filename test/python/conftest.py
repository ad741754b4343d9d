"""Shared pytest set-up: 8 CPU devices, set before anything imports jax; the module
verified after every step of shardc's pipelines (``SHARDC_VERIFY_STEPS``), so a
step that breaks the IR fails as an ``InternalError`` naming it."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ["SHARDC_VERIFY_STEPS"] = "1"
