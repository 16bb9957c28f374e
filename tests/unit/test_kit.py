"""The protocol kit's own rules: cores are pure (no I/O, no pydantic, no process-global caches),
and the shared pieces (oldest-partner choice, pending replies, duplicate filter, the stack's
routing and delivery) behave as documented."""

from __future__ import annotations

import ast
import importlib
import random
from collections import Counter
from pathlib import Path

import pytest

import node.kit
from node.kit import Dissemination, Layer, Stack
from node.kit.types import Deliver, Descriptor, EventMsg, Gossip, LocalProtocolError, Published, RemoteProtocolError, Send, SetTimer
from node.kit.views import DuplicateFilter, PendingReplies, age_all, pick_oldest, youngest

NODE = Path(node.kit.__file__).parent.parent
CORE_MODULES = [p for p in [*(NODE / "kit").glob("*.py"), *(NODE / "protocols").rglob("*.py")] if p.name != "plugins.py"]
"""The kit and every protocol (``plugins``, which imports what the environment names, apart)."""
PURE_MODULES = {"__future__", "abc", "collections", "dataclasses", "functools", "hashlib", "itertools", "math",
                "random", "re", "types", "typing", "bisect", "heapq", "enum", "numpy"}
"""Computation only: no I/O, clock or global randomness (numpy: SpiderCast's vectorised selection
over a 10,000-node membership)."""


def test_cores_import_only_pure_computation_modules_the_kit_and_the_protocols():
    for path in CORE_MODULES:
        allowed = PURE_MODULES | ({"importlib", "pkgutil"} if path.name == "registry.py" else set())  # finds rooms by name
        for stmt in ast.walk(ast.parse(path.read_text())):
            if isinstance(stmt, ast.Import):
                names = [a.name for a in stmt.names]
            elif isinstance(stmt, ast.ImportFrom):
                if stmt.level:  # relative: a module of the same folder
                    continue
                names = [stmt.module or ""]
            else:
                continue
            for name in names:
                ok = name.split(".")[0] in allowed or name.startswith(("node.kit", "node.protocols"))
                assert ok, f"{path.relative_to(NODE)} imports {name}"


def test_cores_hold_no_process_global_mutable_state_but_the_registry():
    for path in CORE_MODULES:
        module = importlib.import_module(".".join(path.relative_to(NODE.parent).with_suffix("").parts).removesuffix(".__init__"))
        for name, value in vars(module).items():
            if name.startswith("__") or getattr(value, "__module__", module.__name__) != module.__name__:
                continue
            mutable = isinstance(value, dict | list | set | bytearray) or hasattr(value, "cache_info")
            registries = {("node.kit.registry", "_protocols"), ("node.kit.messages", "_kinds")}  # filled as modules import
            assert not mutable or (module.__name__, name) in registries, f"{module.__name__}.{name}"


def test_pick_oldest_is_uniform_among_the_oldest():
    view = {i: Descriptor(i, f"n{i}", age=a) for i, a in enumerate([3, 7, 7, 1, 7])}
    rng = random.Random(1)
    picks = Counter(pick_oldest(view, rng) for _ in range(3000))
    assert set(picks) == {1, 2, 4} and min(picks.values()) > 900
    age_all(view)
    assert [d.age for d in view.values()] == [4, 8, 8, 2, 8]


def test_youngest_copy_wins_and_the_earlier_view_on_a_tie():
    a = {1: Descriptor(1, "a", age=2), 2: Descriptor(2, "a", age=5)}
    b = {1: Descriptor(1, "b", age=2), 2: Descriptor(2, "b", age=1), 3: Descriptor(3, "b")}
    merged = youngest(a, b)
    assert {n: d.addr for n, d in merged.items()} == {1: "a", 2: "b", 3: "b"}


def test_pending_replies_accept_in_time_and_count_late_or_unasked_ones():
    pending: PendingReplies[str] = PendingReplies(timeout_s=0.5)
    pending.expect(7, now=1.0, kept="sent")
    assert pending.take(7, now=1.4) == "sent"
    assert pending.take(7, now=1.4) is None  # twice
    pending.expect(8, now=1.0, kept="x")
    assert pending.take(8, now=1.6) is None  # late
    pending.expect(9, now=1.0, kept="y")
    pending.expect(10, now=1.8, kept="z")
    assert pending.prune(now=2.0) == [(9, "y")]  # expired, handed back for on_timeout
    assert len(pending) == 1 and pending.late == 2


def test_duplicate_filter_forgets_the_oldest_past_capacity():
    seen = DuplicateFilter(3)
    for k in range(5):
        seen.add(f"e{k}")
    assert [f"e{k}" in seen for k in range(5)] == [False, False, True, True, True]


