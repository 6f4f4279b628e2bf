"""Cron Triggers (issue 34 item 4): the schedule parser, the next slot, the missed-run rule, the Jobs' names, the
double-fire guard against the in-memory apiserver's 409s, the cron key, and the Trigger's Ready message."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pidispatch.api import cron
from pidispatch.api.models import JobSpec
from pidispatch.api.trigger import schedule_problem
from pidispatch.api.views import TriggerView
from pidispatch.jobflow import cron as firing
from pidispatch.jobflow import trigger as trigger_step
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.key import KeyRef, cron_branch, cron_of, job_key
from pidispatch.jobflow.summarize_trigger import trigger_status
from pidispatch.kubeapi import ApiError
from pidispatch.settings import Settings
from pidispatch.store.keys import branch_key, issue_key, key_from_parts
from testkit.jobflow import job_names, schedule_record
from testkit.memoryapi import JOBS, NS, TRIGGERS, MemoryApi


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# ---- the parser -----------------------------------------------------------------------------------------

# (what, schedule, after, the next slots)
NEXT = [
    ("every minute", "* * * * *", "2026-12-04 18:45:30", ["2026-12-04 18:46", "2026-12-04 18:47"]),
    ("a slot is strictly after: on the minute, the next one", "* * * * *", "2026-12-04 18:46:00",
     ["2026-12-04 18:47"]),
    ("every 15 minutes", "*/15 * * * *", "2026-12-04 18:46", ["2026-12-04 19:00", "2026-12-04 19:15"]),
    ("N/step means N-max/step", "5/20 * * * *", "2026-12-04 18:46", ["2026-12-04 19:05", "2026-12-04 19:25",
                                                                      "2026-12-04 19:45", "2026-12-04 20:05"]),
    ("a range with a step", "0 9-17/4 * * *", "2026-12-04 10:00", ["2026-12-04 13:00", "2026-12-04 17:00",
                                                                     "2026-12-05 09:00"]),
    ("a list", "0,30 6 * * *", "2026-12-04 06:10", ["2026-12-04 06:30", "2026-12-05 06:00"]),
    ("weekdays by name (2026-12-04 is a Friday)", "0 6 * * MON-FRI", "2026-12-04 07:00",
     ["2026-12-07 06:00", "2026-12-08 06:00"]),
    ("7 is Sunday too", "0 0 * * 7", "2026-12-04 00:00", ["2026-12-06 00:00", "2026-12-13 00:00"]),
    ("months by name, case-insensitive", "0 0 1 jan,Jul *", "2026-12-04 00:00", ["2027-01-01 00:00",
                                                                                  "2027-07-01 00:00"]),
    ("day 31 skips the short months", "0 0 31 * *", "2026-12-04 00:00", ["2026-12-31 00:00", "2027-01-31 00:00",
                                                                          "2027-03-31 00:00"]),
    ("both day fields restricted: either matches", "0 0 13 * FRI", "2026-11-01 00:00",
     ["2026-11-06 00:00", "2026-11-13 00:00", "2026-11-20 00:00"]),
    ("day of week a bare star: day of month alone", "0 0 13 * *", "2026-11-01 00:00", ["2026-11-13 00:00",
                                                                                       "2026-12-13 00:00"]),
    ("'?' reads as '*' in the day fields", "0 0 13 * ?", "2026-11-01 00:00", ["2026-11-13 00:00"]),
    ("a step on a star restricts (as Kubernetes reads it)", "0 0 */10 * MON", "2026-11-01 00:00",
     ["2026-11-02 00:00", "2026-11-09 00:00", "2026-11-11 00:00"]),
    ("the leap day", "0 0 29 2 *", "2026-12-04 00:00", ["2028-02-29 00:00", "2032-02-29 00:00"]),
    ("@hourly", "@hourly", "2026-12-04 18:45", ["2026-12-04 19:00"]),
    ("@daily", "@daily", "2026-12-04 18:45", ["2026-12-05 00:00"]),
    ("@weekly is Sunday midnight", "@weekly", "2026-12-04 18:45", ["2026-12-06 00:00"]),
    ("@monthly", "@monthly", "2026-12-04 18:45", ["2027-01-01 00:00"]),
    ("@yearly", "@yearly", "2026-12-04 18:45", ["2027-01-01 00:00"]),
    ("blanks around and between fields", "  0   12 * *  * ", "2026-12-04 18:45", ["2026-12-05 12:00"]),
]


@pytest.mark.parametrize(("schedule", "after", "slots"), [n[1:] for n in NEXT], ids=[n[0] for n in NEXT])
def test_next_slots(schedule: str, after: str, slots: list[str]) -> None:
    parsed = cron.parse(schedule)
    got, t = [], at(after)
    for _ in slots:
        nxt = cron.next_slot(parsed, t)
        assert nxt is not None
        got.append(nxt)
        t = nxt
    assert got == [at(s) for s in slots]


INVALID = [
    ("four fields", "* * * *", "expected 5 fields"),
    ("six fields (no seconds field)", "0 * * * * *", "expected 5 fields"),
    ("minute out of range", "60 * * * *", "minute: 60 is out of range 0-59"),
    ("hour out of range", "0 24 * * *", "hour: 24 is out of range 0-23"),
    ("day 0", "0 0 0 * *", "day of month: 0 is out of range 1-31"),
    ("month 13", "0 0 1 13 *", "month: 13 is out of range 1-12"),
    ("weekday 8", "0 0 * * 8", "day of week: 8 is out of range 0-7"),
    ("a word", "every day", "expected 5 fields"),
    ("an unknown name", "0 0 * * FUNDAY", "day of week: 'FUNDAY' is not a number"),
    ("a month name in the hour", "0 JAN * * *", "hour: 'JAN' is not a number from 0 to 23"),
    ("a zero step", "*/0 * * * *", "the step in '*/0' must be a positive number"),
    ("a backwards range", "0 17-9 * * *", "the range '17-9' runs backwards"),
    ("an empty list item", "0,,5 * * * *", "an empty item"),
    ("'?' outside the day fields", "? * * * *", "'?' is only allowed in the day fields"),
    ("a time zone", "TZ=Europe/Paris 0 6 * * *", "name it in on.timeZone"),
    ("an unknown descriptor", "@reboot", "not a known descriptor"),
    ("a date that never comes", "0 0 30 2 *", "no date ever matches"),
    ("a negative number", "-1 * * * *", "is not a number"),
    ("unicode digits", "\u0661 * * * *", "is not a number"),
]


@pytest.mark.parametrize(("schedule", "message"), [i[1:] for i in INVALID], ids=[i[0] for i in INVALID])
def test_invalid_schedules_say_why(schedule: str, message: str) -> None:
    with pytest.raises(cron.CronError) as caught:
        cron.parse(schedule)
    assert message in str(caught.value)
    assert cron.problem(schedule) == str(caught.value)


def brute_next(schedule: cron.Schedule, after: datetime) -> datetime:
    """The next slot by trying every minute: the oracle of next_slot's skipping."""
    t = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while not (t.minute in schedule.minutes and t.hour in schedule.hours and t.month in schedule.months
               and schedule.day_matches(t)):
        t += timedelta(minutes=1)
    return t


