"""Cron like CronJob (issue 42 item 6): ``on.timeZone`` and ``on.startingDeadlineSeconds``.

Slots in a real zone across its daylight-saving changes (Europe/Berlin, America/New_York), held against an oracle that
walks real time minute by minute and reads the wall clock, which is what robfig/cron's ``SpecSchedule.Next`` (and so
Kubernetes' CronJob) amounts to: a wall-clock time the spring-forward gap skips does not fire, one the fall-back
overlap repeats fires at both instants. The deadline rule is the CronJob controller's (``mostRecentScheduleTime``
with its ``startingDeadlineSeconds`` floor), driven through the cron loop against the in-memory apiserver with a
clock the test sets, as an operator's restart meets it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pidispatch.api import cron
from pidispatch.api.views import TriggerView
from pidispatch.jobflow import cron as firing
from pidispatch.jobflow import trigger as trigger_step
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.summarize_trigger import trigger_status
from pidispatch.settings import Settings
from testkit.jobflow import job_names, schedule_record
from testkit.memoryapi import NS, TRIGGERS, MemoryApi

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def slots(schedule: str, zone: str, after: str, count: int) -> list[str]:
    parsed = cron.parse(schedule, zone)
    got, t = [], utc(after)
    for _ in range(count):
        nxt = cron.next_slot(parsed, t)
        assert nxt is not None
        got.append(f"{nxt:%Y-%m-%d %H:%M}")
        t = nxt
    return got


# ---- slots in a zone, across its changes ------------------------------------------------------------------

# (what, schedule, zone, after (UTC), the next slots (UTC)). Berlin: CET (+1) to CEST (+2) at 2027-03-28 01:00Z
# (02:00 -> 03:00 local), back at 2027-10-31 01:00Z (03:00 -> 02:00 local). New York: EST (-5) to EDT (-4) at
# 2027-03-14 07:00Z (02:00 -> 03:00 local), back at 2027-11-07 06:00Z (02:00 -> 01:00 local).
ZONED = [
    ("a daily local time follows the offset: winter", "0 9 * * *", BERLIN, "2027-01-10 00:00",
     ["2027-01-10 08:00", "2027-01-11 08:00"]),
    ("a daily local time follows the offset: summer", "0 9 * * *", BERLIN, "2027-07-10 00:00",
     ["2027-07-10 07:00", "2027-07-11 07:00"]),
    ("a daily local time across spring forward: the same local 09:00", "0 9 * * *", BERLIN, "2027-03-27 00:00",
     ["2027-03-27 08:00", "2027-03-28 07:00"]),
    ("Berlin gap: 02:30 does not exist on 2027-03-28 and does not fire that day", "30 2 * * *", BERLIN,
     "2027-03-27 00:00", ["2027-03-27 01:30", "2027-03-29 00:30"]),
    ("New York gap: 02:30 does not exist on 2027-03-14", "30 2 * * *", NEW_YORK, "2027-03-13 00:00",
     ["2027-03-13 07:30", "2027-03-15 06:30"]),
    ("Berlin overlap: 02:30 happens twice on 2027-10-31 and fires twice (robfig/cron, a CronJob)", "30 2 * * *",
     BERLIN, "2027-10-30 12:00", ["2027-10-31 00:30", "2027-10-31 01:30", "2027-11-01 01:30"]),
    ("New York overlap: 01:30 happens twice on 2027-11-07 and fires twice", "30 1 * * *", NEW_YORK,
     "2027-11-06 12:00", ["2027-11-07 05:30", "2027-11-07 06:30", "2027-11-08 06:30"]),
    ("hourly across the gap: 01:00 then 03:00 local, an hour apart in real time", "0 * * * *", BERLIN,
     "2027-03-28 00:30", ["2027-03-28 01:00", "2027-03-28 02:00"]),
    ("hourly across the overlap: both 02:00s, an hour apart each", "0 * * * *", BERLIN, "2027-10-30 23:30",
     ["2027-10-31 00:00", "2027-10-31 01:00", "2027-10-31 02:00"]),
    ("every 20 minutes is every 20 real minutes across the gap", "*/20 * * * *", NEW_YORK, "2027-03-14 06:30",
     ["2027-03-14 06:40", "2027-03-14 07:00", "2027-03-14 07:20"]),
    ("a weekday rule reads the local day: Monday 00:15 Berlin is Sunday 23:15Z", "15 0 * * MON", BERLIN,
     "2027-01-09 00:00", ["2027-01-10 23:15", "2027-01-17 23:15"]),
    ("the first of the month, local", "0 0 1 * *", NEW_YORK, "2027-02-15 00:00",
     ["2027-03-01 05:00", "2027-04-01 04:00"]),
    ("UTC by name is UTC", "0 6 * * *", "UTC", "2027-03-28 00:00", ["2027-03-28 06:00"]),
]


@pytest.mark.parametrize(("schedule", "zone", "after", "expected"), [z[1:] for z in ZONED], ids=[z[0] for z in ZONED])
def test_slots_in_a_zone(schedule: str, zone: str, after: str, expected: list[str]) -> None:
    assert slots(schedule, zone, after, len(expected)) == expected


def wall_clock_search(schedule: cron.Schedule, after: datetime) -> datetime:
    """The oracle: the first real minute after ``after`` whose wall clock (in the schedule's zone) matches."""
    t = after.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    while True:
        wall = t.astimezone(schedule.zone)
        if (wall.minute in schedule.minutes and wall.hour in schedule.hours and wall.month in schedule.months
                and schedule.day_matches(wall)):
            return t
        t += timedelta(minutes=1)


# The changes of 2027 in both zones, each with a day around it: where a slot could be skipped or doubled.
CHANGES = [utc(t) for t in ("2027-03-14 07:00", "2027-03-28 01:00", "2027-10-31 01:00", "2027-11-07 06:00")]


@settings(max_examples=120, deadline=None)
@given(zone=st.sampled_from([BERLIN, NEW_YORK]),
       minute=st.one_of(st.sampled_from(["*", "*/15", "0", "30", "0,45", "59"])),
       hour=st.sampled_from(["*", "1", "2", "3", "1-3", "*/2", "0", "23"]),
       change=st.sampled_from(CHANGES), offset=st.integers(-26 * 60, 26 * 60))
def test_next_slot_is_the_first_real_minute_whose_wall_clock_matches(zone: str, minute: str, hour: str,
                                                                      change: datetime, offset: int) -> None:
    schedule = cron.parse(f"{minute} {hour} * * *", zone)
    after = change + timedelta(minutes=offset, seconds=17)
    assert cron.next_slot(schedule, after) == wall_clock_search(schedule, after)


# ---- the time zone's validation -------------------------------------------------------------------------

BAD_ZONES = [
    ("unknown", "Mars/Olympus_Mons", "not a time zone of the IANA database"),
    ("empty", "", "the time zone is empty"),
    ("Local, the operator's own", "Local", "'Local' is the operator's own zone"),
    ("a path out of the database", "../../etc/passwd", "not the form of an IANA time zone name"),
    ("an absolute path", "/etc/localtime", "not the form of an IANA time zone name"),
    ("a part too long for a zone name", "Europe/Berlin_Berlin_Berlin", "not the form of an IANA time zone name"),
]


@pytest.mark.parametrize(("zone", "message"), [b[1:] for b in BAD_ZONES], ids=[b[0] for b in BAD_ZONES])
def test_a_bad_time_zone_refuses_the_trigger_with_the_reason(zone: str, message: str) -> None:
    view = cron_view(timeZone=zone)
    assert view.refusal is not None and view.refusal.reason == "InvalidTimeZone"
    assert message in view.refusal.message and "on.timeZone" in view.refusal.message
    condition = ready(view)
    assert (condition["status"], condition["reason"]) == ("False", "InvalidTimeZone")
    assert message in condition["message"]
    assert trigger_step.next_fire(view, utc("2027-01-01 00:00")) is None, "a refused Trigger never fires"


def test_a_time_zone_inside_the_schedule_is_refused_as_a_cronjob_refuses_it() -> None:
    for schedule in ("TZ=Europe/Berlin 0 6 * * *", "CRON_TZ=America/New_York 0 6 * * *"):
        view = cron_view(schedule=schedule)
        assert view.refusal is not None and view.refusal.reason == "InvalidSchedule"
        assert "name it in on.timeZone" in view.refusal.message


def test_the_cron_fields_on_a_trigger_that_is_not_cron_are_refused_not_ignored() -> None:
    for field, value, reason in (("timeZone", BERLIN, "InvalidTimeZone"),
                                 ("startingDeadlineSeconds", 60, "InvalidSchedule")):
        view = TriggerView.of({"metadata": {"name": "t"},
                               "spec": {"on": {"event": "issues.labeled", "label": "pi", field: value}, "run": {}}})
        assert view.refusal is not None and view.refusal.reason == reason
        assert f"on.{field} is set but on.event is 'issues.labeled'" in view.refusal.message


def test_a_negative_deadline_is_an_invalid_spec() -> None:
    view = cron_view(startingDeadlineSeconds=-1)
    assert view.refusal is not None and view.refusal.reason == "InvalidSpec"
    assert "startingDeadlineSeconds" in view.refusal.message


def test_ready_names_the_zone_and_the_next_slot_in_utc() -> None:
    condition = ready(cron_view(schedule="0 9 * * *", timeZone=BERLIN))
    assert condition["status"] == "True"
    assert condition["message"] == ("The Trigger can run jobs. It fires on its schedule '0 9 * * *' (Europe/Berlin, "
                                    "the operator's clock); next at 2027-01-01T08:00:00Z.")


def cron_view(**on: Any) -> TriggerView:
    return TriggerView.of({"metadata": {"name": "nightly", "namespace": NS},
                           "spec": {"on": {"event": "cron", "schedule": "* * * * *", "repository": "octo/repo", **on},
                                    "run": {}}})


def ready(view: TriggerView) -> dict[str, Any]:
    status = trigger_status(view, Settings(sessions_dir="/s", github_auth_source="app"), 1, None,
                            upcoming=trigger_step.next_fire(view, utc("2027-01-01 00:00"))).to_patch()
    return next(c for c in status["conditions"] if c["type"] == "Ready")


# ---- the deadline: which slot fires -----------------------------------------------------------------------

HOURLY = cron.parse("0 * * * *")
DEADLINE = [
    ("no deadline: the latest slot fires however late", "10:00", "13:59", None, ("13:00", 2, None)),
    ("the latest slot within the deadline fires, the earlier ones are missed", "10:00", "13:04", 300,
     ("13:00", 2, None)),
    ("the latest slot past the deadline is skipped, not run, and so are the earlier ones", "10:00", "13:06", 300,
     (None, 3, "13:00")),
    ("a slot exactly the deadline old is too late (a CronJob's earliest time is now - deadline)", "10:00",
     "13:05", 300, (None, 3, "13:00")),
    ("a deadline of 0: any slot the loop comes to after it is late", "10:00", "13:00:30", 0,
     (None, 3, "13:00")),
    ("nothing due", "13:00", "13:59", 60, None),
]


def on_day(clock: str) -> datetime:
    return utc(f"2027-01-04 {clock}")


@pytest.mark.parametrize(("since", "now", "deadline", "expected"), [d[1:] for d in DEADLINE],
                         ids=[d[0] for d in DEADLINE])
def test_the_deadline_rule(since: str, now: str, deadline: int | None,
                           expected: tuple[str | None, int, str | None] | None) -> None:
    found = firing.due(HOURLY, on_day(since), on_day(now), deadline)
    if expected is None:
        assert found is None
        return
    slot, missed, skipped = expected
    assert found == firing.Due(on_day(slot) if slot else None, missed, on_day(skipped) if skipped else None)


# ---- the deadline through the cron loop: an operator's restart -------------------------------------------

class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now.timestamp()


def setup(on: dict[str, Any], created: str, status: dict[str, Any] | None = None) -> tuple[MemoryApi, Cluster]:
    api = MemoryApi()
    api.create(TRIGGERS, {"metadata": {"name": "nightly"},
                          "spec": {"on": {"event": "cron", "repository": "octo/repo", **on}, "run": {}}})
    obj = api.objects[f"{TRIGGERS}/nightly"]
    obj["metadata"]["creationTimestamp"] = f"{utc(created):%Y-%m-%dT%H:%M:%SZ}"
    if status is not None:
        obj["status"] = {"schedule": status}
    return api, Cluster(api, NS)


def test_a_restart_within_the_deadline_catches_the_missed_slot_up() -> None:
    fired = {"lastSlot": "2027-01-04T05:00:00Z", "lastJob": "nightly-cron-202701040500", "missed": 0}
    api, cluster = setup({"schedule": "0 * * * *", "startingDeadlineSeconds": 600}, "2027-01-01 00:00", fired)
    firing.Cron(cluster, Clock(utc("2027-01-04 06:09"))).turn()  # down from 05:30 to 06:09: 06:00 is 9 minutes late
    assert job_names(api) == ["nightly-cron-202701040600"]
    assert schedule_record(api)["lastSlot"] == "2027-01-04T06:00:00Z" and schedule_record(api)["missed"] == 0


def test_a_restart_past_the_deadline_skips_the_slot_records_it_and_fires_the_next_on_time() -> None:
    fired = {"lastSlot": "2027-01-04T05:00:00Z", "lastJob": "nightly-cron-202701040500", "missed": 0}
    api, cluster = setup({"schedule": "0 * * * *", "startingDeadlineSeconds": 600}, "2027-01-01 00:00", fired)
    clock = Clock(utc("2027-01-04 07:11"))  # down from 05:30 to 07:11: 06:00 and 07:00 both more than 10 min late
    before = firing.metrics.CRON_MISSED._value.get()
    c = firing.Cron(cluster, clock)
    c.turn()
    assert job_names(api) == [], "a slot missed by more than the deadline is not run"
    assert schedule_record(api) == {**fired, "missed": 2, "lastSkipped": "2027-01-04T07:00:00Z",
                           "nextSlot": "2027-01-04T08:00:00Z"}
    assert firing.metrics.CRON_MISSED._value.get() - before == 2
    clock.now = utc("2027-01-04 07:30")
    c.turn()
    firing.Cron(Cluster(api, NS), clock).turn()  # another restart: the skipped slots are not counted again
    assert job_names(api) == [] and schedule_record(api)["missed"] == 2
    clock.now = utc("2027-01-04 08:00:01")
    c.turn()
    assert job_names(api) == ["nightly-cron-202701040800"], "the next slot, on time, fires"
    assert schedule_record(api)["missed"] == 2 and schedule_record(api)["lastSlot"] == "2027-01-04T08:00:00Z"


def test_a_zoned_trigger_fires_at_its_local_time_and_names_the_job_by_the_utc_minute() -> None:
    api, cluster = setup({"schedule": "30 1 * * *", "timeZone": NEW_YORK}, "2027-11-06 12:00")
    clock = Clock(utc("2027-11-07 05:30:01"))  # 01:30 EDT, the first of the two 01:30s
    c = firing.Cron(cluster, clock)
    c.turn()
    assert job_names(api) == ["nightly-cron-202711070530"]
    assert schedule_record(api)["nextSlot"] == "2027-11-07T06:30:00Z", "01:30 EST, the overlap's second 01:30"
    clock.now = utc("2027-11-07 06:30:01")
    c.turn()
    assert job_names(api) == ["nightly-cron-202711070530", "nightly-cron-202711070630"], "a CronJob fires both too"


def test_the_loop_sleeps_until_a_zoned_slot() -> None:
    api, cluster = setup({"schedule": "0 9 * * *", "timeZone": BERLIN}, "2027-01-01 00:00")
    clock = Clock(utc("2027-01-04 07:59:50"))
    c = firing.Cron(cluster, clock)
    c.turn()
    assert schedule_record(api)["nextSlot"] == "2027-01-04T08:00:00Z"
    assert c.next_turn_in() == pytest.approx(10.05)
    assert ZoneInfo(BERLIN)  # the zone database is there (the operator image: tzdata, pyproject.toml)


def test_more_than_100_missed_says_too_many_missed_start_times_and_still_fires_the_latest(
        caplog: pytest.LogCaptureFixture) -> None:
    fired = {"lastSlot": "2027-01-04T05:00:00Z", "lastJob": "nightly-cron-202701040500", "missed": 0}
    api, cluster = setup({"schedule": "* * * * *"}, "2027-01-01 00:00", fired)
    with caplog.at_level("WARNING", logger="pidispatch.operator"):
        firing.Cron(cluster, Clock(utc("2027-01-04 06:42:10"))).turn()  # 102 slots due: 101 missed
    assert job_names(api) == ["nightly-cron-202701040642"], (
        "as a CronJob since its second controller: a warning, a fire")
    assert schedule_record(api)["missed"] == 101
    assert "too many missed start times: 101" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="pidispatch.operator"):
        firing.Cron(cluster, Clock(utc("2027-01-04 08:22:10"))).turn()  # 100 due: 99 missed, no warning
    assert "too many missed" not in caplog.text
