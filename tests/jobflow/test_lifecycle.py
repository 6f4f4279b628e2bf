"""A key's lifecycle (issue 34 items 1-2): retirement and quarantine, as rules, on a real store, at the receiver."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.models import SessionKeyStatus
from pidispatch.api.views import SessionKeyView
from pidispatch.jobflow import lifecycle, quarantine, retire, sessionkey
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.summarize import Ended
from pidispatch.jobflow.summarize_sessionkey import (
    KeyOutcome,
    LastJob,
    Promoted,
    SessionKeySummary,
    StoreReading,
    lifecycle_fields,
    sessionkey_status,
)
from pidispatch.receiver.closed import Closed
from pidispatch.settings import ConfigError, OperatorSettings
from pidispatch.store.inspect import inspect_key
from pidispatch.store.keys import branch_key, issue_key
from pidispatch.store.resolve import resolve
from pidispatch.store.retire import ARCHIVE_PREFIX, RetireMode, retire_key
from pidispatch.store.staging import HostRecord, JobDir, stage
from testkit.countingapi import SESSIONKEYS, CountingApi
from testkit.memoryapi import NS
from testkit.receiver import MemoryCluster, Running, trigger
from testkit.store import KEY, MODEL, PI, Store, sample

NOW = "2026-12-04T18:00:00Z"
OLD = sample("s1_after_turn1.jsonl")


# -- the count ------------------------------------------------------------------------------------------------
def after(state: dict[str, Any] | None, job: str = "j4", *, resumed: bool = True, outcome: str = "Failed",
          reason: str = "PodFailed", promoted: bool = False, threshold: int = 3) -> dict[str, Any] | None:
    """``failedResumes`` after ``job`` ended, through the operator's own path: ``quarantine.count`` and the
    promotion's ``Promoted`` (as ``complete.record_end`` gathers them), folded by ``lifecycle_fields``."""
    settings = OperatorSettings.from_env({"PI_DISPATCH_QUARANTINE_AFTER": str(threshold)})
    ended = Ended(outcome, None, None, reason, "")
    failed = quarantine.count(settings, job, resumed=resumed, ended=ended, now=NOW)
    found: list[KeyOutcome] = [*([Promoted()] if promoted else []), *([failed] if failed is not None else [])]
    sk = SessionKeyView.of({"metadata": {"name": KEY}, "status": {"failedResumes": state} if state else {}})
    fields = SessionKeySummary(lifecycle_fields(sk, found)).to_patch()
    return fields["failedResumes"] if "failedResumes" in fields else state


TWO = {"count": 2, "jobs": ["j1", "j2"], "quarantinedAt": None}
THREE = {"count": 3, "jobs": ["j1", "j2", "j3"], "quarantinedAt": NOW}
COUNTS = [
    ("a first failed resume counts one", None, {}, {"count": 1, "jobs": ["j4"], "quarantinedAt": None}),
    ("the third in a row quarantines", TWO, {"job": "j3"}, THREE),
    ("a fourth keeps the first quarantine stamp", {**THREE, "quarantinedAt": "2026-12-01T00:00:00Z"}, {},
     {"count": 4, "jobs": ["j1", "j2", "j3", "j4"], "quarantinedAt": "2026-12-01T00:00:00Z"}),
    ("a resumed job that succeeds resets the count", TWO, {"outcome": "Succeeded", "reason": "PodSucceeded",
                                                           "promoted": True}, None),
    ("a cold job that promotes replaces the quarantined transcript", THREE,
     {"resumed": False, "outcome": "Succeeded", "reason": "PodSucceeded", "promoted": True}, None),
    ("a cold job that fails leaves the count", TWO, {"resumed": False}, TWO),
    ("a checkout that failed never ran pi: not counted", TWO, {"reason": "CheckoutFailed"}, TWO),
    ("a Pod that never started: not counted", TWO, {"reason": "PodNeverStarted"}, TWO),
    ("a deadline is counted (a huge context can cause it)", None, {"reason": "DeadlineExceeded"},
     {"count": 1, "jobs": ["j4"], "quarantinedAt": None}),
    ("a job counted already is not counted again (its end rewritten after a kill)", TWO, {"job": "j2"}, TWO),
    ("threshold 0 never counts", TWO, {"threshold": 0}, None),
    ("threshold 1 quarantines at once", None, {"threshold": 1}, {"count": 1, "jobs": ["j4"], "quarantinedAt": NOW}),
]


