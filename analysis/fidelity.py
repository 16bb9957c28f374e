"""Whether a run measured the protocol or the testbed: ``summary.json`` ``fidelity.verdict``.

The peer processes sample their event loop's lag (node/transport/loopwatch.py) and the controller
reads the counters every second into ``host`` lines of the timeline. Between two readings of a
process, the window is *degraded* when the process did not answer, when its loop's timer fired
less than half as often as it should (the loop was starved), or when more than
``late_fraction`` of its samples came later than ``lag_ms``: every emulated delay, timer and
reply of its peers then ran late by as much.

The link probes count too. During the run (``network.fidelity_every_s``), each round of probes
stands for the time until the next round; the round is degraded when its probes arrived later
than the delays the emulation drew for them, on average, by more than ``delay_error_pct`` of
those delays (and at least ``excess_floor_ms``), or when more than ``loss_error_pp`` points of the probes the
plan let through were lost. At the end of the run: a mean delay off the plan by more than
``delay_error_pct``, or a loss above the plan's by more than ``loss_error_pp`` points.

- ``ok``: no degraded window, end-of-run probes within tolerance.
- ``degraded``: some windows degraded (listed, in seconds from the start) or probes off.
- ``invalid``: severely degraded windows cover more than ``invalid_fraction`` of the run or of
  its load phase (warm-up end to the last planned publication: when the events measured are in
  flight), or the end-of-run probes lost more than ``invalid_loss_pp`` points above the plan:
  the numbers describe the host. A window is severe when its process did not answer, its loop
  starved, more than ``late_fraction`` of its samples came later than ``invalid_lag_ms``, or
  its probe round's links were late by more than ``invalid_delay_error_pct`` of the planned
  delay (the hosts doubled it) or lost more than ``invalid_loss_pp`` points.
- ``unmeasured``: a run of real peers with neither load readings nor probe rounds (a run written
  before they existed, or one without link emulation on a backend that gives no readings).
``sim`` runs in virtual time: ``ok``.
"""

from __future__ import annotations

THRESHOLDS = {"lag_ms": 100, "invalid_lag_ms": 1000, "late_fraction": 0.1, "invalid_fraction": 0.5,
              "delay_error_pct": 25.0, "invalid_delay_error_pct": 100.0, "excess_floor_ms": 5.0,
              "loss_error_pp": 5.0, "invalid_loss_pp": 50.0}
SAMPLE_S = 0.2
"""The peers' lag sampling period (node/transport/loopwatch.py SAMPLE_S; not imported: the
analysis does not load the node package)."""


def _by_node(timeline: list[dict], kind: str) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for e in timeline:
        if e["kind"] == kind:
            out.setdefault(e["node"], []).append(e)
    for lines in out.values():
        lines.sort(key=lambda e: e["t_ns"])
    return out


def windows(timeline: list[dict], started_ns: int, thresholds: dict = THRESHOLDS) -> tuple[list[dict], int]:
    """The degraded windows of the peer processes (process's first node, ``start_s``,
    ``end_s``, why, ``severe``) and how many windows there were."""
    out, total = [], 0
    lag_ms, late_fraction = thresholds["lag_ms"], thresholds["late_fraction"]
    late_key, very_late_key = f"lag_over_{lag_ms}ms", f"lag_over_{thresholds['invalid_lag_ms']}ms"
    for node, lines in sorted(_by_node(timeline, "host").items()):
        last = None  # the last reading that answered
        for prev, cur in zip(lines, lines[1:]):
            total += 1
            span = {"node": node, "start_s": (prev["t_ns"] - started_ns) / 1e9, "end_s": (cur["t_ns"] - started_ns) / 1e9}
            if cur["answered"]:
                base = last if last is not None else (prev if prev["answered"] else None)
                if base is not None:
                    samples = cur.get("lag_samples", 0) - base.get("lag_samples", 0)
                    expected = (cur["t_ns"] - base["t_ns"]) / 1e9 / SAMPLE_S
                    late = cur.get(late_key, 0) - base.get(late_key, 0)
                    very_late = cur.get(very_late_key, 0) - base.get(very_late_key, 0)
                    if samples < 0.5 * expected:
                        out.append({**span, "why": f"event loop starved: {samples} of about {expected:.0f} lag samples",
                                    "severe": True})
                    elif samples and late / samples > late_fraction:
                        out.append({**span, "why": f"{late} of {samples} lag samples later than {lag_ms} ms",
                                    "severe": very_late / samples > late_fraction})
                last = cur
            else:
                out.append({**span, "why": "did not answer within the controller's deadline", "severe": True})
    return out, total


