"""DPS (Anceaume et al. 2006): content-based semantic groups, leader-based or epidemic
(``protocol``: config, the layer and its registration; ``groups``: the messages and group
state; ``route``: publication routing; ``content``, ``semantic_tree``: filters and the tree)."""

from . import protocol  # noqa: F401  (registers dps)
