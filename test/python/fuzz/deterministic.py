"""Hypothesis settings shared by the property tests: deterministic, replayable runs.

Every run draws the same examples (``derandomize``), keeps no example database,
and lets slow or heavily filtered strategies run (the programs are costly to
compile, and their grammars filter), so CI and a local run see the same cases.
"""

from hypothesis import HealthCheck

SKIPPED_HEALTH_CHECKS = [HealthCheck.too_slow, HealthCheck.filter_too_much,
                         HealthCheck.data_too_large]


def settings_kwargs(*more_skipped: HealthCheck) -> dict:
    """Keyword arguments for ``hypothesis.settings`` (add ``max_examples``)."""
    return dict(deadline=None, derandomize=True, database=None, print_blob=False,
                suppress_health_check=[*SKIPPED_HEALTH_CHECKS, *more_skipped])
