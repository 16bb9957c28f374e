"""The chart's values from an experiment file, and the chart's values.schema.json.

``helm/overlaylab/values.yaml`` holds the experiment under ``experiment:`` key for key (the
resolved file the pods load), plus what Helm cannot compute itself: the pod counts of the layout
(``controller/backends/hosting.py``), the Locust sizing and the Chaos Mesh objects rendered from the
network plan. ``values.schema.json`` is generated from the same pydantic schema as
``overlaylab schema`` (``make chart-schema``; a test keeps it in sync), so ``helm install`` and
``helm template`` reject a bad experiment with the field's name.

Chaos Mesh (``k8s.network_faults: chaos_mesh``) acts on whole pods with kernel netem, so only a
constant delay with jitter, loss and partitions of whole pods map onto it; anything else is an
error that says so (the peers' own emulation, ``peers``, does all of it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from controller.backends.hosting import pod_layout, release_name
from controller.experiment import plans
from controller.experiment.dynamics import ConstantDelay
from controller.experiment.schema import Experiment, ExperimentError, dump_experiment, experiment_schema
from node.kit import builtin_protocols

CHART = Path(__file__).resolve().parents[2] / "helm" / "overlaylab"


def helm_values(exp: Experiment, plan: plans.Plan, run_id: str) -> str:
    if exp.protocol.name not in builtin_protocols():
        raise ExperimentError(f"protocol.name: {exp.protocol.name!r} is registered from outside the package, and the "
                              f"image carries the built-in protocols only ({', '.join(builtin_protocols())}): "
                              "run it on sim or local")
    release = release_name(run_id)
    layout = pod_layout(exp, plan, release)
    p = exp.publications
    chaos = chaos_values(exp, plan, layout)
    return _dump(exp, run_id, {
        "peers": {"replicas": len(layout.peer_pods), "churners": len(layout.churner_pods),
                  "port": exp.k8s.peer_port, "controlPort": exp.k8s.control_port, "perPod": exp.k8s.peers_per_pod},
        "locust": {"enabled": p.driver == "locust", "workers": exp.k8s.locust_workers,
                   "ratePerUser": p.rate_per_s / p.locust_users},
        "chaos": chaos,
        "probes": {"timeoutSeconds": probe_timeout_s(chaos)},
        "tls": {"enabled": exp.tls()},
        "sweep": {"points": 0, "parallelism": 1},
    })


def sweep_values(base: Experiment, run_id: str, points: int, parallelism: int) -> str:
    """The values of a sweep run as an Indexed Job (``overlaylab sweep --backend k8s``): the
    points (simulations) of ``base``'s sweep, ``parallelism`` at a time, beside the results
    volume and server; no peers, controller, Locust, faults or certificates (the chart's
    defaults for those keys render nothing in sweep mode), and no plan to render."""
    return _dump(base, run_id, {"tls": {"enabled": False}, "sweep": {"points": points, "parallelism": parallelism}})


def _dump(exp: Experiment, run_id: str, specific: dict) -> str:
    """The values every release has (run id, image, Collector, results volume, the experiment)
    around ``specific``."""
    repository, tag = split_image(exp.k8s.image)
    values = {
        "runId": run_id,
        "image": {"repository": repository, "tag": tag, "pullPolicy": exp.k8s.image_pull_policy},
        "collector": {"image": exp.k8s.collector_image},
        "results": {"storageClass": exp.k8s.storage_class or "", "size": exp.k8s.storage_size,
                    "accessMode": exp.k8s.storage_access_mode, "hostPath": exp.k8s.results_host_path or ""},
        **specific,
        "experiment": yaml.safe_load(dump_experiment(exp)),
    }
    return yaml.dump(values, Dumper=ValuesDumper, sort_keys=False)


YAML11_BOOLEANS = frozenset("y Y yes Yes YES n N no No NO on On ON off Off OFF".split())


class ValuesDumper(yaml.SafeDumper):
    """Quotes the strings YAML 1.1 reads as booleans (Helm's parser: a parameter named ``y``
    would reach the chart as the key ``true``); PyYAML leaves ``y`` and ``n`` bare."""


ValuesDumper.add_representer(str, lambda dumper, s: dumper.represent_scalar(
    "tag:yaml.org,2002:str", s, style="'" if s in YAML11_BOOLEANS else None))


def probe_timeout_s(chaos: dict) -> int:
    """Above the largest delay netem adds to a probe's round trip (STYLE.md P13: a probe must not
    fail because of the fault under test)."""
    d = chaos.get("delay") or {"latencyMs": 0, "jitterMs": 0}
    return 2 + math.ceil(2 * (d["latencyMs"] + d["jitterMs"]) / 1000)


def split_image(image: str) -> tuple[str, str]:
    """``repo[:port]/name[:tag]`` -> (repository, tag); no tag means ``latest``."""
    name, _, tag = image.rpartition(":")
    return (name, tag) if name and "/" not in tag else (image, "latest")


def chaos_values(exp: Experiment, plan: plans.Plan, layout) -> dict:
    net = exp.network
    if plan.churn.events and exp.churn.rejoin == "resume":
        raise ExperimentError("churn.rejoin: resume needs the local backend's checkpoints; a deleted pod "
                              "comes back empty: set churn.rejoin: fresh for k8s")
    pod_kill = pod_kill_values(exp, plan) if exp.k8s.churn_faults == "chaos_mesh" else None
    if exp.k8s.network_faults != "chaos_mesh":
        return {"enabled": pod_kill is not None, "delay": None, "loss": None, "partitions": [], "podKill": pod_kill}
    if not isinstance(net.delay, ConstantDelay):
        raise ExperimentError(f"network.delay: Chaos Mesh gives every link one delay; model {net.delay.model!r} "
                              "needs k8s.network_faults: peers")
    if net.bandwidth_kbps:
        raise ExperimentError("network.bandwidth_kbps: not mapped onto Chaos Mesh; use k8s.network_faults: peers")
    pod_of = layout.pod_of()
    partitions = []
    for k, w in enumerate(plan.network.partitions):
        pods = sorted({pod_of[n] for n in w.nodes})
        split = [p for p in pods if not set(layout.nodes_of(p)) <= w.nodes]
        if split:
            raise ExperimentError(f"network.partitions.{k}: pods {split} host nodes on both sides of the cut; "
                                  "Chaos Mesh cuts whole pods (set k8s.peers_per_pod: 1)")
        others = sorted(set(layout.pods()) - set(pods))
        partitions.append({"name": f"partition-{k}", "pods": pods, "others": others,
                           "startS": w.start_s, "endS": w.end_s})
    return {
        "enabled": True,
        "delay": {"latencyMs": net.delay.ms, "jitterMs": net.jitter_ms} if net.delay.ms or net.jitter_ms else None,
        "loss": {"percent": round(100 * net.loss, 4)} if net.loss else None,
        "partitions": partitions,
        "podKill": pod_kill,
    }


def pod_kill_values(exp: Experiment, plan) -> dict:
    """A Schedule of PodChaos pod-kill on the churner pods at the plan's mean crash rate over
    the measurement window (Chaos Mesh draws the victims; the exact plan is the controller's)."""
    crashes = [e for e in plan.churn.events if e.kind == "crash"]
    if exp.churn.model != "sessions" or exp.churn.leave != "crash" or not crashes:
        raise ExperimentError("k8s.churn_faults: chaos_mesh maps synthetic crash sessions (churn.model: sessions, "
                              "churn.leave: crash) onto a PodChaos Schedule; use churn_faults: controller")
    start, end = exp.phases.warmup_s, plan.end_s - exp.phases.drain_s
    return {"every": f"{max(1, round((end - start) / len(crashes)))}s", "startS": start, "endS": end}


def values_schema() -> dict:
    """values.schema.json: the chart's own keys, and ``experiment`` as the experiment schema."""
    exp_schema = experiment_schema(builtin_protocols())  # what the image carries
    defs = exp_schema.pop("$defs", {})
    exp_schema.pop("title", None)
    obj = lambda props, required=(): {
        "type": "object", "additionalProperties": False, "properties": props, "required": list(required)}
    string, integer = {"type": "string"}, {"type": "integer", "minimum": 0}
    port = {"type": "integer", "minimum": 1024, "maximum": 65000}
    resources = obj({"requests": {"type": "object"}, "limits": {"type": "object"}}, ["requests", "limits"])
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "overlaylab chart values (generated by `make chart-schema` from controller/backends/helm.py)",
        **obj({
            "runId": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,63}$",
                      "description": "run id: every object is labelled overlaylab.io/run-id with it"},
            "image": obj({"repository": string, "tag": string,
                          "pullPolicy": {"enum": ["IfNotPresent", "Always", "Never"]}},
                         ["repository", "tag"]),
            "peers": obj({"replicas": {**integer, "description": "peer pods (overlaylab helm-values computes it)"},
                          "churners": {**integer, "description": "one-node pods for the nodes that churn"},
                          "port": port, "controlPort": port,
                          "perPod": {"type": "integer", "minimum": 1},
                          "resources": resources},
                         ["replicas", "churners", "port", "controlPort", "perPod"]),
            "controller": obj({"resources": resources}),
            "collector": obj({"image": string, "resources": resources}, ["image"]),
            "results": obj({"storageClass": string, "size": {"type": "string", "pattern": "^[0-9]+(Mi|Gi|Ti)$"},
                             "accessMode": {"enum": ["ReadWriteOnce", "ReadWriteMany"]},
                             "hostPath": string, "resources": resources}, ["size"]),
            "locust": obj({"enabled": {"type": "boolean"}, "workers": {"type": "integer", "minimum": 1},
                           "ratePerUser": {"type": "number", "exclusiveMinimum": 0},
                           "resources": resources}, ["enabled"]),
            "tls": obj({"enabled": {"type": "boolean",
                                    "description": "mutual TLS between peers, controller and Locust"}}, ["enabled"]),
            "networkPolicy": obj({"enabled": {"type": "boolean"},
                                  "apiServerCIDRs": {"type": "array", "items": string}}, ["enabled"]),
            "chaos": obj({
                "enabled": {"type": "boolean"},
                "delay": {"oneOf": [{"type": "null"}, obj({"latencyMs": {"type": "number", "minimum": 0},
                                                           "jitterMs": {"type": "number", "minimum": 0}},
                                                          ["latencyMs", "jitterMs"])]},
                "loss": {"oneOf": [{"type": "null"}, obj({"percent": {"type": "number", "minimum": 0,
                                                                      "maximum": 100}}, ["percent"])]},
                "partitions": {"type": "array", "items": obj({
                    "name": string, "pods": {"type": "array", "items": string},
                    "others": {"type": "array", "items": string},
                    "startS": {"type": "number"}, "endS": {"type": "number"}},
                    ["name", "pods", "others", "startS", "endS"])},
                "podKill": {"oneOf": [{"type": "null"}, obj({
                    "every": {"type": "string", "pattern": "^[0-9]+s$"},
                    "startS": {"type": "number"}, "endS": {"type": "number"}}, ["every", "startS", "endS"])]},
            }, ["enabled"]),
            "probes": obj({"timeoutSeconds": {"type": "integer", "minimum": 1}}),
            "sweep": obj({"points": {**integer, "description": "0: one experiment; N: the N points of the "
                                     "experiment's sweep as an Indexed Job, and nothing else"},
                          "parallelism": {"type": "integer", "minimum": 1}, "resources": resources},
                         ["points", "parallelism"]),
            "experiment": exp_schema,
        }, ["runId", "image", "peers", "experiment"]),
        "$defs": defs,
    }


def write_values_schema(path: Path = CHART / "values.schema.json") -> None:
    path.write_text(json.dumps(values_schema(), indent=2) + "\n")