FIELD = st.one_of(st.just("*"), st.builds(lambda a, s: f"{a}/{s}", st.sampled_from(["*", "0", "3"]),
                                         st.integers(1, 7)))


@settings(max_examples=150, deadline=None)
@given(minute=st.one_of(FIELD, st.integers(0, 59).map(str)), hour=st.one_of(FIELD, st.integers(0, 23).map(str)),
       dom=st.one_of(st.just("*"), st.integers(1, 28).map(str), st.just("*/3")),
       dow=st.one_of(st.just("*"), st.integers(0, 7).map(str), st.just("1-5")),
       start=st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2030, 1, 1)))
def test_next_slot_equals_a_minute_by_minute_search(minute: str, hour: str, dom: str, dow: str,
                                                    start: datetime) -> None:
    schedule = cron.parse(f"{minute} {hour} {dom} * {dow}")
    after = start.replace(tzinfo=UTC)
    assert cron.next_slot(schedule, after) == brute_next(schedule, after)


# ---- the missed-run rule --------------------------------------------------------------------------------

EVERY_MINUTE = cron.parse("* * * * *")
DUE = [
    ("nothing due before the next minute", "2026-12-04 18:45:00", "2026-12-04 18:45:59", None),
    ("the slot just passed fires, nothing missed", "2026-12-04 18:45:00", "2026-12-04 18:46:01",
     ("2026-12-04 18:46", 0)),
    ("down over 10 slots: the latest fires once, 9 are missed", "2026-12-04 18:45:00", "2026-12-04 18:55:30",
     ("2026-12-04 18:55", 9)),
    ("a day down on every minute: one fire", "2026-12-03 18:45:00", "2026-12-04 18:45:00",
     ("2026-12-04 18:45", 1439)),
]


