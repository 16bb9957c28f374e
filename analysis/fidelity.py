"""Whether a run measured the protocol or the testbed: ``summary.json`` ``fidelity.verdict``.

The peer processes sample their event loop's lag (node/transport/loopwatch.py) and the controller
reads the counters every second into ``host`` lines of the timeline. Between two readings of a
process, the window is *degraded* when the process did not answer, when its loop's timer fired
less than half as often as it should (the loop was starved), or when more than
``late_fraction`` of its samples came later than ``lag_ms``: every emulated delay, timer and
reply of its peers then ran late by as much. The end-of-run link probes count too: a mean delay
off the plan by more than ``delay_error_pct``, or a loss above the plan's by more than
``loss_error_pp`` points.

- ``ok``: no degraded window, probes within tolerance.
- ``degraded``: some windows degraded (listed, in seconds from the start) or probes off.
- ``invalid``: degraded windows cover more than ``invalid_fraction`` of the run, or the probes
  lost more than ``invalid_loss_pp`` points above the plan: the numbers describe the host.
- ``unmeasured``: a run of real peers without load readings (k8s, or a run written before).
``sim`` runs in virtual time: ``ok``.
"""

from __future__ import annotations

THRESHOLDS = {"lag_ms": 100, "late_fraction": 0.1, "invalid_fraction": 0.5, "delay_error_pct": 25.0,
              "loss_error_pp": 5.0, "invalid_loss_pp": 50.0}
SAMPLE_S = 0.2
"""The peers' lag sampling period (node/transport/loopwatch.py SAMPLE_S; not imported: the
analysis does not load the node package)."""


def windows(timeline: list[dict], started_ns: int, lag_ms: int = THRESHOLDS["lag_ms"],
            late_fraction: float = THRESHOLDS["late_fraction"]) -> tuple[list[dict], int]:
    """The degraded windows (process's first node, ``start_s``, ``end_s``, why) and how many
    windows there were."""
    by_host: dict[int, list[dict]] = {}
    for e in timeline:
        if e["kind"] == "host":
            by_host.setdefault(e["node"], []).append(e)
    out, total = [], 0
    late_key = f"lag_over_{lag_ms}ms"
    for node, lines in sorted(by_host.items()):
        lines.sort(key=lambda e: e["t_ns"])
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
                    if samples < 0.5 * expected:
                        out.append({**span, "why": f"event loop starved: {samples} of about {expected:.0f} lag samples"})
                    elif samples and late / samples > late_fraction:
                        out.append({**span, "why": f"{late} of {samples} lag samples later than {lag_ms} ms"})
                last = cur
            else:
                out.append({**span, "why": "did not answer within the controller's deadline"})
    return out, total


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
    bad, total = windows(timeline, meta["started_ns"], thresholds["lag_ms"], thresholds["late_fraction"])
    out["windows"] = bad
    duration_s = (meta["ended_ns"] - meta["started_ns"]) / 1e9
    reasons = out["reasons"]
    if not total:
        out["verdict"] = "unmeasured"
        reasons.append("no load readings of the peer processes")
    elif bad:
        share = covered_s(bad) / duration_s if duration_s > 0 else 1.0
        reasons.append(f"{len(bad)} of {total} process windows degraded, {100 * share:.1f}% of the run's "
                       f"{duration_s:.1f} s")
        out["verdict"] = "invalid" if share > thresholds["invalid_fraction"] else "degraded"
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
