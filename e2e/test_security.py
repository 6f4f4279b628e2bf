"""Security properties of a release, checked against the real API server.

- Job Pods pass the ``restricted`` Pod Security Standard (their namespace enforces it, and a Pod that
  does not pass is refused there) and carry no API token.
- The ServiceAccounts that run untrusted or exposed code (job Pods: the namespace's ``default``; the
  webhook receiver: the chart's receiver SA) cannot read Secrets, SessionKeys or ``pods/log``, by
  ``kubectl auth can-i --as`` and with their real bound tokens.
- No transcript bytes, tokens or branch names leak into Job or SessionKey status, Events or metrics.
"""

from __future__ import annotations

import json
import random
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import ApiError, Kube
from e2e.framework.receiver_release import RECEIVER, create_webhook_secret, receiver_values
from e2e.framework.release import Release, base_values, installed, merge
from pidispatch.api.crds import GROUP
from pidispatch.store.keys import issue_key

pytestmark = pytest.mark.e2e

ISSUE = random.randint(600_000, 699_999)
BRANCH = f"pi/issue-{ISSUE}"
MARKER = f"transcript-marker-{uuid.uuid4().hex}"
PLANTED = "ghs_" + uuid.uuid4().hex[:18] + uuid.uuid4().hex[:18].upper()  # an installation token's shape


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet) -> Iterator[Release]:
    values = merge(merge(base_values(), receiver_values()), {"sessions": {"enabled": True}})
    with installed(cluster, kube, "security", values,
                   prepare=lambda ns: create_webhook_secret(kube, ns, b"security-test-webhook-secret")) as r:
        yield r


@pytest.fixture(scope="module")
def marked_job(release: Release) -> dict[str, Any]:
    """A resumed Job whose transcript holds ``MARKER`` and a token, on the unique branch ``BRANCH``."""
    r = release
    assert r.run(f"seed-{ISSUE}", issue=ISSUE)["status"]["phase"] == "Succeeded"
    transcript = r.key_dir(issue_key("github", "acme/widgets", ISSUE)) / "current.jsonl"
    lines = transcript.read_bytes().splitlines(keepends=True)
    entry = json.loads(lines[-1])
    entry["message"]["content"][0]["text"] = f"{MARKER} token={PLANTED}"
    transcript.write_bytes(b"".join(lines[:-1]) + json.dumps(entry, separators=(",", ":")).encode() + b"\n")
    job = r.run(f"marked-{ISSUE}", issue=ISSUE, comment="@pi token=log")
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    assert job["status"]["session"]["reason"] == "resumed"
    promoted = transcript.read_bytes()
    assert MARKER.encode() in promoted, "the marker went through the job and was promoted back"
    # No credential is ever stored (issue 31 item 5): the token the transcript carried is redacted in the
    # promoted copy, counted on the Job, and the line stays JSON.
    assert PLANTED.encode() not in promoted, "the planted token was promoted back into the store"
    assert b"token=[REDACTED:github-token]" in promoted
    assert all(json.loads(line) for line in promoted.splitlines())
    assert job["status"]["session"]["redacted"] == 1, json.dumps(job["status"])
    return job


# -- Pod Security ---------------------------------------------------------------------------------------------
def test_job_pods_are_admitted_by_a_restricted_namespace_and_get_no_token(release: Release, marked_job,
                                                                          kube: Kube) -> None:
    ns = kube.get(f"/api/v1/namespaces/{release.ns}")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # The enforcement is live: a Pod that is not restricted is refused in this namespace.
    with pytest.raises(ApiError) as refused:
        kube.create(f"/api/v1/namespaces/{release.ns}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "not-restricted"},
            "spec": {"containers": [{"name": "x", "image": "x", "securityContext": {"privileged": True}}]}})
    assert refused.value.status == 403 and "restricted" in refused.value.message
    [pod] = release.pods_of(marked_job["metadata"]["name"])
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec.get("serviceAccountName", "default") == "default"
    assert not any("projected" in v or "secret" in v for v in spec.get("volumes") or []), spec.get("volumes")
    for container in spec["containers"] + spec.get("initContainers", []):
        assert not any(m["mountPath"].startswith("/var/run/secrets/kubernetes.io")
                       for m in container.get("volumeMounts") or []), container["name"]
        sc = {**(spec.get("securityContext") or {}), **(container.get("securityContext") or {})}
        assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False, container["name"]
        assert sc["capabilities"]["drop"] == ["ALL"], container["name"]
        assert sc["seccompProfile"]["type"] in ("RuntimeDefault", "Localhost"), container["name"]


