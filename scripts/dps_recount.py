"""DPS Table 1 shares of a content run recounted without Spark, from the plan's filters and the
spans, and the contacted floor (controller/experiment/content_workloads.py) recounted predicate by predicate
with analysis/filters.py: `python scripts/dps_recount.py RUN_DIR` (node ids 0..N-1, one filter
per node)."""
import json
import sys
from collections import defaultdict

import numpy as np
import pyarrow.parquet as pq

from analysis import filters
from controller.experiment.content_workloads import matching_matrix
from node.protocols.dps.content import parse_event, parse_filter

rd = sys.argv[1]
subs = {json.loads(l)["node"]: json.loads(l)["topics"][0] for l in open(rd + "/subscriptions.jsonl")}
t = pq.read_table(rd + "/traces/spans.parquet", columns=["name", "node", "event_id", "topic"])
name, node, eid, topic = (t.column(c).to_numpy(zero_copy_only=False) for c in ("name", "node", "event_id", "topic"))
pub = name == "publish"
events = sorted(zip(eid[pub], node[pub], topic[pub]))
nodes = sorted(subs)
N = len(nodes)
match = matching_matrix([parse_filter(subs[v]) for v in nodes], [parse_event(tp) for _, _, tp in events])
recv = ~pub
order = {e: k for k, (e, _, _) in enumerate(events)}
contacted = np.zeros(len(events))
fp = np.zeros(len(events))
pairs = {(e, int(n)) for e, n in zip(eid[recv], node[recv])}
for (e, n) in pairs:
    k = order[e]
    if n == events[k][1]:
        continue
    contacted[k] += 1
    if not match[k, n]:
        fp[k] += 1
for k, (_, p, _) in enumerate(events):
    match[k, p] = False
print(f"events {len(events)} matching {100 * match.sum(1).mean() / N:.4f} contacted {100 * contacted.mean() / N:.4f} fp {100 * fp.mean() / N:.4f}")

floor = 0.0
by_attr = []
for v in nodes:
    per: dict[str, list] = defaultdict(list)
    for p in filters.predicates(subs[v]):
        per[p[0]].append(p)
    by_attr.append(list(per.values()))
for _, _, tp in events:
    a = filters.attributes(tp)
    floor += sum(sum(all(filters.holds(p, a.get(p[0])) for p in g) for g in groups) / len(groups) for groups in by_attr)
print(f"contacted floor {100 * floor / (len(events) * N):.4f}")
