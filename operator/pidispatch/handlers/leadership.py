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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pidispatch.leader import LeaderElector

log = logging.getLogger("pidispatch.operator")


class Leadership:
    """Runs ``elector`` in a thread: :meth:`start`'s ``on_started`` once the Lease is ours, ``on_lost`` if it
    is lost after that."""

    def __init__(self, elector: LeaderElector, on_lost: Callable[[], None]) -> None:
        self._elector = elector
        self._on_started: Callable[[], None] = lambda: None
        self._on_lost = on_lost
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def leading(self) -> bool:
        """True once this replica holds the Lease and has started acting on it."""
        return self._leading.is_set()

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