@pytest.mark.parametrize(("state", "change", "expected"), [c[1:] for c in COUNTS], ids=[c[0] for c in COUNTS])
def test_failed_resumes_are_counted_in_a_row(state: dict[str, Any] | None, change: dict[str, Any],
                                             expected: dict[str, Any] | None) -> None:
    assert after(state, **change) == expected


def test_the_count_keeps_the_last_job_names_only() -> None:
    state = {"count": 12, "jobs": [f"j{i}" for i in range(10)], "quarantinedAt": NOW}
    assert after(state, "j99")["jobs"] == [*(f"j{i}" for i in range(1, 10)), "j99"]


# -- what the next delivery is told ------------------------------------------------------------------------
HELD = [
    ("nothing stored", None, None),
    ("a plain key", {"bytes": 10}, None),
    ("counted, not yet quarantined", {"failedResumes": TWO}, None),
    ("quarantined", {"failedResumes": THREE}, "quarantined"),
    ("retired", {"retired": {"reason": "pull-request-merged", "at": NOW}}, "retired"),
    ("retired wins over quarantined", {"retired": {"reason": "issue-closed", "at": NOW}, "failedResumes": THREE},
     "retired"),
]


@pytest.mark.parametrize(("status", "held"), [h[1:] for h in HELD], ids=[h[0] for h in HELD])
def test_the_sessionkey_holds_the_next_delivery_cold(status: dict[str, Any] | None, held: str | None) -> None:
    assert lifecycle.held_reason(None if status is None else SessionKeyStatus.model_validate(status)) == held


