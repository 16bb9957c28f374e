"""``overlaylab``: run experiments and analyse runs.

    overlaylab run FILE [--backend sim|local] [--seed N] [--out DIR] [--set PATH=VALUE ...] [--load-ui]
    overlaylab analyze RUN_DIR                 prints the headline metrics; summary.json has everything
    overlaylab sweep FILE [--set ...] [--out DIR] [--parallel N]  every point of the file's sweep: grid
    overlaylab reproduce [PAPER|CLAIM ...] [--scale quick|paper]  the seed papers' claims, claim by claim
    overlaylab compare RUN_DIR RUN_DIR...    metrics side by side (e.g. sim against local; or a sweep's directory)
    overlaylab crosscheck RUN_DIR            the core metrics recomputed in plain Python against summary.json
    overlaylab synthetic OUT --spans N       a synthetic run of about N spans (to try the analysis at scale)
    overlaylab workload FILE [--json]        the workload's distributions, correlation and ring-link sharing
    overlaylab validate FILE [--set ...]     check a file without running it
    overlaylab schema [--markdown DIR]       the experiment file's JSON Schema (or its reference pages)
    overlaylab helm-values FILE [--run-id ID] [--sweep]  the chart's values for an experiment (k8s backend)

Inside a cluster or container network (what the chart's pods run):
    overlaylab peer FILE --run-id ID --release R --pod NAME ...     host the pod's nodes
    overlaylab drive FILE --run-id ID --release R --out DIR ...     the controller: carry out the plan
    overlaylab load-plan FILE --release R --out PLAN.json           the Locust users' plan
    overlaylab serve-results DIR                                    serve run directories as tar.gz
    overlaylab sweep-point FILE --index K --out DIR                 one point of a sweep (an Indexed Job's index)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from controller.cli.progress import console
from controller.experiment.population import ContentWorkload as ContentWorkloadConfig
from controller.experiment.schema import Experiment, ExperimentError, check_data_files, dump_experiment, experiment_schema, load_experiment
from controller.experiment.workloads import PlanError
from node.kit.plugins import PluginError, load_plugins


def _load(args) -> Experiment:
    overrides = list(args.set or [])
    for flag, path in (("backend", "backend"), ("seed", "seed"), ("out", "outputs.dir")):
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append(f"{path}={value}")
    return load_experiment(args.file, overrides)


def cmd_run(args) -> int:
    from controller.backends import get_runner
    from controller.backends.rundir import RunDir
    from node.sim.accelerators import NoAccelerator
    from node.sim.check import Diverged

    exp = _load(args)
    check_data_files(exp, args.file)
    if args.load_ui and (exp.backend != "local" or exp.publications.driver != "locust"):
        raise ExperimentError("--load-ui needs backend local and publications.driver: locust")
    runner = get_runner(exp.backend, load_ui=args.load_ui)
    warn_capacity(exp, quiet=True)
    rd = RunDir.create(exp, exp.outputs.dir)
    console.print(f"run {rd.run_id} -> {rd.path}")
    try:
        runner.run(exp, rd)
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted: every peer stopped; what was written is in {rd.path}[/]")
        return 130
    except NoAccelerator as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Diverged as e:
        print(f"error: sim.engine check: {e}\n(the run from the Python cores stopped there: {rd.path})", file=sys.stderr)
        return 1
    if exp.sim.variants:
        return _variants(rd.path, exp.outputs.analyze and not args.no_analyze)
    if exp.outputs.analyze and not args.no_analyze:
        return _analyze(str(rd.path))
    return 0


def _variants(sweep_dir, analyze: bool) -> int:
    """After a run forked into variants: analyse each, and show them side by side."""
    from rich.table import Table

    from analysis.jobs.summarize import run as summarize

    variants = json.loads((sweep_dir / "variants.json").read_text())
    console.print(f"{len(variants)} variants in {sweep_dir}/variants/")
    if not analyze:
        return 0
    table = Table(title="variants")
    for col in ("variant", "hit ratio", "complete", "mean hops", "p99 hops", "dup.", "relay"):
        table.add_column(col, overflow="fold")
    for v in variants:
        s = summarize(sweep_dir / v["run_dir"])
        table.add_row(" ".join(f"{k}={x}" for k, x in v["variant"].items()), *(f"{x:.4g}" if x is not None else "n/a" for x in (
            s["hit_ratio"], s["complete_event_ratio"], s["hops"]["mean"], s["hops"]["p99"],
            s["duplication_factor"], s["relay_ratio"])))
    console.print(table)
    return 0


def cmd_sweep(args) -> int:
    from controller.cli.sweep import run_sweep

    if args.resume and args.backend != "local":
        raise ExperimentError("--resume: only a local sweep resumes (a Job's indexes are retried by Kubernetes)")
    sweep_dir = run_sweep(args.file, list(args.set or []), Path(args.out) if args.out else None, args.parallel,
                          analyze=not args.no_analyze, backend=args.backend,
                          resume=Path(args.resume) if args.resume else None)
    record = json.loads((sweep_dir / "sweep.json").read_text())
    console.print(f"sweep: {sweep_dir}/sweep.json, sweep.csv ({record['wall_s']} s)")
    return 1 if any(p["rc"] != 0 for p in record["points"]) else 0


def cmd_reproduce(args) -> int:
    """The papers' claims, claim by claim: runs, verdicts, a report directory; 1 where a claim
    that no registered explanation covers did not reproduce."""
    import time

    from controller.reproduce import failures, reproduce

    out = Path(args.out or f"runs/reproduce-{args.scale}-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        record = reproduce(list(args.targets), args.scale, out, args.parallel, args.resume,
                           Path(args.runs) if args.runs else None)
    except ValueError as e:
        raise ExperimentError(str(e)) from None
    for name, paper in record["papers"].items():
        console.print(f"reproduce: {name}: " + ", ".join(f"{n} {v}" for v, n in paper["counts"].items()))
    failed = failures(record)
    if failed:
        console.print(f"[red]reproduce: not reproduced: {', '.join(failed)}[/]")
    console.print(f"reproduce: {out}/index.html, {out}/reproduce.json")
    return 1 if failed else 0


def cmd_sweep_point(args) -> int:
    """One index of a sweep's Indexed Job: point ``--index`` of the file's sweep."""
    from controller.cli.sweep import points, run_point

    _, todo = points(args.file, check=False)
    return 0 if run_point(args.file, [], todo[args.index], Path(args.out))["rc"] == 0 else 1


def cmd_analyze(args) -> int:
    from analysis.spark import get_spark
    from analysis.storage import S3A_CONF

    conf = {**(S3A_CONF if args.run_dir.startswith("s3a://") else {}), **dict(args.conf)}
    return _analyze(args.run_dir, get_spark(master=args.master, conf=conf))


def _analyze(run_dir: str, spark=None) -> int:
    from analysis.jobs.summarize import run as summarize

    summary = summarize(run_dir, spark)
    print(json.dumps(headline(summary), indent=2))
    console.print(f"summary: {run_dir}/summary.json  report: {run_dir}/report.html")
    return 0


def cmd_crosscheck(args) -> int:
    from rich.table import Table

    from analysis.crosscheck import compare

    if not (Path(args.run_dir) / "summary.json").is_file():
        print(f"error: {args.run_dir} has no summary.json to check: run `overlaylab analyze {args.run_dir}` first",
              file=sys.stderr)
        return 2
    rows = compare(args.run_dir)
    table = Table(title=f"crosscheck {args.run_dir}: Spark summary against plain Python")
    for col in ("metric", "summary.json", "plain Python", ""):
        table.add_column(col)
    for r in rows:
        table.add_row(r["metric"], *(f"{v:.6g}" if isinstance(v, float) else str(v) for v in (r["spark"], r["python"])),
                      "ok" if r["agree"] else "[red]DIFFERS[/]")
    console.print(table)
    bad = [r["metric"] for r in rows if not r["agree"]]
    if bad:
        print(f"differ: {', '.join(bad)}")
    return 1 if bad else 0


def cmd_model(args) -> int:
    from controller.cli import model

    results = Path(args.results) if args.results else None
    grid, rows = model.model_table(args.file, args.set or [], results)
    model.print_table(grid, rows)
    out = Path(args.out) if args.out else results or Path(".")
    model.write(out, grid, rows)
    console.print(f"model: {out}/model.json, model.csv, model.png")
    return 0


def cmd_synthetic(args) -> int:
    from analysis.synthetic import write_synthetic_run

    rd = write_synthetic_run(Path(args.out), args.spans, nodes=args.nodes, topics=args.topics, seed=args.seed)
    print(f"wrote {rd} ({json.loads((rd / 'run.json').read_text())['spans']:,} spans); analyse it with "
          f"`overlaylab analyze {rd}`")
    return 0


def cmd_compare(args) -> int:
    from rich.table import Table

    from analysis.compare import compare, expand_sweeps

    result = compare(expand_sweeps(args.run_dirs))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    table = Table(title="compare")
    table.add_column("metric")
    for run, backend in zip(result["runs"], result["backends"]):
        table.add_column(f"{backend}\n{run}")
    for k in range(1, len(result["runs"])):
        table.add_column(f"diff {k}")

    def fmt(v):
        return "n/a" if v is None else f"{v:.4g}"

    table.add_row("fidelity verdict", *(v or "n/a" for v in result["verdicts"]), *([""] * (len(result["runs"]) - 1)))
    for row in result["metrics"]:
        table.add_row(row["metric"], *map(fmt, row["values"]), *map(fmt, row["diff"]))
    console.print(table)
    for k, tvd in enumerate(result["hop_tvd"], 1):
        console.print(f"hop distribution, total variation distance run 0 vs {k}: {fmt(tvd)}")
    return 0


def cmd_workload(args) -> int:
    import random

    from controller.experiment import workloads

    exp = _load(args)
    subs = workloads.render(exp)
    report = workloads.describe(subs, random.Random(f"{exp.seed}:describe"))
    if isinstance(exp.workload, ContentWorkloadConfig):  # filters, not topics: no rings to share
        report["content"] = _content_shares(exp, subs)
    else:
        report["link_sharing"] = workloads.link_sharing(subs)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    from rich.table import Table

    table = Table(title=f"workload {exp.workload.model}: {report['nodes']} nodes, {report['topics']} non-empty topics")
    for col in ("", "min", "mean", "p50", "p90", "p99", "max"):
        table.add_column(col)
    for name in ("subscriptions_per_node", "subscribers_per_topic"):
        d = report[name]
        table.add_row(name.replace("_", " "), *(f"{d.get(k, 0):.4g}" for k in ("min", "mean", "p50", "p90", "p99", "max")))
    console.print(table)
    for k, v in report["correlation"].items():
        console.print(f"correlation {k}: {v if v is None or isinstance(v, int) else round(v, 4)}")
    sharing = report.get("link_sharing", {})
    if sharing.get("distinct_per_link") is not None:
        console.print(f"link sharing (distinct true ring neighbours per target ring link): "
                      f"{sharing['distinct_per_link']:.3f} over {sharing['target_links']} links "
                      f"({sharing['distinct_per_node']:.1f} distinct per node); by subscriptions: "
                      + ", ".join(f"{b['subscriptions_from']}+ {b['distinct_per_link']:.2f}" for b in sharing["by_subscriptions"]))
    if "content" in report:
        c = report["content"]
        console.print(f"content over the plan's {c['events']} events: matching {c['matching_pct']:.2f}% of subscriptions, "
                      f"contacted floor {c['contacted_floor_pct']:.2f}% (join attribute drawn at random; "
                      f"the paper's Table 1: {c['paper_matching_pct']} / {c['paper_contacted_pct']})")
    return 0


def _content_shares(exp, subs) -> dict:
    """Matching and the contacted floor (controller/experiment/content_workloads.py) of the plan's
    subscriptions against the plan's events, per subscription."""
    from controller.experiment import content_workloads, plans
    from node.protocols.dps.content import parse_event, parse_filter

    filters = [parse_filter(f) for s in subs for f in sorted(s)]
    events = [parse_event(t) for t in plans.publication_slots(exp, subs)[1]]
    name = exp.workload.name
    return {"events": len(events), "matching_pct": content_workloads.matching_pct(filters, events),
            "contacted_floor_pct": content_workloads.contacted_floor_pct(filters, events),
            "paper_matching_pct": content_workloads.PAPER_MATCHING_PCT[name],
            "paper_contacted_pct": content_workloads.PAPER_CONTACTED_PCT[name]}


