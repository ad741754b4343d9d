"""Execution of shardc-compiled programs (compile through XLA, run, wrap results)."""
