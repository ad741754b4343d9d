"""shardc's benchmarks: programs (``bench.models``, ``bench.zoo``) and the scripts that
measure shardc on them against ``jax.jit``, XLA and jaxlib's native Shardy.

Run each script as a module from the repository root, e.g. ``python -m bench.e2e``,
``python -m bench.zoo`` or ``python -m bench.propagation --help``; the tests import
the same modules (pytest puts the repository root on the import path).

Nothing here imports jax: each script sets ``XLA_FLAGS`` for its 8 CPU devices
before jax creates its backend.
"""
