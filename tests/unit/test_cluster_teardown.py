"""Teardown on k8s (controller/backends/k8s.py): an object that vanished between the list and the
delete (a Job's pods, deleted with the Job a moment earlier) is gone, as teardown wants; any other
refusal still fails."""

from types import SimpleNamespace

import pytest
from kubernetes.client import ApiException

from controller.backends.k8s import Cluster


class FakeCoreV1:
    def __init__(self, api_client, names, status):
        self.names, self.status, self.deleted = names, status, []

    def list_namespaced_pod(self, namespace, label_selector):
        return SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(name=n)) for n in self.names])

    def delete_namespaced_pod(self, name, namespace, propagation_policy):
        if name == "vanished":
            raise ApiException(status=self.status)
        self.deleted.append(name)


def cluster(status: int) -> tuple[Cluster, FakeCoreV1]:
    core = FakeCoreV1(None, ["a", "vanished", "b"], status)
    c = object.__new__(Cluster)  # no cluster: only what delete_labelled reads
    c.client = SimpleNamespace(ApiException=ApiException, CoreV1Api=lambda api_client: core)
    c.api_client, c.namespace = None, "ns"
    return c, core


def test_a_pod_deleted_with_its_job_before_the_teardown_reaches_it_is_not_an_error():
    c, core = cluster(404)
    assert c.delete_labelled("Pod", "run=r") == 3
    assert core.deleted == ["a", "b"]


def test_any_other_refusal_of_a_delete_still_fails_the_teardown():
    c, _ = cluster(403)
    with pytest.raises(ApiException):
        c.delete_labelled("Pod", "run=r")
