"""The operator's side of leader election: only the replica that holds the Lease acts.

kopf delivers every watch event to every replica (it runs standalone: kopf's own peering would freeze
replicas of equal priority, and its pause never reached the dispatcher's threads anyway). Until this
replica leads, the handlers drop the events: nothing is admitted, started, completed, retained or
recovered. On taking the Lease it starts the dispatcher (journal recovery, a full LIST of the Jobs, the
loops) and retention, and only then says it leads; an event dropped in between is caught by the first
resync (30 s), which lists the Jobs and the Pods of running ones again.

Losing the Lease (no renewal within the renew deadline) ends the process: what the dispatcher's threads
were doing cannot be stopped half-way in a consistent state, and the next leader's journal recovery is
made for exactly that, the same as after a crash. A planned stop (SIGTERM) releases the Lease, so the
standby takes over at once.

A replica paused past its lease (SIGSTOP, a frozen node) learns that it lost the Lease only at its next
renewal; until then its threads would go on where they stood. So while leading, the fence
(``pidispatch/election/fence.py``) is installed: each write first asks :meth:`LeaderElector.holds`, and events are
dropped as soon as it says no.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pidispatch.election import fence
from pidispatch.election.leader import LeaderElector

log = logging.getLogger("pidispatch.operator")


class Leadership:
    """Runs ``elector`` in a thread: :meth:`start`'s ``on_started`` once the Lease is ours, ``on_lost`` if it
    is lost after that."""

    def __init__(self, elector: LeaderElector, on_lost: Callable[[], None], *, fenced: bool = False) -> None:
        """``fenced``: install the process-wide fence on taking the Lease (the operator; not a test that runs
        several replicas in one process)."""
        self._elector = elector
        self._fenced = fenced
        self._on_started: Callable[[], None] = lambda: None
        self._on_lost = on_lost
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def leading(self) -> bool:
        """True once this replica holds the Lease and has started acting on it, and only while its last
        renewal is younger than the renew deadline (a replica woken from a pause drops events at once)."""
        return self._leading.is_set() and self._elector.holds()

    def holds(self) -> bool:
        """The fence alone: this replica took the Lease and renewed it within the renew deadline (true already
        while :meth:`start`'s ``on_started`` runs, before :attr:`leading`)."""
        return self._elector.holds()

    def wait(self, timeout: float | None = None) -> bool:
        return self._leading.wait(timeout)

    def start(self, on_started: Callable[[], None]) -> None:
        """Stand by for the Lease in a thread of its own; ``on_started`` runs in it once the Lease is ours."""
        self._on_started = on_started
        log.info("standing by for lease %s/%s as %s", self._elector.config.namespace, self._elector.config.name,
                 self._elector.config.identity)
        self._thread = threading.Thread(target=self._elector.run, args=(self._started, self._lost, self._stop),
                                        name="pidispatch-leader", daemon=True)
        self._thread.start()

    def _started(self) -> None:
        # Started on a thread of its own: the dispatcher's start (journal recovery, a LIST of every Job) must
        # not hold up the renewals, or a long one would outlast the renew deadline and trip the fence.
        threading.Thread(target=self._start_acting, name="pidispatch-lead", daemon=True).start()

    def _start_acting(self) -> None:
        if self._fenced:
            fence.install(self._elector.holds)
        self._on_started()
        self._leading.set()
        log.info("leading: lease %s/%s held by %s", self._elector.config.namespace, self._elector.config.name,
                 self._elector.config.identity)

    def _lost(self) -> None:
        self._leading.clear()
        self._on_lost()

    def stop(self) -> None:
        """Stop standing by or leading; a held Lease is released on the way out."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
