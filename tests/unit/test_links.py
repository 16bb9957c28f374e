import random
import statistics

from node.links import LinkModel, LinkRule


def test_delay_jitter_and_loss_match_the_rule():
    model = LinkModel([LinkRule(delay_ms=50, jitter_ms=10, loss=0.1)], random.Random(1))
    samples = [model.sample(3) for _ in range(20_000)]
    kept = [s for s in samples if s is not None]
    assert abs(1 - len(kept) / len(samples) - 0.1) < 0.01
    assert all(0.040 <= s <= 0.060 for s in kept)
    assert abs(statistics.mean(kept) - 0.050) < 0.0005


def test_last_matching_rule_wins_and_partitions_drop():
    model = LinkModel([LinkRule(delay_ms=5), LinkRule(nodes=frozenset({2}), partitioned=True)], random.Random(1))
    assert model.sample(1) == 0.005
    assert model.sample(2) is None


def test_no_rules_no_delay():
    assert LinkModel([], random.Random(1)).sample(9) == 0.0
