"""shardc-opt with one user sharding rule registered (for user_rules.mlir).

Registers ``@my_matmul`` as ``ij,jk->ik`` with ``j`` a reduction factor, the
way a program that calls a custom kernel through ``jax.ffi`` would, then runs
the ordinary ``shardc-opt`` entry point on the remaining arguments.
"""

import sys

from shardc.compiler import register_sharding_rule
from shardc.tools.shardc_opt import main

register_sharding_rule("my_matmul", "ij,jk->ik", reduction="j")
sys.exit(main(sys.argv[1:]))