class Echo(Layer):
    name = "echo"
    period = 2.0

    def tick(self, now):
        return [Send(n, d.addr, Gossip(self.name, self.stack.me, ())) for n, d in self.view.items()]

    def bootstrap(self, contacts):
        self.view = {c.node_id: c for c in contacts}


class ToAll(Dissemination):
    def targets(self, event, sender):
        return [d for n, d in self.stack.view("echo").items() if n != sender]


def stack(node_id: int = 0) -> Stack:
    return Stack(Descriptor(node_id, f"n{node_id}", frozenset({"t"})), None, random.Random(0), [Echo()], ToAll())


def test_stack_arms_a_timer_per_periodic_layer_and_rearms_it_after_each_tick():
    s = stack()
    [timer] = s.start(10.0, [Descriptor(1, "n1"), Descriptor(2, "n2")])
    assert isinstance(timer, SetTimer) and timer.name == "echo" and 10.0 <= timer.at < 12.0
    actions = s.on_timer("echo", 12.0)
    assert [a.dst for a in actions if isinstance(a, Send)] == [1, 2] and actions[-1] == SetTimer("echo", 14.0)
    with pytest.raises(LocalProtocolError):
        s.on_timer("nope", 12.0)


def test_stack_delivers_every_copy_forwards_first_copies_and_routes_layer_messages():
    s = stack()
    s.start(0.0, [Descriptor(1, "n1"), Descriptor(2, "n2")])
    e = EventMsg("1-1", "t", b"", 1, 1)
    first = s.on_message(1, e, 1.0)
    assert first[0] == Deliver(e, 1, True, True)
    assert [(a.dst, a.msg.hops) for a in first[1:]] == [(2, 2)]  # not back to the sender, one hop more
    assert s.on_message(2, e, 1.1) == [Deliver(e, 2, False, True)]  # a duplicate: delivered, not forwarded
    published = s.publish("t", b"p", 2.0)
    assert isinstance(published[0], Published) and published[0].event.event_id == "0-0-1"
    with pytest.raises(RemoteProtocolError):
        s.on_message(1, Gossip("unknown-layer", Descriptor(1, "n1"), ()), 3.0)
    s.leave(4.0)
    assert s.on_message(1, EventMsg("1-2", "t", b"", 1, 1), 5.0) == []
    with pytest.raises(LocalProtocolError):
        s.publish("t", b"", 5.0)


def test_analysis_imports_nothing_from_node():
    """The analysis computes from a run's files alone: a second route to what the cores did."""
    for path in (NODE.parent / "analysis").rglob("*.py"):
        for stmt in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else \
                [stmt.module or ""] if isinstance(stmt, ast.ImportFrom) and not stmt.level else []
            assert not any(n == "node" or n.startswith("node.") for n in names), f"{path} imports {names}"


def test_the_analysis_job_loads_nothing_of_node_even_indirectly():
    import subprocess
    import sys

    code = ("import sys, analysis.jobs.summarize, analysis.crosscheck\n"
            "print(sorted(m for m in sys.modules if m == 'node' or m.startswith('node.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=NODE.parent).stdout
    assert out.strip() == "[]", out


def test_a_plugin_module_that_cannot_be_imported_is_a_clear_error(monkeypatch, capsys):
    from controller.cli.main import main

    monkeypatch.setenv("OVERLAYLAB_PROTOCOLS", "no_such_protocol_module")
    with pytest.raises(SystemExit) as done:
        main(["schema"])
    assert done.value.code == 2
    assert "OVERLAYLAB_PROTOCOLS names 'no_such_protocol_module'" in capsys.readouterr().err


def test_values_hash_and_compare_as_frozen_dataclasses_and_an_unchanged_age_is_the_same_descriptor():
    # Sets and dicts of values must order as they did when values were frozen dataclasses (runs
    # stay byte-identical): a frozen dataclass hashes the tuple of its compared fields.
    d = Descriptor(7, "h:1", frozenset({"a", "b"}), 3, (("a", 2),))
    assert hash(d) == hash((7, "h:1", frozenset({"a", "b"}), 3, (("a", 2),)))
    measured = Descriptor(7, "h:1", frozenset({"a", "b"}), 3, (("a", 2),), profile_bytes=40)
    assert measured == d and hash(measured) == hash(d)  # the codec's measure is not part of the value
    e = EventMsg("e1", "a", b"x", 7, 2)
    assert hash(Send(1, "h:2", e)) == hash((1, "h:2", e))
    assert d.aged(3) is d and d.aged(4) == Descriptor(7, "h:1", frozenset({"a", "b"}), 4, (("a", 2),))
