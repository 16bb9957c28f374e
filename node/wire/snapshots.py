"""Snapshots in columns: the schema of a run directory's ``snapshots/*.parquet`` and the table of
a set of :class:`node.kit.types.NodeSnapshot` (the simulator's Python cores, or real peers'
``GetSnapshot``); the compiled PolderCast loop hands the same columns over directly."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

SNAPSHOT_SCHEMA = pa.schema([
    ("t_ns", pa.int64()), ("gossip_ns", pa.int64()), ("node", pa.int32()), ("layer", pa.string()),
    ("neighbours", pa.list_(pa.int32())), ("per_topic", pa.map_(pa.string(), pa.list_(pa.int32()))),
    ("topics", pa.list_(pa.string())),
])
"""One row per (node, layer): the layer's neighbours, its per-topic links (keys in name order)
and the node's topics (name order). ``gossip_ns`` is ``t_ns`` with the simulator's frozen
dissemination rounds left out (the overlay's own clock, which counts gossip cycles); ``t_ns``
where nothing was frozen."""


def snapshot_table(snaps: Iterable, t_ns: int, gossip_ns: int | None = None) -> pa.Table:
    """The rows of ``NodeSnapshot`` objects taken at ``t_ns``."""
    cols: dict[str, list] = {name: [] for name in SNAPSHOT_SCHEMA.names}
    for snap in snaps:
        topics = sorted(snap.topics)
        for layer in snap.layers:
            cols["node"].append(snap.node_id)
            cols["layer"].append(layer.layer)
            cols["neighbours"].append(list(layer.neighbours))
            cols["per_topic"].append(sorted(layer.per_topic.items()))
            cols["topics"].append(topics)
    rows = len(cols["node"])
    cols["t_ns"] = [t_ns] * rows
    cols["gossip_ns"] = [t_ns if gossip_ns is None else gossip_ns] * rows
    return pa.table(cols, schema=SNAPSHOT_SCHEMA)


def columns_table(layers: list[str], topics: list[str], columns: tuple, t_ns: int, gossip_ns: int) -> pa.Table:
    """The table of the columns a compiled loop hands over: its nodes (``len(layers)`` rows each);
    per row the neighbours (offsets, values), per-topic entries (offsets; each entry's topic
    number and links: offsets, values) and the node's topics (offsets, numbers)."""
    nodes, nb_off, nb, pt_off, pt_keys, pt_item_off, pt_items, tp_off, tp = columns
    names = pa.array(topics, pa.string())
    i32 = pa.int32()
    rows = len(nodes) * len(layers)
    return pa.table({
        "t_ns": pa.array(np.full(rows, t_ns, np.int64)), "gossip_ns": pa.array(np.full(rows, gossip_ns, np.int64)),
        "node": pa.array(np.repeat(np.asarray(nodes, np.int32), len(layers))),
        "layer": pa.array(layers * len(nodes), pa.string()),
        "neighbours": pa.ListArray.from_arrays(pa.array(nb_off, i32), pa.array(nb, i32)),
        "per_topic": pa.MapArray.from_arrays(pa.array(pt_off, i32), names.take(pa.array(pt_keys, pa.uint32())),
                                             pa.ListArray.from_arrays(pa.array(pt_item_off, i32), pa.array(pt_items, i32))),
        "topics": pa.ListArray.from_arrays(pa.array(tp_off, i32), names.take(pa.array(tp, pa.uint32()))),
    }, schema=SNAPSHOT_SCHEMA)
