"""Sans-IO protocol cores. Importing this package registers every protocol by name."""

from . import gossip, poldercast  # noqa: F401  (register "gossip", "poldercast")
from .base import Protocol, create_protocol, protocol_config_class, protocol_names, register_protocol
from .types import *  # noqa: F403

__all__ = ["Protocol", "create_protocol", "protocol_config_class", "protocol_names", "register_protocol"]
