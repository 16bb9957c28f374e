"""The kit protocols are built from: typed messages and actions (``types``), the stack of layers
and its dissemination rule (``stack``), views (``views``), the protocol registry (``registry``),
the one interpreter of actions (``interpret``) and link emulation (``links``). The protocols
themselves live in :mod:`node.protocols`, one folder each; the registry finds them by name."""

from node.kit.registry import (
    ProtocolSpec,
    builtin_protocols,
    create_protocol,
    dissemination_params,
    protocol_config_class,
    protocol_names,
    protocol_spec,
    register_protocol,
)
from node.kit.stack import Dissemination, ExchangeLayer, Layer, Stack

__all__ = [
    "Dissemination", "ExchangeLayer", "Layer", "ProtocolSpec", "Stack", "builtin_protocols", "create_protocol",
    "dissemination_params", "protocol_config_class", "protocol_names", "protocol_spec", "register_protocol",
]
