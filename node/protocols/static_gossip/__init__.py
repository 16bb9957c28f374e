"""Interest-aware gossip on a static graph (Ferretti et al.): ``topology`` holds the graph the
controller hands over, ``protocol`` the rule and its registration."""

from . import protocol  # noqa: F401  (registers static_gossip)