def host_series(timeline: list[dict], started_ns: int) -> list[dict]:
    """Per process and reading: the mean lag of its loop's samples since its last answered
    reading (ms), and its CPU share over that time (for the report's plot)."""
    out = []
    for node, lines in sorted(_by_node(timeline, "host").items()):
        answered = [e for e in lines if e["answered"]]
        for prev, cur in zip(answered, answered[1:]):
            samples = cur.get("lag_samples", 0) - prev.get("lag_samples", 0)
            dt_s = (cur["t_ns"] - prev["t_ns"]) / 1e9
            out.append({"node": node, "t_s": (cur["t_ns"] - started_ns) / 1e9,
                        "lag_mean_ms": (cur.get("lag_ms_sum", 0) - prev.get("lag_ms_sum", 0)) / samples if samples else None,
                        "cpu_share": (cur.get("cpu_ms", 0) - prev.get("cpu_ms", 0)) / 1000 / dt_s if dt_s > 0 else None})
    return out


def probe_rounds(timeline: list[dict], started_ns: int, ended_ns: int) -> list[dict]:
    """The in-run probe rounds, pooled over their links: ``start_s``/``end_s`` (until the next
    round), probes ``sent``, ``dropped`` by plan, ``received``, ``planned_ms`` (the mean planned
    delay of those that arrived), ``excess_ms`` (their mean measured less planned delay: links
    held up by one stalled process count, though the others were on time) and ``lost_pct``
    (share of the probes the plan let through that did not arrive)."""
    by_round: dict[int, list[dict]] = {}
    for e in timeline:
        if e["kind"] == "probe":
            by_round.setdefault(e["round"], []).append(e)
    rounds = [by_round[k] for k in sorted(by_round)]
    out = []
    for k, links in enumerate(rounds):
        t_ns = links[0]["t_ns"]
        end_ns = rounds[k + 1][0]["t_ns"] if k + 1 < len(rounds) else \
            min(ended_ns, t_ns + (t_ns - rounds[k - 1][0]["t_ns"] if k else ended_ns - t_ns))
        sent, dropped, received = (sum(e[key] for e in links) for key in ("sent", "dropped", "received"))
        through = sent - dropped
        out.append({"start_s": (t_ns - started_ns) / 1e9, "end_s": (end_ns - started_ns) / 1e9,
                    "sent": sent, "dropped": dropped, "received": received,
                    "planned_ms": sum(e["planned_ms_sum"] for e in links) / received if received else None,
                    "excess_ms": sum(e["measured_ms_sum"] - e["planned_ms_sum"] for e in links) / received if received else None,
                    "lost_pct": 100 * (through - received) / through if through else None})
    return out


def probe_windows(rounds: list[dict], thresholds: dict = THRESHOLDS) -> list[dict]:
    """The rounds whose probes were late or lost beyond the thresholds, as degraded windows;
    ``severe`` beyond the invalid ones (the hosts at least doubled the delays, or lost half)."""
    out = []
    for r in rounds:
        span = {"node": None, "start_s": r["start_s"], "end_s": r["end_s"]}
        if r["lost_pct"] is not None and r["lost_pct"] > thresholds["loss_error_pp"]:
            out.append({**span, "why": f"link probes: {r['lost_pct']:.0f}% of {r['sent'] - r['dropped']} lost by the hosts",
                        "severe": r["lost_pct"] > thresholds["invalid_loss_pp"]})
        elif r["excess_ms"] is not None and \
                r["excess_ms"] > max(thresholds["excess_floor_ms"], thresholds["delay_error_pct"] / 100 * r["planned_ms"]):
            out.append({**span, "why": f"link probes: {r['excess_ms']:.1f} ms later than the {r['planned_ms']:.1f} ms planned",
                        "severe": r["excess_ms"] > thresholds["invalid_delay_error_pct"] / 100 * r["planned_ms"]})
    return out


