"""One definition of each derived meaning of a Trigger (issue 41, item 3), asked of every reader.

"Resume armed" is decided once, on the typed view (``api/views.py``: ``TriggerView.armed`` and ``.resumes``); the
operator's status (``ResumeArmed``), its admission (a Job of the Trigger gets a key), and doctor's count read that one
answer, so doctor never calls armed what the operator treats as off. The same for "serves" (the receiver, the
admission and doctor ask ``TriggerView.serves``).
"""

from __future__ import annotations

from typing import Any

import pytest

from pidispatch.api.views import JobView, TriggerView
from pidispatch.doctor.cluster import ClusterFacts, trigger_checks
from pidispatch.jobflow import admit
from pidispatch.jobflow.trigger import trigger_status
from pidispatch.settings import Settings

STORE = Settings(sessions_dir="/var/lib/pi-dispatch/sessions", github_auth_source="app")
NS = "pi"


def body(on: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "t"}, "spec": {"on": on, "run": {"model": "fake/fake-model", **run}}}


def operator_says_armed(trigger: dict[str, Any]) -> bool:
    """The operator's verdict, as a user reads it: the Trigger's ``ResumeArmed`` condition."""
    status = trigger_status(TriggerView.of(trigger), STORE, 1, None)
    [armed] = [c for c in status["conditions"] if c["type"] == "ResumeArmed"]
    return bool(armed["status"] == "True")


def doctor_says_armed(trigger: dict[str, Any]) -> bool:
    """Doctor's verdict: its count of the Triggers that arm resume."""
    line = trigger_checks(ClusterFacts(namespace=NS, triggers=[trigger]))[0]
    return line.message.endswith("1 arms resume")


COMMENT = {"event": "issue_comment.created", "phrase": "@pi"}
CASES = [
    ("resume, no on.repositories", body(COMMENT, {"resume": True})),
    ("resume, on.repositories null", body({**COMMENT, "repositories": None}, {"resume": True})),
    ("resume on named repositories", body({**COMMENT, "repositories": ["acme/*"]}, {"resume": True})),
    ("resume on one repository", body({**COMMENT, "repository": "acme/api"}, {"resume": True})),
    ("resume off on named repositories", body({**COMMENT, "repositories": ["acme/*"]}, {"resume": False})),
    ("resume refused (a command)", body({**COMMENT, "repositories": ["acme/*"]}, {"resume": True, "command": "/x"})),
    # Loaded, but its schedule can never fire: the operator says Ready=False (InvalidSchedule) and refuses its Jobs.
    ("resume, a schedule on a comment Trigger", body({**COMMENT, "repositories": ["acme/*"], "schedule": "0 6 * * *"},
                                                    {"resume": True})),
    ("resume, a cron Trigger whose schedule is not cron",
     body({"event": "cron", "schedule": "every day", "repository": "acme/api"}, {"resume": True})),
    ("resume, a cron Trigger that fires", body({"event": "cron", "schedule": "0 6 * * *", "repository": "acme/api"},
                                                {"resume": True})),
]


@pytest.mark.parametrize("trigger", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_doctor_and_the_operator_agree_on_resume_armed(trigger: dict[str, Any]) -> None:
    assert doctor_says_armed(trigger) is operator_says_armed(trigger)


@pytest.mark.parametrize("trigger", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_a_job_is_keyed_only_where_the_operator_says_armed(trigger: dict[str, Any]) -> None:
    """The admission admits a resumed Job (one that needs the store) only of a Trigger whose ResumeArmed is True."""
    job = JobView.of({"metadata": {"name": "j"}, "spec": {"trigger": "t", "forge": "github",
                                                          "repository": "acme/api", "issue": 7}})
    refused = admit.refusal(job, TriggerView.of(trigger), Settings(sessions_dir=None, github_auth_source="app"))
    # Without a store, a Job of an armed Trigger is refused sessions-dir-unset; of any other, not for that reason.
    assert (refused is not None and refused.condition_reason == "SessionsDirUnset") is operator_says_armed(trigger)
