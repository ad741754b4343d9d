"""Shared pytest set-up: 8 CPU devices, set before anything imports jax."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
