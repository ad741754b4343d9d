"""Execution of shardc-compiled programs: compile through XLA, place, run, wrap.

Public surface: ``Compiled`` (what ``Lowered.compile()`` returns), the argument
and result handler registries, the collectives report, and the multi-process
helpers ``host_local_to_global`` / ``global_to_host_local``.
"""

from shardc.runtime.arguments import register_argument_handler
from shardc.runtime.compiled import Compiled
from shardc.runtime.multihost import global_to_host_local, host_local_to_global
from shardc.runtime.results import register_result_handler

__all__ = [
    "Compiled",
    "global_to_host_local",
    "host_local_to_global",
    "register_argument_handler",
    "register_result_handler",
]
