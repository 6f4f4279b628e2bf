"""Leader election on a ``coordination.k8s.io/v1`` Lease: one operator replica acts, the others stand by.

Two replicas of the operator must never both dispatch: each would admit and start Jobs with its own
slots (the budget doubles) and a starting replica's journal recovery could remove the lock of the
other's live promotion. So everything that acts (the dispatcher, its timers, retention, journal
recovery) runs only while this replica holds the Lease; a standby watches the Lease and takes over
when the holder stops renewing it.

The algorithm is client-go's (``tools/leaderelection``), written for this operator:

* The holder renews ``spec.renewTime`` every ``retry_seconds``. Every write is an update carrying the
  Lease's ``resourceVersion``, so two replicas racing for it cannot both win: the apiserver answers one
  of them 409. (RBAC: ``get``, ``create`` and ``update`` on leases.)
* A standby judges the holder by **its own** clock: the Lease has expired when its record has not
  changed for ``lease_seconds`` since this replica last saw it change. Clocks of different nodes are
  never compared, so a skewed node cannot steal a live lease.
* A holder that cannot renew for ``renew_deadline_seconds`` (shorter than the lease) stops acting
  before any standby may take over (the caller exits the process: what it was doing is left to the
  new leader's journal recovery, the same as a crash).
* A holder that shuts down on purpose (a rollout, a drain) releases the Lease: it empties the holder
  and shortens the duration to one second, so the standby takes over at once instead of after a lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pidispatch.kubeapi import Api, ApiError

log = logging.getLogger("pidispatch.leader")

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def boottime() -> float:
    """Seconds on a clock that keeps counting while the machine is suspended (``CLOCK_BOOTTIME``).

    ``time.monotonic`` stops during a suspend: a frozen node that resumes would find its lease as fresh
    as when it froze, though a standby may have led for minutes. Where there is no such clock, monotonic.
    """
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(clock) if clock is not None else time.monotonic()


def micro_time(now: datetime | None = None) -> str:
    """A ``MicroTime`` as the Lease's ``acquireTime`` and ``renewTime`` take it (RFC 3339, microseconds)."""
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseConfig:
    """Which Lease, who this replica is, and the three durations (client-go's defaults, 15/10/2 s)."""

    namespace: str
    name: str
    identity: str  # this replica's Pod name: unique among the replicas, readable by a person
    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError("a lease needs 0 < retry < renew deadline < lease duration: the holder must stop "
                             "acting before a standby may take over")


