"""The kube-apiserver restarted while 20 Jobs run: the operator recovers its watches and finishes all.

Ten keys are seeded first (one cold Job each), then 20 Jobs start together: ten resume those keys,
ten start cold. While their Pods run (``@pi sleep=3``), the API server is stopped and started again
on the same port (``Cluster.restart_apiserver``). Every Job must end ``Succeeded`` with exactly one
Pod, every key must be promoted exactly once (resume-chain 1 after a resume, 0 after a cold start,
and the transcript one turn longer), and no lock may be left. The figures (restart time, time until
a new Job gets its Pod, time until all 20 finish) are printed for docs/reliability.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import Release, base_values, installed, merge
from pidispatch.store.keys import issue_key
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

RESUMED = range(800, 810)
COLD = range(810, 820)


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet) -> Iterator[Release]:
    if cluster.external_kubeconfig:
        pytest.skip("restarts the local control plane's kube-apiserver")
    with installed(cluster, kube, "apiserver", merge(base_values(), {"sessions": {"enabled": True}})) as r:
        yield r


def _phase(r: Release, name: str) -> str | None:
    return (r.get("jobs", name).get("status") or {}).get("phase")


def test_an_apiserver_restart_mid_run_finishes_every_job_exactly_once(release: Release, cluster: Cluster) -> None:
    r = release
    for issue in RESUMED:
        r.job(f"seed-{issue}", issue=issue)
    for issue in RESUMED:
        assert r.wait_job(f"seed-{issue}", timeout=180)["status"]["phase"] == "Succeeded"

    names = {issue: f"run-{issue}" for issue in [*RESUMED, *COLD]}
    for issue, name in names.items():
        r.job(name, issue=issue, comment="@pi sleep=3")
    wait_until("a first job Pod running", lambda: any(
        (p.get("status") or {}).get("phase") == "Running" for name in names.values() for p in r.pods_of(name)),
        timeout=120)
    print(f"[apiserver] restarting with {sum(_phase(r, n) == 'Succeeded' for n in names.values())}/20 done",
          flush=True)

    started = time.monotonic()
    restart_s = cluster.restart_apiserver()
    r.job("after-restart", issue=830)
    wait_until("the operator to create a Pod for a Job made after the restart",
               lambda: r.pods_of("after-restart"), timeout=180)
    first_pod_s = time.monotonic() - started
    for name in [*names.values(), "after-restart"]:
        job = r.wait_job(name, timeout=300)
        assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    all_done_s = time.monotonic() - started
    print(f"[apiserver] restart (stop to /readyz ok) {restart_s:.1f} s; a new Job's Pod {first_pod_s:.1f} s "
          f"after the stop; all 21 Jobs Succeeded {all_done_s:.1f} s after the stop", flush=True)

    for issue, name in names.items():
        assert len(r.pods_of(name)) == 1, f"{name}: a duplicate Pod was created"
        session = r.get("jobs", name)["status"]["session"]
        key_dir = r.key_dir(issue_key("github", "acme/widgets", issue))
        assert not (key_dir / "lock").exists(), f"{name}: a lock was left behind"
        turns = (key_dir / "current.jsonl").read_bytes().count(b'"role":"user"')
        chain = (key_dir / "resume-chain").read_text().strip()
        venue = (key_dir / "venue").read_text().strip()
        if issue in RESUMED:
            assert (session["resumed"], session["reason"]) == (True, "resumed"), name
            assert (turns, chain, venue) == (2, "1", "kubernetes"), f"{name}: promoted more or less than once"
        else:
            assert session["resumed"] is False, name
            assert (turns, chain, venue) == (1, "0", "kubernetes"), f"{name}: promoted more or less than once"