HEADLINE = ("run_id", "backend", "protocol", "seed", "nodes", "topics", "events", "hit_ratio",
            "complete_event_ratio", "latency_ms", "hops", "duplication_factor", "relay_ratio", "degree",
            "topic_connectivity", "overhead", "spans", "errors", "churn")


def headline(summary: dict) -> dict:
    """The summary without its long series (those stay in summary.json and the report)."""
    out = {k: summary[k] for k in HEADLINE if k in summary}
    fidelity = summary.get("fidelity") or {}
    if fidelity:
        out["fidelity"] = {k: fidelity[k] for k in ("verdict", "reasons", "delay_ms", "jitter_ms", "loss") if k in fidelity}
    load = summary.get("load") or {}
    out["load"] = {k: v for k, v in load.items() if k in ("driver", "target_rate_per_s", "offered_per_s",
                                                          "published_per_s", "deliveries_per_s")}
    pm = summary.get("protocol_metrics") or {}
    out["protocol_metrics"] = {k: v for k, v in pm.items() if not isinstance(v, (list, dict))}
    return out


def cmd_validate(args) -> int:
    """Parse, check the data files and render the plans: what ``run`` would refuse, refused here."""
    from controller.experiment import plans

    exp = _load(args)
    check_data_files(exp, args.file)
    plans.render(exp)
    warn_capacity(exp)
    if exp.sweep.settings() or exp.sweep.seeds:  # every point, as `sweep` checks it
        from controller.cli.sweep import points

        _, found = points(args.file, list(args.set or []))
        print(f"# sweep: {len(found)} runs, each valid", file=sys.stderr)
    print(dump_experiment(exp), end="")
    return 0


