"""Sans-IO protocol cores and the kit they are built from (``stack``, ``views``, the layers and
rules). Importing this package registers every built-in protocol by name."""

from . import dps, gossip, poldercast, spidercast, stan, static_gossip  # noqa: F401  (register the built-in protocols)
from .registry import (
    ProtocolSpec,
    builtin_protocols,
    create_protocol,
    dissemination_params,
    protocol_config_class,
    protocol_names,
    protocol_spec,
    register_protocol,
)
from .stack import Dissemination, ExchangeLayer, Layer, Stack

__all__ = [
    "Dissemination", "ExchangeLayer", "Layer", "ProtocolSpec", "Stack", "builtin_protocols", "create_protocol",
    "dissemination_params", "protocol_config_class", "protocol_names", "protocol_spec", "register_protocol",
]
