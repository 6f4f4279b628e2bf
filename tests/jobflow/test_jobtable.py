"""The job table's one record per Job, and the queue policy beside the slot budget (issue 32, item 2).

The dispatcher's behaviour is pinned by ``test_operator_queue.py`` and friends; these pin the pieces it
now stands on: what a DELETED and a superseding Job leave of a record, and when a waiting Job is marked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pidispatch.api.views import JobView
from pidispatch.jobflow.queuepolicy import QUEUED_AFTER_SECONDS, marks_later, next_mark_in, writes_retrying
from pidispatch.jobflow.table import JobTable


def job(name: str, uid: str) -> JobView:
    return JobView.of({"metadata": {"name": name, "uid": uid}, "spec": {}})


def lined_up(current: str | None = "u1") -> JobTable:
    """A table holding Job ``j`` (uid u1): admitted, waiting unmarked, one failed start, its body kept."""
    table = JobTable(lambda name: current)
    assert table.claim("j", "u1")
    table.track("j", "Pending")
    table.keep_body(job("j", "u1"), "Pending")
    table.line_up("j", ("2026-01-01T00:00:00Z", "j"))
    table.wait_unmarked("j", (1.0, "stamp"))
    table.failed_start("j")
    return table


def test_a_deleted_job_leaves_nothing_of_its_record() -> None:
    table = lined_up()
    table.forget("j", "u1", place_too=True)
    assert (table.phase("j"), table.body("j"), table.unmarked(), table.phase_counts()) == (None, None, {}, {})
    assert table.order("j") == ("", "j") and table.failed_start("j") == 1, "the count starts again"
    assert not table.claim("j", "u1"), "a late event of the deleted Job is ignored"


def test_a_job_recreated_under_the_name_takes_over_the_place_in_line_not_the_old_facts() -> None:
    table = lined_up(current="u2")
    assert table.claim("j", "u2"), "a fresh read says the name is u2's now"
    assert (table.phase("j"), table.body("j")) == (None, None), "the old Job's phase and body are gone"
    assert table.order("j") == ("2026-01-01T00:00:00Z", "j") and table.unmarked() == {"j": 1.0}, \
        "the place in line goes with the slot, which is the name's (slots.py knows names, not uids)"
    assert not table.claim("j", "u1"), "the old uid is retired"


def test_a_wait_already_noted_is_kept_and_taken_once() -> None:
    table = lined_up()
    table.wait_unmarked("j", (5.0, "later"))
    assert table.take_unmarked("j") == (1.0, "stamp")
    assert table.take_unmarked("j") is None


def test_the_keys_in_flight_are_the_pods_this_process_created() -> None:
    table = lined_up()
    table.fly("j", "github.com/acme/widgets/issue-1")
    assert table.keys_in_flight() == {"github.com/acme/widgets/issue-1"}
    table.land("j")
    assert table.keys_in_flight() == set()


@pytest.mark.parametrize(("place", "free", "phase", "marks"), [
    (None, 0, "Pending", False),
    (1, 1, "Pending", False),
    (2, 1, "Pending", True),
    (1, 0, None, True),
    (3, 0, "Queued", False),
], ids=["not in line", "a free slot is its", "behind more Jobs than free slots",
        "no slot free and no phase yet", "marked already"])
def test_a_job_put_in_line_is_marked_queued_later_only_if_it_must_wait(place: int | None, free: int,
                                                                      phase: str | None, marks: bool) -> None:
    assert marks_later(place, free, phase) is marks


@pytest.mark.parametrize(("since", "now", "wait"), [
    ([], 10.0, 5.0),
    ([10.0], 10.0, QUEUED_AFTER_SECONDS),
    ([10.0, 9.0], 10.0, QUEUED_AFTER_SECONDS - 1.0),
    ([1.0], 10.0, 0.05),
], ids=["nobody waits: the idle wait", "the grace from now", "the oldest wait first", "overdue: at once"])
def test_the_marker_sleeps_until_the_next_mark_is_due(since: list[float], now: float, wait: float) -> None:
    assert next_mark_in(since, now) == pytest.approx(wait)


def test_only_the_first_failure_in_a_row_writes_retrying() -> None:
    assert [writes_retrying(n) for n in (1, 2, 3)] == [True, False, False]


def test_a_replica_that_takes_the_lease_reads_the_triggers_whose_events_it_dropped(tmp_path: Path) -> None:
    """A standby drops every event until it leads (handlers/leadership.py): a Trigger created meanwhile
    still gets its status, from the start's list and from every resync, without an event."""
    from testkit.jobflow import Clock, api_with_trigger, controller
    from testkit.memoryapi import TRIGGERS

    api = api_with_trigger()
    c = controller(api, Clock(), tmp_path)
    c.start()
    try:
        ready = [x for x in (api.get(f"{TRIGGERS}/fix").get("status") or {}).get("conditions") or []
                 if x["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", "the start read the Trigger no event brought"
        api.create(TRIGGERS, {"metadata": {"name": "late"}, "spec": {
            "on": {"event": "issues.labeled", "label": "pi"}, "run": {}}})
        c.resync()
        assert (api.get(f"{TRIGGERS}/late").get("status") or {}).get("conditions"), "the resync wrote its status"
    finally:
        c.stop()