def warn_capacity(exp, quiet: bool = False) -> None:
    """A local plan's estimated demand on this machine (controller/backends/capacity.py), on stderr; in
    yellow when it does not fit. ``quiet``: only that warning."""
    if exp.backend != "local":
        return
    from controller.backends.capacity import estimate

    est = estimate(exp)
    if quiet and (est is None or est.fits):
        return
    if est is None:
        print("# capacity: not calibrated on this machine (overlaylab calibrate)", file=sys.stderr)
    elif est.fits:
        print(f"# capacity: {est.describe()}", file=sys.stderr)
    elif est.overloads:
        console.print(f"[yellow]warning: this plan overloads this machine: its results would describe the host, not the "
                      f"protocol (fidelity.verdict invalid): {est.describe()}[/]", highlight=False, soft_wrap=True)
    else:
        console.print(f"[yellow]warning: the host will likely fall behind this plan at times (fidelity.verdict degraded): "
                      f"{est.describe()}[/]", highlight=False, soft_wrap=True)


def cmd_calibrate(args) -> int:
    """Measure this machine's per-peer costs for the file's protocol (a small local run) into
    the capacity table that ``validate`` and ``run`` estimate from."""
    import tempfile

    from analysis.fidelity import verdict
    from controller.backends import get_runner
    from controller.backends.capacity import CALIBRATION_PEERS, costs_file, costs_from_run, save_costs
    from controller.backends.rundir import RunDir

    peers, per_process = CALIBRATION_PEERS
    args.set = [f"nodes.count={peers}", f"nodes.peers_per_process={per_process}", *(args.set or [])]
    exp = _load(args)
    if exp.backend != "local":
        raise SystemExit("calibrate: the costs are those of local peer processes (backend: local)")
    with tempfile.TemporaryDirectory() as tmp:
        rd = RunDir.create(exp, tmp)
        get_runner(exp.backend).run(exp, rd)
        meta = json.loads((rd.path / "run.json").read_text())
        timeline = [json.loads(line) for line in (rd.path / "timeline.jsonl").read_text().splitlines()]
        fidelity = verdict(meta, timeline, None)
        if fidelity["verdict"] == "invalid":
            raise SystemExit(f"calibrate: the calibration run itself fell behind ({fidelity['verdict']}: "
                             f"{'; '.join(fidelity['reasons'])}); run it on a quieter machine or with fewer publications")
        if fidelity["verdict"] != "ok":
            console.print(f"[yellow]calibrate: the run was {fidelity['verdict']} ({'; '.join(fidelity['reasons'])}): "
                          "the costs stand, the run's latencies would not[/]", highlight=False)
        shown = os.path.relpath(args.file) if not os.path.relpath(args.file).startswith("..") else args.file
        command = "overlaylab calibrate " + " ".join([shown, *(f"--set {s}" for s in args.set[2:])])
        costs = costs_from_run(rd.path, exp.protocol.name, exp.nodes.peers_per_process, command)
    out = args.out or costs_file()
    save_costs(costs, out)
    print(json.dumps(costs.__dict__, indent=2))
    print(f"# written to {out}", file=sys.stderr)
    return 0


