"""Command-line tools of shardc (``shardc-opt``)."""
