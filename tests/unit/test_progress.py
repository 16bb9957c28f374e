"""Progress lines for a long phase off a terminal (a log, CI, nohup)."""

from controller.cli import progress


def test_a_phase_off_a_terminal_logs_how_far_it_is_at_most_once_per_interval(monkeypatch):
    clock = iter([0.0, 10.0, 59.0, 61.0, 90.0, 130.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    assert not progress.console.is_terminal
    with progress.console.capture() as out:
        with progress.phase("sim: 3 peers", 200.0) as advance:
            for done in (5, 20, 50, 60, 100):  # wall 10, 59, 61, 90, 130 s
                advance(done)
    lines = out.get().splitlines()
    assert lines == [
        "sim: 3 peers: 50/200 (25%) after 0:01:01, about 0:03:03 left at the rate so far",
        "sim: 3 peers: 100/200 (50%) after 0:02:10, about 0:02:10 left at the rate so far",
        "sim: 3 peers: done",
    ]