@pytest.mark.parametrize(("since", "now", "expected"), [d[1:] for d in DUE], ids=[d[0] for d in DUE])
def test_missed_runs_are_counted_and_only_the_latest_fires(since: str, now: str,
                                                           expected: tuple[str, int] | None) -> None:
    found = firing.due(EVERY_MINUTE, at(since), at(now))
    assert found == (firing.Due(at(expected[0]), expected[1]) if expected else None)


# ---- names ----------------------------------------------------------------------------------------------

def test_a_slots_job_name_is_the_same_whoever_makes_it_and_distinct_per_slot_and_trigger() -> None:
    slot = at("2026-12-04 18:46")
    assert firing.job_name("nightly", slot) == "nightly-cron-202612041846" == firing.job_name("nightly", slot)
    assert firing.job_name("nightly", slot + timedelta(minutes=1)) != firing.job_name("nightly", slot)
    assert firing.job_name("weekly", slot) != firing.job_name("nightly", slot)
    long_a, long_b = "a" * 250, "a" * 249 + "b"
    assert len(firing.job_name(long_a, slot)) <= 253
    assert firing.job_name(long_a, slot) != firing.job_name(long_b, slot)


# ---- the key --------------------------------------------------------------------------------------------

def cron_trigger(name: str = "nightly", **on: Any) -> TriggerView:
    return TriggerView.of({"metadata": {"name": name, "namespace": NS},
                           "spec": {"on": {"event": "cron", "schedule": "* * * * *", "repository": "octo/repo", **on},
                                    "run": {"resume": True}}})


CRON_JOB = JobSpec.model_validate({"trigger": "nightly", "forge": "github", "repository": "octo/repo"})


def test_a_cron_jobs_key_is_the_triggers_own_branch_in_the_specs_key_format() -> None:
    branch = cron_of(NS, cron_trigger(), CRON_JOB)
    assert branch == cron_branch(NS, "nightly") == "pi/cron-ns-nightly"
    ref = job_key(CRON_JOB, True, cron=branch)
    key = key_from_parts(["github", "octo/repo", "pi/cron-ns-nightly"])
    assert ref == KeyRef(key, "github", "octo/repo", "pi/cron-ns-nightly") and key == branch_key(
        "github", "octo/repo", "pi/cron-ns-nightly")
    assert job_key(CRON_JOB, True, cron=cron_of(NS, cron_trigger("weekly"), CRON_JOB)) != ref, \
        "two cron Triggers never share a conversation"
    assert job_key(CRON_JOB, False, cron=branch) is None, "resume off: no key"


def test_a_job_made_by_hand_for_an_issue_keeps_the_issues_key_and_other_triggers_no_cron_key() -> None:
    issue_job = CRON_JOB.model_copy(update={"issue": 7})
    assert cron_of(NS, cron_trigger(), issue_job) is None
    assert job_key(issue_job, True, cron=cron_of(NS, cron_trigger(), issue_job)) == KeyRef(
        issue_key("github", "octo/repo", 7) or "", "github", "octo/repo", "pi/issue-7")
    comment = TriggerView.of({"metadata": {"name": "t"}, "spec": {"on": {"event": "issue_comment.created"},
                                                                   "run": {"resume": True}}})
    assert cron_of(NS, comment, CRON_JOB) is None


# ---- the Trigger's status --------------------------------------------------------------------------------

def ready(view: TriggerView, now: datetime, kind: str = "Ready") -> dict[str, Any]:
    status = trigger_status(view, Settings(sessions_dir="/s", github_auth_source="app"), 1, None,
                            upcoming=trigger_step.next_fire(view, now)).to_patch()
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_ready_says_when_a_cron_trigger_fires_next() -> None:
    condition = ready(cron_trigger(schedule="0 6 * * 1-5"), at("2026-12-04 18:45"))
    assert condition["status"] == "True"
    assert condition["message"] == ("The Trigger can run jobs. It fires on its schedule '0 6 * * 1-5' (UTC, the "
                                    "operator's clock); next at 2026-12-07T06:00:00Z.")
    armed = ready(cron_trigger(), at("2026-12-04 18:45"), "ResumeArmed")
    assert (armed["status"], armed["message"]) == ("True", "Each job of this cron Trigger continues the Trigger's "
                                                           "own conversation.")


