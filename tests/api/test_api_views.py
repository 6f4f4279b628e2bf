"""``api/views.py``: a Job, a Trigger and a SessionKey parsed once, an invalid spec kept as its refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pidispatch.api.models import JobSpec, TriggerSpec, problem
from pidispatch.api.trigger import RESUME_NOT_BOOLEAN, Refusal, first_refusal
from pidispatch.api.views import JobView, SessionKeyView, TriggerView
from pidispatch.jobflow.pod import pod_env

SPEC: dict[str, Any] = {"trigger": "fix-it", "forge": "github", "repository": "octo/repo", "issue": 7}
META = {"name": "fix-it-1", "uid": "u-1", "generation": 2, "resourceVersion": "41",
        "creationTimestamp": "2030-01-01T00:00:00Z"}
CONDITION = {"type": "Started", "status": "False", "reason": "WaitingForSlot", "message": "",
             "lastTransitionTime": "2030-01-01T00:00:00Z"}


def test_a_job_is_read_once_into_typed_fields_and_keeps_its_body() -> None:
    body = {"metadata": META, "spec": SPEC, "status": {"phase": "Queued", "conditions": [CONDITION]}}
    job = JobView.of(body)
    assert (job.name, job.uid, job.meta.generation, job.meta.resource_version, job.meta.created) == (
        "fix-it-1", "u-1", 2, "41", "2030-01-01T00:00:00Z")
    assert job.spec == JobSpec(**SPEC) and job.invalid is None
    assert job.phase == "Queued" and job.status.conditions is not None
    assert job.status.conditions[0].reason == "WaitingForSlot"
    assert job.stored_status == body["status"], "the stored status is what a merge patch is computed against"


INVALID = [
    ("no repository", {"trigger": "fix-it", "forge": "github"}),
    ("issue 0", {**SPEC, "issue": 0}),
    ("a string for a number", {**SPEC, "issue": "7"}),
    ("fork as a string", {**SPEC, "fork": "false"}),
    ("no spec at all", None),
]


@pytest.mark.parametrize("spec", [c[1] for c in INVALID], ids=[c[0] for c in INVALID])
def test_a_spec_the_schema_refuses_is_kept_as_its_first_problem(spec: dict[str, Any] | None) -> None:
    job = JobView.of({"metadata": META, "spec": spec})
    assert job.spec is None
    assert job.invalid == problem(JobSpec, spec) and job.invalid is not None


def test_a_status_field_that_does_not_fit_reads_as_absent_and_the_others_stay() -> None:
    job = JobView.of({"metadata": META, "spec": SPEC, "status": {
        "phase": "Refused", "reason": "no-such-reason", "completedAt": "2030-01-01T00:00:00Z"}})
    assert (job.phase, job.status.reason, job.status.completedAt) == ("Refused", None, "2030-01-01T00:00:00Z")


TRIGGERS = [
    ("loadable, resume off", {"on": {"event": "issue_comment.created"}, "run": {}}, False),
    ("armed", {"on": {"event": "issue_comment.created", "repositories": ["acme/*"]}, "run": {"resume": True}}, True),
    ("armed on one exact repository", {"on": {"event": "issue_comment.created", "repository": "acme/api"},
                                       "run": {"resume": True}}, True),
    ("resume asked, no repository named: not armed", {"on": {"event": "issue_comment.created"},
                                                      "run": {"resume": True}}, False),
    ("resume a string", {"on": {"event": "issue_comment.created"}, "run": {"resume": "true"}}, False),
    ("armed with a command", {"on": {"event": "issue_comment.created", "repositories": ["acme/*"]},
                              "run": {"resume": True, "command": "x"}}, True),
    ("no on", {"run": {"resume": True}}, False),
]


@pytest.mark.parametrize(("spec", "armed"), [c[1:] for c in TRIGGERS], ids=[c[0] for c in TRIGGERS])
def test_a_trigger_carries_its_first_refusal_as_the_operator_always_judged_it(spec: dict[str, Any],
                                                                              armed: bool) -> None:
    trigger = TriggerView.of({"metadata": {"name": "fix-it"}, "spec": spec})
    assert trigger.refusal == first_refusal(spec)  # no schedule here: the load-time refusal is the whole
    assert trigger.armed is armed
    assert trigger.requested is (spec["run"].get("resume") is True)
    assert (trigger.spec is None) is (problem(TriggerSpec, spec) is not None)


def test_resume_as_a_string_is_refused_in_the_operator_s_words() -> None:
    trigger = TriggerView.of({"metadata": {"name": "t"},
                              "spec": {"on": {"event": "issue_comment.created"}, "run": {"resume": "true"}}})
    assert trigger.refusal == Refusal("ResumeConflict", RESUME_NOT_BOOLEAN) and trigger.spec is None


def test_a_sessionkey_being_deleted_shows_its_finalizers_and_its_last_commit() -> None:
    sha = "a" * 40
    sk = SessionKeyView.of({"metadata": {"name": "k" * 32, "resourceVersion": "7", "finalizers": ["f/x"],
                                         "deletionTimestamp": "2030-01-01T00:00:00Z"},
                            "spec": {"forge": "github", "repository": "octo/repo", "branch": "pi/issue-7"},
                            "status": {"lastCommit": {"sha": sha, "pushed": True}}})
    assert (sk.meta.deletion, sk.meta.finalizers, sk.meta.resource_version) == ("2030-01-01T00:00:00Z", ("f/x",), "7")
    assert sk.status.lastCommit is not None and sk.status.lastCommit.sha == sha


def test_the_runner_gets_the_spec_as_it_was_written_fields_unknown_and_null_included() -> None:
    raw = {**SPEC, "comment": None, "x-newer-field": {"a": 1}, "resolved": {"headRef": "x"}}
    job = JobView.of({"metadata": META, "spec": raw})
    assert job.spec is not None
    trigger = TriggerView.of({"metadata": {"name": "fix-it"}, "spec": {"on": {"event": "issue_comment.created"},
                                                                     "run": {}}})
    assert trigger.spec is not None
    env = pod_env(job.name, job.spec, trigger.spec)
    assert json.loads(env["PI_JOB_SPEC"]) == {k: v for k, v in raw.items() if k != "resolved"}
