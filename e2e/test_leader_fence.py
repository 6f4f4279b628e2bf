"""The fence against the real apiserver: a leader SIGSTOP'd past its lease writes nothing once it wakes.

Two replicas, each a process with the operator's own pieces: a ``LeaderElector`` on a real Lease, the
fence installed on taking it (``fence.install(elector.holds)``), and an ``Api`` whose writes pass the fence
(``Api.write_guard``, as ``handlers/main.py`` wires it). While it leads, each replica writes as fast as it
a write each time work arrives (a byte on its FIFO, as a watch event would wake the dispatcher): one
ConfigMap per write, labelled with its name, so every write it ever made stays countable and ordered (a
resourceVersion is etcd's revision). Leader A is frozen with SIGSTOP; B takes the Lease once it has stood
still a lease long; the test notes the Lease's revision then, hands A work while it is still frozen and
wakes it. A's threads go on from where they stood: its writer has work at once, its elector learns of B
only after a round trip to the apiserver. The fence must end A before its write lands, so no ConfigMap of
A may carry a later revision. (Without the fence, A's write lands: the test fails.)
"""

from __future__ import annotations

import errno
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from e2e.test_leader import LEASE, admin, lease
from pidispatch.election import fence
from pidispatch.election.leader import LeaderElector, LeaseConfig
from pidispatch.kubeapi import Api
from testkit.store import SPAWN
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e


def _replica(identity: str, work: str, server: str, ca: str, cert: str, key: str, namespace: str) -> None:
    """One replica: stand by, lead, then write once per byte on the FIFO ``work`` until stopped by the fence
    (exit 3) or by its elector, on a renewal that found another holder (exit 4)."""
    def client(**kw: Any) -> Api:
        return Api(server, ca_file=ca, cert_file=cert, key_file=key, **kw)

    config = LeaseConfig(namespace=namespace, name=LEASE, identity=identity, lease_seconds=3,
                         renew_deadline_seconds=2, retry_seconds=0.2)
    elector = LeaderElector(client(timeout=0.2, retries=0), config)
    leading, stop = threading.Event(), threading.Event()

    def started() -> None:
        fence.install(elector.holds)
        leading.set()

    threading.Thread(target=elector.run, args=(started, lambda: os._exit(4), stop), daemon=True).start()
    leading.wait()
    api = client(retries=0)
    api.write_guard = fence.write_guard
    with open(work, "rb", buffering=0) as arrivals:
        seq = 0
        while arrivals.read(1):
            seq += 1
            api.create(f"/api/v1/namespaces/{namespace}/configmaps", {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": f"{identity}-{seq}", "labels": {"writer": identity}}})


def work_for(fifo: Path) -> int:
    """The write end of a replica's FIFO, once the replica reads it (it opens it on leading)."""
    def opened() -> int | None:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no reader yet
                return None
            raise
        os.set_blocking(fd, True)
        return fd

    return wait_until(f"{fifo.name} reading its work", opened, timeout=60)


def writes(cluster: Any, namespace: str, identity: str) -> list[int]:
    found = admin(cluster).list(f"/api/v1/namespaces/{namespace}/configmaps", labelSelector=f"writer={identity}")
    return sorted(int(cm["metadata"]["resourceVersion"]) for cm in found)


def test_a_leader_woken_past_its_lease_writes_nothing_after_the_standby_leads(cluster: Any, namespace: str,
                                                                             tmp_path: Path) -> None:
    creds = (cluster.server, str(cluster.ca_file), str(cluster.pki / "admin.crt"), str(cluster.pki / "admin.key"))
    fifos = {name: tmp_path / name for name in ("op-a", "op-b")}
    for fifo in fifos.values():
        os.mkfifo(fifo)
    a = SPAWN.Process(target=_replica, args=("op-a", str(fifos["op-a"]), *creds, namespace))
    b = SPAWN.Process(target=_replica, args=("op-b", str(fifos["op-b"]), *creds, namespace))
    a.start()
    try:
        with open(work_for(fifos["op-a"]), "wb", buffering=0) as to_a:
            for _ in range(3):
                to_a.write(b"x")
            wait_until("A leads and writes", lambda: len(writes(cluster, namespace, "op-a")) == 3, timeout=60)
            b.start()
            os.kill(a.pid, signal.SIGSTOP)  # a frozen node: A's threads stop wherever they are
            wait_until("B leads", lambda: lease(cluster, namespace)["spec"].get("holderIdentity") == "op-b",
                       timeout=60)
            taken = int(lease(cluster, namespace)["metadata"]["resourceVersion"])
            with open(work_for(fifos["op-b"]), "wb", buffering=0) as to_b:
                to_b.write(b"x")
                wait_until("B writes", lambda: writes(cluster, namespace, "op-b"), timeout=30)
                to_a.write(b"x")  # work for A, waiting when it wakes
                os.kill(a.pid, signal.SIGCONT)
                a.join(30)
                # Asked while B's work is still open: once ``to_b`` closes, B reads the end of its work and
                # returns (exit 0) of its own accord, which a later look would take for B having stopped.
                b_leads = b.is_alive()
        assert a.exitcode in (fence.EXIT_DEPOSED, 4), f"the deposed leader did not stop ({a.exitcode})"
        late = [rv for rv in writes(cluster, namespace, "op-a") if rv > taken]
        assert not late, f"A wrote {len(late)} time(s) after B took the Lease (revision {taken})"
        assert b_leads, f"the new leader stopped while A woke (exit code {b.exitcode})"
        print(f"\nA ended with exit code {a.exitcode} (3: the fence, 4: its elector) having written nothing late")
    finally:
        for p in (a, b):
            if p.pid is not None and p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join(10)
