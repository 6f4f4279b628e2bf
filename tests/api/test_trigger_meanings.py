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
from pidispatch.doctor.diagnose import auth_checks
from pidispatch.jobflow import admit
from pidispatch.jobflow.summarize_trigger import trigger_status
from pidispatch.receiver.delivery import Event, job_spec, unserved
from pidispatch.settings import Settings

STORE = Settings(sessions_dir="/var/lib/pi-dispatch/sessions", github_auth_source="app")
NS = "pi"


def body(on: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "t"}, "spec": {"on": on, "run": {"model": "fake/fake-model", **run}}}


def operator_says_armed(trigger: dict[str, Any]) -> bool:
    """The operator's verdict, as a user reads it: the Trigger's ``ResumeArmed`` condition."""
    status = trigger_status(TriggerView.of(trigger), STORE, 1, None).to_patch()
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
    ("resume, a cron Trigger in an unknown time zone (InvalidTimeZone)",
     body({"event": "cron", "schedule": "0 6 * * *", "repository": "acme/api", "timeZone": "Mars/Olympus"},
          {"resume": True})),
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


# ---- serves: the receiver ignores a delivery from a repository no Trigger serves; the admission refuses a Job
# for one its Trigger does not serve. One rule (TriggerView.serves) for both.

SERVES = [({**COMMENT, "repositories": ["acme/*"]}, "acme/api"),
          ({**COMMENT, "repositories": ["acme/*"]}, "acme-labs/x"),
          ({**COMMENT, "repository": "acme/api"}, "ACME/Api"), ({**COMMENT, "repository": "acme/api"}, "acme/web"),
          (COMMENT, "anyone/anything"), ({**COMMENT, "repositories": ["*/api", "acme/[!w]*"]}, "acme/web")]


@pytest.mark.parametrize(("on", "repository"), SERVES)
def test_the_receiver_and_the_admission_agree_on_what_a_trigger_serves(on: dict[str, Any], repository: str) -> None:
    trigger = body(on, {})
    event = Event(trigger_event="issue_comment.created", repository=repository, sender="alice", sender_is_bot=False,
                  issue=7, text="@pi fix", author_association="OWNER")
    job = JobView.of({"metadata": {"name": "j"}, "spec": {"trigger": "t", "forge": "github", "repository": repository,
                                                          "issue": 7}})
    refused = admit.refusal(job, TriggerView.of(trigger), STORE)
    beyond = refused is not None and refused.condition_reason == "BeyondTrigger"
    assert (unserved([trigger], event) is not None) is beyond


# ---- the auth source: the receiver writes spec.authSource, the admission checks it against the Trigger's; doctor
# counts the Triggers whose jobs get the gh login, the admission refuses them (config-refused). One rule for all
# (forge/authsource.py: source_of, is_gh_login).

SOURCES = ["app", "pat", "gh"]


@pytest.mark.parametrize("deployment", SOURCES)
@pytest.mark.parametrize("run_auth", [None, *SOURCES])
def test_a_job_the_receiver_made_is_never_beyond_its_trigger_s_auth(deployment: str, run_auth: str | None) -> None:
    trigger = body({**COMMENT, "repositories": ["acme/*"]}, {"auth": run_auth} if run_auth else {})
    event = Event(trigger_event="issue_comment.created", repository="acme/api", sender="alice", sender_is_bot=False,
                  issue=7, text="@pi fix", author_association="OWNER")
    spec = job_spec(trigger, event, "d-1", deployment)
    assert not isinstance(spec, str), spec
    job = JobView.of({"metadata": {"name": "j"}, "spec": spec.model_dump(exclude_none=True)})
    settings = Settings(sessions_dir="/s", github_auth_source=deployment)
    refused = admit.refusal(job, TriggerView.of(trigger), settings)
    assert refused is None or refused.condition_reason != "BeyondTrigger", refused


@pytest.mark.parametrize("deployment", SOURCES)
@pytest.mark.parametrize("run_auth", [None, *SOURCES])
def test_doctor_fails_a_gh_trigger_exactly_where_the_admission_refuses_it(deployment: str,
                                                                         run_auth: str | None) -> None:
    run = {"resume": True, **({"auth": run_auth} if run_auth else {})}
    trigger = body({**COMMENT, "repositories": ["acme/*"]}, run)
    settings = Settings(sessions_dir="/s", github_auth_source=deployment)
    doctor_fails = any(c.status.name == "FAIL" for c in auth_checks(settings, [trigger], NS))
    job = JobView.of({"metadata": {"name": "j"}, "spec": {"trigger": "t", "forge": "github", "repository": "acme/api",
                                                          "issue": 7}})
    refused = admit.refusal(job, TriggerView.of(trigger), settings)
    assert doctor_fails is (refused is not None and refused.condition_reason == "ConfigRefused"), refused


def test_doctor_reports_a_trigger_whose_schedule_cannot_fire_as_the_operator_does() -> None:
    """Refused (the operator's Ready=False, InvalidSchedule, in the same words), and no push-access disclosure: its
    jobs never resume."""
    trigger = body({"event": "cron", "schedule": "every day", "repository": "acme/api"}, {"resume": True})
    checks = trigger_checks(ClusterFacts(namespace=NS, triggers=[trigger]))
    status = trigger_status(TriggerView.of(trigger), STORE, 1, None).to_patch()
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSchedule")
    [fail] = [c for c in checks if c.status.name == "FAIL"]
    assert fail.message.startswith("Trigger t is refused: on.schedule 'every day' is not valid cron"), fail
    assert ready["message"].startswith("on.schedule 'every day' is not valid cron")
    assert not [c for c in checks if c.name == "push-access"]
