"""The operator's repeat of the Trigger's CEL refusals: same order, same messages."""

from __future__ import annotations

import pytest

from pidispatch.api.crds import TRIGGER_RULES
from pidispatch.api.trigger import (
    FLOW_AND_COMMAND,
    LOCAL_KIND,
    RESUME_NOT_BOOLEAN,
    first_refusal,
)
from pidispatch.api.views import TriggerView

# The least each event's Trigger needs to fire (api/trigger.py refuses a label or comment Trigger without it).
FIRES = {"issue_comment.created": {"phrase": "@pi"}, "issues.labeled": {"label": "pi"}, "cron": {}}


def spec_of(event: str, run: dict) -> dict:
    return {"on": {"event": event, **FIRES[event]}, "run": run}


CASES = [
    ("resume alone", {"resume": True}, "issue_comment.created", None),
    ("resume string", {"resume": "true"}, "issue_comment.created", RESUME_NOT_BOOLEAN),
    ("resume number", {"resume": 1}, "issue_comment.created", RESUME_NOT_BOOLEAN),
    ("command first", {"resume": True, "command": "x", "kind": "local", "replicas": 2}, "cron",
     TRIGGER_RULES[0]["message"]),
    ("resume on cron is loadable: a cron Trigger continues its own conversation", {"resume": True}, "cron", None),
    ("cron with replicas is refused as any Trigger's", {"resume": True, "replicas": 2}, "cron",
     TRIGGER_RULES[2]["message"]),
    ("local kind on cron", {"resume": True, "kind": "local"}, "cron", TRIGGER_RULES[1]["message"]),
    ("local kind", {"resume": True, "kind": "local"}, "issue_comment.created", TRIGGER_RULES[1]["message"]),
    ("local kind without resume: not implemented, so refused rather than run as a forge job", {"kind": "local"},
     "issue_comment.created", LOCAL_KIND),
    ("local kind on cron without resume", {"kind": "local"}, "cron", LOCAL_KIND),
    ("forge kind is what runs", {"kind": "forge"}, "issue_comment.created", None),
    ("replicas before secrets", {"resume": True, "replicas": 2, "secrets": ["s"]}, "issue_comment.created",
     TRIGGER_RULES[2]["message"]),
    ("secrets", {"resume": True, "secrets": ["s"]}, "issue_comment.created", TRIGGER_RULES[3]["message"]),
    ("empty secrets list", {"resume": True, "secrets": []}, "issue_comment.created", None),
    ("resume false with secrets", {"resume": False, "secrets": ["s"]}, "cron", None),
    ("secrets without resume", {"secrets": ["model-keys", "deploy.key"]}, "issue_comment.created", None),
    ("resume with a well-formed command keeps the contract's message", {"resume": True, "command": "/review"},
     "issue_comment.created", TRIGGER_RULES[0]["message"]),
    ("command acts", {"command": "/review focus on tests"}, "issue_comment.created", None),
    ("command on cron", {"command": "/nightly"}, "cron", None),
    ("command with resume false and replicas", {"resume": False, "command": "/x", "replicas": 2},
     "issue_comment.created", None),
    ("flow and command", {"flow": "triage", "command": "/review"}, "issue_comment.created", FLOW_AND_COMMAND),
    ("flow and an ill-formed command: one of the two first", {"flow": "triage", "command": "x"},
     "issue_comment.created", FLOW_AND_COMMAND),
    ("command without a slash", {"command": "x"}, "issue_comment.created",
     "run.command: 'x' is not a command: it starts with '/', as in '/review focus on tests'. It is the job's whole "
     "prompt, a command a pi extension of the job image registers."),
    ("flow acts", {"flow": "fix"}, "issue_comment.created", None),
    ("flow with replicas", {"flow": "fix", "replicas": 3}, "issue_comment.created", None),
    ("replicas act", {"replicas": 2}, "issue_comment.created", None),
    ("resume with flow: a flow resumes", {"resume": True, "flow": "fix"}, "issue_comment.created", None),
    ("secrets names a Secret", {"secrets": ["Model_Keys"]}, "issue_comment.created",
     "run.secrets: 'Model_Keys' is not a Secret's name (lowercase letters, digits, '-' and '.', at most 253). "
     "It names a Secret of the Trigger's namespace, mounted into the job."),
]


@pytest.mark.parametrize(("run", "event", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_first_refusal(run: dict, event: str, message: str | None) -> None:
    refusal = first_refusal(spec_of(event, run))
    assert (refusal.message if refusal is not None else None) == message


@pytest.mark.parametrize(("run", "armed"), [({"resume": True}, True), ({"resume": False}, False), ({}, False),
                                            ({"resume": "true"}, False), ({"resume": 1}, False)])
def test_resume_armed_only_by_boolean_true(run: dict, armed: bool) -> None:
    assert TriggerView.of({"spec": {"run": run}}).requested is armed


@pytest.mark.parametrize(("run", "reason"), [
    ({"command": "x"}, "InvalidCommand"),
    ({"command": "/x", "flow": "y"}, "InvalidCommand"),
    ({"resume": True, "replicas": 2}, "ResumeConflict"),
    ({"resume": True, "command": "/x"}, "ResumeConflict"),
], ids=["an ill-formed command", "flow and command", "resume with replicas", "resume with command"])
def test_the_ready_reason_says_not_implemented_or_resume_conflict(run: dict, reason: str) -> None:
    refusal = first_refusal(spec_of("issue_comment.created", run))
    assert refusal is not None and refusal.reason == reason


@pytest.mark.parametrize(("spec", "reason"), [
    (spec_of("issue_comment.created", {"secrets": ["Model_Keys"]}), "InvalidSecretName"),
    (spec_of("issue_comment.created", {"replicas": 7}), "InvalidSpec"),
    (spec_of("issue_comment.created", {"flow": "Fix_It"}), "InvalidFlow"),
    (spec_of("issue_comment.created", {"resume": "yes"}), "ResumeConflict"),
    (spec_of("issue_comment.created", {"kind": "local"}), "FieldNotImplemented"),
    ({"on": {"event": "issues.labeled", "label": "pi", "phrase": "@pi"}, "run": {}}, "FieldNotForEvent"),
    ({"on": {"event": "issues.labeled"}, "run": {}}, "LabelMissing"),
    ({"on": {"event": "issue_comment.created"}, "run": {}}, "PhraseMissing"),
], ids=["a Secret's name", "what the schema refuses", "a flow's name", "resume not a boolean", "a local job",
        "a field of another event", "no label", "no phrase"])
def test_a_refusal_that_is_no_resume_conflict_is_not_called_one(spec: dict, reason: str) -> None:
    refusal = first_refusal(spec)
    assert refusal is not None and refusal.reason == reason, refusal
