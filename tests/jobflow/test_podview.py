"""A job Pod read once into its view (``jobflow/podview.py``): the phase, the runner's termination message, why a
Pod never started, the owner, an OOM kill, the run timeout, the checkout and when it finished.

Moved here with the code from ``test_flow.py`` (phase, message) and ``test_operator_limits.py`` (never started);
the dispatcher's use of them stays there.
"""

from __future__ import annotations

import calendar
import json
import time
from typing import Any

import pytest

from pidispatch.contract import JOB_LABEL
from pidispatch.jobflow.checkout import checkout_of
from pidispatch.jobflow.podview import PodView, pod_phase

CREATED = "2030-01-01T00:00:00Z"
EPOCH = calendar.timegm(time.strptime(CREATED, "%Y-%m-%dT%H:%M:%SZ"))
SHA = "a" * 40


def pod(phase: str | None = None, statuses: list[dict] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase is not None:
        status["phase"] = phase
    if statuses is not None:
        status["containerStatuses"] = statuses
    return {"metadata": {"name": "pij-delivery-1"}, "status": status}


@pytest.mark.parametrize(("p", "phase"), [
    (None, "Failed"), (pod("Pending"), None), (pod("Running"), None), (pod("Unknown"), None), (pod(), None),
    ({"metadata": {}}, None), (pod("Succeeded"), "Succeeded"), (pod("Failed"), "Failed"),
], ids=["vanished pod counts as failed", "pending", "running", "unknown", "no phase yet", "no status",
        "succeeded", "failed"])
def test_pod_phase(p: dict | None, phase: str | None) -> None:
    assert pod_phase(PodView.of(p) if p is not None else None) == phase


def terminated(name: str, message: str | None) -> dict[str, Any]:
    term: dict[str, Any] = {"exitCode": 0}
    if message is not None:
        term["message"] = message
    return {"name": name, "state": {"terminated": term}}


@pytest.mark.parametrize(("p", "message"), [
    (pod("Succeeded", [terminated("pi", '{"outcome":"completed"}')]), '{"outcome":"completed"}'),
    (pod("Succeeded", [terminated("sidecar", '{"outcome":"completed"}')]), None),
    (pod("Succeeded", [terminated("sidecar", "forged"), terminated("pi", "real")]), "real"),
    (pod("Running", [{"name": "pi", "state": {"running": {}}}]), None),
    (pod("Succeeded", [terminated("pi", "")]), None),
    (pod("Succeeded", [terminated("pi", None)]), None),
    (pod("Pending"), None),
    (None, None),
], ids=["pi's message", "another container's message is ignored", "pi's among several", "still running",
        "empty message", "no message", "no container statuses", "no pod"])
def test_termination_message_only_from_the_pi_container(p: dict | None, message: str | None) -> None:
    assert (PodView.of(p).message if p is not None else None) == message


def pending(waiting: dict[str, str] | None = None, scheduled: dict[str, str] | None = None,
            created: str = CREATED) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if waiting is not None:
        status["containerStatuses"] = [{"name": "pi", "state": {"waiting": waiting}}]
    if scheduled is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", **scheduled}]
    return {"metadata": {"creationTimestamp": created}, "status": status}


NEVER_STARTED = [
    ("image pull", pending({"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x"'}), 601,
     'ImagePullBackOff: Back-off pulling image "x"'),
    ("missing secret", pending({"reason": "CreateContainerConfigError", "message": 'secret "s" not found'}), 601,
     'CreateContainerConfigError: secret "s" not found'),
    ("unschedulable", pending(scheduled={"reason": "Unschedulable", "message": "0/1 nodes are available"}), 601,
     "Unschedulable: 0/1 nodes are available"),
    ("still creating", pending({"reason": "ContainerCreating"}), 601, "ContainerCreating: no message"),
    ("within the timeout", pending({"reason": "ImagePullBackOff"}), 599, None),
    ("running", {"metadata": {"creationTimestamp": CREATED}, "status": {"phase": "Running"}}, 9999, None),
]


@pytest.mark.parametrize(("pod", "age", "why"), [c[1:] for c in NEVER_STARTED], ids=[c[0] for c in NEVER_STARTED])
def test_a_pod_that_never_started_is_named_by_its_own_reason(pod: dict, age: float, why: str | None) -> None:
    assert PodView.of(pod).never_started(EPOCH + age, 600) == why


def test_the_owner_is_the_controlling_reference_and_the_job_its_name_else_the_label() -> None:
    refs = [{"kind": "ConfigMap", "name": "cm", "uid": "u0"},
            {"kind": "Job", "name": "delivery-1", "uid": "u1", "controller": True}]
    pod = PodView.of({"metadata": {"name": "pij-delivery-1", "ownerReferences": refs,
                                   "labels": {JOB_LABEL: "short"}}})
    assert (pod.name, pod.owner_uid, pod.owner_name, pod.job) == ("pij-delivery-1", "u1", "delivery-1", "delivery-1")
    # A controller of another kind owns the Pod (its uid is compared), but names no Job: the label does.
    other = PodView.of({"metadata": {"ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "uid": "u2",
                                                          "controller": True}],
                                     "labels": {JOB_LABEL: "short"}}})
    assert (other.owner_uid, other.owner_name, other.job) == ("u2", None, "short")
    assert PodView.of({"metadata": {}}).job is None
    # Read alone (retention, per Job and Pod): the same answer, without the rest of the view.
    assert PodView.owner_uid_of({"metadata": {"ownerReferences": refs}}) == "u1"
    assert PodView.owner_uid_of({"metadata": {}}) is None


@pytest.mark.parametrize("stamp", [
    "2026-12-07T18:00:00Z", "2024-02-29T23:59:59Z", "2026-12-07T18:00:60Z", "2026-1-07T18:00:00Z",
    "2023-02-29T00:00:00Z", "2026-12-07 18:00:00Z", "2026-12-07T18:00:00.5Z", "2026-12-07T18:00:00+00:00",
    "2026-12-07T24:00:00Z", "2026-12-07T18:00:00z", "yesterday", "", None,
])
def test_the_creation_time_reads_as_strptime_reads_it(stamp: str | None) -> None:
    """The fast path (``fromisoformat``) answers as ``strptime`` did, leap second and malformed stamps included."""
    try:
        expected: float | None = float(calendar.timegm(time.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        expected = None
    assert PodView.of({"metadata": {"creationTimestamp": stamp}}).created == expected


def test_an_oom_kill_of_the_job_container_names_its_memory_limit() -> None:
    def pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "pi", "resources": {"limits": limits}}]},
                "status": {"containerStatuses": [{"name": name, "state": {"terminated": {"reason": "OOMKilled"}}}]}}

    assert PodView.of(pod("pi", {"memory": "320Mi"})).oom_limit == "320Mi"
    assert PodView.of(pod("pi", {})).oom_limit == "the node's memory"
    assert PodView.of(pod("sidecar", {"memory": "320Mi"})).oom_limit is None