NOT_READY = [
    ("an invalid schedule, with the parse error", {"schedule": "61 * * * *"},
     "on.schedule '61 * * * *' is not valid cron (minute: 61 is out of range 0-59)"),
    ("no schedule", {"schedule": None}, "a cron Trigger fires on on.schedule, which is not set"),
    ("no repository", {"repository": None}, "on.repository is not set"),
]


@pytest.mark.parametrize(("on", "message"), [n[1:] for n in NOT_READY], ids=[n[0] for n in NOT_READY])
def test_a_cron_trigger_that_cannot_fire_is_not_ready(on: dict[str, Any], message: str) -> None:
    spec = {"on": {"event": "cron", "schedule": "* * * * *", "repository": "octo/repo", **on}, "run": {}}
    spec["on"] = {k: v for k, v in spec["on"].items() if v is not None}
    view = TriggerView.of({"metadata": {"name": "nightly"}, "spec": spec})
    condition = ready(view, at("2026-12-04 18:45"))
    assert (condition["status"], condition["reason"]) == ("False", "InvalidSchedule")
    assert message in condition["message"]
    assert trigger_step.next_fire(view, at("2026-12-04 18:45")) is None


def test_a_schedule_on_a_trigger_that_is_not_cron_is_refused_not_ignored() -> None:
    why = schedule_problem({"on": {"event": "issues.labeled", "schedule": "* * * * *"}})
    assert why is not None and "only a cron Trigger reads it" in why
    assert schedule_problem({"on": {"event": "issues.labeled"}}) is None


# ---- firing, against the in-memory apiserver -------------------------------------------------------------

class Clock:
    def __init__(self, start: str) -> None:
        self.now = at(start)

    def __call__(self) -> float:
        return self.now.timestamp()


def setup(created: str = "2026-12-04 18:45:10", status: dict[str, Any] | None = None,
          schedule: str = "* * * * *") -> tuple[MemoryApi, Cluster]:
    api = MemoryApi()
    api.create(TRIGGERS, {"metadata": {"name": "nightly"},
                          "spec": {"on": {"event": "cron", "schedule": schedule, "repository": "octo/repo"},
                                   "run": {"resume": True}}})
    obj = api.objects[f"{TRIGGERS}/nightly"]
    obj["metadata"]["creationTimestamp"] = at(created).strftime("%Y-%m-%dT%H:%M:%SZ")
    if status is not None:
        obj["status"] = {"schedule": status}
    return api, Cluster(api, NS)


def test_each_slot_fires_once_however_many_turns() -> None:
    api, cluster = setup()
    clock = Clock("2026-12-04 18:45:40")
    c = firing.Cron(cluster, clock)
    c.turn()
    assert job_names(api) == [], "nothing before the first slot after the Trigger's creation"
    assert schedule_record(api)["nextSlot"] == "2026-12-04T18:46:00Z"
    clock.now = at("2026-12-04 18:46:01")
    c.turn()
    c.turn()
    assert job_names(api) == ["nightly-cron-202612041846"]
    job = api.job("nightly-cron-202612041846")
    assert job["spec"] == {"trigger": "nightly", "forge": "github", "repository": "octo/repo",
                           "deliveryId": "cron-2026-12-04T18:46:00Z"}
    assert schedule_record(api) == {"lastSlot": "2026-12-04T18:46:00Z", "lastJob": "nightly-cron-202612041846",
                                    "missed": 0, "nextSlot": "2026-12-04T18:47:00Z"}
    clock.now = at("2026-12-04 18:47:00.5")
    c.turn()
    assert job_names(api) == ["nightly-cron-202612041846", "nightly-cron-202612041847"]
    assert 0 < c.next_turn_in() <= 60


def test_a_restarted_operator_and_a_new_leader_do_not_fire_a_slot_again() -> None:
    api, cluster = setup()
    clock = Clock("2026-12-04 18:46:01")
    firing.Cron(cluster, clock).turn()
    for _ in range(3):  # a new process (a restart, another replica taking the lead) knows only the status
        firing.Cron(Cluster(api, NS), clock).turn()
    assert job_names(api) == ["nightly-cron-202612041846"]


def test_the_claim_is_conditional_two_writers_of_one_version_claim_once() -> None:
    api, cluster = setup()
    clock = Clock("2026-12-04 18:46:01")
    stale = TriggerView.of(api.get(f"{TRIGGERS}/nightly"))  # both read the Trigger at this version
    firing.Cron(cluster, clock).fire(stale)
    claims = [w for w in api.writes if w[0] == "PATCH"]
    firing.Cron(Cluster(api, NS), clock).fire(stale)  # the old leader, a step behind: its claim answers 409
    assert [w for w in api.writes if w[0] == "PATCH"] == claims, "the stale writer wrote nothing"
    assert job_names(api) == ["nightly-cron-202612041846"]