def cmd_schema(args) -> int:
    if args.markdown:
        from controller.cli.reference import pages
        from node.kit import builtin_protocols

        args.markdown.mkdir(parents=True, exist_ok=True)
        for name, text in pages(builtin_protocols()).items():
            (args.markdown / name).write_text(text)
            print(args.markdown / name)
    else:
        print(json.dumps(experiment_schema(), indent=2))
    return 0


def cmd_helm_values(args) -> int:
    from controller.backends.helm import helm_values, sweep_values
    from controller.experiment import plans

    if args.sweep:
        from controller.cli.sweep import points

        base, todo = points(args.file, list(args.set or []))
        print(sweep_values(base, args.run_id or "manual", len(todo), base.sweep.parallel or 1), end="")
        return 0
    exp = _load(args)
    print(helm_values(exp, plans.render(exp), args.run_id or "manual"), end="")
    return 0


def _layout(args, exp: Experiment, plan):
    from controller.backends.hosting import pod_layout

    return pod_layout(exp, plan, args.release, args.domain)


def cmd_peer(args) -> int:
    """Write the pod's peer config and become ``python -m node`` (exec: signals reach the peers)."""
    import os
    import tempfile

    from controller.backends.hosting import peer_config
    from controller.experiment import plans

    exp = load_experiment(args.file)
    layout = _layout(args, exp, plans.render(exp))
    nodes = list(layout.nodes_of(args.pod))
    cfg = peer_config(exp, args.run_id, nodes, host="0.0.0.0", advertise=f"{args.pod}{layout.domain}",
                      ports={n: layout.port + k for k, n in enumerate(nodes)},
                      control_host="0.0.0.0", control_ports={n: layout.control_port + k for k, n in enumerate(nodes)},
                      pki=args.pki, otlp_endpoint=args.otlp_endpoint, trace_dir=args.trace_dir, refuse_before_join=True)
    fd, path = tempfile.mkstemp(prefix="peer-", suffix=".json")
    os.write(fd, cfg.model_dump_json().encode())
    os.close(fd)
    os.execv(sys.executable, [sys.executable, "-m", "node", "--config", path])


