#!/usr/bin/env python3
"""Leader takeover on a real kube-apiserver: how long the operator's replicas are without a leader.

Not a test: timings are never assertions. Starts a local control plane (etcd, kube-apiserver; no kubelet)
in a temp directory and runs two replicas' electors (``pidispatch/election/leader.py``, the operator's own
durations: 15 s lease, 10 s renew deadline, 2 s retry) against one Lease:

a. **Planned stop** (a rollout, a drain): the leader releases the Lease on its way out; from the release
   to the standby holding it.
b. **Leader lost** (killed, its node gone): the leader stops renewing without a word; from its last
   renewal to the standby holding it. Bounded below by the lease duration by design: the standby must
   not take a lease a live leader may still hold.

Each is run ``--runs`` times; the table gives min, median and max. The baseline in the same run is the
lease duration itself for (b) and one retry period for (a), the algorithm's own floors.

    .venv/bin/python bench/takeover.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, machine, machine_line, progress  # noqa: E402

sys.path.insert(0, str(REPO / "operator"))
sys.path.insert(0, str(REPO))

from e2e.framework.cluster import Cluster  # noqa: E402
from pidispatch.election.leader import LeaderElector, LeaseConfig  # noqa: E402
from pidispatch.kubeapi import Api  # noqa: E402

NS = "default"


def admin(cluster: Cluster) -> Api:
    return Api(cluster.server, ca_file=str(cluster.ca_file), cert_file=str(cluster.pki / "admin.crt"),
               key_file=str(cluster.pki / "admin.key"), retries=0)


def standby_until_leading(elector: LeaderElector, stop: threading.Event, took: list[float]) -> None:
    while not stop.is_set():
        if elector.step():
            took.append(time.monotonic())
            return
        stop.wait(elector.config.retry_seconds)


def one_run(cluster: Cluster, lease: str, planned: bool) -> float:
    config = LeaseConfig(namespace=NS, name=lease, identity="leader")
    leader = LeaderElector(admin(cluster), config)
    assert leader.step(), "the first replica takes the empty lease"
    standby = LeaderElector(admin(cluster), LeaseConfig(namespace=NS, name=lease, identity="standby"))
    stop, took = threading.Event(), []
    thread = threading.Thread(target=standby_until_leading, args=(standby, stop, took), daemon=True)
    thread.start()
    for _ in range(3):  # the leader renews for a while; the standby watches the record change
        time.sleep(config.retry_seconds)
        assert leader.step()
    gone = time.monotonic()
    if planned:
        leader.release()
    thread.join(60)
    stop.set()
    return took[0] - gone


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="pidispatch-bench-takeover-"))
    info = machine(tmp)
    cluster = Cluster(state_dir=tmp / "cluster")
    progress("starting the local control plane (no kubelet)")
    cluster.start(kubelet=False)
    try:
        rows = []
        for planned, what, floor in ((True, "planned stop (release)", 2.0), (False, "leader lost (no renewal)", 15.0)):
            times = []
            for i in range(args.runs):
                times.append(one_run(cluster, f"bench-{int(planned)}-{i}", planned))
                progress(f"{what}: run {i + 1}: {times[-1]:.2f} s")
            rows.append((what, min(times), statistics.median(times), max(times), floor))
    finally:
        cluster.stop()
    print(machine_line(info))
    print()
    print("| takeover | min | median | max | the algorithm's floor | median / floor |")
    print("|---|---|---|---|---|---|")
    for what, lo, med, hi, floor in rows:
        print(f"| {what} | {lo:.2f} s | {med:.2f} s | {hi:.2f} s | {floor:.0f} s | {med / floor:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
