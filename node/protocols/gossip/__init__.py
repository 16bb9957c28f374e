"""Interest-aware gossip over CYCLON (``protocol``: the rule, its config and registration)."""

from . import protocol  # noqa: F401  (registers gossip)
