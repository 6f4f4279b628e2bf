"""The SessionKey's steps read typed views, not dicts (issue 41): where a view reads a field differently from the
dict walk it replaced (a field missing, or one that does not fit the CRD's model), the status it leads to.

The store's answer (``store.inspect.inspect_key``) is read once into ``StoreReading``; the stored status into
``SessionKeyView.status`` (``api/views.py``: leniently, a top-level field that does not fit its model reads as
absent); the job Pods retention decides on into ``RetainedPod``.
"""

from __future__ import annotations

from typing import Any

from pidispatch.api.models import KeyUsage
from pidispatch.api.views import SessionKeyView
from pidispatch.jobflow import lifecycle
from pidispatch.jobflow.cost import JobUsage
from pidispatch.jobflow.retention import RetainedPod
from pidispatch.jobflow.summarize_sessionkey import (
    Promoted,
    Retirement,
    StoreReading,
    judged_with,
    summarize_sessionkey,
)

KEY = "github--acme--widgets--pi%2Fissue-7"
NOW = "2026-12-07T19:00:00Z"
FOUND: dict[str, Any] = {"directory": True, "bytes": 10, "next": "resumed", "assumedPiVersion": False,
                         "ledger": {"entries": 2, "letter": None}}


def key(status: dict[str, Any]) -> SessionKeyView:
    return SessionKeyView.of({"metadata": {"name": KEY, "generation": 1}, "status": status})


def by_type(patch: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in patch["conditions"]}


def test_a_store_answer_without_its_optional_parts_reads_as_nothing_there() -> None:
    """No ``lock``, no ``ledger``, no ``resumeChain``, no ``next``: unlocked, no entries, chain 0, ``absent``."""
    reading = StoreReading.of({"directory": True})
    assert (reading.stored, reading.locked, reading.ledger_entries, reading.resume_chain, reading.next) == (
        False, False, 0, 0, "absent")
    patch = summarize_sessionkey(key({}), reading).to_patch()
    assert (patch["ledger"], patch["resumeChain"], patch["next"]) == ({"entries": 0, "letter": None}, 0, "absent")
    assert by_type(patch)["Locked"]["reason"] == "Unlocked"


def test_a_lock_without_a_state_is_a_stale_one() -> None:
    """As the dict walk had it: a lock that does not say ``live`` is stale."""
    patch = summarize_sessionkey(key({}), StoreReading.of({**FOUND, "lock": {"ageMs": 5}})).to_patch()
    assert by_type(patch)["Locked"]["reason"] == "StaleLock"


def test_a_stored_lineage_with_neither_job_nor_reason_is_none() -> None:
    """``rethreadedBy: {}`` (a merge patch keeps no null member) says the conversation did not start from a
    handoff; the model reads it as a lineage of two nulls, which must not read as a rethread."""
    patch = summarize_sessionkey(key({"rethreadedBy": {}}), StoreReading.of(FOUND)).to_patch()
    assert by_type(patch)["Rethreaded"]["reason"] == "NotRethreaded"
    stored = {"rethreadedBy": {"job": "j1", "reason": "pi-version-changed"}}
    patch = summarize_sessionkey(key(stored), StoreReading.of(FOUND)).to_patch()
    assert by_type(patch)["Rethreaded"]["reason"] == "PiVersionChanged"
    assert "rethreadedBy" not in patch, "a lineage as stored is not sent again"


def test_a_usage_the_model_cannot_read_counts_from_none() -> None:
    """A stored ``usage`` that does not fit ``KeyUsage`` (here a count below zero, which the CRD refuses) reads as
    absent: the job's end counts from none instead of adding to figures that cannot be trusted."""
    sk = key({"usage": {"cold": {"jobs": -1, "total": 5}}})
    assert sk.status.usage is None
    patch = summarize_sessionkey(sk, StoreReading.of(FOUND), [JobUsage("j2", "cold", {"total": 7})]).to_patch()
    assert patch["usage"] == {"cold": {"jobs": 1, "total": 7}, "recentJobs": ["j2"]}


def test_usage_read_as_floats_is_sent_as_whole_numbers() -> None:
    sk = key({"usage": {"resumed": {"jobs": 1, "total": 5}, "recentJobs": ["j1"]}})
    assert isinstance(sk.status.usage, KeyUsage)
    patch = summarize_sessionkey(sk, StoreReading.of(FOUND), [JobUsage("j2", "cold", {"total": 7})]).to_patch()
    assert patch["usage"] == {"resumed": {"jobs": 1, "total": 5}, "cold": {"jobs": 1, "total": 7},
                              "recentJobs": ["j1", "j2"]}
    assert type(patch["usage"]["resumed"]["total"]) is int


def test_a_retirement_without_a_reason_is_no_retirement() -> None:
    """``retired`` without its required ``reason`` (the CRD refuses one) reads as not retired: the next delivery
    is not held, and a retirement request is carried out instead of read as one seen already."""
    sk = key({"retired": {"at": NOW}})
    assert sk.status.retired is None and lifecycle.held_reason(sk.status) is None
    patch = summarize_sessionkey(sk, None, [Retirement("requested", NOW, None)]).to_patch()
    assert patch == {"retired": {"reason": "requested", "at": NOW, "archive": None}, "failedResumes": None}
    retired = key({"retired": {"reason": "issue-closed", "at": NOW}})
    assert summarize_sessionkey(retired, None, [Retirement("requested", NOW, None)]).to_patch() == {}


def test_a_promotion_empties_both_lifecycle_fields_and_nothing_else_without_a_store() -> None:
    sk = key({"retired": {"reason": "issue-closed", "at": NOW}, "failedResumes": {"count": 1, "jobs": ["j1"]}})
    assert summarize_sessionkey(sk, None, [Promoted()]).to_patch() == {"failedResumes": None, "retired": None}


def test_judged_with_an_unreadable_stamp_is_unknown_as_a_whole() -> None:
    """A stored ``judgedWith`` that does not fit its model (a population token no Trigger admits) reads as
    absent, so the next refresh judges with the pi version stamped on the key, as for a key of an older operator;
    a readable one is used as it is."""
    odd = key({"judgedWith": {"piVersion": "0.1", "model": "m", "population": ["NOBODY"]}})
    found = judged_with(odd.status, [])
    assert (found.pi_version, found.model, found.population) == (None, None, None)
    good = key({"judgedWith": {"piVersion": "0.1", "model": "m", "population": ["OWNER"]}})
    found = judged_with(good.status, [])
    assert (found.pi_version, found.model, found.population) == ("0.1", "m", ("OWNER",))


def test_a_job_pod_without_uid_or_deletion_reads_as_one_to_delete_by_name() -> None:
    """Retention reads a Pod once: its name, phase and controlling owner (``PodView``), its uid for the
    precondition and whether it is being deleted."""
    pod = RetainedPod.of({"metadata": {"name": "pij-j1"}, "status": {"phase": "Failed"}})
    assert (pod.name, pod.uid, pod.deleting, pod.ended, pod.pod.owner_uid) == ("pij-j1", None, False, True, None)
    going = RetainedPod.of({"metadata": {"name": "pij-j2", "uid": "u", "deletionTimestamp": NOW}})
    assert (going.uid, going.deleting, going.ended) == ("u", True, False)