def test_the_run_timeout_is_read_with_the_kubelets_reason() -> None:
    pod = PodView.of({"spec": {"activeDeadlineSeconds": 900}, "status": {"phase": "Failed",
                                                                         "reason": "DeadlineExceeded"}})
    assert pod.deadline_exceeded and pod.active_deadline_seconds == 900
    assert not PodView.of({"status": {"phase": "Failed"}}).deadline_exceeded


def test_the_checkout_is_read_back_from_the_job_containers_environment() -> None:
    def pod(name: str, value: object) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": name, "env": [{"name": "PI_CHECKOUT", "value": value}]}]}}

    found = checkout_of(PodView.of(pod("pi", json.dumps({"ref": "main", "sha": SHA}))))
    assert found is not None and (found.ref, found.sha) == ("main", SHA)
    assert checkout_of(PodView.of(pod("sidecar", json.dumps({"ref": "main", "sha": SHA})))) is None
    assert checkout_of(PodView.of(pod("pi", "not json"))) is None
    assert checkout_of(PodView.of(pod("pi", 7))) is None
    assert checkout_of(None) is None


def test_the_pod_finished_when_its_last_container_did() -> None:
    def ended(stamp: str | None) -> dict[str, Any]:
        return {"name": "pi", "state": {"terminated": {"finishedAt": stamp} if stamp else {}}}

    pod = PodView.of({"status": {"containerStatuses": [ended("2030-01-01T00:00:05Z"), ended("2030-01-01T00:00:09Z"),
                                                       ended(None)]}})
    assert pod.finished_at == EPOCH + 9
    assert PodView.of({"status": {"containerStatuses": [ended(None)]}}).finished_at is None


def test_the_view_is_frozen() -> None:
    pod = PodView.of({"metadata": {"name": "pij-x"}})
    with pytest.raises(AttributeError):
        pod.phase = "Succeeded"  # type: ignore[misc]
