"""What the Locust users need from the experiment, as one JSON file the runner writes.

Kept free of gevent and Locust so the runner (asyncio) can import it.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_load_plan(path: Path, *, addrs: dict[int, str], subscriptions: list[frozenset[str]],
                    topic_choice: str, payload_bytes: int, seed: int) -> None:
    path.write_text(json.dumps({
        "addrs": {str(k): v for k, v in addrs.items()},
        "subscriptions": [sorted(s) for s in subscriptions],
        "topic_choice": topic_choice,
        "payload_bytes": payload_bytes,
        "seed": seed,
    }))


class LoadPlan:
    """Topic and publisher choice, following the experiment's publication plan: a topic uniform
    over non-empty topics or in proportion to subscribers, and a random subscriber of it."""

    def __init__(self, data: dict) -> None:
        self.addrs = {int(k): v for k, v in data["addrs"].items()}
        self.by_topic: dict[str, list[int]] = {}
        for node, topics in enumerate(data["subscriptions"]):
            for t in topics:
                self.by_topic.setdefault(t, []).append(node)
        self.topics = sorted(self.by_topic)
        self.weights = ([len(self.by_topic[t]) for t in self.topics]
                        if data["topic_choice"] == "popularity" else None)
        self.payload = b"x" * data["payload_bytes"]
        self.seed = data["seed"]

    @classmethod
    def load(cls, path: str | Path) -> LoadPlan:
        return cls(json.loads(Path(path).read_text()))

    def pick(self, rng) -> tuple[int, str]:
        topic = rng.choices(self.topics, weights=self.weights)[0] if self.weights else rng.choice(self.topics)
        return rng.choice(self.by_topic[topic]), topic