def resumable(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Resumable")


def judged(found: dict[str, Any], conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The store's judgement of a key as its status patch carries it (no lifecycle)."""
    return sessionkey_status(StoreReading.of(found), conditions).to_patch()


def overlaid(status: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """``status`` with the lifecycle of the status ``stored`` on top (``lifecycle.overlay``)."""
    lived = SessionKeyStatus.model_validate(stored)
    conditions, nxt = lifecycle.overlay(status["conditions"], status["next"], lived.retired, lived.failedResumes, KEY)
    return {**status, "conditions": conditions, "next": nxt}


def test_a_quarantined_key_is_not_resumable_and_says_why_and_how_to_release(store: Store) -> None:
    store.put(OLD)
    found = judged(inspect_key(store.settings, KEY, pi_version=PI, model=MODEL))
    assert resumable(found)["status"] == "True"
    status = overlaid(found, {"failedResumes": THREE})
    condition = resumable(status)
    assert (condition["status"], condition["reason"], status["next"]) == ("False", "Quarantined", "quarantined")
    assert "3 resumed jobs in a row ended Failed" in condition["message"]
    assert "j1, j2, j3" in condition["message"]
    assert f"kubectl annotate sessionkey {KEY} pi-dispatch.dev/release-quarantine=true" in condition["message"]
    assert not any(c["type"] == "Retired" for c in status["conditions"]), "never retired: no Retired condition"


def test_a_retired_key_says_retired_with_its_reason_until_a_new_conversation(store: Store) -> None:
    found = judged(inspect_key(store.settings, KEY))
    retired = {"reason": "pull-request-merged", "at": NOW, "archive": f"{ARCHIVE_PREFIX}{KEY}-1"}
    status = overlaid(found, {"retired": retired})
    condition = next(c for c in status["conditions"] if c["type"] == "Retired")
    assert (condition["status"], condition["reason"]) == ("True", "PullRequestMerged")
    assert retired["archive"] in condition["message"]
    assert (resumable(status)["reason"], status["next"]) == ("Retired", "retired")
    # A new conversation promoted: the stored status has no ``retired`` any more; the condition is judged again.
    rejudged = judged(inspect_key(store.settings, KEY), status["conditions"])
    reopened = overlaid(rejudged, {"conditions": status["conditions"]})
    again = next(c for c in reopened["conditions"] if c["type"] == "Retired")
    assert (again["status"], again["reason"]) == ("False", "InUse")


def test_annotations_ask_the_operator() -> None:
    assert lifecycle.asks({"metadata": {"annotations": {"pi-dispatch.dev/retire": "issue-closed"}}})
    assert lifecycle.asks({"metadata": {"annotations": {"pi-dispatch.dev/release-quarantine": "yes"}}})
    assert not lifecycle.asks({"metadata": {"annotations": {"other": "x"}}})
    assert not lifecycle.asks({"metadata": {}})
    assert lifecycle.retire_reason("pull-request-closed") == "pull-request-closed"
    assert lifecycle.retire_reason("because I said so") == "requested"


# -- the store ------------------------------------------------------------------------------------------------
def record() -> HostRecord:
    return HostRecord(key=KEY, forge="github", repository="acme/widgets", branch="pi/issue-7", venue="kubernetes",
                      pi_version=PI, model=MODEL)


def staged(store: Store, uid: str, held: str | None = None) -> tuple[JobDir, HostRecord]:
    store.stage_root.mkdir(parents=True, exist_ok=True)
    jd = JobDir(str(store.stage_root), uid)
    return jd, stage(store.settings, jd, record(), held=held)


def test_retiring_deletes_the_key_and_marks_the_jobs_in_flight(store: Store) -> None:
    store.put(OLD)
    running, host = staged(store, "job-in-flight")
    assert host.resume
    assert retire_key(store.settings, str(store.stage_root), KEY, RetireMode.DELETE) is None
    assert not store.key_dir().exists() and running.forgotten()
    assert os.listdir(store.root) == []


def test_archiving_keeps_the_key_directory_whole_outside_any_key_name(store: Store) -> None:
    store.put(OLD)
    before = {p.name: p.read_bytes() for p in store.key_dir().iterdir()}
    archived = retire_key(store.settings, str(store.stage_root), KEY, RetireMode.ARCHIVE, clock_ms=1234.5)
    assert archived == f"{ARCHIVE_PREFIX}{KEY}-1234"
    assert not store.key_dir().exists()
    assert {p.name: p.read_bytes() for p in (store.root / archived).iterdir()} == before
    # No resolution reaches it: the key starts cold, and the archive is readable as a key directory if moved back.
    assert resolve(store.settings, KEY, str(store.stage())).verdict.reason == "absent"
    os.rename(store.root / archived, store.key_dir())
    assert resolve(store.settings, KEY, str(store.stage()), pi_version=PI, model=MODEL).verdict.resume


def test_retiring_removes_a_link_at_the_key_without_following_it(store: Store, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "current.jsonl").write_bytes(OLD)
    store.root.mkdir(parents=True, exist_ok=True)
    os.symlink(target, store.key_dir())
    assert retire_key(store.settings, str(store.stage_root), KEY, RetireMode.ARCHIVE) is None
    assert not os.path.lexists(store.key_dir())
    assert (target / "current.jsonl").read_bytes() == OLD, "the link's target is never touched"


def test_retiring_twice_finds_nothing(store: Store) -> None:
    store.put(OLD)
    retire_key(store.settings, str(store.stage_root), KEY, RetireMode.ARCHIVE, clock_ms=1)
    assert retire_key(store.settings, str(store.stage_root), KEY, RetireMode.ARCHIVE, clock_ms=2) is None
    assert len(os.listdir(store.root)) == 1


@pytest.mark.parametrize("reason", ["quarantined", "retired"])
def test_a_held_key_stages_0_bytes_with_the_reason_and_leaves_the_transcript(store: Store, reason: str) -> None:
    store.put(OLD)
    jd, host = staged(store, "job-held", held=reason)
    assert (host.mounted, host.resume, host.reason) == (True, False, reason)
    assert Path(jd.session, "current.jsonl").read_bytes() == b""
    assert (store.key_dir() / "current.jsonl").read_bytes() == OLD
    _, free = staged(store, "job-free")
    assert free.resume, "without the hold the same key resumes"


# -- settings -------------------------------------------------------------------------------------------------
def test_the_chart_values_reach_the_operator_settings() -> None:
    settings = OperatorSettings.from_env({})
    assert (settings.retire, settings.quarantine_after) == ("delete", 3)
    settings = OperatorSettings.from_env({"PI_DISPATCH_RETIRE": "archive", "PI_DISPATCH_QUARANTINE_AFTER": "0"})
    assert (settings.retire, settings.quarantine_after) == ("archive", 0)
    for name, value in (("PI_DISPATCH_RETIRE", "keep"), ("PI_DISPATCH_QUARANTINE_AFTER", "-1"),
                        ("PI_DISPATCH_QUARANTINE_AFTER", "three")):
        with pytest.raises(ConfigError, match=name):
            OperatorSettings.from_env({name: value})


# -- the receiver ---------------------------------------------------------------------------------------------
RESUMING = trigger("fix", "issue_comment.created", phrase="@pi", run={"model": "fake/fake-model", "resume": True})
NOT_RESUMING = trigger("fix", "issue_comment.created", phrase="@pi")
REPO = "acme/widgets"


def closed_pr(hooks: Any, head_ref: str, head_repo: str | None, merged: bool) -> Any:
    """``pull_request.closed`` of PR 5, its head ``head_ref`` of ``head_repo`` (``None``: a deleted fork)."""
    pr = hooks.pull_request(5, head_ref=head_ref, fork=head_repo if head_repo not in (None, REPO) else None,
                            deleted_fork=head_repo is None)
    return hooks.pull_request_event(pr, "closed", merged=merged)


@pytest.fixture
def retiring() -> Any:
    cluster = MemoryCluster([RESUMING])
    running = Running(cluster)
    yield running, cluster
    running.stop()


@pytest.mark.parametrize(("merged", "reason"), [(True, "pull-request-merged"), (False, "pull-request-closed")],
                         ids=["merged", "closed unmerged"])
def test_a_closed_pull_request_annotates_its_head_branch_key(retiring: Any, merged: bool, reason: str) -> None:
    receiver, cluster = retiring
    key = branch_key("github", REPO, "feature/x")
    cluster.sessionkeys[key] = {}
    sent = receiver.hooks.send(closed_pr(receiver.hooks, "feature/x", REPO, merged))
    assert (sent.status, sent.json) == (202, {"retired": key, "reason": reason})
    # With its number: the operator retires feature/x only if the conversation's last job ran on pull request 5.
    assert cluster.sessionkeys[key] == {"pi-dispatch.dev/retire": reason,
                                        "pi-dispatch.dev/retire-pull-request": "5"} and cluster.jobs == {}
    assert receiver.counts()["retired"] == 1


def test_a_closed_issue_annotates_its_issue_branch_key(retiring: Any) -> None:
    receiver, cluster = retiring
    key = issue_key("github", REPO, 9)
    cluster.sessionkeys[key] = {}
    sent = receiver.hooks.send(receiver.hooks.issues_event(9, "closed"))
    assert (sent.status, sent.json) == (202, {"retired": key, "reason": "issue-closed"})
    assert cluster.sessionkeys[key] == {"pi-dispatch.dev/retire": "issue-closed"}


def test_a_forks_closed_pull_request_retires_nothing(retiring: Any) -> None:
    """A fork's head named main must not retire main of the base repository."""
    receiver, cluster = retiring
    key = branch_key("github", REPO, "main")
    cluster.sessionkeys[key] = {}
    for head_repo in ("mallory/widgets", None):
        sent = receiver.hooks.send(closed_pr(receiver.hooks, "main", head_repo, True))
        assert sent.status == 202 and "fork" in sent.json["ignored"]
    assert cluster.sessionkeys[key] == {}


def test_without_a_resume_trigger_or_a_sessionkey_nothing_is_retired() -> None:
    cluster = MemoryCluster([NOT_RESUMING])
    receiver = Running(cluster)
    try:
        key = issue_key("github", REPO, 9)
        cluster.sessionkeys[key] = {}
        sent = receiver.hooks.send(receiver.hooks.issues_event(9, "closed"))
        assert sent.status == 202 and "arms resume" in sent.json["ignored"]
        cluster.trigger_objects = [RESUMING]
        sent = receiver.hooks.send(receiver.hooks.issues_event(10, "closed"))
        assert sent.status == 202 and sent.json["ignored"] == "no conversation is stored for this branch"
        assert cluster.sessionkeys[key] == {}
    finally:
        receiver.stop()


def test_the_receiver_names_the_key_the_store_does() -> None:
    close = Closed(REPO, "pi/issue-3", "issue-closed")
    assert close.key == issue_key("github", REPO, 3) == branch_key("github", REPO, "pi/issue-3")


# -- the operator's writes on a SessionKey (MemoryApi, a real store) ------------------------------------------
@pytest.fixture
def keyed(store: Store, tmp_path: Path) -> Any:
    api = CountingApi()
    store.put(OLD)
    api.create(SESSIONKEYS, {"metadata": {"name": KEY}, "spec": {"forge": "github", "repository": REPO,
                                                                  "branch": "pi/issue-7"}})
    settings = OperatorSettings(store=store.settings, staging_dir=str(tmp_path / "staging"), retire="archive")
    return settings, Cluster(api, NS, clock=lambda: NOW), api, f"{SESSIONKEYS}/{KEY}"  # type: ignore[arg-type]


def failed_end(reason: str = "PodFailed") -> Any:
    return Ended("Failed", None, None, reason, "failed")


def count(settings: OperatorSettings, cluster: Cluster, job: str, resumed: bool = True) -> None:
    """A job's end on the key as ``complete.record_end`` writes it: the quarantine step's outcome, if any, and the
    last job's facts, through the SessionKey's one writer."""
    found: list[KeyOutcome] = [LastJob(job, None, sessionkey.JudgedWith(PI, MODEL, None))]
    failed = quarantine.count(settings, job, resumed=resumed, ended=failed_end(), now=cluster.clock())
    sessionkey.write(settings, cluster, KEY, [*found, *([failed] if failed is not None else [])])


def test_failed_resumes_counted_by_two_writers_at_once_lose_none(keyed: Any) -> None:
    settings, cluster, api, path = keyed
    # Another job's count lands between this one's read and its write: the write is refused (409), read again.
    api.before_patch = lambda _: count(settings, cluster, "j1")
    count(settings, cluster, "j2")
    assert api.get(path)["status"]["failedResumes"] == {"count": 2, "jobs": ["j1", "j2"]}
    count(settings, cluster, "j3")
    status = api.get(path)["status"]
    assert status["failedResumes"]["quarantinedAt"] == NOW and status["next"] == "quarantined"
    assert quarantine.count(settings, "j4", resumed=False, ended=failed_end(), now=NOW) is None, \
        "a job that did not resume counts nothing"
    assert quarantine.count(settings, "j4", resumed=True, ended=failed_end("CheckoutFailed"), now=NOW) is None


def test_a_release_annotation_clears_the_count_and_goes(keyed: Any) -> None:
    settings, cluster, api, path = keyed
    for job in ("j1", "j2", "j3"):
        count(settings, cluster, job)
    api.patch(path, {"metadata": {"annotations": {lifecycle.RELEASE_ANNOTATION: "true"}}})
    assert retire.requests(settings, cluster, SessionKeyView.of(api.get(path)))
    body = api.get(path)
    assert "failedResumes" not in body["status"] and lifecycle.RELEASE_ANNOTATION not in body["metadata"]["annotations"]
    assert body["status"]["next"] == "resumed", "released: the status is judged again in the same write"


def test_a_retire_annotation_archives_and_a_promotion_ends_the_retirement(keyed: Any, store: Store) -> None:
    settings, cluster, api, path = keyed
    api.patch(path, {"metadata": {"annotations": {lifecycle.RETIRE_ANNOTATION: "issue-closed"}}})
    seen = SessionKeyView.of(api.get(path))
    assert retire.requests(settings, cluster, seen)
    assert not retire.requests(settings, cluster, SessionKeyView.of(api.get(path))), "the annotation is gone"
    assert retire.requests(settings, cluster, seen), "the same request seen again (a stale watch event)"
    status = api.get(path)["status"]
    assert status["retired"]["reason"] == "issue-closed"
    assert status["retired"]["archive"] == os.listdir(store.root)[0], "the second look kept the first's archive"
    assert (status["next"], resumable(status)["reason"]) == ("retired", "Retired")
    store.put(OLD)  # a new conversation promoted on the branch
    sessionkey.write(settings, cluster, KEY, [LastJob("j9", None, sessionkey.JudgedWith(None, None, None)),
                                              Promoted()])
    status = api.get(path)["status"]
    assert "retired" not in status and status["next"] == "resumed"
    assert next(c for c in status["conditions"] if c["type"] == "Retired")["status"] == "False"
