"""The experiment file: one typed, documented schema, validated before anything starts.

Every field has a default and a one-line description (the attribute docstring, which also lands
in the JSON Schema printed by ``overlaylab schema``). Unknown keys and wrong types are errors
that name the field's path and what was expected. Protocol parameters come from the protocol's
own config dataclass in its folder under ``node/protocols`` (one source of truth), chosen by ``protocol.name``.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from controller.experiment import yamlfile
from controller.experiment.dynamics import Churn, Network, Phases, Publications
from controller.experiment.population import (
    AclTopology,
    ContentWorkload,
    Nodes,
    NoTopology,
    Topology,
    UniformWorkload,
    UniverseWorkload,
    Workload,
)
from controller.experiment.strict import Strict
from node.kit import dissemination_params, protocol_config_class, protocol_names, protocol_spec
from node.transport.settings import TransportSettings

PROTOCOL_MODELS: dict[str, type[BaseModel]] = {}
"""``protocol:`` as a model per registered protocol (name and params), built as they register."""


def protocol_union(names: list[str]) -> Any:
    """The ``protocol:`` section's type for the protocols ``names``: tagged by ``name``."""
    for name in names:
        if name not in PROTOCOL_MODELS:
            config = protocol_config_class(name)
            PROTOCOL_MODELS[name] = create_model(
                name, __base__=Strict, name=(Literal[name], ...), params=(config, Field(default_factory=config)))
    models = tuple(PROTOCOL_MODELS[n] for n in names)
    return Annotated[Union[models], Field(discriminator="name")] if len(models) > 1 else models[0]


ProtocolSpec: Any = protocol_union(protocol_names())



class Analysis(Strict):
    delivery_window_s: PositiveFloat | None = None
    """W: a copy counts as delivered within W seconds of the publication (default: the run's end)."""
    join_warmup_s: NonNegativeFloat = 0.0
    """A node is an expected receiver only this long after its join."""


class Sim(Strict):
    wire_codec: bool = True
    """Encode and decode every simulated message with the real protobuf codec."""
    check_invariants: bool = False
    """Check every core's invariants after each message (slow; for debugging)."""
    engine: Literal["auto", "native", "python", "check"] = "auto"
    """Who runs the overlay: a compiled loop (CYCLON, or PolderCast's three layers and RingCast;
    node/sim/native/, built where cargo is present), byte for byte as the Python cores would, or
    the Python cores. ``auto``: the compiled loop where it can and where it was verified against
    the running Python code; ``native``: an error where it cannot; ``python``: never;
    ``check``: the run is the Python cores', and beside it the compiled loop's is compared
    with it every ``check_every_s``, failing with the first differing step, node and state
    (docs/architecture.md, "The compiled loops")."""
    check_every_s: PositiveFloat = 5.0
    failure_detection: Literal["oracle", "heartbeat"] = "oracle"
    """How a sender learns that a peer is dead. ``oracle``: a send to a dead peer is handed back
    to the sender's ``on_send_failed`` at once (as a real transport's refused connection is);
    ``heartbeat``: the copy is lost silently, and only the protocol's own probes and timeouts
    reveal the death (as in the DPS paper's simulator, where failures are detected by
    heartbeats between neighbours). The compiled loops run ``oracle`` only."""
    """``engine: check``: virtual seconds between two comparisons of the two runs."""
    variants: list[dict[str, Any]] = []
    """Dissemination settings to compare on one overlay (e.g. the paper's E3 sweep of fanout and
    shortcut source): the overlay is built once, up to the first publication, and the run then
    forks into one run per entry, each a protocol.params override such as {fanout: 3,
    shortcut_source: cyclon}, in its own run directory under ``variants/``. Only parameters that
    gossip never reads are allowed (PolderCast: fanout, shortcut_source, ring_failover; gossip:
    gamma, ttl), so each variant is exactly the run its own file gives from scratch."""
    parallel_variants: PositiveInt | None = None
    """How many variants run at once (default: the machine's cores)."""
    networks: PositiveInt = 1
    """Independent networks simulated side by side in one run, as the papers average over random
    graphs: each has nodes.count nodes (ids k * nodes.count + i), its own topology, subscriptions
    and publications from a seed derived from (seed, k), and its own topics (``nK.`` prefix).
    The summary reports reach per network (static_gossip) and over all."""


MAX_SWEEP_RUNS = 10_000
"""The most runs one sweep file may ask for."""


