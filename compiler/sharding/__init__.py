"""Sharding values shared by every layer above, and the factor sharding rules.

``axes`` (mesh axes and sub-axes) and ``tensor`` (a tensor's sharding, its text
form, and a tensor's shape, element bytes and sharding) are the plain values
propagation, the cost model, checks and explain all read; ``walker`` visits
every sharding an IR module holds. ``rule`` holds the factor-based
``OpShardingRule``, ``builder`` the ``RuleBuilder`` that numbers factors the way
Shardy does, ``rules`` the per-op-family table that maps each StableHLO/sdy op
to its rule, and ``user_rules`` the rules users register.
"""
