"""One Job the apiserver will not give a Pod must not hold the queue (on the local control plane).

With one slot, a Job whose Pod create is refused for good ends ``Failed`` and the Job behind it runs;
a Job with a name longer than a label value (legal: Job names go up to 253 characters) runs, and its
Pod is found by its ``pi-dispatch.dev/job`` label. Before the fix both held the head of the queue:
the create was answered 422 and retried every second, and nothing behind it ever started.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import Release, base_values, installed, merge
from pidispatch.manifests.pod import JOB_LABEL, job_label

pytestmark = pytest.mark.e2e

LONG = "delivery-" + "x" * 61  # 70 characters


@pytest.fixture(scope="module")
def one_slot(cluster: Cluster, kube: Kube, kubelet) -> Iterator[Release]:
    with installed(cluster, kube, "queue", merge(base_values(), {"maxConcurrentJobs": 1})) as r:
        r.trigger("plain", resume=False)
        yield r


def pods_labelled(r: Release, job: str) -> list[dict]:
    return r.kube.list(f"/api/v1/namespaces/{r.ns}/pods", labelSelector=f"{JOB_LABEL}={job_label(job)}")


def test_a_job_with_a_70_character_name_runs_and_the_next_one_too(one_slot: Release) -> None:
    r = one_slot
    r.job(LONG, trigger="plain", issue=1)
    r.job("after-long", trigger="plain", issue=2)
    assert r.wait_job(LONG)["status"]["phase"] == "Succeeded"
    assert r.wait_job("after-long")["status"]["phase"] == "Succeeded"
    [pod] = pods_labelled(r, LONG)
    assert pod["metadata"]["ownerReferences"][0]["name"] == LONG
    assert pod["metadata"]["name"] == r.get("jobs", LONG)["status"]["podName"]


def test_a_pod_the_apiserver_refuses_fails_its_job_and_the_next_one_runs(one_slot: Release) -> None:
    r = one_slot
    # The apiserver refuses a Pod whose image has surrounding whitespace (422); the Trigger's schema
    # accepts any string, so this is a Pod create refused for good that a user can cause.
    r.trigger("spaced", resume=False, image="local/fakepi ")
    r.job("refused-pod", trigger="spaced", issue=3)
    r.job("behind-refused", trigger="plain", issue=4)
    refused = r.wait_job("refused-pod")
    assert refused["status"]["phase"] == "Failed"
    started = r.condition(refused, "Started")
    assert started["reason"] == "PodRefused" and "422" in started["message"], started
    assert pods_labelled(r, "refused-pod") == []
    assert r.wait_job("behind-refused")["status"]["phase"] == "Succeeded"
