"""fidelity.verdict from the peer processes' load readings and the link probes (analysis/fidelity.py)."""

from analysis.fidelity import covered_s, verdict

S = 1_000_000_000


def host(t_s: float, node: int = 0, answered: bool = True, samples: int = 0, late: int = 0, very_late: int = 0) -> dict:
    line = {"t_ns": int(t_s * S), "kind": "host", "node": node, "answered": answered}
    if answered:
        line.update(lag_samples=samples, lag_over_100ms=late, lag_over_1000ms=very_late)
    return line


def readings(node: int, seconds: int, stall: range = range(0)) -> list[dict]:
    """A process read every second, 5 lag samples a second, silent in the ``stall`` seconds."""
    out, samples = [], 0
    for t in range(1, seconds + 1):
        if t in stall:
            out.append(host(t, node, answered=False))
        else:
            samples = 5 * t
            out.append(host(t, node, samples=samples))
    return out


META = {"backend": "local", "started_ns": 0, "ended_ns": 20 * S}


def test_a_run_whose_processes_kept_up_is_ok():
    v = verdict(META, readings(0, 20) + readings(3, 20), None)
    assert v["verdict"] == "ok" and v["windows"] == [] and v["reasons"] == []


def test_a_stalled_process_degrades_its_window_only():
    v = verdict(META, readings(0, 20) + readings(3, 20, stall=range(8, 11)), None)
    assert v["verdict"] == "degraded"
    assert {(w["node"], w["start_s"], w["end_s"]) for w in v["windows"]} == {(3, 7.0, 8.0), (3, 8.0, 9.0), (3, 9.0, 10.0)}
    assert covered_s(v["windows"]) == 3.0
    assert v["reasons"][:2] == ["3 of 38 process windows degraded", "15.0% of the run's 20.0 s degraded, 15.0% severely"]


def test_late_samples_and_a_starved_timer_degrade_too():
    lines = [host(1, samples=5), host(2, samples=10, late=3), host(3, samples=11, late=3), host(4, samples=16, late=3)]
    v = verdict({**META, "ended_ns": 4 * S}, lines, None)
    assert [w["start_s"] for w in v["windows"]] == [1.0, 2.0]
    assert "later than 100 ms" in v["windows"][0]["why"] and "starved" in v["windows"][1]["why"]


def test_a_run_stalled_most_of_the_time_or_losing_its_probes_is_invalid():
    assert verdict(META, readings(0, 20, stall=range(2, 18)), None)["verdict"] == "invalid"
    probes = {"loss": {"planned": 0.0, "measured": 1.0, "error_pp": 100.0}, "delay_ms": {"error_pct": 5.0}}
    v = verdict(META, readings(0, 20), probes)
    assert v["verdict"] == "invalid" and "lost 100.0 points" in v["reasons"][0]
    slow = {"loss": {"error_pp": 0.0}, "delay_ms": {"error_pct": 60.0}}
    assert verdict(META, readings(0, 20), slow)["verdict"] == "degraded"


def test_sim_is_ok_and_a_real_run_without_readings_unmeasured():
    assert verdict({**META, "backend": "sim"}, [], None)["verdict"] == "ok"
    assert verdict({**META, "backend": "k8s"}, [], None)["verdict"] == "unmeasured"


def probe(round_: int, t_s: float, sent: int = 5, dropped: int = 0, received: int = 5, planned: float = 30.0,
          excess: float = 0.5) -> dict:
    """One link's probes of one in-run round: ``received`` arrived, each ``excess`` ms later than planned."""
    return {"t_ns": int(t_s * S), "kind": "probe", "node": 1, "dst": 2, "round": round_, "sent": sent, "dropped": dropped,
            "received": received, "planned_ms_sum": planned * received, "measured_ms_sum": (planned + excess) * received}


def test_a_probe_round_late_or_lost_degrades_the_time_until_the_next_round():
    lines = readings(0, 20) + [probe(k, 5.0 * k) for k in (1, 2, 3)]
    lines += [probe(2, 10.0, received=5, excess=20.5), probe(3, 15.0, dropped=1, received=2)]
    v = verdict(META, lines, None)
    assert v["probe_rounds"] == 3 and v["verdict"] == "degraded"
    assert [(w["start_s"], w["end_s"]) for w in v["windows"]] == [(10.0, 15.0), (15.0, 20.0)]
    # round 2: 10 probes, half 20.5 ms late: 10.5 ms beyond 30 ms planned (threshold 7.5); round 3: 9 let through, 7 arrived
    assert "10.5 ms later than the 30.0 ms planned" in v["windows"][0]["why"]
    assert "22% of 9 lost by the hosts" in v["windows"][1]["why"]
    # one link of three held up (a process stalled at one end) makes its round late
    one_late = [probe(1, 5.0), probe(1, 5.0, excess=60.0), probe(1, 5.0), probe(2, 10.0)]
    assert verdict(META, readings(0, 20) + one_late, None)["verdict"] == "degraded"
    # probes dropped by the plan's own loss are not the host's
    assert verdict(META, readings(0, 20) + [probe(1, 5.0, dropped=3, received=2)], None)["verdict"] == "ok"


def test_without_host_readings_the_probes_judge_alone():
    v = verdict({**META, "backend": "k8s"}, [probe(1, 5.0), probe(2, 10.0, received=0)], None)
    assert v["verdict"] == "degraded" and "judged by the link probes alone" in v["reasons"][0]
    assert [(w["start_s"], w["end_s"]) for w in v["windows"]] == [(10.0, 15.0)]  # the last round stands for one period
    assert verdict({**META, "backend": "k8s"}, [probe(1, 5.0)], None)["verdict"] == "ok"


def test_a_load_phase_mostly_degraded_is_invalid_however_long_the_drain():
    """The events measured are in flight in the load phase: a host behind for most of it makes
    the run invalid, though the idle drain after it brings the share of the whole run down."""
    meta = {**META, "measure_start_ns": 4 * S, "load_end_ns": 10 * S}
    v = verdict(meta, readings(0, 20, stall=range(5, 10)), None)
    assert v["verdict"] == "invalid", v
    assert v["reasons"][1:] == ["25.0% of the run's 20.0 s degraded, 25.0% severely",
                                "83.3% of the load phase's 6.0 s severely degraded"]
    assert verdict({**meta, "load_end_ns": None}, readings(0, 20, stall=range(5, 10)), None)["verdict"] == "degraded"


def test_only_severe_windows_make_a_run_invalid():
    """A loop late by over 100 ms all run long is degraded; late by over a second, invalid. A
    probe round late by more than the planned delay itself is severe, by a quarter of it not."""
    late = [host(t, samples=5 * t, late=2 * t) for t in range(1, 21)]
    v = verdict(META, late, None)
    assert v["verdict"] == "degraded" and not any(w["severe"] for w in v["windows"]), v
    very_late = [host(t, samples=5 * t, late=2 * t, very_late=2 * t) for t in range(1, 21)]
    assert verdict(META, very_late, None)["verdict"] == "invalid"
    mild = [probe(k, 5.0 * k, excess=20.0) for k in range(4)]
    assert verdict(META, readings(0, 20) + mild, None)["verdict"] == "degraded"
    doubled = [probe(k, 5.0 * k, excess=31.0) for k in range(4)]
    assert verdict(META, readings(0, 20) + doubled, None)["verdict"] == "invalid"
