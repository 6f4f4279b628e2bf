"""Who may end a conversation by closing (docs/sessions.md#a-conversation-ends-with-its-branch).

A closed issue or pull request retires a key only when its sender is trusted by a resume-armed Trigger that serves
the repository (the Trigger's ``on.authorAssociations``, as for a job's start), and a pull request's close only
when the job system owns its head branch: ``pi/issue-<n>``, or a branch whose last job ran on that very pull
request; never ``pi/cron-…``. The receiver in-process on a loopback socket (real HTTP, payloads from the testkit
builders, checked against GitHub's schemas), the operator's retirement on a real store.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.views import SessionKeyView
from pidispatch.jobflow import retire
from pidispatch.jobflow.cluster import Cluster
from pidispatch.settings import OperatorSettings
from pidispatch.store.keys import branch_key, issue_key
from testkit.countingapi import SESSIONKEYS, CountingApi
from testkit.memoryapi import NS
from testkit.receiver import MemoryCluster, Running, trigger
from testkit.store import KEY, Store, sample

REPO = "acme/widgets"
RETIRE = "pi-dispatch.dev/retire"
RETIRE_PR = "pi-dispatch.dev/retire-pull-request"
RESUME = {"model": "fake/fake-model", "resume": True}
RESUMING = trigger("fix", "issue_comment.created", phrase="@pi", repository=REPO, run=RESUME)
NOW = "2026-12-04T18:00:00Z"
JOBS = f"/apis/pi-dispatch.dev/v1alpha1/namespaces/{NS}/jobs"


@pytest.fixture
def receiver() -> Any:
    cluster = MemoryCluster([RESUMING])
    running = Running(cluster)
    yield running, cluster
    running.stop()


# -- issues.closed: the sender's association -----------------------------------------------------------------
@pytest.mark.parametrize("association", ["NONE", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR"])
def test_an_issue_closed_by_its_untrusted_author_retires_nothing(receiver: Any, association: str) -> None:
    """The stranger who opened the issue maintainers work on cannot delete their conversation by closing it."""
    running, cluster = receiver
    key = issue_key("github", REPO, 9)
    cluster.sessionkeys[key] = {}
    sent = running.hooks.send(running.hooks.issues_event(9, "closed", sender="mallory",
                                                         author_association=association))
    assert sent.status == 202 and association in sent.json["ignored"], sent.json
    assert "authorAssociations" in sent.json["ignored"]
    assert cluster.sessionkeys[key] == {}, "nothing annotated"
    assert running.counts()["retired"] == 0 and running.counts()["ignored"] == 1


@pytest.mark.parametrize(("author", "association"), [("maintainer", "MEMBER"), ("mallory", "NONE")],
                         ids=["a member's own issue", "a stranger's issue closed by a member"])
def test_an_issue_closed_by_a_member_retires(receiver: Any, author: str, association: str) -> None:
    """A member's own issue (the payload says MEMBER); or anyone's issue closed by someone else, which GitHub
    allows only with triage rights on the repository."""
    running, cluster = receiver
    key = issue_key("github", REPO, 9)
    cluster.sessionkeys[key] = {}
    sent = running.hooks.send(running.hooks.issues_event(9, "closed", sender="maintainer", author=author,
                                                         author_association=association))
    assert (sent.status, sent.json) == (202, {"retired": key, "reason": "issue-closed"})
    assert cluster.sessionkeys[key][RETIRE] == "issue-closed"


def test_the_triggers_own_author_associations_decide() -> None:
    """The same rule as a job's start: a Trigger that accepts only OWNER does not trust a MEMBER's close."""
    cluster = MemoryCluster([trigger("fix", "issue_comment.created", phrase="@pi", repository=REPO, run=RESUME,
                                     authorAssociations=["OWNER"])])
    running = Running(cluster)
    try:
        key = issue_key("github", REPO, 9)
        cluster.sessionkeys[key] = {}
        sent = running.hooks.send(running.hooks.issues_event(9, "closed", sender="maintainer",
                                                             author_association="MEMBER"))
        assert sent.status == 202 and "MEMBER" in sent.json["ignored"] and cluster.sessionkeys[key] == {}
        # A Trigger of another repository trusts nobody here; one that serves it and accepts MEMBER does.
        cluster.trigger_objects.append(trigger("other", "issue_comment.created", phrase="@pi",
                                               repository="acme/gadgets", run=RESUME))
        sent = running.hooks.send(running.hooks.issues_event(9, "closed", sender="maintainer",
                                                             author_association="MEMBER"))
        assert sent.status == 202 and cluster.sessionkeys[key] == {}
        cluster.trigger_objects.append(trigger("review", "pull_request_review.submitted", repository=REPO,
                                               run=RESUME, authorAssociations=["MEMBER"]))
        sent = running.hooks.send(running.hooks.issues_event(9, "closed", sender="maintainer",
                                                             author_association="MEMBER"))
        assert sent.json == {"retired": key, "reason": "issue-closed"}
    finally:
        running.stop()


# -- pull_request.closed: the sender, and whose branch -------------------------------------------------------
def closed_pr(running: Running, head_ref: str, *, author: str = "octocat", association: str = "OWNER",
              sender: str | None = None, merged: bool = False) -> Any:
    hooks = running.hooks
    pr = hooks.pull_request(5, head_ref=head_ref, author=author, author_association=association)
    return hooks.send(hooks.pull_request_event(pr, "closed", merged=merged, sender=sender or author))


@pytest.mark.parametrize("sender", ["octocat", "mallory"], ids=["by its owner", "by its author"])
def test_a_pull_request_from_a_cron_branch_retires_nothing(receiver: Any, sender: str) -> None:
    """A cron Trigger's conversation is keyed by ``pi/cron-<namespace>-<trigger>``: a pull request anyone opens
    from that branch must not end it."""
    running, cluster = receiver
    branch = "pi/cron-pi-nightly"
    key = branch_key("github", REPO, branch)
    cluster.sessionkeys[key] = {}
    sent = closed_pr(running, branch, author="mallory", association="NONE", sender=sender, merged=True)
    assert sent.status == 202 and "pi/cron-" in sent.json["ignored"], sent.json
    assert cluster.sessionkeys[key] == {}


def test_a_pull_request_closed_by_its_untrusted_author_retires_nothing(receiver: Any) -> None:
    """A reader opens a pull request from the maintainers' branch and closes it: nothing is asked."""
    running, cluster = receiver
    key = branch_key("github", REPO, "feature/x")
    cluster.sessionkeys[key] = {}
    sent = closed_pr(running, "feature/x", author="mallory", association="NONE")
    assert sent.status == 202 and "NONE" in sent.json["ignored"] and cluster.sessionkeys[key] == {}


