"""A cron Trigger fires on its schedule across an operator restart, without a double fire, and its second run
resumes the first (issue 34 item 4's proof), with real pi 0.73.1 and the scripted model; and, as a CronJob, a
schedule in ``on.timeZone`` fires at its local minute and a slot later than ``on.startingDeadlineSeconds`` across
a restart is skipped and recorded (issue 42 item 6).

Slots are real UTC minutes (``* * * * *``): the test waits for real minute boundaries, under three minutes
in all. The operator is stopped (its Deployment scaled to 0) across two slot boundaries, then started again:
the slots that came due while it was down are counted as missed and only the latest fires; the slot that
fired before the restart never fires again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import TAMPER_BOUNDS, Release, base_values, installed, merge
from pidispatch.jobflow.cron import job_name, parse_time
from pidispatch.jobflow.key import cron_branch
from pidispatch.store.keys import branch_key
from testkit.pitool import pi_binary
from testkit.scripted_model import ScriptedModel, Usage, text_of, write_agent_dir
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

REPO = "acme/widgets"
TRIGGER = "nightly"


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as m:
        yield m


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet, model: ScriptedModel,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    root = tmp_path_factory.mktemp("pi")
    agent = write_agent_dir(root / "agent", model.base_url, context_window=32000)
    (root / "home").mkdir()
    job = {"command": ["pidispatch", "runner"],
           "env": {"PI_BIN": str(pi_binary()), "PI_CODING_AGENT_DIR": str(agent), "HOME": str(root / "home")}}
    with installed(cluster, kube, "cron", merge(base_values(), {"sessions": {"enabled": True, **TAMPER_BOUNDS},
                                                                 "job": job}), trigger=None) as r:
        yield r


def deployment(r: Release) -> str:
    found = [d["metadata"]["name"] for d in r.kube.list(f"/apis/apps/v1/namespaces/{r.ns}/deployments",
                                                         labelSelector="app.kubernetes.io/component=operator")]
    assert len(found) == 1, found
    return found[0]


def scale(r: Release, replicas: int) -> None:
    name = deployment(r)
    r.kube.patch(f"/apis/apps/v1/namespaces/{r.ns}/deployments/{name}", {"spec": {"replicas": replicas}})
    if replicas == 0:
        wait_until("no operator Pod", lambda: not r.operator_pods(), timeout=90)
    else:
        wait_until("the operator Pod Running", lambda: any(
            (p.get("status") or {}).get("phase") == "Running" for p in r.operator_pods()), timeout=90)


def cron_jobs(r: Release) -> dict[str, dict[str, Any]]:
    return {j["metadata"]["name"]: j for j in r.kube.list(r.path("jobs")) if j["spec"]["trigger"] == TRIGGER}


def schedule_status(r: Release) -> dict[str, Any]:
    return (r.get("triggers", TRIGGER).get("status") or {}).get("schedule") or {}


def minute_of(when: float) -> datetime:
    return datetime.fromtimestamp(when, UTC).replace(second=0, microsecond=0)


def conversation(requests: list[dict]) -> str:
    return "\n".join(text_of(m.get("content")) for body in requests for m in body.get("messages", []))


def test_a_cron_trigger_fires_across_a_restart_once_per_slot_and_resumes_its_conversation(
        release: Release, model: ScriptedModel) -> None:
    r = release
    model.reply("Nightly check done: the widget cache is stale, I will look again tomorrow.", usage=Usage(700, 30))
    model.reply("Second run: I remember the stale widget cache; it is fixed now.", usage=Usage(900, 30))
    r.kube.create(r.path("triggers"), {
        "apiVersion": "pi-dispatch.dev/v1alpha1", "kind": "Trigger", "metadata": {"name": TRIGGER},
        "spec": {"on": {"event": "cron", "schedule": "* * * * *", "repository": REPO},
                 "run": {"resume": True, "model": "fake/fake-model", "piVersion": "0.73.1"}}})

    def ready() -> dict[str, Any] | None:
        return r.condition(r.get("triggers", TRIGGER), "Ready")

    try:
        condition = wait_until("the cron Trigger's Ready", lambda: (c := ready()) and "next at" in c.get(
            "message", "") and c, timeout=60)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\nTrigger: {json.dumps(r.get('triggers', TRIGGER).get('status'))}\noperator log:\n"
                           f"{r.operator_log()[-4000:]}") from None
    assert condition["status"] == "True", condition
    assert "It fires on its schedule '* * * * *' (UTC" in condition["message"]

    # The first slot: the first minute after the Trigger's creation.
    first = wait_until("the first slot's Job", lambda: cron_jobs(r) or None, timeout=90)
    assert len(first) == 1, list(first)
    first_name = next(iter(first))
    slot1 = parse_time(first[first_name]["metadata"]["annotations"]["pi-dispatch.dev/cron-slot"])
    assert slot1 is not None and first_name == job_name(TRIGGER, slot1)
    job1 = r.wait_job(first_name, timeout=150)
    assert job1["status"]["phase"] == "Succeeded", (json.dumps(job1["status"]), r.pod_log(job1["status"]["podName"]))
    assert job1["status"]["session"]["resumed"] is False and job1["status"]["session"]["reason"] == "absent"
    requests_after_first = len(model.requests)

    # The operator down across two slot boundaries: one slot is missed, the other fires late, once.
    scale(r, 0)
    down_at = time.time()
    boundary = minute_of(down_at).timestamp() + 120
    wait_until("two slot boundaries while the operator is down", lambda: time.time() >= boundary + 1,
               timeout=boundary + 10 - down_at)
    assert cron_jobs(r).keys() == {first_name}, "nothing fires while no operator runs"
    scale(r, 1)
    up_at = time.time()

    # The catch-up: one Job, for the latest slot due; the slot that already fired never again.
    second = wait_until("the catch-up Job", lambda: (jobs := cron_jobs(r)) and len(jobs) >= 2 and jobs, timeout=90)
    # No more slots from here: the rest of the test reads a settled Trigger.
    r.kube.patch(r.path("triggers", TRIGGER), {"spec": {"on": {"schedule": "0 0 1 1 *"}}})
    names = sorted(second)
    assert names[0] == first_name
    slot2 = parse_time(second[names[1]]["metadata"]["annotations"]["pi-dispatch.dev/cron-slot"])
    assert slot2 is not None and slot2 > slot1
    latest_due = minute_of(up_at)
    assert slot2 in (latest_due, minute_of(time.time())), (slot2, latest_due)  # the latest slot, not a replay
    job2 = r.wait_job(names[1], timeout=150)
    assert job2["status"]["phase"] == "Succeeded", (json.dumps(job2["status"]), r.pod_log(job2["status"]["podName"]))
    everything = cron_jobs(r)
    assert set(everything) == {first_name, names[1]}, f"a slot fired twice or a missed slot was replayed: {everything}"
    missed = schedule_status(r).get("missed", 0)
    assert missed == round((slot2 - slot1).total_seconds() / 60) - 1, (missed, slot1, slot2)
    assert missed >= 1, "the operator was down over two slots: the earlier one is missed"
    for name in everything:
        assert len(r.pods_of(name)) == 1, f"Job {name} ran more than once"
    assert len(model.requests) == requests_after_first + 1, "one model call per fired slot, none for a missed one"

    # The second run resumes the first: the model is sent the first run's conversation.
    session = job2["status"]["session"]
    assert (session["resumed"], session["reason"]) == (True, "resumed"), session
    assert "the widget cache is stale" in conversation(model.requests[requests_after_first:])
    key = branch_key("github", REPO, cron_branch(r.ns, TRIGGER))
    assert key is not None and (r.key_dir(key) / "current.jsonl").exists()
    sk = r.sessionkey(key)
    assert sk is not None and sk["spec"]["branch"] == f"pi/cron-{r.ns}-{TRIGGER}"


def test_an_invalid_schedule_is_not_ready_with_the_parse_error(release: Release) -> None:
    r = release
    r.kube.create(r.path("triggers"), {
        "apiVersion": "pi-dispatch.dev/v1alpha1", "kind": "Trigger", "metadata": {"name": "broken"},
        "spec": {"on": {"event": "cron", "schedule": "61 * * * *", "repository": REPO}, "run": {}}})
    condition = wait_until("the broken Trigger's Ready", lambda: r.condition(r.get("triggers", "broken"), "Ready"),
                           timeout=60)
    assert (condition["status"], condition["reason"]) == ("False", "InvalidSchedule")
    assert "minute: 61 is out of range 0-59" in condition["message"]


def test_kubectl_get_triggers_shows_the_next_slot(release: Release, cluster: Cluster, tmp_path: Path) -> None:
    r = release
    r.kube.create(r.path("triggers"), {
        "apiVersion": "pi-dispatch.dev/v1alpha1", "kind": "Trigger", "metadata": {"name": "hourly"},
        "spec": {"on": {"event": "cron", "schedule": "@hourly", "repository": REPO}, "run": {}}})
    nxt = wait_until("the hourly Trigger's next slot", lambda: (r.get("triggers", "hourly").get("status") or {}).get(
        "schedule", {}).get("nextSlot"), timeout=60)
    when = parse_time(nxt)
    assert when is not None and when.minute == 0 and 0 < when.timestamp() - time.time() <= 3600, nxt
    out = cluster.kubectl("get", "triggers", "hourly", "-n", r.ns).stdout
    assert "NEXT" in out.splitlines()[0] and nxt in out


# ---- cron like CronJob (issue 42 item 6): on.timeZone and on.startingDeadlineSeconds --------------------------

ZONE = "Asia/Kolkata"  # UTC+05:30: a slot read in the wrong zone would be off by hours and by half an hour


def jobs_of(r: Release, trigger: str) -> dict[str, dict[str, Any]]:
    return {j["metadata"]["name"]: j for j in r.kube.list(r.path("jobs")) if j["spec"]["trigger"] == trigger}


def schedule_of(r: Release, trigger: str) -> dict[str, Any]:
    return (r.get("triggers", trigger).get("status") or {}).get("schedule") or {}


def test_a_time_zone_schedule_fires_at_its_local_minute(release: Release) -> None:
    r = release
    now = time.time()
    # A minute at least 40 s ahead, written as Kolkata's wall clock: in UTC these fields name another instant.
    slot = minute_of(now + 100) if now % 60 > 20 else minute_of(now + 60)
    local = slot.astimezone(ZoneInfo(ZONE))
    schedule = f"{local.minute} {local.hour} {local.day} {local.month} *"
    r.kube.create(r.path("triggers"), {
        "apiVersion": "pi-dispatch.dev/v1alpha1", "kind": "Trigger", "metadata": {"name": "kolkata"},
        "spec": {"on": {"event": "cron", "schedule": schedule, "timeZone": ZONE, "repository": REPO},
                 "run": {"model": "fake/fake-model", "piVersion": "0.73.1"}}})
    condition = wait_until("the zoned Trigger's Ready", lambda: (c := r.condition(
        r.get("triggers", "kolkata"), "Ready")) and "next at" in c.get("message", "") and c, timeout=60)
    assert condition["status"] == "True", condition
    assert f"({ZONE}, the operator's clock); next at {slot:%Y-%m-%dT%H:%M:%SZ}" in condition["message"], condition
    fired = wait_until("the zoned slot's Job", lambda: jobs_of(r, "kolkata") or None,
                       timeout=slot.timestamp() - time.time() + 60)
    assert list(fired) == [job_name("kolkata", slot)], (list(fired), slot, schedule)
    assert fired[job_name("kolkata", slot)]["metadata"]["annotations"]["pi-dispatch.dev/cron-slot"] == (
        f"{slot:%Y-%m-%dT%H:%M:%SZ}")
    assert schedule_of(r, "kolkata")["lastSlot"] == f"{slot:%Y-%m-%dT%H:%M:%SZ}"


def test_an_unknown_time_zone_is_not_ready_with_the_reason(release: Release) -> None:
    r = release
    r.kube.create(r.path("triggers"), {
        "apiVersion": "pi-dispatch.dev/v1alpha1", "kind": "Trigger", "metadata": {"name": "mars"},
        "spec": {"on": {"event": "cron", "schedule": "0 6 * * *", "timeZone": "Mars/Olympus_Mons",
                        "repository": REPO}, "run": {}}})
    condition = wait_until("the Mars Trigger's Ready", lambda: r.condition(r.get("triggers", "mars"), "Ready"),
                           timeout=60)
    assert (condition["status"], condition["reason"]) == ("False", "InvalidTimeZone"), condition
    assert "on.timeZone 'Mars/Olympus_Mons' is not a time zone" in condition["message"], condition


def test_a_slot_later_than_the_deadline_across_a_restart_is_skipped_and_recorded(release: Release) -> None:
    r = release
    deadline = 10
    r.kube.create(r.path("triggers"), {
        "apiVersion": "pi-dispatch.dev/v1alpha1", "kind": "Trigger", "metadata": {"name": "late"},
        "spec": {"on": {"event": "cron", "schedule": "* * * * *", "startingDeadlineSeconds": deadline,
                        "repository": REPO}, "run": {"model": "fake/fake-model", "piVersion": "0.73.1"}}})
    # A slot on time fires: the first minute after the Trigger's creation.
    first = wait_until("the first on-time slot's Job", lambda: jobs_of(r, "late") or None, timeout=90)
    assert len(first) == 1, list(first)

    # The operator down across one slot boundary, back well past the deadline (and before the next boundary).
    scale(r, 0)
    before = jobs_of(r, "late").keys()
    boundary = minute_of(time.time()).timestamp() + 60
    wait_until("a slot boundary and the deadline past it", lambda: time.time() >= boundary + deadline + 5,
               timeout=boundary + deadline + 20 - time.time())
    assert jobs_of(r, "late").keys() == before, "nothing fires while no operator runs"
    scale(r, 1)
    up_at = time.time()
    skipped = datetime.fromtimestamp(boundary, UTC)
    record = wait_until("the skipped slot recorded", lambda: (s := schedule_of(r, "late")).get("lastSkipped") and s,
                        timeout=60)
    assert record["lastSkipped"] == f"{skipped:%Y-%m-%dT%H:%M:%SZ}", (record, up_at - boundary)
    assert record["missed"] >= 1, record
    assert job_name("late", skipped) not in jobs_of(r, "late"), "a slot later than the deadline is not run"

    # The next slot, on time, fires.
    following = skipped.timestamp() + 60
    fired = wait_until("the next on-time slot's Job", lambda: job_name("late", datetime.fromtimestamp(
        following, UTC)) in (jobs := jobs_of(r, "late")) and jobs, timeout=following - time.time() + 60)
    r.kube.patch(r.path("triggers", "late"), {"spec": {"on": {"schedule": "0 0 1 1 *"}}})  # no more slots
    assert job_name("late", skipped) not in fired, "the skipped slot never ran"
