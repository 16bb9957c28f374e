"""The DPS paper's content workloads (controller/content_workloads.py; spec §6.2): calibrated to
Table 1's Matching column, and the vectorised matching checked against the predicates one by one."""

from __future__ import annotations

import random

import numpy as np
import pytest

from controller.content_workloads import DOMAIN, PAPER_MATCHING_PCT, ContentWorkload, matching_matrix, matching_pct

pytestmark = pytest.mark.unit


def sample(name: str, subs: int, events: int, seed: int = 1):
    w, rng = ContentWorkload(name, seed), random.Random(seed + 1)
    return [w.subscription(rng) for _ in range(subs)], [w.event(rng) for _ in range(events)]


@pytest.mark.parametrize("name", sorted(PAPER_MATCHING_PCT))
def test_matching_share_is_the_papers_table_1(name):
    subs, events = sample(name, 1500, 1500)
    pct, paper = matching_pct(subs, events), PAPER_MATCHING_PCT[name]
    assert abs(pct - paper) <= 0.15 * paper, (name, pct, paper)  # the spec's calibration band (±15% relative)


@pytest.mark.parametrize("name", sorted(PAPER_MATCHING_PCT))
def test_vectorised_matching_equals_the_filters_one_by_one(name):
    subs, events = sample(name, 120, 150, seed=7)
    brute = np.array([[s.matches(e) for s in subs] for e in events])
    assert (matching_matrix(subs, events) == brute).all() and brute.any()


def test_generators_follow_the_table_and_are_seeded():
    subs, events = sample("alert", 3000, 10)
    ops = [p.op for s in subs for p in s.preds]
    eq = ops.count("=")
    assert abs(eq / (len(ops) - eq) - 0.2 / (0.8 * 2)) < 0.02  # 20% equalities; a range is 2 predicates
    game, _ = sample("game", 500, 1)
    widths = [label.hi - label.lo + 1 for s in game for label in s.labels.values()]
    assert all(p.op != "=" for s in game for p in s.preds) and 45 < np.mean(widths) < 55
    assert all(0 <= label.lo and label.hi < DOMAIN for s in game for label in s.labels.values())
    again, _ = sample("game", 500, 1)
    assert again == game
    with pytest.raises(ValueError, match="content workload 'chess'"):
        ContentWorkload("chess", 1)