# -- the operator: a pull request's close retires only the branch the job system owns -------------------------
@pytest.fixture
def operator(store: Store, tmp_path: Path) -> Any:
    """A SessionKey of ``feature/x`` whose last job ran on pull request 4, a stored transcript under it."""
    api = CountingApi()
    store.put(sample("s1_after_turn1.jsonl"))
    api.create(SESSIONKEYS, {"metadata": {"name": KEY}, "spec": {"forge": "github", "repository": REPO,
                                                                  "branch": "feature/x"}})
    api.patch(f"{SESSIONKEYS}/{KEY}/status", {"status": {"lastJob": "fix-4"}})
    api.create(JOBS, {"metadata": {"name": "fix-4"},
                      "spec": {"trigger": "fix", "forge": "github", "repository": REPO, "pullRequest": 4,
                               "sender": "octocat", "deliveryId": "d-4"}})
    settings = OperatorSettings(store=store.settings, staging_dir=str(tmp_path / "staging"), retire="delete")
    return settings, Cluster(api, NS, clock=lambda: NOW), api  # type: ignore[arg-type]


def asked(api: CountingApi, annotations: dict[str, str], branch: str = "feature/x") -> SessionKeyView:
    path = f"{SESSIONKEYS}/{KEY}"
    api.patch(path, {"spec": {"branch": branch}, "metadata": {"annotations": annotations}})
    return SessionKeyView.of(api.get(path))


