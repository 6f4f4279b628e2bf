"""``jobflow.summarize``: the one writer of a Job's phase and conditions, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from pidispatch.api.models import JobSession, JobStatus, problem
from pidispatch.api.views import JobView
from pidispatch.jobflow.summarize import Change, Commented, Ended, Queued, Refused, Retrying, Running
from pidispatch.jobflow.summarize import summarize as summarize_job

T0, T1 = "2030-01-01T00:00:00Z", "2030-01-01T00:05:00Z"
SESSION = {"resumed": True, "reason": "resumed", "bytes": 10}
SESSION_MODEL = JobSession(**SESSION)  # what the steps hand summarize; it writes SESSION

CASES: list[tuple[str, Change, str | None, str, bool]] = [
    # (id, change, phase it sets, the condition it owns, that condition's status)
    ("queued", Queued(T0, 4), "Queued", "Started", False),
    ("refused", Refused("Refused", "sessions-dir-unset", "SessionsDirUnset", "no store"), "Refused", "Started", False),
    ("failed before its pod", Refused("Failed", None, "PodRefused", "422"), "Failed", "Started", False),
    ("retrying", Retrying("GitHub is down"), None, "Started", False),
    ("running", Running("pij-a", SESSION_MODEL, "Pod created"), "Running", "Started", True),
    ("succeeded", Ended("Succeeded", SESSION_MODEL, {"total": 5.0}, "PodSucceeded", "ok"), "Succeeded", "Completed",
     True),
    ("failed", Ended("Failed", None, None, "PodFailed", "failed"), "Failed", "Completed", False),
    ("commented", Commented(True, "Posted", "posted"), None, "Commented", True),
]


def summarize(status: dict[str, Any], change: Change, generation: int, now: str) -> dict[str, Any]:
    """The patch that records ``change`` on a Job of ``generation`` whose status is stored as ``status``."""
    return summarize_job(JobView.of({"metadata": {"name": "j", "generation": generation}, "status": status}),
                         change, now)


def condition(patch: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in patch["conditions"] if c["type"] == type_)


@pytest.mark.parametrize(("change", "phase", "owned", "status"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_change_sets_its_phase_and_only_its_own_condition(change: Change, phase: str | None, owned: str,
                                                               status: bool) -> None:
    patch = summarize({}, change, 3, T0)
    assert patch.get("phase") == phase
    assert [c["type"] for c in patch["conditions"]] == [owned]
    c = condition(patch, owned)
    assert (c["status"], c["observedGeneration"], c["lastTransitionTime"]) == (str(status), 3, T0)
    assert patch["observedGeneration"] == 3
    assert problem(JobStatus, patch) is None, "the operator writes a status its own CRD would refuse"


@pytest.mark.parametrize("change", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_a_change_already_recorded_writes_nothing(change: Change) -> None:
    first = summarize({}, change, 1, T0)
    assert summarize(first, change, 1, T1) == {}, "the same change again must cost no API write"


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    queued = summarize({}, Queued(T0, 4), 1, T0)
    retrying = summarize(queued, Retrying("again"), 1, T1)
    assert condition(retrying, "Started")["lastTransitionTime"] == T0
    assert "phase" not in retrying, "a retry leaves the phase alone"
    running = summarize({**queued, **retrying}, Running("pij-a", None, "up"), 1, T1)
    assert condition(running, "Started")["lastTransitionTime"] == T1


def test_the_end_keeps_the_start_and_adds_its_own_condition() -> None:
    running = summarize({}, Running("pij-a", SESSION_MODEL, "up"), 1, T0)
    ended = summarize(running, Ended("Succeeded", SESSION_MODEL, None, "PodSucceeded", "done"), 1, T1)
    assert [c["type"] for c in ended["conditions"]] == ["Started", "Completed"]
    assert (ended["phase"], ended["completedAt"]) == ("Succeeded", T1)
    assert "session" not in ended, "an unchanged session is not written again"
    assert "observedGeneration" not in ended, "already recorded"
