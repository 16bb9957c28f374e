import random
import statistics

import pytest

from node.kit.links import LinkModel, LinkRule


def test_delay_jitter_and_loss_match_the_rule():
    model = LinkModel([LinkRule(delay_ms=50, jitter_ms=10, loss=0.1)], random.Random(1))
    samples = [model.sample(0, 3) for _ in range(20_000)]
    kept = [s for s in samples if s is not None]
    assert abs(1 - len(kept) / len(samples) - 0.1) < 0.01
    assert all(0.040 <= s <= 0.060 for s in kept)
    assert abs(statistics.mean(kept) - 0.050) < 0.0005


def test_last_matching_rule_wins_and_partitioned_rules_drop():
    model = LinkModel([LinkRule(delay_ms=5), LinkRule(nodes=frozenset({2}), partitioned=True)], random.Random(1))
    assert model.sample(0, 1) == 0.005
    assert model.sample(0, 2) is None


def test_partitions_cut_both_ways_and_only_across():
    model = LinkModel([], random.Random(1))
    model.partitions = [frozenset({1, 2})]
    assert model.sample(1, 3) is None and model.sample(3, 1) is None
    assert model.sample(1, 2) == 0.0 and model.sample(3, 4) == 0.0


def test_base_delay_per_link_adds_to_the_rule():
    model = LinkModel([LinkRule(delay_ms=1)], random.Random(1), base=lambda s, d: 10.0 * (s + d))
    assert model.sample(1, 2) == 0.031


def test_bandwidth_serialises_messages_behind_each_other():
    model = LinkModel([], random.Random(1), bandwidth_kbps=8.0)  # 1 byte per ms
    assert model.sample(0, 1, size=100, now=0.0) == 0.1
    assert model.sample(0, 2, size=100, now=0.0) == 0.2  # waits for the first
    assert model.sample(5, 2, size=100, now=0.0) == 0.1  # another sender has its own link
    assert model.sample(0, 1, size=100, now=1.0) == pytest.approx(0.1)  # idle again


def test_no_rules_no_delay():
    assert LinkModel([], random.Random(1)).sample(0, 9) == 0.0
