"""Arguments jax.jit takes that shardc's jit must take alike: pytrees whose nodes check
their leaves when built, and programs with jax's high-level ("hijax") types
lowered ahead of time (``lower()``, ``trace()``, ``compile()``), compared with
``jax.jit``. (Calls of hijax programs: test_hijax.py.)
"""

import jax
import numpy as np
from jax.experimental import random as exp_random

from shardc.compiler import jit


def test_argument_whose_pytree_checks_its_leaves():
    # StatefulPRNG refuses to be built around anything but a typed key and a Ref:
    # shardc traces it by its own values, as jax.jit does.
    draw = lambda rng: rng.uniform(size=5)  # noqa: E731
    ours_rng, theirs_rng = exp_random.stateful_rng(7), exp_random.stateful_rng(7)
    first, second = jit(draw)(ours_rng), jit(draw)(ours_rng)
    np.testing.assert_array_equal(first, jax.jit(draw)(theirs_rng))
    np.testing.assert_array_equal(second, jax.jit(draw)(theirs_rng))
    assert (first != second).all()
