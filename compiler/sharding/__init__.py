"""Sharding data shared by shardc's propagation passes.

``rule`` holds the factor-based ``OpShardingRule`` value, ``builder`` the
``RuleBuilder`` that fixes factor numbering the way Shardy does, and ``rules``
the per-op-family registry that maps each StableHLO/sdy op to its rule.
"""
