"""The object ``shardc.compiler.jit`` returns, apart from its lowering (``api``).

``options``: jit's keywords, validated and completed as ``jax.jit`` does it;
``caches``: what a jitted function keeps between calls, bounded and cleared as
jax's caches are; ``surface``: ``repr``, pickling, method binding and cache
control as jax.jit's object has them; ``binding``: the jit primitive a shardc
jit binds under an enclosing trace; ``calling``: calls through jax's C++
dispatch, and the executables they compile; ``annotated``: jax's module with
shardc's shardings written on it, and propagated; ``hitypes``: programs with
jax's high-level types; ``pjit``: jax's ``pjit`` on shardc's jit;
``unused_arguments``: the arguments a program never reads, left out of what XLA
compiles; ``donation``: jax.jit's warning for donated arguments no result can
reuse.
"""
