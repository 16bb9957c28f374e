"""Sans-IO protocol cores and the kit they are built from (``stack``, ``views``, the layers and
rules). Importing this package registers every protocol by name, including those of the modules
named in ``$OVERLAYLAB_PROTOCOLS``."""

from . import gossip, poldercast  # noqa: F401  (register "gossip", "poldercast")
from .registry import (
    ProtocolSpec, builtin_protocols, create_protocol, dissemination_params, load_plugins, protocol_config_class, protocol_names,
    protocol_spec, register_protocol,
)
from .stack import Dissemination, ExchangeLayer, Layer, Stack

load_plugins()

__all__ = [
    "Dissemination", "ExchangeLayer", "Layer", "ProtocolSpec", "Stack", "builtin_protocols", "create_protocol", "dissemination_params",
    "load_plugins", "protocol_config_class", "protocol_names", "protocol_spec", "register_protocol",
]