def test_a_pull_request_no_job_ran_on_retires_nothing(operator: Any, store: Store,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A member closes pull request 5 from ``feature/x`` (someone else's, opened from the branch whose
    conversation pull request 4 built): the request is refused, said, and dropped; the transcript stays."""
    settings, cluster, api = operator
    caplog.set_level(logging.INFO)
    sk = asked(api, {RETIRE: "pull-request-closed", RETIRE_PR: "5"})
    assert not retire.requests(settings, cluster, sk)
    assert (store.root / KEY / "current.jsonl").exists(), "the conversation is untouched"
    body = api.get(f"{SESSIONKEYS}/{KEY}")
    assert "retired" not in (body.get("status") or {})
    assert not set(body["metadata"].get("annotations") or {}) & {RETIRE, RETIRE_PR}, "the request is dropped"
    refused = [r.fields for r in caplog.records if getattr(r, "fields", {}).get("event") == "sessionkey_retire_refused"]
    assert refused and refused[0]["key"] == KEY and "pull request 4" in refused[0]["why"], refused


def test_the_pull_request_the_conversation_ran_on_retires_it(operator: Any, store: Store) -> None:
    settings, cluster, api = operator
    assert retire.requests(settings, cluster, asked(api, {RETIRE: "pull-request-merged", RETIRE_PR: "4"}))
    assert not (store.root / KEY).exists()
    assert api.get(f"{SESSIONKEYS}/{KEY}")["status"]["retired"]["reason"] == "pull-request-merged"


@pytest.mark.parametrize(("branch", "retired"), [("pi/issue-12", True), ("pi/cron-pi-nightly", False)])
def test_issue_branches_are_the_job_systems_and_cron_branches_never_retire_by_pull_request(
        operator: Any, store: Store, branch: str, retired: bool) -> None:
    """``pi/issue-<n>`` is the branch issue jobs push: its pull request's close ends it whichever job ran last.
    A cron key never ends by a pull request's close, even one its last job ran on."""
    settings, cluster, api = operator
    assert retire.requests(settings, cluster, asked(api, {RETIRE: "pull-request-merged", RETIRE_PR: "4"},
                                                  branch)) is retired
    assert (store.root / KEY).exists() is not retired


def test_an_issue_close_or_a_persons_request_needs_no_pull_request(operator: Any, store: Store) -> None:
    settings, cluster, api = operator
    assert retire.requests(settings, cluster, asked(api, {RETIRE: "because"}))
    assert not (store.root / KEY).exists()


def test_a_pull_request_close_whose_last_job_is_gone_retires_nothing(operator: Any, store: Store) -> None:
    """The Job that says which pull request built the conversation was deleted (``ttlSecondsAfterFinished``):
    ownership cannot be shown, and the conversation stays (the reaper or a person ends it)."""
    settings, cluster, api = operator
    api.delete(f"{JOBS}/fix-4")
    assert not retire.requests(settings, cluster, asked(api, {RETIRE: "pull-request-closed", RETIRE_PR: "4"}))
    assert (store.root / KEY).exists()


def test_from_the_receiver_to_the_store_a_member_closing_anothers_pull_request_retires_nothing(
        receiver: Any, operator: Any, store: Store) -> None:
    """The whole way: the member's close is trusted and asks with its number; the operator refuses it."""
    running, cluster = receiver
    settings, op_cluster, api = operator
    key = branch_key("github", REPO, "feature/x")
    cluster.sessionkeys[key] = {}
    sent = closed_pr(running, "feature/x", author="mallory", association="NONE", sender="maintainer")
    assert sent.json == {"retired": key, "reason": "pull-request-closed"}
    assert cluster.sessionkeys[key] == {RETIRE: "pull-request-closed", RETIRE_PR: "5"}
    assert not retire.requests(settings, op_cluster, asked(api, cluster.sessionkeys[key]))
    assert (store.root / KEY).exists()