def cmd_drive(args) -> int:
    import asyncio

    from controller.backends.cluster import ClusterDriver
    from controller.backends.rundir import RunDir

    exp = load_experiment(args.file)
    rd = RunDir.create(exp, args.out, run_id=args.run_id)
    from node.transport.security import Credentials

    driver = ClusterDriver(exp, rd, args.release, args.domain, namespace=None if args.no_kube else args.namespace,
                           locust_url=args.locust_url,
                           credentials=Credentials.load(args.pki, "controller") if args.pki else None)
    asyncio.run(driver.run())
    console.print(f"run {rd.run_id} written to {rd.path}")
    return 0


def cmd_load_plan(args) -> int:
    from controller.experiment import plans
    from loadgen.plan import write_load_plan

    exp = load_experiment(args.file)
    p = exp.publications
    plan = plans.render(exp)
    write_load_plan(Path(args.out), addrs=_layout(args, exp, plan).addrs(control=True), subscriptions=plan.subscriptions,
                    topic_choice=p.topic_choice, payload_bytes=p.payload_bytes, seed=exp.seed)
    return 0


def cmd_serve_results(args) -> int:
    from controller.backends.results import serve

    serve(args.dir, args.port)
    return 0


def _conf_pair(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="overlaylab", description="Pub/sub overlay testbed.")
    sub = p.add_subparsers(dest="command", required=True)

    def experiment_args(sp):
        sp.add_argument("file", help="experiment file (YAML)")
        sp.add_argument("--set", action="append", metavar="PATH=VALUE",
                        help="override a field, e.g. --set nodes.count=64 (repeatable)")

    run = sub.add_parser("run", help="run an experiment")
    experiment_args(run)
    run.add_argument("--backend", choices=["sim", "local", "k8s"])
    run.add_argument("--seed", type=int)
    run.add_argument("--out", help="directory for run directories (default: outputs.dir)")
    run.add_argument("--no-analyze", action="store_true", help="skip the analysis")
    run.add_argument("--load-ui", action="store_true",
                     help="Locust with its web UI on http://127.0.0.1:8089; Ctrl-C ends the load phase")
    run.set_defaults(fn=cmd_run)

    sweep = sub.add_parser("sweep", help="run every point of the file's sweep: grid (and seeds), in parallel")
    experiment_args(sweep)
    sweep.add_argument("--out", help="where the sweep's directory is created (default: outputs.dir)")
    sweep.add_argument("--parallel", type=int, help="points at once (default: sweep.parallel, else one per core)")
    sweep.add_argument("--no-analyze", action="store_true", help="run the points only")
    sweep.add_argument("--resume", metavar="SWEEP_DIR",
                       help="finish an interrupted sweep of the same file: keep its finished points, run the rest")
    sweep.add_argument("--backend", choices=["local", "k8s"], default="local",
                       help="where the points (simulations) run: processes here, or an Indexed Job on the "
                            "cluster of the file's k8s section")
    sweep.set_defaults(fn=cmd_sweep)

    rep = sub.add_parser("reproduce", help="the seed papers' claims, claim by claim: runs, verdicts and a report")
    rep.add_argument("targets", nargs="*", metavar="PAPER|CLAIM",
                     help="papers (poldercast, spidercast, stan, dps, ferretti) or claim ids (P1, C2...); default: all")
    rep.add_argument("--scale", choices=["quick", "paper"], default="quick",
                     help="quick: minutes on this machine; paper: the paper's N, rounds and repetitions")
    rep.add_argument("--out", help="the report directory (default: runs/reproduce-<scale>-<time>)")
    rep.add_argument("--parallel", type=int, help="runs at once (default: one per core)")
    rep.add_argument("--runs", help="where the runs go (default: OUT/runs); a report to commit keeps them apart")
    rep.add_argument("--resume", action="store_true",
                     help="keep the runs an earlier invocation into --out ran and analysed; run the rest")
    rep.set_defaults(fn=cmd_reproduce)

    mdl = sub.add_parser("model", help="the analytic gossip model (ferretti-gossip.md) on the file's sweep grid, "
                                       "against simulation")
    experiment_args(mdl)
    mdl.add_argument("--results", help="a sweep directory of the same file: its simulated receivers beside the model")
    mdl.add_argument("--out", help="where model.json/.csv/.png go (default: --results, else here)")
    mdl.set_defaults(fn=cmd_model)

    analyze = sub.add_parser("analyze", help="(re)compute summary.json and report.html of a run")
    analyze.add_argument("run_dir", help="a run directory, or its URI in object storage (s3a://bucket/runs/RUN)")
    analyze.add_argument("--master", help="Spark master URL (default $OVERLAYLAB_SPARK_MASTER or local[*])")
    analyze.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                         type=_conf_pair, help="a Spark setting (repeat); docs/spark.md")
    analyze.set_defaults(fn=cmd_analyze)

    check = sub.add_parser("crosscheck", help="recompute the core metrics in plain Python and compare with summary.json")
    check.add_argument("run_dir")
    check.set_defaults(fn=cmd_crosscheck)

    syn = sub.add_parser("synthetic", help="write a synthetic run directory of about N spans (analysis at scale)")
    syn.add_argument("out", help="the run directory to create")
    syn.add_argument("--spans", type=int, default=1_000_000)
    syn.add_argument("--nodes", type=int, default=10_000)
    syn.add_argument("--topics", type=int, default=1_000)
    syn.add_argument("--seed", type=int, default=1)
    syn.set_defaults(fn=cmd_synthetic)

    comp = sub.add_parser("compare", help="compare analysed runs side by side (e.g. sim against local)")
    comp.add_argument("run_dirs", nargs="+", help="run directories; a sweep's directory stands for all its runs")
    comp.add_argument("--json", action="store_true", help="machine-readable output")
    comp.set_defaults(fn=cmd_compare)

    workload = sub.add_parser("workload", help="render the subscription workload and print its distributions")
    experiment_args(workload)
    workload.add_argument("--json", action="store_true", help="machine-readable output")
    workload.set_defaults(fn=cmd_workload)

    validate = sub.add_parser("validate", help="check an experiment file and print it resolved")
    experiment_args(validate)
    validate.set_defaults(fn=cmd_validate)

    calibrate = sub.add_parser("calibrate", help="measure this machine's per-peer costs (what validate estimates from)")
    calibrate.add_argument("file", nargs="?", default=str(Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"),
                           help="experiment file whose protocol and plan to measure (default: the quickstart)")
    calibrate.add_argument("--set", action="append", metavar="PATH=VALUE", help="override a field (repeatable)")
    calibrate.add_argument("--out", type=Path, help="capacity table to update (default: bench/results/capacity.json)")
    calibrate.set_defaults(fn=cmd_calibrate)

    schema = sub.add_parser("schema", help="print the experiment file's JSON Schema")
    schema.add_argument("--markdown", type=Path, metavar="DIR",
                        help="write the reference pages into DIR instead (docs/reference: make docs)")
    schema.set_defaults(fn=cmd_schema)

    values = sub.add_parser("helm-values", help="render the chart's values from an experiment file")
    experiment_args(values)
    values.add_argument("--run-id", help="run id the objects are labelled with (default: manual)")
    values.add_argument("--sweep", action="store_true",
                        help="the values of the file's sweep as an Indexed Job (what `sweep --backend k8s` installs)")
    values.set_defaults(fn=cmd_helm_values)

    def in_cluster(name, fn, help):
        sp = sub.add_parser(name, help=help)
        sp.add_argument("file", help="the resolved experiment file (the chart mounts it)")
        sp.add_argument("--release", required=True, help="Helm release name (prefix of pod names)")
        sp.add_argument("--domain", help="suffix that makes a pod name resolvable (default: .<release>-peers)")
        sp.set_defaults(fn=fn)
        return sp

    peer = in_cluster("peer", cmd_peer, "host this pod's nodes (in a peer pod)")
    peer.add_argument("--pod", required=True, help="this pod's name")
    peer.add_argument("--run-id", required=True)
    peer.add_argument("--otlp-endpoint", help="export spans to this Collector (host:port)")
    peer.add_argument("--trace-dir", help="or write OTLP JSON lines here")
    peer.add_argument("--pki", help="folder with the run's ca.pem, peer.pem, peer.key: mutual TLS")

    drive = in_cluster("drive", cmd_drive, "carry out the plan over running peers (the controller Job)")
    drive.add_argument("--run-id", required=True)
    drive.add_argument("--out", required=True, help="the run directory is created here, named by the run id")
    drive.add_argument("--namespace", help="the pods' namespace (churn deletes pods through the API)")
    drive.add_argument("--no-kube", action="store_true", help="no Kubernetes API (static containers; no churn)")
    drive.add_argument("--locust-url", help="the Locust master's web API, e.g. http://<release>-locust:8089")
    drive.add_argument("--pki", help="folder with the run's ca.pem, controller.pem, controller.key: mutual TLS")

    load = in_cluster("load-plan", cmd_load_plan, "write the Locust users' plan (in a Locust pod)")
    load.add_argument("--out", required=True)

    point = sub.add_parser("sweep-point", help="run one point of a sweep (an index of the sweep's Indexed Job)")
    point.add_argument("file")
    point.add_argument("--index", type=int, required=True)
    point.add_argument("--out", required=True, help="the sweep's directory")
    point.set_defaults(fn=cmd_sweep_point)

    results = sub.add_parser("serve-results", help="serve run directories as tar.gz over HTTP (results pod)")
    results.add_argument("dir")
    results.add_argument("--port", type=int, default=8000)
    results.set_defaults(fn=cmd_serve_results)
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        load_plugins()
        sys.exit(args.fn(args))
    except (ExperimentError, PlanError, PluginError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