class Sweep(Strict):
    grid: dict[str, list[Any]] = {}
    """``--set`` paths to the values to try, e.g. {nodes.count: [1000, 2000], protocol.params.fanout:
    [2, 3]}: every combination is one point of ``overlaylab sweep`` (``overlaylab run`` ignores it)."""
    points: list[dict[str, Any]] = []
    """More points, one by one, after the grid's combinations: each maps ``--set`` paths to values
    (for settings that are no product, e.g. gamma 0.1 with sigma 0.2..0.6, then sigma 0.1 with
    gamma 0.2..0.6)."""
    seeds: list[int] = []
    """The seeds every point runs with (default: the file's seed); seeds alone sweep the file as
    it is over them."""
    parallel: PositiveInt | None = None
    """Points run at once (default: one per core)."""

    @field_validator("grid")
    @classmethod
    def _lists(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for path, values in grid.items():
            if not values:
                raise ValueError(f"{path}: no values")
            _sweepable(path)
        return grid

    @field_validator("points")
    @classmethod
    def _settings(cls, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for k, settings in enumerate(points):
            if not settings:
                raise ValueError(f"points[{k}]: no settings")
            for path in settings:
                _sweepable(path)
        return points

    @model_validator(mode="after")
    def _size(self) -> Sweep:
        combos = math.prod(len(v) for v in self.grid.values()) if self.grid else 0
        runs = (combos + len(self.points)) * max(1, len(self.seeds))
        if runs > MAX_SWEEP_RUNS:
            raise ValueError(f"{runs:,} runs (points x seeds); at most {MAX_SWEEP_RUNS:,}")
        return self

    def settings(self) -> list[dict[str, Any]]:
        """Every point's settings: the grid's combinations, then ``points``."""
        combos = [dict(zip(self.grid, c)) for c in itertools.product(*self.grid.values())] if self.grid else []
        return combos + [dict(p) for p in self.points]

    def paths(self) -> list[str]:
        """Every path a point sets, in order of first appearance."""
        return list(dict.fromkeys(path for s in self.settings() for path in s))


def _sweepable(path: str) -> None:
    if path.split(".")[0] == "sweep":
        raise ValueError(f"{path}: a sweep cannot sweep its own settings")


class Kubernetes(Strict):
    namespace: str = Field("default", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    """k8s: namespace the run is installed into (it must exist)."""
    context: str | None = None
    """k8s: kubeconfig context to use (default: the current one)."""
    image: str = "overlaylab:0.1.0"
    """k8s: the overlaylab image (peers, controller, Locust, results server); `make image` builds it."""
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    """k8s: pull policy of the overlaylab image (Never for an image loaded into kind/minikube)."""
    peers_per_pod: PositiveInt = 4
    """k8s: peers hosted by one pod of the peer StatefulSet (nodes that churn get a pod each)."""
    peer_port: int = Field(7000, ge=1024, le=65000)
    """k8s: gRPC port of a pod's first peer; its k-th peer listens on peer_port + k."""
    control_port: int = Field(7400, ge=1024, le=65000)
    """k8s: port of the Control service (controller and Locust only) of a pod's first peer; its
    k-th peer's is control_port + k."""
    collector_image: str = "otel/opentelemetry-collector-contrib:0.139.0"
    """k8s: the OpenTelemetry Collector image (contrib: it has the file exporter)."""
    storage_class: str | None = None
    """k8s: storage class of the results volume (default: the cluster's default class)."""
    storage_size: str = Field("2Gi", pattern=r"^[0-9]+(Mi|Gi|Ti)$")
    """k8s: size of the results volume (traces and run directories)."""
    storage_access_mode: Literal["ReadWriteOnce", "ReadWriteMany"] = "ReadWriteOnce"
    """k8s: the Collector and the controller Job share the results volume: ReadWriteOnce puts
    them on one node (kind, minikube); on a multi-node cluster use an RWX class."""
    results_host_path: str | None = None
    """k8s: keep results in this directory of the (single) node instead of a PersistentVolumeClaim,
    for clusters without a storage provisioner; it must exist and be writable by uid 10001. The
    Pod Security Standards (baseline, restricted) refuse hostPath volumes: there, give the
    cluster a PersistentVolume and set storage_class instead."""
    network_faults: Literal["peers", "chaos_mesh"] = "peers"
    """k8s: who emulates delay, jitter and loss: the peers' transport (as in local) or Chaos Mesh
    NetworkChaos (kernel netem; needs Chaos Mesh installed and a kernel with netem)."""
    churn_faults: Literal["controller", "chaos_mesh"] = "controller"
    """k8s: who crashes nodes: the controller deletes pods at the churn plan's times, or a Chaos
    Mesh Schedule of PodChaos pod-kill at the plan's mean crash rate (the controller records each
    kill it sees and joins the restarted node)."""
    locust_workers: PositiveInt = 2
    """k8s: Locust worker pods (publications.driver: locust)."""
    ready_timeout_s: PositiveFloat = 600.0
    """k8s: how long to wait for pods to be ready and for the controller Job to finish setup."""
    teardown: bool = True
    """k8s: delete everything labelled with the run id when the run ends."""

    @model_validator(mode="after")
    def _ports_apart(self) -> Kubernetes:
        peer, control, k = self.peer_port, self.control_port, self.peers_per_pod
        if peer < control + k and control < peer + k:
            raise ValueError(f"peer ports {peer}..{peer + k - 1} overlap control ports {control}..{control + k - 1}")
        return self


class Security(Strict):
    tls: bool | Literal["auto"] = "auto"
    """Mutual TLS between peers, the controller and Locust, from a CA made for the run
    (docs/security.md): true, false, or auto (on for k8s, off for local; sim has no transport)."""
    listen: Literal["auto", "unix", "tcp"] = "auto"
    """Where local peers listen. unix (auto on local): Unix sockets in a folder only the run's
    user can open, so no other user of the machine reaches a peer. tcp: ports on 127.0.0.1, open
    to every local user unless ``tls`` is on. k8s peers always listen on TCP (auto)."""


class Outputs(Strict):
    dir: str = "runs"
    """Where run directories are created."""
    analyze: bool = True
    """Run the analysis when the experiment ends."""
    snapshot_every_s: PositiveFloat | None = None
    """Snapshot every node's links this often (convergence over time; on local and k8s peers
    through Control.GetSnapshot, so a snapshot is not one instant); always at the end."""


class Experiment(Strict):
    name: str = Field("experiment", pattern=r"^[A-Za-z0-9_.-]+$")
    """Experiment name (part of the run id)."""
    seed: int = 1
    """Seed of every random choice: the same file and seed give the same plan."""
    backend: Literal["sim", "local", "k8s"] = "local"
    """Where peers run: sim (discrete-event), local (gRPC processes), k8s (Helm chart)."""
    protocol: ProtocolSpec = Field(default_factory=lambda: PROTOCOL_MODELS["gossip"](name="gossip"))
    """Protocol name and its parameters (defaults from the protocol spec)."""
    nodes: Nodes = Nodes()
    topology: Topology = Field(default_factory=NoTopology)
    """A fixed graph the nodes start from (their contacts are their neighbours in it): built by
    the controller from the seed, once per network, for protocols with a static topology layer."""
    workload: Workload = Field(default_factory=UniformWorkload)
    churn: Churn = Churn()
    publications: Publications = Publications()
    network: Network = Network()
    transport: TransportSettings = Field(default_factory=TransportSettings)
    """local and k8s: how peers carry messages (one call per message, or a stream per link)."""
    phases: Phases = Phases()
    analysis: Analysis = Analysis()
    sim: Sim = Sim()
    k8s: Kubernetes = Kubernetes()
    security: Security = Security()
    outputs: Outputs = Outputs()
    sweep: Sweep = Sweep()

    @model_validator(mode="after")
    def _variants(self) -> Experiment:
        labels = [variant_label(v) for v in self.sim.variants]
        if len(set(labels)) < len(labels):
            raise ValueError(f"sim.variants: two variants are the same ({', '.join(labels)})")
        for k, overrides in enumerate(self.sim.variants):
            if self.backend != "sim":
                raise ValueError("sim.variants: only the sim backend forks a run into variants")
            try:
                variant_params(self.protocol, overrides)
            except ValueError as e:
                raise ValueError(f"sim.variants[{k}]: {e}") from None
        return self

    @model_validator(mode="after")
    def _networks(self) -> Experiment:
        if isinstance(self.workload, UniverseWorkload) and len(self.workload.build()) != self.nodes.count:
            size = len(self.workload.build())
            raise ValueError(f"workload: the {self.workload.flavour} universe of {self.workload.seeds} seeds has {size} "
                             f"nodes; set nodes.count: {size} (got {self.nodes.count})")
        if isinstance(self.topology, AclTopology) and self.topology.size() != self.nodes.count:
            raise ValueError(f"topology: acl a={self.topology.a:g} b={self.topology.b:g} has {self.topology.size()} nodes; "
                             f"set nodes.count: {self.topology.size()} (got {self.nodes.count})")
        if isinstance(self.workload, ContentWorkload):
            if self.publications.publisher != "any" or self.publications.mode != "rate":
                raise ValueError("publications: a content workload draws a fresh event for each publication, "
                                 "from any node: set publications.publisher: any and mode: rate")
            if self.protocol.name != "dps":
                raise ValueError(f"workload: content filters need a content-based protocol (dps), not {self.protocol.name!r}")
        needs = protocol_spec(self.protocol.name).contacts
        if needs is not None and self.nodes.contacts != needs:
            raise ValueError(f"nodes.contacts: {self.protocol.name} needs {needs!r} (got {self.nodes.contacts!r})")
        if self.nodes.contacts == "all" and self.backend != "sim":
            from node.wire.codec import MAX_ENTRIES
            if self.nodes.count > MAX_ENTRIES + 1:
                raise ValueError(f"nodes.contacts: all hands every node to every node, and a join carries at most "
                                 f"{MAX_ENTRIES} contacts: {self.backend} runs take at most {MAX_ENTRIES + 1} nodes "
                                 f"(got nodes.count {self.nodes.count})")
        if self.security.listen == "unix" and self.backend == "k8s":
            raise ValueError("security.listen: unix is for the local backend; k8s peers listen on TCP")
        if self.sim.networks > 1:
            if self.backend != "sim":
                raise ValueError("sim.networks: only the sim backend runs several networks in one run")
            if self.churn.model != "none" or self.churn.phases or self.network.partitions:
                raise ValueError("sim.networks: runs of several networks take no churn and no partitions")
            if self.sim.variants:
                raise ValueError("sim.networks: several networks and sim.variants do not combine")
        return self

    def unix_sockets(self) -> bool:
        """Whether local peers listen on Unix sockets (``security.listen``)."""
        return self.backend == "local" and self.security.listen != "tcp"

    def tls(self) -> bool:
        """Whether this run's transport uses mutual TLS (``security.tls``)."""
        return self.security.tls is True or (self.security.tls == "auto" and self.backend == "k8s")

    def cycle_s(self) -> float:
        """The protocol's gossip period in seconds (for per-cycle overhead)."""
        return protocol_spec(self.protocol.name).cycle_s(self.protocol.params)


def variant_params(protocol, overrides: dict[str, Any]):
    """The protocol's params with one variant's ``overrides``, validated; ValueError names the bad
    key and what was expected."""
    allowed = dissemination_params(protocol.name)
    for key in overrides:
        if key not in allowed:
            raise ValueError(f"{key!r} is not a dissemination parameter of {protocol.name} "
                             f"(allowed: {', '.join(sorted(allowed)) or 'none'})")
    merged = {**TypeAdapter(type(protocol.params)).dump_python(protocol.params, mode="json"), **overrides}
    try:
        return TypeAdapter(type(protocol.params)).validate_python(merged)
    except ValidationError as e:
        raise ValueError("; ".join(": ".join(filter(None, (".".join(map(str, err["loc"])), err["msg"].removeprefix("Value error, "))))
                                   for err in e.errors())) from None


def variant_experiment(exp: Experiment, overrides: dict[str, Any]) -> Experiment:
    """``exp`` as the single run of one variant: its params applied, no variants left."""
    data = exp.model_dump(mode="json")
    data["protocol"]["params"].update(overrides)
    data["sim"]["variants"] = []
    return Experiment.model_validate(data)


def variant_label(overrides: dict[str, Any]) -> str:
    """A run-directory name for a variant: ``fanout-3_shortcut_source-cyclon``."""
    return "_".join(f"{k}-{v}" for k, v in overrides.items()) or "base"


class ExperimentError(ValueError):
    """An experiment file that cannot run; the message names the file and each bad field."""


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``PATH=VALUE`` overrides (dotted path, a number indexes a list such as
    ``churn.phases.0.probability``; VALUE parsed as YAML) to a raw file dict."""
    for item in overrides:
        path, sep, raw = item.partition("=")
        if not sep or not path:
            raise ExperimentError(f"--set {item!r}: expected PATH=VALUE, e.g. nodes.count=64")
        keys = path.split(".")
        node: Any = data
        for key in keys[:-1]:
            if isinstance(node, list):
                node = node[_index(item, key, node)]
            else:
                node = node.setdefault(key, {})
            if not isinstance(node, (dict, list)):
                raise ExperimentError(f"--set {item!r}: {key!r} is not a section")
        if isinstance(node, list):
            node[_index(item, keys[-1], node)] = _set_value(item, raw)
        else:
            node[keys[-1]] = _set_value(item, raw)
    return data


def _set_value(item: str, raw: str) -> Any:
    try:
        return yamlfile.load(raw)
    except (yaml.YAMLError, yamlfile.YamlError) as e:
        raise ExperimentError(f"--set {item!r}: {e}") from None


def _index(item: str, key: str, items: list) -> int:
    if not key.isdigit() or int(key) >= len(items):
        raise ExperimentError(f"--set {item!r}: {key!r} is not an index of a list of {len(items)}")
    return int(key)


def load_experiment(path: str | Path, overrides: list[str] = ()) -> Experiment:
    path = Path(path)
    try:
        data = yamlfile.load(path.read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError, yamlfile.YamlError) as e:
        raise ExperimentError(f"{path}: cannot read: {e}") from None
    if not isinstance(data, dict):
        raise ExperimentError(f"{path}: expected a mapping of sections at the top level")
    if not data:
        raise ExperimentError(f"{path}: empty experiment file (write at least a name: and the sections that differ "
                              "from the defaults; `overlaylab schema` lists them)")
    data = apply_overrides(data, list(overrides))
    _resolve_paths(data, path.resolve().parent)
    return parse_experiment(data, source=str(path))


def check_data_files(exp: Experiment, source: str = "<experiment>") -> None:
    """Every data file the experiment names exists and is a file: checked before a run directory
    is created (and by ``overlaylab validate``), not halfway through a run."""
    missing = []
    for keys in PATH_FIELDS:
        node: Any = exp
        for k in keys:
            node = getattr(node, k, None)
        if isinstance(node, str) and node not in GENERATED and not Path(node).is_file():
            missing.append(f"  {'.'.join(keys)}: no such file: {node}")
    if missing:
        raise ExperimentError("\n".join([f"{source}: {len(missing)} missing data file(s)", *missing]))


PATH_FIELDS = (("workload", "path"), ("workload", "graph"), ("churn", "path"), ("network", "delay", "path"),
               ("topology", "degrees"))
GENERATED = ("synthetic", "geometric")
"""Values of a path field that name a generator, not a file."""


def data_dir() -> Path:
    """Where ``data:`` paths point: $OVERLAYLAB_DATA_DIR, else ../shared/datasets beside the project."""
    env = os.environ.get("OVERLAYLAB_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "datasets"


def resolve_path(value: str, base: Path, field: str = "path") -> str:
    """``data:NAME`` inside the data folder (one that leads out of it is refused), else relative
    to ``base`` (the experiment file's folder)."""
    if value.startswith("data:"):
        root = data_dir().resolve()
        p = (root / value[5:]).resolve()
        if not p.is_relative_to(root):
            raise ExperimentError(f"{field}: {value!r} leads out of the data folder {root}")
        return str(p)
    p = Path(value)
    return str(p if p.is_absolute() else (base / p).resolve())


def _resolve_paths(data: dict, base: Path) -> None:
    """Make file paths absolute (relative to the experiment file; ``data:`` to the data folder),
    so the resolved experiment in a run directory still finds its files."""
    for keys in PATH_FIELDS:
        node = data
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(keys[-1]), str) and node[keys[-1]] not in GENERATED:
            node[keys[-1]] = resolve_path(node[keys[-1]], base, ".".join(keys))


def sync_protocols() -> None:
    """Let ``Experiment`` accept every protocol registered so far (one registered after this
    module was imported, e.g. by a test or a plugin, included)."""
    names = protocol_names()
    if sorted(PROTOCOL_MODELS) != names:
        Experiment.model_fields["protocol"].annotation = protocol_union(names)
        Experiment.model_rebuild(force=True)


def experiment_schema(protocols: list[str] | None = None) -> dict:
    """The experiment file's JSON Schema, for every registered protocol or only ``protocols``."""
    sync_protocols()
    if protocols is None:
        return Experiment.model_json_schema()
    model = create_model("Experiment", __base__=Experiment, __doc__=Experiment.__doc__, protocol=(
        protocol_union(protocols),
        Field(default_factory=lambda: PROTOCOL_MODELS["gossip"](name="gossip"),
              description=Experiment.model_fields["protocol"].description)))
    return model.model_json_schema()


def parse_experiment(data: dict, source: str = "<experiment>") -> Experiment:
    sync_protocols()
    try:
        return Experiment.model_validate(data)
    except ValidationError as e:
        raise ExperimentError(format_errors(e, source)) from None


def format_errors(e: ValidationError, source: str) -> str:
    lines = [f"{source}: {e.error_count()} invalid field(s)"]
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        got = f" (got {err['input']!r})" if err["type"] != "missing" and not isinstance(err["input"], dict) else ""
        msg = "unknown field" if err["type"] in ("extra_forbidden", "unexpected_keyword_argument") else err["msg"]
        lines.append(f"  {loc}: {msg}{got}")
    return "\n".join(lines)


def dump_experiment(exp: Experiment) -> str:
    return yaml.safe_dump(exp.model_dump(mode="json"), sort_keys=False)