def covered_s(spans: list[dict]) -> float:
    """Seconds covered by the union of ``spans``."""
    total, end = 0.0, float("-inf")
    for s in sorted(spans, key=lambda s: s["start_s"]):
        if s["end_s"] > end:
            total += s["end_s"] - max(s["start_s"], end)
            end = s["end_s"]
    return total


def verdict(meta: dict, timeline: list[dict], probes: dict | None, thresholds: dict = THRESHOLDS) -> dict:
    """``fidelity.verdict`` with its reasons, thresholds and degraded windows."""
    out = {"verdict": "ok", "reasons": [], "thresholds": dict(thresholds), "windows": []}
    if meta.get("backend") == "sim":
        out["reasons"].append("sim: virtual time, no host to fall behind")
        return out
    bad, total = windows(timeline, meta["started_ns"], thresholds)
    rounds = probe_rounds(timeline, meta["started_ns"], meta["ended_ns"])
    late_rounds = probe_windows(rounds, thresholds)
    out["windows"] = bad + late_rounds
    out["probe_rounds"] = len(rounds)
    duration_s = (meta["ended_ns"] - meta["started_ns"]) / 1e9
    reasons = out["reasons"]
    if not total:
        reasons.append("no load readings of the peer processes" + (": judged by the link probes alone" if rounds else ""))
        if not rounds:
            out["verdict"] = "unmeasured"
    if out["windows"]:
        if bad:
            reasons.append(f"{len(bad)} of {total} process windows degraded")
        if late_rounds:
            reasons.append(f"{len(late_rounds)} of {len(rounds)} rounds of link probes during the run late or lost")
        severe = [w for w in out["windows"] if w["severe"]]
        shares = [covered_s(out["windows"]) / duration_s if duration_s > 0 else 1.0,
                  covered_s(severe) / duration_s if duration_s > 0 else 1.0]
        reasons.append(f"{100 * shares[0]:.1f}% of the run's {duration_s:.1f} s degraded, {100 * shares[1]:.1f}% severely")
        if meta.get("load_end_ns") and meta["load_end_ns"] > meta["measure_start_ns"]:
            lo, hi = (meta["measure_start_ns"] - meta["started_ns"]) / 1e9, (meta["load_end_ns"] - meta["started_ns"]) / 1e9
            in_load = [{**w, "start_s": max(w["start_s"], lo), "end_s": min(w["end_s"], hi)} for w in severe
                       if w["end_s"] > lo and w["start_s"] < hi]
            shares.append(covered_s(in_load) / (hi - lo))
            reasons.append(f"{100 * shares[-1]:.1f}% of the load phase's {hi - lo:.1f} s severely degraded")
        out["verdict"] = "invalid" if max(shares[1:]) > thresholds["invalid_fraction"] else "degraded"
    if probes:
        loss_pp = (probes.get("loss") or {}).get("error_pp")
        delay_pct = (probes.get("delay_ms") or {}).get("error_pct")
        if loss_pp is not None and loss_pp > thresholds["invalid_loss_pp"]:
            out["verdict"] = "invalid"
            reasons.append(f"link probes lost {loss_pp:.1f} points more than planned")
        elif (loss_pp is not None and loss_pp > thresholds["loss_error_pp"]) or \
                (delay_pct is not None and abs(delay_pct) > thresholds["delay_error_pct"]):
            if out["verdict"] in ("ok", "unmeasured"):
                out["verdict"] = "degraded"
            reasons.append(f"link probes off the plan: delay {delay_pct if delay_pct is None else round(delay_pct, 1)}%, "
                           f"loss {loss_pp if loss_pp is None else round(loss_pp, 1)} points")
    return out
