"""The webhook receiver end to end: installed by the Helm chart next to the operator, running as its own
ServiceAccount (read Triggers, create Jobs) on the real kube-apiserver, fed signed GitHub-format
deliveries by ``testkit/fakegithub.py``. A matching delivery becomes a Job CR that the operator runs to a
terminal phase with the scripted job stand-in; forged, unsigned, replayed, oversized and malformed
deliveries create nothing (a signed body replayed under a new delivery id included: Job names come
from the Trigger and the body's digest, and the API server refuses the second), a phrase quoted, in
code or in an HTML comment starts nothing, a form-encoded webhook works, a flood of bad requests leaves
the receiver up, and the ServiceAccount can do exactly what its Role says.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import ApiError, Kube
from e2e.framework.receiver_release import RECEIVER, Receiver, installed_receiver
from e2e.framework.release import PI_VERSION
from pidispatch.api.crds import GROUP, VERSION
from pidispatch.api.vocabulary import RETIRE_ANNOTATION, RETIRE_PULL_REQUEST_ANNOTATION
from pidispatch.receiver.delivery import body_digest, job_name
from pidispatch.store.keys import pull_request_key
from testkit.fakegithub import Delivery, Webhooks, signature
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

SECRET = b"e2e-webhook-" + uuid.uuid4().hex.encode()
MAX_BODY = 64 * 1024
TRIGGERS: dict[str, dict[str, Any]] = {
    "label": {"event": "issues.labeled", "label": "pi"},
    "fix": {"event": "issue_comment.created", "phrase": "@pi"},
    "review": {"event": "pull_request_review.submitted", "phrase": "@pi"},
    "inline": {"event": "pull_request_review_comment.created", "phrase": "@pi"},
    "elsewhere": {"event": "issue_comment.created", "phrase": "/elsewhere", "repository": "other/repo"},
}


@pytest.fixture(scope="module")
def receiver(cluster: Cluster, kube: Kube, kubelet: object) -> Iterator[Receiver]:
    with installed_receiver(cluster, kube, "receiver", SECRET, TRIGGERS, max_body=MAX_BODY) as r:
        yield r


def jobs(r: Receiver) -> dict[str, dict[str, Any]]:
    return {j["metadata"]["name"]: j for j in r.release.kube.list(r.release.path("jobs"))}


_numbers = iter(range(500, 100000))


# -- every event type, through to the operator -------------------------------------------------------------
EVENTS: list[tuple[str, str, Callable[[Webhooks, int], Delivery], dict[str, Any]]] = [
    ("issue labeled", "label", lambda h, n: h.issues_labeled(n, "pi", sender="alice"),
     {"issue": "N", "sender": "alice"}),
    ("comment on an issue", "fix", lambda h, n: h.issue_comment(n, "@pi fix the flaky test", sender="bob"),
     {"issue": "N", "comment": "@pi fix the flaky test", "sender": "bob"}),
    ("comment on a pull request", "fix", lambda h, n: h.issue_comment(n, "@pi rebase", on_pull_request=True),
     {"pullRequest": "N", "comment": "@pi rebase", "sender": "octocat"}),
    ("review submitted", "review",
     lambda h, n: h.pull_request_review(h.pull_request(n, head_ref="topic"), "@pi address these"),
     {"pullRequest": "N", "comment": "@pi address these", "fork": False, "sender": "octocat"}),
    ("review comment from a fork", "inline",
     lambda h, n: h.pull_request_review_comment(h.pull_request(n, fork="mallory/widgets"), "@pi rename",
                                                sender="mallory"),
     {"pullRequest": "N", "comment": "@pi rename", "fork": True, "sender": "mallory"}),
]


@pytest.mark.parametrize(("trigger", "build", "expected"), [e[1:] for e in EVENTS], ids=[e[0] for e in EVENTS])
def test_a_signed_delivery_becomes_a_job_the_operator_runs(receiver: Receiver, trigger: str,
                                                           build: Callable[[Webhooks, int], Delivery],
                                                           expected: dict[str, Any]) -> None:
    number = next(_numbers)
    sent = receiver.hooks().send(build(receiver.hooks(), number))
    name = job_name(body_digest(sent.delivery.body), trigger)
    assert sent.status == 202, sent.json
    assert sent.json == {"jobs": [name], "duplicates": []}
    job = receiver.release.get("jobs", name)
    assert job["spec"] == {"trigger": trigger, "forge": "github", "repository": "acme/widgets",
                           **{k: (number if v == "N" else v) for k, v in expected.items()},
                           "authSource": "app", "deliveryId": sent.delivery.id}
    done = receiver.release.wait_job(name)
    assert done["status"]["phase"] == "Succeeded", done["status"]


def test_one_delivery_to_no_matching_trigger_creates_nothing(receiver: Receiver) -> None:
    before = set(jobs(receiver))
    hooks = receiver.hooks()
    for delivery in (hooks.issue_comment(1, "/elsewhere please"), hooks.issues_labeled(1, "bug"),
                     hooks.issue_comment(1, "thanks, looks good")):
        sent = hooks.send(delivery)
        assert sent.status == 202 and "no Trigger matches" in sent.json["ignored"], sent.json
    assert set(jobs(receiver)) == before


def test_the_repository_restriction_admits_its_own_repository(receiver: Receiver) -> None:
    hooks = receiver.hooks(repository="other/repo")
    sent = hooks.send(hooks.issue_comment(next(_numbers), "/elsewhere please"))
    assert sent.json["jobs"] == [job_name(body_digest(sent.delivery.body), "elsewhere")]
    assert receiver.release.get("jobs", sent.json["jobs"][0])["spec"]["repository"] == "other/repo"


# -- nothing is created from what is not a fresh, signed, well-formed delivery ---------------------------------
def test_a_replicas_trigger_gets_one_job_per_attempt_from_the_charts_receiver(receiver: Receiver) -> None:
    """``run.replicas: 2`` (issue 34, item 6) through the chart's receiver, as its own ServiceAccount: one
    delivery, two Jobs ``<name>-r1`` and ``<name>-r2`` naming their attempt, both run by the operator."""
    release = receiver.release
    release.kube.create(release.path("triggers"), {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trigger", "metadata": {"name": "race"},
        "spec": {"on": {"event": "issue_comment.created", "phrase": "@race"},
                 "run": {"model": "fake/fake-model", "piVersion": PI_VERSION, "replicas": 2}}})
    try:
        receiver.await_triggers(len(TRIGGERS) + 1)
        number = next(_numbers)
        sent = receiver.hooks().send(receiver.hooks().issue_comment(number, "@race both of you"))
        base = job_name(body_digest(sent.delivery.body), "race")
        assert (sent.status, sent.json) == (202, {"jobs": [f"{base}-r1", f"{base}-r2"], "duplicates": []}), sent.json
        for i in (1, 2):
            job = release.get("jobs", f"{base}-r{i}")
            assert (job["spec"]["replica"], job["spec"]["replicas"], job["spec"]["issue"]) == (i, 2, number)
            done = release.wait_job(f"{base}-r{i}")
            assert done["status"]["phase"] == "Succeeded", done["status"]
    finally:
        release.kube.delete(release.path("triggers", "race"))
        receiver.await_triggers(len(TRIGGERS))


def test_a_merged_pull_request_is_retired_by_the_charts_receiver_as_its_own_service_account(
        receiver: Receiver) -> None:
    """Retirement (issue 34, item 1) through the chart's receiver: its ServiceAccount, not an admin, annotates
    the SessionKey a merged pull request names (``e2e/test_operator_lifecycle.py`` follows the operator's side
    to a cold next delivery). A resume Trigger must serve the repository, so one is made for the test."""
    release = receiver.release
    release.kube.create(release.path("triggers"), {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trigger", "metadata": {"name": "keeper"},
        "spec": {"on": {"event": "issue_comment.created", "phrase": "@keep", "repositories": ["acme/*"]},
                 "run": {"model": "fake/fake-model", "piVersion": PI_VERSION, "resume": True}}})
    branch, number = "topic-retire", next(_numbers)
    key = pull_request_key("github", "acme/widgets", branch, "acme/widgets")
    assert key is not None
    created = release.kube.create(release.path("sessionkeys"), {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "SessionKey", "metadata": {"name": key},
        "spec": {"forge": "github", "repository": "acme/widgets", "branch": branch}})
    try:
        receiver.await_triggers(len(TRIGGERS) + 1)
        hooks = receiver.hooks()
        sent = hooks.send(hooks.pull_request_event(hooks.pull_request(number, head_ref=branch), "closed",
                                                   merged=True))
        assert (sent.status, sent.json) == (202, {"retired": key, "reason": "pull-request-merged"}), sent.json
        # The operator acts on the annotation at once (here it refuses: no job of its own ran on the branch, and
        # takes the annotation off), so the receiver's write is read from the SessionKey's history, not its state.
        annotations: dict[str, str] = {}
        for event in release.kube.watch(release.path("sessionkeys"), resource_version=created["metadata"][
                "resourceVersion"], timeout_seconds=30, fieldSelector=f"metadata.name={key}"):
            annotations = event["object"]["metadata"].get("annotations") or {}
            if event["type"] == "MODIFIED" and RETIRE_ANNOTATION in annotations:
                break
        assert annotations.get(RETIRE_ANNOTATION) == "pull-request-merged", annotations
        assert annotations.get(RETIRE_PULL_REQUEST_ANNOTATION) == str(number), annotations
    finally:
        release.kube.delete(release.path("triggers", "keeper"))
        release.kube.delete_ignore_missing(release.path("sessionkeys", key))
        receiver.await_triggers(len(TRIGGERS))


def test_a_replayed_delivery_creates_no_second_job(receiver: Receiver) -> None:
    hooks = receiver.hooks()
    first = hooks.send(hooks.issue_comment(next(_numbers), "@pi once"))
    [name] = first.json["jobs"]
    created = receiver.release.get("jobs", name)["metadata"]["uid"]
    count = len(jobs(receiver))
    for _ in range(3):
        again = hooks.send(first.delivery.redelivered())
        assert again.status == 202 and again.json == {"jobs": [], "duplicates": [name]}
    for _ in range(3):  # the same signed body under a new delivery id: a replay, not GitHub
        replay = Delivery(first.delivery.event, first.delivery.payload)
        assert replay.id != first.delivery.id and replay.body == first.delivery.body
        again = hooks.send(replay)
        assert again.status == 202 and again.json == {"jobs": [], "duplicates": [name]}
    assert len(jobs(receiver)) == count
    assert receiver.release.get("jobs", name)["metadata"]["uid"] == created, "the first Job, untouched"
    assert receiver.release.get("jobs", name)["spec"]["deliveryId"] == first.delivery.id


def test_a_form_encoded_delivery_becomes_a_job(receiver: Receiver) -> None:
    hooks = receiver.hooks()
    sent = hooks.send(hooks.issue_comment(next(_numbers), "@pi fix 100% & more"), form=True)
    assert sent.status == 202 and sent.json["jobs"] == [job_name(body_digest(sent.delivery.form_body), "fix")]
    assert receiver.release.get("jobs", sent.json["jobs"][0])["spec"]["comment"] == "@pi fix 100% & more"
    ping = hooks.send(hooks.ping("Keep it logically awesome.", hook_id=1), form=True)
    assert ping.status == 202 and "ping" in ping.json["ignored"]


def _raw(port: int, request: bytes) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        head = b""
        while b"\r\n" not in head:
            more = s.recv(4096)
            if not more:
                break
            head += more
    return int(head[9:12])


REFUSED: list[tuple[str, Callable[[Receiver, Webhooks], Any], int]] = [
    ("unsigned", lambda r, h: h.send(h.issue_comment(1, "@pi x"), secret=None).status, 401),
    ("signed with another secret", lambda r, h: h.send(h.issue_comment(1, "@pi x"), secret=b"guess").status, 401),
    ("body altered after signing", lambda r, h: (lambda d: h.send(
        d, body=d.body.replace(b"@pi x", b"@pi y"), signature_header=signature(SECRET, d.body)).status)(
        h.issue_comment(1, "@pi x")), 401),
    ("signature of an empty body", lambda r, h: h.send(h.issue_comment(1, "@pi x"),
                                                       signature_header=signature(SECRET, b"")).status, 401),
    ("oversized", lambda r, h: h.send(h.issue_comment(1, "@pi " + "x" * MAX_BODY)).status, 413),
    ("oversized by its declared length, body never sent", lambda r, h: _raw(r.port, (
        "POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issue_comment\r\n"
        f"X-GitHub-Delivery: {uuid.uuid4()}\r\nX-Hub-Signature-256: sha256={'0' * 64}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {50 * 1024 * 1024}\r\n\r\n").encode()), 413),
    ("malformed JSON, correctly signed", lambda r, h: h.send(h.issue_comment(1, "@pi x"),
                                                             body=b'{"action": "created", ').status, 400),
    ("wrong shape, correctly signed", lambda r, h: h.send(h.issue_comment(1, "@pi x"), body=json.dumps(
        {"action": "created", "comment": {"body": "@pi x"}}).encode()).status, 400),
    ("no delivery id", lambda r, h: h.send(h.issue_comment(1, "@pi x"),
                                           headers={"X-GitHub-Delivery": None}).status, 400),
    ("an event no Trigger can match", lambda r, h: h.send(h.push("refs/heads/main")).status, 202),
    ("an action no Trigger can match", lambda r, h: h.send(h.issue_comment(1, "@pi x", action="edited")).status, 202),
    ("a bot's comment", lambda r, h: h.send(h.issue_comment(1, "@pi x", sender="pi[bot]", bot=True)).status, 202),
    ("the phrase in a longer word", lambda r, h: h.send(h.issue_comment(1, "@pip install")).status, 202),
    ("the phrase in an address", lambda r, h: h.send(h.issue_comment(1, "mail someone@pi.dev")).status, 202),
    ("the phrase quoted", lambda r, h: h.send(h.issue_comment(1, "> @pi x\n\nno")).status, 202),
    ("the phrase in code", lambda r, h: h.send(h.issue_comment(1, "`@pi x` and\n```\n@pi x\n```")).status, 202),
    ("the phrase in an HTML comment", lambda r, h: h.send(h.issue_comment(1, "ok <!-- @pi x -->")).status, 202),
]


@pytest.mark.parametrize(("attempt", "status"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_what_is_refused_creates_nothing(receiver: Receiver, attempt: Callable[[Receiver, Webhooks], Any],
                                         status: int) -> None:
    before = set(jobs(receiver))
    assert attempt(receiver, receiver.hooks()) == status
    assert set(jobs(receiver)) == before


def test_a_flood_of_bad_requests_leaves_the_receiver_up_and_creates_nothing(receiver: Receiver) -> None:
    hooks = receiver.hooks()
    before_jobs = set(jobs(receiver))
    before = receiver.deliveries()
    [pod] = receiver.pods()
    kinds: list[Callable[[], int]] = [
        lambda: hooks.send(hooks.issue_comment(1, "@pi x"), secret=None).status,
        lambda: hooks.send(hooks.issue_comment(1, "@pi x"), secret=b"forged").status,
        lambda: hooks.send(hooks.issue_comment(1, "@pi x"), signature_header="sha256=nothex").status,
        lambda: hooks.send(hooks.issue_comment(1, "@pi x"), body=b"{" * 2000, secret=b"forged").status,
        lambda: _raw(receiver.port, (
            f"POST /webhook HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256={'1' * 64}\r\n"
            f"Content-Length: {1 << 30}\r\n\r\n").encode()),
    ]
    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(lambda i: kinds[i % len(kinds)](), range(500)))
    assert sorted(set(statuses)) == [401, 413], statuses
    assert receiver.get("/healthz").status_code == 200
    assert receiver.get("/readyz").status_code == 200
    after = receiver.deliveries()
    assert after["unauthorized"] - before["unauthorized"] == 400
    assert after["too_large"] - before["too_large"] == 100
    assert after["created"] == before["created"]
    assert set(jobs(receiver)) == before_jobs
    [same] = receiver.pods()
    assert same["metadata"]["uid"] == pod["metadata"]["uid"]
    assert same["status"]["containerStatuses"][0]["restartCount"] == 0
    sent = hooks.send(hooks.issue_comment(next(_numbers), "@pi still here?"))
    assert sent.status == 202 and len(sent.json["jobs"]) == 1, "and it still serves GitHub"


def test_the_receiver_logs_neither_the_secret_nor_bodies(receiver: Receiver) -> None:
    hooks = receiver.hooks()
    marker = f"@pi zebra-{uuid.uuid4().hex[:8]}"
    sent = hooks.send(hooks.issue_comment(next(_numbers), marker))
    assert sent.status == 202
    wait_until("the delivery's log line", lambda: sent.delivery.id in receiver.log(), timeout=10)
    log = receiver.log()
    assert SECRET.decode() not in log and marker not in log and "acme/widgets" not in log
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert any(e.get("event") == "receiver_delivery" and e.get("delivery") == sent.delivery.id
               and e.get("result") == "created" for e in events)


# -- its ServiceAccount ------------------------------------------------------------------------------------
def test_the_receiver_pod_runs_as_its_own_service_account_with_only_its_secret(receiver: Receiver) -> None:
    [pod] = receiver.pods()
    spec = pod["spec"]
    assert spec["serviceAccountName"] == RECEIVER
    assert spec["containers"][0]["command"] == ["pidispatch", "receiver"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes.pop("webhook-secret")["secret"]["secretName"] == "github-webhook"
    assert [v for v in volumes.values() if "projected" not in v] == [], "besides its token: nothing"
    assert not any("persistentVolumeClaim" in v for v in spec["volumes"])


CAN = [
    ("list triggers", ["list", f"triggers.{GROUP}"]),
    ("get triggers", ["get", f"triggers.{GROUP}"]),
    ("watch triggers", ["watch", f"triggers.{GROUP}"]),
    ("create jobs", ["create", f"jobs.{GROUP}"]),
    ("annotate sessionkeys for retirement", ["patch", f"sessionkeys.{GROUP}"]),
]
CANNOT = [
    ("get secrets", ["get", "secrets"]),
    ("list secrets", ["list", "secrets"]),
    ("create pods", ["create", "pods"]),
    ("get pods", ["get", "pods"]),
    ("get pi jobs", ["get", f"jobs.{GROUP}"]),
    ("patch pi jobs", ["patch", f"jobs.{GROUP}"]),
    ("patch pi jobs status", ["patch", f"jobs.{GROUP}", "--subresource=status"]),
    ("delete pi jobs", ["delete", f"jobs.{GROUP}"]),
    ("create triggers", ["create", f"triggers.{GROUP}"]),
    ("patch triggers", ["patch", f"triggers.{GROUP}"]),
    ("list sessionkeys", ["list", f"sessionkeys.{GROUP}"]),
    ("get sessionkeys", ["get", f"sessionkeys.{GROUP}"]),
    ("patch sessionkeys status", ["patch", f"sessionkeys.{GROUP}", "--subresource=status"]),
    ("delete sessionkeys", ["delete", f"sessionkeys.{GROUP}"]),
    ("create batch jobs", ["create", "jobs.batch"]),
    ("create events", ["create", "events"]),
    ("list configmaps", ["list", "configmaps"]),
]


def _can_i(cluster: Cluster, user: str, namespace: str, args: list[str]) -> bool:
    result = cluster.kubectl("auth", "can-i", *args, f"--as={user}", "-n", namespace, check=False)
    assert result.stdout.strip() in ("yes", "no"), result.stdout + result.stderr
    return result.stdout.strip() == "yes"


def test_the_service_account_can_read_triggers_and_create_jobs_and_nothing_else(receiver: Receiver,
                                                                                cluster: Cluster,
                                                                                namespace: str) -> None:
    ns = receiver.release.ns
    user = f"system:serviceaccount:{ns}:{RECEIVER}"
    for what, args in CAN:
        assert _can_i(cluster, user, ns, args), f"{user} should be allowed to {what}"
        assert not _can_i(cluster, user, namespace, args), f"{what} only in its own namespace"
    for what, args in CANNOT:
        assert not _can_i(cluster, user, ns, args), f"{user} must not be allowed to {what}"


def test_the_service_account_token_acts_within_its_role(receiver: Receiver, cluster: Cluster, kube: Kube) -> None:
    """The same, acting with a bound token of the receiver's ServiceAccount (TokenRequest)."""
    ns = receiver.release.ns
    sa = cluster.service_account_kube(ns, RECEIVER, create=False)
    release = receiver.release
    assert {t["metadata"]["name"] for t in sa.list(release.path("triggers"))} >= set(TRIGGERS)
    name = f"rbac-probe-{uuid.uuid4().hex[:6]}"
    sa.create(release.path("jobs"), {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job", "metadata": {"name": name},
                                     "spec": {"trigger": "nonexistent", "forge": "github",
                                              "repository": "acme/widgets"}})
    try:
        refused = [
            ("get a Secret", lambda: sa.get(f"/api/v1/namespaces/{ns}/secrets/github-webhook")),
            ("list Secrets", lambda: sa.get(f"/api/v1/namespaces/{ns}/secrets")),
            ("create a Pod", lambda: sa.create(f"/api/v1/namespaces/{ns}/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                "spec": {"containers": [{"name": "x", "image": "x"}]}})),
            ("patch a Job's status", lambda: sa.patch(release.path("jobs", name) + "/status",
                                                      {"status": {"phase": "Succeeded"}})),
            ("read a Job back", lambda: sa.get(release.path("jobs", name))),
            ("delete a Job", lambda: sa.delete(release.path("jobs", name))),
            ("list SessionKeys", lambda: sa.get(release.path("sessionkeys"))),
            ("change a Trigger", lambda: sa.patch(release.path("triggers", "fix"), {"spec": {"on": {"phrase": "x"}}})),
        ]
        for what, attempt in refused:
            with pytest.raises(ApiError) as err:
                attempt()
            assert err.value.status == 403, f"{what}: {err.value.status} {err.value.message}"
    finally:
        kube.delete_ignore_missing(release.path("jobs", name))


def test_install_notes_describe_the_receiver(receiver: Receiver) -> None:
    notes = receiver.release.helm("get", "notes", "pi-dispatch").stdout
    assert f"Service {RECEIVER}" in notes and "/webhook" in notes and "Secret github-webhook" in notes