def test_a_claimed_slot_whose_job_was_not_created_is_created_by_the_next_turn() -> None:
    api, cluster = setup(status={"lastSlot": "2026-12-04T18:46:00Z", "missed": 0})  # killed after the claim
    firing.Cron(cluster, Clock("2026-12-04 18:46:30")).turn()
    assert job_names(api) == ["nightly-cron-202612041846"]
    assert schedule_record(api)["lastJob"] == "nightly-cron-202612041846"


def test_a_create_that_answers_409_is_the_same_job_not_a_second_one() -> None:
    api, cluster = setup(status={"lastSlot": "2026-12-04T18:46:00Z", "missed": 0})
    api.create(JOBS, firing.job_body(TriggerView.of(api.get(f"{TRIGGERS}/nightly")), "octo/repo",
                                     at("2026-12-04 18:46")))  # created, then killed before the lastJob note
    creates = []

    def count(path: str, body: dict[str, Any]) -> None:
        creates.append(body["metadata"]["name"])

    api.on_create = count
    firing.Cron(cluster, Clock("2026-12-04 18:46:30")).turn()
    assert creates == ["nightly-cron-202612041846"], "created again by name"
    assert job_names(api) == ["nightly-cron-202612041846"], "the 409 made no second Job"
    assert schedule_record(api)["lastJob"] == "nightly-cron-202612041846"


def test_missed_slots_are_counted_not_replayed() -> None:
    api, cluster = setup(status={"lastSlot": "2026-12-04T18:46:00Z", "lastJob": "nightly-cron-202612041846",
                                 "missed": 2})
    before = firing.metrics.CRON_MISSED._value.get()
    firing.Cron(cluster, Clock("2026-12-04 18:56:30")).turn()  # down from 18:46:30 to 18:56:30
    assert job_names(api) == ["nightly-cron-202612041856"], "one catch-up fire, for the latest slot"
    assert schedule_record(api)["missed"] == 2 + 9
    assert firing.metrics.CRON_MISSED._value.get() - before == 9


def test_a_trigger_that_cannot_fire_creates_nothing() -> None:
    api, cluster = setup(schedule="61 * * * *")
    firing.Cron(cluster, Clock("2026-12-04 19:00:01")).turn()
    assert job_names(api) == []


def test_a_trigger_whose_jobs_could_not_be_placed_fires_nothing_and_its_slots_count_as_missed() -> None:
    api, cluster = setup()
    blocked = firing.Cron(cluster, Clock("2026-12-04 18:47:01"), lambda trigger: "PlacementConflict")
    blocked.turn()
    assert job_names(api) == []
    firing.Cron(cluster, Clock("2026-12-04 18:48:01")).turn()  # placeable again
    assert job_names(api) == ["nightly-cron-202612041848"]
    assert schedule_record(api)["missed"] == 2


def test_one_failing_trigger_does_not_stop_the_others() -> None:
    api, cluster = setup()
    api.create(TRIGGERS, {"metadata": {"name": "other"},
                          "spec": {"on": {"event": "cron", "schedule": "* * * * *", "repository": "octo/repo"},
                                   "run": {}}})
    api.objects[f"{TRIGGERS}/other"]["metadata"]["creationTimestamp"] = "2026-12-04T18:45:10Z"
    names = itertools.count()

    def refuse_nightly(path: str, body: dict[str, Any]) -> None:
        next(names)
        if body["spec"]["trigger"] == "nightly":
            raise ApiError(500, "POST", path, "an outage")

    api.on_create = refuse_nightly
    firing.Cron(cluster, Clock("2026-12-04 18:46:01")).turn()
    assert job_names(api) == ["other-cron-202612041846"]
    nightly = api.get(f"{TRIGGERS}/nightly")["status"]["schedule"]
    assert nightly["lastSlot"] == "2026-12-04T18:46:00Z" and "lastJob" not in nightly, "claimed before the create"
    api.on_create = lambda path, body: None
    firing.Cron(cluster, Clock("2026-12-04 18:46:20")).turn()  # the claimed slot's Job, on the next turn
    assert job_names(api) == ["nightly-cron-202612041846", "other-cron-202612041846"]
