"""The built-in protocols, a folder each: its registration (``protocol.py``: config, build,
``register_protocol``), its layers and rules, and its messages. The registry
(:mod:`node.kit.registry`) imports a folder when its protocol is first asked for by name; no
module here imports another protocol's folder except for a layer or rule it reuses (CYCLON,
the interest-aware gossip)."""
