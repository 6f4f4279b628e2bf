"""The dispatcher's loops: named daemon threads, each waiting for its turn and then running it under
:func:`guarded`, the one place where an exception from the job flow stops (logged with its type). They are
timers: a loop decides and hands a Job's work to its key in the operator's one queue, or runs a step that acts
on no Job (docs/architecture.md#event-path); it never acts on a Job itself.

A turn that fails is retried by its next turn (or by the resync, for work a watch event started), so one
failure never stops a loop. Waits are events or intervals; nothing sleeps in place of a wait.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pidispatch.election import fence

log = logging.getLogger("pidispatch.operator")

Wait = Callable[[], bool]  # blocks until the loop's next turn; True when the loop is to stop instead


def guarded(fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)``; an exception is logged (its type and message) and goes no further."""
    try:
        fn(*args)
    except Exception as exc:  # one failure must not stop the loop; the next turn or the resync retries
        log.warning("%s failed: %s: %s", getattr(fn, "__name__", fn), type(exc).__name__, exc)


class Loops:
    """The threads of one dispatcher. ``stopping`` is set once, by :meth:`stop`."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def every(self, seconds: float) -> Wait:
        """A turn every ``seconds``; the wait ends early, for good, when the loops stop."""
        return lambda: self.stopping.wait(seconds)

    @staticmethod
    def woken(event: threading.Event, timeout: Callable[[], float]) -> Wait:
        """A turn when ``event`` is set (and cleared for the next), or after ``timeout()`` seconds."""
        def wait() -> bool:
            event.wait(timeout())
            event.clear()
            return False
        return wait

    def start(self, name: str, turn: Callable[[], None], wait: Wait) -> None:
        thread = threading.Thread(target=self._run, args=(turn, wait), name=f"pidispatch-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, *wake: threading.Event) -> None:
        """Stop every loop: set ``stopping``, wake the loops waiting on ``wake``, and join them."""
        self.stopping.set()
        for event in wake:
            event.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _run(self, turn: Callable[[], None], wait: Wait) -> None:
        while not self.stopping.is_set():
            if wait():
                return
            fence.check(f"a turn of {threading.current_thread().name}")  # a leader woken past its lease stops
            guarded(turn)
