"""Busy is not dead on k8s (controller/backends/cluster.py): a node that does not answer is a
crash only when its pod is not the one the run started, or not running, or restarted."""

import asyncio
from types import SimpleNamespace

from controller.backends.cluster import ClusterDriver


def pod(uid: str = "u1", phase: str = "Running", restarts: int = 0, deleting: bool = False):
    return SimpleNamespace(metadata=SimpleNamespace(uid=uid, deletion_timestamp="now" if deleting else None),
                           status=SimpleNamespace(phase=phase, container_statuses=[SimpleNamespace(restart_count=restarts)]))


class FakeCore:
    def __init__(self, current):
        self.current = current

    def read_namespaced_pod(self, name, namespace):
        if self.current is None:
            raise RuntimeError("404")
        return self.current


def driver(current, started=pod()) -> ClusterDriver:
    d = object.__new__(ClusterDriver)  # no cluster: only what host_running and host_groups read
    d.core, d.namespace, d.uids, d.restarts = FakeCore(current), "ns", {}, {}
    d.pod_of = {0: "r-peer-0", 1: "r-peer-0", 2: "r-peer-1"}
    d.alive = {0, 1, 2}
    d._started("r-peer-0", started)
    return d


def running(d: ClusterDriver) -> bool:
    return asyncio.run(d.host_running(1))


def test_the_same_running_pod_is_busy_not_dead():
    assert running(driver(pod()))
    assert running(driver(pod(restarts=2), started=pod(restarts=2)))  # restarts before the run do not count


def test_a_replaced_restarted_stopped_deleted_or_missing_pod_is_a_crash():
    assert not running(driver(pod(uid="u2")))
    assert not running(driver(pod(restarts=1)))
    assert not running(driver(pod(phase="Failed")))
    assert not running(driver(pod(deleting=True)))
    assert not running(driver(None))
    d = driver(pod())
    d.core = None  # no Kubernetes API: nothing known
    assert not running(d)


def test_the_load_readings_go_one_per_pod():
    assert driver(pod()).host_groups() == [[0, 1], [2]]
