"""The operator and GitHub end to end: the chart installed with a GitHub App (or a pat) pointing at a local
fake of the GitHub REST API (``testkit/fakegithub_api.py``), the operator running as the chart's
ServiceAccount through the test kubelet, ``testkit/fakepi.py`` as the job image.

What is proven: a pull request's head comes from the API (the Job's own ``spec.resolved`` is ignored);
forks, forks that differ only by case, deleted forks and failed lookups (404, 500, a timeout) never
resume and get the Pod a job without resume gets; a same-repository PR from ``pi/issue-N`` resumes the
issue job's transcript; each job's installation token is scoped to its repository, reaches the Pod as
``GH_TOKEN`` from a Secret the Job owns, and appears in no log, Event, status or metric; the two
refusals post one comment per delivery (also one for a delivery two Triggers refused), also when the
operator is killed right after posting.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import Release, base_values, create_secret, fresh_namespace, merge, received_digest
from pidispatch.manifests.pod import token_secret_name
from pidispatch.store.keys import issue_key
from testkit.fakegithub_api import FakeGitHubAPI, fingerprint, generate_app_key
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

REPO = "acme/widgets"
APP_ID, INSTALLATION = 4242, 77
PAT = "github_pat_e2e_0123456789abcdef"
TIMEOUT_SECONDS = 2


def app_values(api: FakeGitHubAPI, **env: str) -> dict[str, Any]:
    # The key and token path alone: this fake API has no repositories, so no workspace is checked out
    # (e2e/test_workspace.py proves the checkout against a real git forge).
    return merge(base_values(**env), {"job": {"checkout": False}, "github": {
        "authSource": "app", "apiUrl": api.url, "timeoutSeconds": TIMEOUT_SECONDS,
        "app": {"id": APP_ID, "installationId": INSTALLATION, "privateKeySecret": {"name": "gh-app"}}}})


@pytest.fixture(scope="module")
def app_key() -> tuple[bytes, Any]:
    return generate_app_key()


@pytest.fixture(scope="module")
def github(app_key: tuple[bytes, Any]) -> Iterator[FakeGitHubAPI]:
    with FakeGitHubAPI(app_id=APP_ID, public_key=app_key[1], installation_id=INSTALLATION,
                       installation_repos=(REPO, "acme/gadgets"), pats={PAT}) as api:
        yield api


def installed(cluster: Cluster, kube: Kube, prefix: str, values: dict[str, Any],
              secrets: dict[str, dict[str, bytes]]) -> Release:
    ns = fresh_namespace(kube, prefix)
    for name, data in secrets.items():  # the user's Secrets exist before the chart mounts them
        create_secret(kube, ns, name, data)
    return Release(cluster, kube, ns, values).install()


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet: object, github: FakeGitHubAPI,
            app_key: tuple[bytes, Any]) -> Iterator[Release]:
    r = installed(cluster, kube, "forge", merge(app_values(github), {"sessions": {"enabled": True}}),
                  {"gh-app": {"private-key.pem": app_key[0]}})
    r.trigger("fix")
    r.trigger("plain", resume=False)
    try:
        yield r
    finally:
        r.uninstall()
        kube.delete_ignore_missing(f"/api/v1/namespaces/{r.ns}")


_numbers = iter(range(1, 100000))


def number() -> int:
    return next(_numbers)


def pod_of(r: Release, job: dict[str, Any]) -> dict[str, Any]:
    return r.kube.get(f"/api/v1/namespaces/{r.ns}/pods/{job['status']['podName']}")


def pod_shape(pod: dict[str, Any]) -> dict[str, Any]:
    """The Pod less what names the Job: what a job with and one without resume must share exactly."""
    spec = json.loads(json.dumps(pod["spec"]))
    [container] = spec["containers"]
    for env in container["env"]:
        if env["name"] in ("PI_JOB_NAME", "PI_TRIGGER", "PI_JOB_SPEC"):
            env["value"] = "<job>"
        ref = (env.get("valueFrom") or {}).get("secretKeyRef")
        if ref and ref["name"].startswith("pij-") and "-token-" in ref["name"]:
            ref["name"] = "<the Pod's name>-token-<uid>"
    for key in ("nodeName", "serviceAccountName", "serviceAccount", "tolerations", "schedulerName",
                "terminationGracePeriodSeconds", "dnsPolicy", "priority", "preemptionPolicy"):
        spec.pop(key, None)
    return {"container": container, "volumes": spec["volumes"], "pod": spec}


def events_of(r: Release, line: str) -> list[dict[str, Any]]:
    out = []
    for text in r.operator_log().splitlines():
        try:
            entry = json.loads(text)
        except ValueError:
            continue
        if entry.get("event") == line:
            out.append(entry)
    return out


# ---- the head comes from the API, and only a same-repository head gives a key -----------------------------

NO_RESUME = [
    ("a fork", {"head_repo": "mallory/widgets"}, "fork"),
    ("a fork that differs only by case", {"head_repo": "Acme/widgets"}, "fork"),
    ("a deleted fork", {"head_repo": None}, "deleted-fork"),
    ("the API says 404", {"status": 404}, "lookup-http-error"),
    ("the API says 500", {"status": 500}, "lookup-http-error"),
    ("the API is slower than the timeout", {"delay": TIMEOUT_SECONDS + 2}, "lookup-timeout"),
]


@pytest.mark.parametrize(("pull", "reason"), [c[1:] for c in NO_RESUME], ids=[c[0] for c in NO_RESUME])
def test_a_pr_without_a_same_repository_head_never_resumes(release: Release, github: FakeGitHubAPI,
                                                           pull: dict[str, Any], reason: str) -> None:
    r = release
    issue, pr = number(), number()
    r.run(f"seed-{issue}", issue=issue)  # a conversation exists on pi/issue-<issue> ...
    key = issue_key("github", REPO, issue)
    github.set_pull(REPO, pr, head_ref=f"pi/issue-{issue}", **pull)  # ... and the PR's head names that branch
    # The Job itself claims a same-repository head: with a GitHub client that claim counts for nothing.
    job = r.run(f"pr-{pr}", pullRequest=pr, resolved={"headRef": f"pi/issue-{issue}", "headRepository": REPO})
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    assert job["status"].get("session") == {"resumed": False, "reason": "disabled"}
    assert github.calls("GET", f"/repos/{REPO}/pulls/{pr}"), "the head was asked of the API"
    assert {"job": f"pr-{pr}", "reason": reason} in [
        {k: e.get(k) for k in ("job", "reason")} for e in events_of(r, "pr_head_unresolved")]
    assert r.sessionkey(key)["status"]["lastJob"] == f"seed-{issue}", "the PR job did not touch the issue's key"
    plain = r.run(f"plain-{pr}", trigger="plain", pullRequest=pr)
    assert pod_shape(pod_of(r, job)) == pod_shape(pod_of(r, plain)), "the Pod a job without resume gets"
    assert "/session" not in json.dumps(pod_of(r, job)) and "PI_SESSION" not in json.dumps(pod_of(r, job))


def test_a_pr_from_the_issue_branch_continues_the_issue_conversation(release: Release,
                                                                      github: FakeGitHubAPI) -> None:
    r = release
    issue, pr = number(), number()
    key = issue_key("github", REPO, issue)
    first = r.run(f"issue-{issue}", issue=issue)
    assert first["status"]["session"]["reason"] == "absent"
    stored = r.digest(key)
    assert stored is not None
    github.set_pull(REPO, pr, head_ref=f"pi/issue-{issue}")
    job = r.run(f"review-{pr}", pullRequest=pr, comment="@pi address the review")
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    assert job["status"]["session"]["resumed"] is True and job["status"]["session"]["reason"] == "resumed"
    assert received_digest(r, job) == stored, "the PR job was handed the issue job's transcript"
    assert (r.key_dir(key) / "resume-chain").read_text().strip() == "1"
    wait_until("SessionKey lastJob = the PR job",
               lambda: r.sessionkey(key)["status"].get("lastJob") == f"review-{pr}", timeout=15)
    assert [e["reason"] for e in events_of(r, "pr_head_unresolved") if e.get("job") == f"review-{pr}"] == []


def test_a_pr_in_the_same_repository_on_its_own_branch_gets_its_own_key(release: Release,
                                                                         github: FakeGitHubAPI) -> None:
    r = release
    pr = number()
    github.set_pull(REPO, pr, head_ref=f"feature/{pr}")
    first = r.run(f"feature-{pr}", pullRequest=pr)
    assert first["status"]["session"]["reason"] == "absent"
    second = r.run(f"feature-again-{pr}", pullRequest=pr)
    assert second["status"]["session"]["reason"] == "resumed"
    assert pod_of(r, second)["spec"]["containers"][0]["volumeMounts"][-1]["mountPath"] == "/session"


# ---- the installation token --------------------------------------------------------------------------------

def test_the_installation_token_reaches_the_pod_and_nowhere_else(release: Release, github: FakeGitHubAPI) -> None:
    r = release
    issue = number()
    job = r.run(f"token-{issue}", issue=issue, comment="@pi token=log")
    assert job["status"]["phase"] == "Succeeded"
    pod = pod_of(r, job)
    m = re.search(r"gh-token sha256:([0-9a-f]{64})", r.pod_log(pod["metadata"]["name"]))
    assert m, r.pod_log(pod["metadata"]["name"])
    token = github.issued_token(m.group(1))
    assert token is not None, "the Pod's GH_TOKEN is a token the App minted"
    [issued] = [i for sha, i in github.issued() if sha == m.group(1)]
    assert issued.repositories == (REPO,), "scoped to the job's repository only"
    assert issued.permissions == {"contents": "write", "issues": "write", "metadata": "read",
                                  "pull_requests": "write"}, "the job permissions asked for, not all the App's"
    # The token is not refreshed: the run (job.timeoutSeconds 3600) is cut to end before the token
    # expires, counting the start timeout (600), in whole minutes; an Event says so.
    assert pod["spec"]["activeDeadlineSeconds"] == 3600 - 300 - 600 - 60
    capped = [e for e in r.kube.list(f"/api/v1/namespaces/{r.ns}/events")
              if e["reason"] == "TimeoutCapped" and e["involvedObject"]["name"] == job["metadata"]["name"]]
    assert capped and "not refreshed" in capped[0]["message"], "the Job's Events say the timeout was cut"
    secret_name = token_secret_name(job["metadata"]["name"], job["metadata"]["uid"])
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["GH_TOKEN"] == {"name": "GH_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret_name,
                                                                                  "key": "token"}}}
    secret = r.kube.get(f"/api/v1/namespaces/{r.ns}/secrets/{secret_name}")  # (as admin)
    assert base64.b64decode(secret["data"]["token"]).decode() == token
    owner = secret["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Job", job["metadata"]["uid"]) and secret["immutable"] is True

    port = r.values["metrics"]["port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    places = {
        "the operator log": r.operator_log(),
        "Events": json.dumps(r.kube.list(f"/api/v1/namespaces/{r.ns}/events")),
        "the Job": json.dumps(r.get("jobs", job["metadata"]["name"])),
        "SessionKeys": json.dumps(r.kube.list(r.path("sessionkeys"))),
        "the Pod": json.dumps(pod),
        "metrics": metrics,
    }
    for where, text in places.items():
        assert token not in text, f"the token appears in {where}"
        assert token[4:20] not in text, f"part of the token appears in {where}"

    r.kube.delete(r.path("jobs", job["metadata"]["name"]))
    wait_until("the garbage collector to remove the job's token Secret", lambda: r.kube.get_or_none(
        f"/api/v1/namespaces/{r.ns}/secrets/{secret_name}") is None, timeout=60)


FORK_PERMISSIONS = {"contents": "read", "issues": "read", "metadata": "read", "pull_requests": "write"}


@pytest.mark.parametrize(("pull", "fork"), [
    ({"head_repo": "mallory/widgets"}, {}),
    ({"head_repo": "mallory/widgets"}, {"fork": True}),
    ({"head_repo": None}, {}),
    ({}, {"fork": True}),
], ids=["the forge says fork", "the payload and the forge say fork", "a deleted fork",
        "the payload says fork of a same-repository head"])
def test_a_fork_job_gets_a_token_read_only_on_contents(release: Release, github: FakeGitHubAPI,
                                                      pull: dict[str, Any], fork: dict[str, Any]) -> None:
    r, pr = release, number()
    github.set_pull(REPO, pr, head_ref=f"feature/{pr}", **pull)
    job = r.run(f"fork-token-{pr}", trigger="plain", pullRequest=pr, comment="@pi token=log", **fork)
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    pod = pod_of(r, job)
    m = re.search(r"gh-token sha256:([0-9a-f]{64})", r.pod_log(pod["metadata"]["name"]))
    assert m, r.pod_log(pod["metadata"]["name"])
    [issued] = [i for sha, i in github.issued() if sha == m.group(1)]
    assert issued.repositories == (REPO,) and issued.permissions == FORK_PERMISSIONS, \
        "no contents, issues or other write: only the comment on the pull request"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert json.loads(env["PI_JOB_SPEC"])["fork"] is True, "the runner is told, so its prompt says it cannot push"
    same = number()
    github.set_pull(REPO, same, head_ref=f"feature/{same}")
    job = r.run(f"same-token-{same}", trigger="plain", pullRequest=same, comment="@pi token=log")
    m = re.search(r"gh-token sha256:([0-9a-f]{64})", r.pod_log(pod_of(r, job)["metadata"]["name"]))
    assert m and [i.permissions for sha, i in github.issued() if sha == m.group(1)] == [{
        "contents": "write", "issues": "write", "metadata": "read", "pull_requests": "write"}]


def test_a_job_without_resume_gets_a_token_too(release: Release, github: FakeGitHubAPI) -> None:
    job = release.run(f"plain-token-{number()}", trigger="plain", issue=number(), comment="@pi token=log")
    log = release.pod_log(job["status"]["podName"])
    m = re.search(r"gh-token sha256:([0-9a-f]{64})", log)
    assert m and github.issued_token(m.group(1)) is not None, log


def test_a_repository_the_app_cannot_reach_fails_the_job_before_any_pod(release: Release) -> None:
    # A Trigger that serves the repository (the others serve acme/* only, and the admission would refuse the Job
    # as beyond-trigger before any token is asked for): the App is not installed on it, so the mint fails.
    release.trigger("elsewhere", repositories=("someone/*",))
    job = release.run(f"elsewhere-{number()}", trigger="elsewhere", issue=1, repository="someone/else")
    assert job["status"]["phase"] == "Failed"
    started = release.condition(job, "Started")
    assert started["reason"] == "GitHubTokenFailed" and "422" in started["message"], started
    assert release.pods_of(job["metadata"]["name"]) == []


# ---- config-refused: a comment that points at doctor, and nothing minted -----------------------------------

def test_config_refused_posts_one_comment_and_mints_nothing(release: Release, github: FakeGitHubAPI) -> None:
    r = release
    r.trigger("gh", auth="gh")
    issue = number()
    minted = len(github.issued())
    job = r.run(f"gh-{issue}", trigger="gh", issue=issue)
    assert (job["status"]["phase"], job["status"]["reason"]) == ("Refused", "config-refused")
    wait_until("Commented=True", lambda: (r.condition(r.get("jobs", f"gh-{issue}"), "Commented") or {}).get(
        "status") == "True", timeout=30)
    assert r.condition(r.get("jobs", f"gh-{issue}"), "Commented")["reason"] == "Posted"
    [comment] = github.comments(REPO, issue)
    assert "pidispatch doctor" in comment["body"] and "configuration problem" in comment["body"]
    assert f"<!-- pi-dispatch:job={job['metadata']['uid']} -->" in comment["body"]
    assert r.pods_of(f"gh-{issue}") == []
    assert r.kube.get_or_none(f"/api/v1/namespaces/{r.ns}/secrets/"
                              f"{token_secret_name(job['metadata']['name'], job['metadata']['uid'])}") is None
    # at most the operator's own token for the comment; none scoped for a job Pod was stored anywhere
    assert len(github.issued()) - minted <= 1


# ---- sessions-dir-unset: one comment per delivery, even across a kill right after posting ------------------

@pytest.fixture(scope="module")
def no_store(cluster: Cluster, kube: Kube, kubelet: object, github: FakeGitHubAPI,
             app_key: tuple[bytes, Any]) -> Iterator[Release]:
    # /tmp is the operator Pod's emptyDir: the mark survives the container's restart, so the kill fires once.
    values = app_values(github, PIDISPATCH_FAILPOINT="commented@killed", PIDISPATCH_FAILPOINT_MARK="/tmp")
    r = installed(cluster, kube, "forge-nostore", values, {"gh-app": {"private-key.pem": app_key[0]}})
    r.trigger("fix")
    try:
        yield r
    finally:
        r.uninstall()
        kube.delete_ignore_missing(f"/api/v1/namespaces/{r.ns}")


def restarts(r: Release) -> int:
    return sum(s.get("restartCount", 0) for p in r.operator_pods()
               for s in (p.get("status") or {}).get("containerStatuses") or [])


def commented(r: Release, name: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        cond = r.condition(r.get("jobs", name), "Commented")
        return cond if cond and cond["status"] == "True" else None

    try:
        return wait_until(f"Job {name} Commented=True", done, timeout=60)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\n{json.dumps(r.get('jobs', name).get('status'))}\n"
                           f"{r.operator_log()[-3000:]}") from None


def test_sessions_dir_unset_posts_one_comment_naming_both_ways_out(no_store: Release,
                                                                   github: FakeGitHubAPI) -> None:
    r = no_store
    issue = number()
    job = r.run("refused-once", issue=issue)
    assert (job["status"]["phase"], job["status"]["reason"]) == ("Refused", "sessions-dir-unset")
    assert commented(r, "refused-once")["reason"] == "Posted"
    [comment] = github.comments(REPO, issue)
    body = comment["body"]
    assert "sessions.enabled=true" in body and "run.resume" in body and "no session store" in body
    assert body.rstrip().endswith(f"<!-- pi-dispatch:job={job['metadata']['uid']} -->")
    assert comment["user"]["login"] == "pi-dispatch[bot]", "posted with the App's installation token"
    assert r.pods_of("refused-once") == []


def test_one_delivery_refused_by_two_triggers_posts_one_comment(no_store: Release, github: FakeGitHubAPI) -> None:
    r = no_store
    r.trigger("fix-too")
    issue, delivery = number(), f"d-{number()}-72d3162e"
    first = r.run("refused-twice-a", issue=issue, deliveryId=delivery)
    second = r.run("refused-twice-b", trigger="fix-too", issue=issue, deliveryId=delivery)
    assert {first["status"]["reason"], second["status"]["reason"]} == {"sessions-dir-unset"}
    reasons = sorted(commented(r, name)["reason"] for name in ("refused-twice-a", "refused-twice-b"))
    assert reasons == ["AlreadyPosted", "Posted"]
    [comment] = github.comments(REPO, issue)
    assert comment["body"].rstrip().endswith(f"<!-- pi-dispatch:delivery={delivery} -->")


def test_a_refused_pr_is_commented_on_the_pr_without_a_head_lookup(no_store: Release,
                                                                   github: FakeGitHubAPI) -> None:
    r = no_store
    pr = number()
    github.set_pull(REPO, pr, head_ref="pi/issue-1")
    job = r.run("refused-pr", pullRequest=pr)
    assert job["status"]["reason"] == "sessions-dir-unset"
    commented(r, "refused-pr")
    assert len(github.comments(REPO, pr)) == 1
    assert github.calls("GET", f"/repos/{REPO}/pulls/{pr}") == [], "refused before any key work"


def test_killed_right_after_posting_the_comment_is_not_posted_twice(no_store: Release,
                                                                    github: FakeGitHubAPI) -> None:
    r = no_store
    issue = number()
    before = restarts(r)
    r.job("killed", issue=issue)
    wait_until("the operator killed and restarted", lambda: restarts(r) > before, timeout=60)
    condition = commented(r, "killed")
    assert condition["reason"] == "AlreadyPosted", "the restarted operator found its marker"
    posts = github.calls("POST", f"/repos/{REPO}/issues/{issue}/comments")
    assert len(posts) == 1 and len(github.comments(REPO, issue)) == 1
    assert r.get("jobs", "killed")["status"]["reason"] == "sessions-dir-unset"
    # a finished Job is not checked again: a new operator Pod does not even list that issue's comments
    listed = len(github.calls("GET", f"/repos/{REPO}/issues/{issue}/comments"))
    old = {p["metadata"]["uid"] for p in r.operator_pods()}
    for pod in r.operator_pods():
        r.kube.delete(f"/api/v1/namespaces/{r.ns}/pods/{pod['metadata']['name']}")
    wait_until("a new operator Pod", lambda: any(p["metadata"]["uid"] not in old for p in r.operator_pods()),
               timeout=60)
    r.await_operator()
    assert len(github.calls("GET", f"/repos/{REPO}/issues/{issue}/comments")) == listed
    assert len(github.comments(REPO, issue)) == 1


# ---- pat: the operator's token from a mounted file, the job's by reference to the user's Secret ------------

def test_pat_source_uses_the_mounted_token_and_hands_the_secret_by_reference(
        cluster: Cluster, kube: Kube, kubelet: object, github: FakeGitHubAPI) -> None:
    values = merge(base_values(), {"sessions": {"enabled": True}, "job": {"checkout": False}, "github": {
        "authSource": "pat", "apiUrl": github.url, "timeoutSeconds": TIMEOUT_SECONDS,
        "token": {"secretName": "gh-token", "key": "token"}}})
    r = installed(cluster, kube, "forge-pat", values, {"gh-token": {"token": PAT.encode() + b"\n"}})
    try:
        r.trigger("fix")
        issue, pr = number(), number()
        r.run(f"issue-{issue}", issue=issue)
        github.set_pull(REPO, pr, head_ref=f"pi/issue-{issue}")
        job = r.run(f"pr-{pr}", pullRequest=pr, comment="@pi token=log")
        assert job["status"]["session"]["reason"] == "resumed", json.dumps(job["status"])
        [lookup] = github.calls("GET", f"/repos/{REPO}/pulls/{pr}")
        assert (lookup.auth, lookup.token_sha256) == ("pat", fingerprint(PAT))
        env = {e["name"]: e for e in pod_of(r, job)["spec"]["containers"][0]["env"]}
        assert env["GH_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "gh-token", "key": "token"}}
        log = r.pod_log(job["status"]["podName"])
        # the kubelet hands the Secret's value over as it is (with its newline); the operator strips it
        digest = hashlib.sha256(PAT.encode() + b"\n").hexdigest()
        assert f"gh-token sha256:{digest}" in log, log
        assert PAT not in r.operator_log()
    finally:
        r.uninstall()
        kube.delete_ignore_missing(f"/api/v1/namespaces/{r.ns}")


def test_a_fork_under_a_pat_is_refused_unless_its_trigger_allows_forks(
        cluster: Cluster, kube: Kube, kubelet: object, github: FakeGitHubAPI) -> None:
    values = merge(base_values(), {"job": {"checkout": False}, "github": {
        "authSource": "pat", "apiUrl": github.url, "timeoutSeconds": TIMEOUT_SECONDS,
        "token": {"secretName": "gh-token", "key": "token"}}})
    r = installed(cluster, kube, "forge-forks", values, {"gh-token": {"token": PAT.encode() + b"\n"}})
    try:
        r.trigger("review", resume=False)
        pr = number()
        github.set_pull(REPO, pr, head_ref="patch", head_repo="mallory/widgets")
        job = r.run(f"fork-{pr}", trigger="review", pullRequest=pr, deliveryId=f"d-{pr}")
        assert (job["status"]["phase"], job["status"]["reason"]) == ("Refused", "fork-not-allowed"), job["status"]
        assert "run.forks: true" in r.condition(job, "Started")["message"]
        assert r.pods_of(job["metadata"]["name"]) == [], "no Pod: the pat Secret was never referenced"
        wait_until("the refusal comment", lambda: len(github.comments(REPO, pr)) == 1, timeout=30)
        assert "comes from a fork" in github.comments(REPO, pr)[0]["body"]
        r.trigger("review", resume=False, forks=True)  # the operator, knowingly
        allowed = r.run(f"fork-allowed-{pr}", trigger="review", pullRequest=pr, deliveryId=f"e-{pr}")
        assert allowed["status"]["phase"] == "Succeeded", allowed["status"]
        env = {e["name"]: e for e in pod_of(r, allowed)["spec"]["containers"][0]["env"]}
        assert env["GH_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "gh-token", "key": "token"}}
        assert len(github.comments(REPO, pr)) == 1, "one comment per refused delivery"
    finally:
        r.uninstall()
        kube.delete_ignore_missing(f"/api/v1/namespaces/{r.ns}")
