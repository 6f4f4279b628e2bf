"""The operator killed (SIGKILL) at every step of the job flow, then restarted in place by the kubelet.

Each step is armed for one Job only (``PIDISPATCH_FAILPOINT=<step>@<job>``) and fires once (a mark on
the staging volume). The Job is a *resumed* delivery, so a second promotion would show as a second
resume-chain increment. (That an interrupted promotion never replaces a newer transcript needs a second
job to promote in between, an order a cluster does not produce on demand: ``tests/store/test_store_journal.py``
proves it with real processes killed at each step.) After the restart every Job must end ``Succeeded``
with exactly one Pod, the store must hold that Job's transcript, promoted once, and no lock may be left
behind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import Release, base_values, installed, merge
from pidispatch.store.keys import issue_key
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

MARKS = "/var/lib/pi-dispatch/jobs/.failpoints"

# (step, what the store shows afterwards): "promoted" = a completed promotion (chain 1, venue stamped);
# "interrupted" = the swap landed but the kill came before the stamps: the transcript is the new one,
# counted once (chain still 0), and the (pending) venue makes the next delivery start cold.
# The promotion's steps: the journal written (intent durable, store untouched), the lock taken (the kill that
# used to leave the key locked for an hour and the transcript lost), the swap done, the sidecars written
# (the venue stamp is the last), the lock released, the result not yet journaled, the status written.
STEPS = [
    ("staged", "promoted"),
    ("pod-created", "promoted"),
    ("promote:journaled", "promoted"),
    ("promote:locked", "promoted"),
    ("promote:temp-written", "promoted"),
    ("promote:sentinel-written", "promoted"),
    ("promote:swapped", "interrupted"),
    ("promote:stamped-pi-version", "interrupted"),
    ("promote:stamped-venue", "promoted"),
    ("promote:unlocked", "promoted"),
    ("promote:promoted", "promoted"),
    ("status-written", "promoted"),
]


def job_name(step: str) -> str:
    return "crash-" + step.replace(":", "-")


@pytest.fixture(scope="module")
def crashing(cluster: Cluster, kube: Kube, kubelet) -> Iterator[Release]:
    armed = ",".join(f"{step}@{job_name(step)}" for step, _ in STEPS)
    values = merge(base_values(PIDISPATCH_FAILPOINT=armed, PIDISPATCH_FAILPOINT_MARK=MARKS),
                   {"sessions": {"enabled": True}})
    with installed(cluster, kube, "restarts", values) as r:
        yield r


def restarts(r: Release) -> int:
    return sum(s.get("restartCount", 0) for p in r.operator_pods()
               for s in (p.get("status") or {}).get("containerStatuses") or [])


@pytest.mark.parametrize(("step", "outcome"), STEPS, ids=[s for s, _ in STEPS])
def test_killed_at_a_step_converges_without_duplicates(crashing: Release, step: str, outcome: str) -> None:
    r = crashing
    issue = 500 + [s for s, _ in STEPS].index(step)
    key = issue_key("github", "acme/widgets", issue)
    (r.staging / ".failpoints").mkdir(exist_ok=True)
    seed = r.run(f"seed-{issue}", issue=issue)
    assert seed["status"]["phase"] == "Succeeded"
    before = restarts(r)

    name = job_name(step)
    job = r.run(name, issue=issue, comment="@pi the follow-up")

    mark = r.staging / ".failpoints" / f"{step}@{name}"
    assert mark.exists(), f"the failpoint {step} never fired"
    # Killed at "status-written", the operator has already written the Job's end: the Job can read
    # Succeeded before the kubelet has noticed the kill and counted the restart. So wait for it.
    wait_until("the operator's restart", lambda: restarts(r) > before, timeout=60)
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    assert len(r.pods_of(name)) == 1, "a duplicate Pod was created"
    assert job["status"]["session"]["resumed"] is True
    assert job["status"]["session"]["reason"] == "resumed"
    key_dir = r.key_dir(key)
    assert not (key_dir / "lock").exists(), "a lock was left behind"
    assert not list(key_dir.glob("*.incoming")), "a temp or lock candidate of the killed attempt was left behind"
    transcript = (key_dir / "current.jsonl").read_bytes()
    assert transcript.count(b'"role":"user"') == 2, "the store does not hold the follow-up's transcript"
    chain = (key_dir / "resume-chain").read_text().strip() if (key_dir / "resume-chain").exists() else "0"
    venue = (key_dir / "venue").read_text().strip()
    if outcome == "promoted":
        assert (chain, venue) == ("1", "kubernetes"), "promoted more or less than once"
    else:
        assert (chain, venue) == ("0", "(pending)")
        nxt = r.run(f"after-{issue}", issue=issue)
        assert nxt["status"]["session"]["reason"] == "venue-changed"
