"""The fence: a replica that may have lost the Lease stops before its next write.

Leader election alone does not stop a deposed leader from acting. A replica paused past its lease (a
SIGSTOP, a frozen node, a long pause of the VM) keeps its threads exactly where they were; when it
wakes, the standby may lead already, and its own elector learns so only at its next renewal, one
retry period later. Meanwhile the dispatcher's threads would go on from where they stood: a promotion
half-way through its steps would swap its transcript in while the new leader promotes on the same key
(whose journal recovery released the old one's lock, judging it a dead process's), a Pod would be
created for a Job the new leader started already.

So every write of an acting replica passes :func:`check` first: before each step of a promotion
(:class:`Fenced`, the store's seams), before each write to the API server (``kubeapi.Api.write_guard``),
before each turn of the dispatcher's loops and each watch event. ``check`` asks the guard installed when
the replica began to lead (``LeaderElector.holds``: the last renewal is younger than the renew deadline,
by a clock that counts a paused machine's time too); when it says no, the process ends at once
(``os._exit``: no ``finally`` runs, so nothing more is written), the same as a crash, which the next
leader's journal recovery is made for.

Why this is enough: the standby takes over only after a whole lease (15 s) with no renewal, by its own
clock, and the holder stops at the renew deadline (10 s): a step that passed the fence has five seconds
to finish its single write. What no fence on a shared filesystem can close is a pause *between* the
check and the write it guards (the filesystem takes no token): that window is one system call wide.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from pidispatch.store.seams import Seams

log = logging.getLogger("pidispatch.operator")

EXIT_DEPOSED = 3  # the exit code of a lost Lease (handlers/main.py): the Deployment restarts the container


def _exit(what: str) -> None:
    log.critical("the lease may have passed to another replica: stopping before %s", what)
    logging.shutdown()
    os._exit(EXIT_DEPOSED)


_guard: Callable[[], bool] | None = None
_on_lost: Callable[[str], None] = _exit


def install(holds: Callable[[], bool], on_lost: Callable[[str], None] = _exit) -> None:
    """From now on, :func:`check` calls ``on_lost`` whenever ``holds()`` is false (installed on taking the Lease)."""
    global _guard, _on_lost
    _guard, _on_lost = holds, on_lost


def uninstall() -> None:
    """No fence (a single process without election, and tests)."""
    global _guard, _on_lost
    _guard, _on_lost = None, _exit


def check(what: str) -> None:
    """Return when this process may still act; otherwise stop it (``on_lost``) before ``what`` is done."""
    guard = _guard
    if guard is not None and not guard():
        _on_lost(what)


def write_guard(method: str, path: str) -> None:
    """:func:`check` in the shape ``kubeapi.Api.write_guard`` calls it."""
    check(f"{method} {path}")


class Fenced:
    """Store seams that pass the fence at every named step of a promotion, after ``inner``'s own action.

    After, because a step's action may be a pause (a failpoint's sleep, a test's SIGSTOP): what matters is
    whether the Lease is still ours when the next write is about to be made.
    """

    def __init__(self, inner: Seams) -> None:
        self.inner = inner

    def at(self, step: str) -> None:
        self.inner.at(step)
        check(f"the promotion's step after {step}")