class LeaderElector:
    """One replica's side of the election. :meth:`step` is one attempt; :meth:`run` loops until stopped.

    ``monotonic`` measures how long the Lease's record has stood still (this replica's clock only);
    ``wall`` stamps the times written into the Lease (for people and for ``kubectl get lease``).
    """

    def __init__(self, api: Api, config: LeaseConfig, *, monotonic: Callable[[], float] = boottime,
                 wall: Callable[[], str] = micro_time) -> None:
        self.api = api
        self.config = config
        self._monotonic = monotonic
        self._wall = wall
        self._path = LEASES.format(namespace=config.namespace)
        # The Lease's record as last seen (its resourceVersion) and when, by this replica's clock.
        self._seen_version: str | None = None
        self._seen_at = 0.0
        self._renewed_at: float | None = None  # the last successful write while leading
        self.leading = False

    def holds(self) -> bool:
        """True while this replica may act: it leads and its last renewal is younger than the renew deadline.

        Judged by the clock alone, never by asking the apiserver: this is the fence (``pidispatch/election/fence.py``)
        each write passes, and it must say no at once to a replica that wakes from a pause past its lease,
        before its elector has run again. A standby waits a whole lease after our last renewal, so a yes
        leaves ``lease - renew deadline`` seconds (5 by default) for the write it guards.
        """
        renewed = self._renewed_at
        return self.leading and renewed is not None and \
            self._monotonic() - renewed < self.config.renew_deadline_seconds

    # ---- one attempt ---------------------------------------------------------------------------------

    def step(self) -> bool:
        """Acquire or renew once; True while this replica holds the Lease. Never raises for an apiserver
        answer: an error is a failed attempt (the renew deadline decides when a holder gives up)."""
        try:
            self.leading = self._try()
        except ApiError as exc:
            log.warning("lease %s/%s: %s", self.config.namespace, self.config.name, exc)
            self.leading = self.leading and not self._deadline_passed()
        if self.leading:
            return True
        self._renewed_at = None
        return False

    def _try(self) -> bool:
        lease = self.api.get_or_none(f"{self._path}/{self.config.name}")
        now = self._monotonic()
        if lease is None:
            return self._create(now)
        spec = lease.get("spec") or {}
        version = lease["metadata"]["resourceVersion"]
        if version != self._seen_version:
            self._seen_version, self._seen_at = version, now
        holder = spec.get("holderIdentity") or ""
        if holder == self.config.identity:
            return self._write(lease, now, renew=True)
        duration = float(spec.get("leaseDurationSeconds") or self.config.lease_seconds)
        if holder and now - self._seen_at < duration:
            return False  # another replica holds it and has renewed within its lease, by our clock
        return self._write(lease, now, renew=False)

    def _create(self, now: float) -> bool:
        stamp = self._wall()
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.config.name, "namespace": self.config.namespace},
                "spec": {"holderIdentity": self.config.identity, "leaseDurationSeconds": self._duration(),
                         "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0}}
        try:
            created = self.api.create(self._path, body)
        except ApiError as exc:
            if exc.status == 409:
                return False  # another replica created it first: judged on the next attempt
            raise
        return self._won(created, now, acquired=True)

    def _write(self, lease: dict[str, Any], now: float, *, renew: bool) -> bool:
        spec = dict(lease.get("spec") or {})
        stamp = self._wall()
        spec.update(holderIdentity=self.config.identity, renewTime=stamp, leaseDurationSeconds=self._duration())
        if not renew:
            spec.update(acquireTime=stamp, leaseTransitions=int(spec.get("leaseTransitions") or 0) + 1)
        try:
            written = self._update(lease, spec)
        except ApiError as exc:
            if exc.status in (404, 409):
                return self.leading and renew and not self._deadline_passed()  # raced: judged again next time
            raise
        return self._won(written, now, acquired=not renew)

    def _won(self, lease: dict[str, Any], now: float, *, acquired: bool) -> bool:
        self._seen_version, self._seen_at = lease["metadata"]["resourceVersion"], now
        self._renewed_at = now
        if acquired:
            log.info("lease %s/%s acquired by %s", self.config.namespace, self.config.name, self.config.identity)
        return True

    def _update(self, lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        """PUT the Lease with ``spec``, under the ``resourceVersion`` it was read at (409 if it changed since)."""
        md = lease["metadata"]
        metadata = {"name": md["name"], "namespace": md["namespace"], "resourceVersion": md["resourceVersion"]}
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}
        return dict(self.api.request("PUT", f"{self._path}/{self.config.name}", body))

    def _deadline_passed(self) -> bool:
        return self._renewed_at is None or self._monotonic() - self._renewed_at >= self.config.renew_deadline_seconds

    def _duration(self) -> int:
        return max(1, round(self.config.lease_seconds))

    # ---- the loop ------------------------------------------------------------------------------------

    def run(self, on_started: Callable[[], None], on_stopped: Callable[[], None], stop: threading.Event) -> None:
        """Stand by until the Lease is ours, call ``on_started``, renew it until ``stop`` is set (then
        release it) or a renewal fails past the deadline (then call ``on_stopped``, which must stop
        everything this replica does as leader)."""
        while not stop.is_set():
            if self.step():
                break
            stop.wait(self.config.retry_seconds)
        else:
            return
        on_started()
        while not stop.wait(self.config.retry_seconds):
            if not self.step():
                log.error("lease %s/%s lost by %s: not renewed within %.0f s; stopping", self.config.namespace,
                          self.config.name, self.config.identity, self.config.renew_deadline_seconds)
                on_stopped()
                return
        self.release()

    def release(self) -> None:
        """Give the Lease up at once (a planned stop): the standby need not wait out the lease."""
        if not self.leading:
            return
        self.leading = False
        try:
            lease = self.api.get_or_none(f"{self._path}/{self.config.name}")
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.config.identity:
                return
            spec = {k: v for k, v in (lease.get("spec") or {}).items() if k != "holderIdentity"}
            self._update(lease, {**spec, "leaseDurationSeconds": 1, "renewTime": self._wall()})
            log.info("lease %s/%s released by %s", self.config.namespace, self.config.name, self.config.identity)
        except ApiError as exc:  # the standby then waits out the lease: slower, never wrong
            log.warning("releasing lease %s/%s: %s", self.config.namespace, self.config.name, exc)
