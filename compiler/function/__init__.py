"""The object ``shardc.compiler.jit`` returns, apart from lowering and calling.

``options``: jit's keywords, validated and completed as ``jax.jit`` does it;
``caches``: what a jitted function keeps between calls, bounded and cleared as
jax's caches are; ``surface``: ``repr``, pickling, method binding and cache
control as jax.jit's object has them; ``binding``: the jit primitive a shardc
jit binds under an enclosing trace.
"""