# -- RBAC of the job and receiver ServiceAccounts ------------------------------------------------------------
DENIED = [
    ("get secrets", ["get", "secrets"]),
    ("list secrets", ["list", "secrets"]),
    ("get sessionkeys", ["get", f"sessionkeys.{GROUP}"]),
    ("list sessionkeys", ["list", f"sessionkeys.{GROUP}"]),
    ("get pods/log", ["get", "pods", "--subresource=log"]),
]
ACCOUNTS = ["default", RECEIVER]


@pytest.mark.parametrize("account", ACCOUNTS, ids=["job-pods-default-sa", "receiver-sa"])
@pytest.mark.parametrize(("what", "args"), DENIED, ids=[w for w, _ in DENIED])
def test_can_i_denies(release: Release, cluster: Cluster, account: str, what: str, args: list[str]) -> None:
    user = f"system:serviceaccount:{release.ns}:{account}"
    result = cluster.kubectl("auth", "can-i", *args, f"--as={user}", "-n", release.ns, check=False)
    assert result.stdout.strip() == "no", f"{user} may {what}: {result.stdout}{result.stderr}"


@pytest.mark.parametrize("account", ACCOUNTS, ids=["job-pods-default-sa", "receiver-sa"])
def test_real_tokens_are_refused(release: Release, cluster: Cluster, marked_job, account: str) -> None:
    ns = release.ns
    sa = Kube.from_kubeconfig(cluster.service_account_kubeconfig(ns, account, create=False))
    key = issue_key("github", "acme/widgets", ISSUE)
    [pod] = release.pods_of(marked_job["metadata"]["name"])
    attempts = {
        "list Secrets": f"/api/v1/namespaces/{ns}/secrets",
        "get the webhook Secret": f"/api/v1/namespaces/{ns}/secrets/github-webhook",
        "list SessionKeys": release.path("sessionkeys"),
        "get a SessionKey": release.path("sessionkeys", key),
        "read a job Pod's log": f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/log",
    }
    for what, path in attempts.items():
        with pytest.raises(ApiError) as denied:
            sa.get(path)
        assert denied.value.status == 403, f"{account} could {what}"


# -- Nothing leaks into status, Events or metrics ------------------------------------------------------------
def _without_branch(sessionkey: dict[str, Any]) -> dict[str, Any]:
    copy = json.loads(json.dumps(sessionkey))
    copy["spec"].pop("branch", None)  # the key's definition, the one place a branch belongs
    return copy


def test_no_transcript_bytes_tokens_or_branch_names_in_status_events_or_metrics(release: Release, marked_job,
                                                                                kube: Kube) -> None:
    r = release
    needles = [MARKER, BRANCH, "ghs_", PLANTED[4:], "Bearer "]
    places: dict[str, str] = {}
    for job in kube.list(r.path("jobs")):
        places[f"Job {job['metadata']['name']} status"] = json.dumps(job.get("status"))
    sessionkeys = kube.list(r.path("sessionkeys"))
    assert any(sk["spec"].get("branch") == BRANCH for sk in sessionkeys), "the marked key has its SessionKey"
    for sk in sessionkeys:
        places[f"SessionKey {sk['metadata']['name']}"] = json.dumps(_without_branch(sk))
    events = kube.list(f"/api/v1/namespaces/{r.ns}/events")
    assert events, "the operator records Events"
    places["Events"] = json.dumps(events)
    places["events.k8s.io Events"] = json.dumps(kube.list(f"/apis/events.k8s.io/v1/namespaces/{r.ns}/events"))
    with urllib.request.urlopen(f"http://127.0.0.1:{r.values['metrics']['port']}/metrics", timeout=10) as response:
        places["operator /metrics"] = response.read().decode()
    for place, text in places.items():
        for needle in needles:
            assert needle not in text, f"{needle!r} appears in {place}"
