"""The queue's policy beside the slot budget (``slots.py``): when a waiting Job is marked ``Queued``, and
how long a Job whose start keeps failing waits before its next try.

* **Queued marking.** A Job that gets a slot within :data:`QUEUED_AFTER_SECONDS` goes straight to
  ``Running``: one status write fewer. Only a Job still waiting after that grace is marked ``Queued``
  (one write), by the dispatcher's marker loop, which sleeps until the next mark is due.
* **Back-off.** A start that failed for a passing reason (a GitHub or apiserver outage, an old Pod of
  the name not yet collected) is tried again after 1 s, 2 s, 4 s, … up to a minute, keeping its place
  in line while the Jobs behind it start. Only the first failure in a row is written (``StartRetrying``):
  a long outage costs one write.

Pure: the counts and times live in the job table's record of each Job; the dispatcher acts on the answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pidispatch.reconcile.backoff import Backoff

QUEUED_AFTER_SECONDS = 2.0  # a Job still waiting for a slot after this long is marked Queued (one write)
IDLE_MARK_WAIT_SECONDS = 5.0  # the marker's sleep when no Job waits unmarked (an arrival wakes it sooner)
BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 60.0


def marks_later(place: int | None, free: int, phase: str | None) -> bool:
    """Should a Job just put in line be marked ``Queued`` if it is still waiting after the grace?

    Only one that waits behind more Jobs than there are free slots, and is not marked already.
    """
    return place is not None and place > free and phase != "Queued"


def waited_longer_than(since: Mapping[str, float], now: float, seconds: float) -> list[str]:
    """The Jobs of ``since`` (name → time they started waiting) that have waited ``seconds`` or more, oldest first."""
    return sorted((job for job, t in since.items() if now - t >= seconds), key=lambda job: (since[job], job))


def due_for_mark(since: Mapping[str, float], now: float) -> list[str]:
    """The Jobs waiting unmarked that are due their ``Queued`` mark now, oldest first."""
    return waited_longer_than(since, now, QUEUED_AFTER_SECONDS)


def next_mark_in(since: Iterable[float], now: float) -> float:
    """Seconds until the next ``Queued`` mark is due (at least 50 ms), or the idle wait when none is."""
    due = [t + QUEUED_AFTER_SECONDS for t in since]
    return max(0.05, min(due) - now) if due else IDLE_MARK_WAIT_SECONDS


# The wait after failed starts in a row: 1 s, 2 s, 4 s, … up to a minute, for 12 of them (about 6 min); then the
# Job leaves the line, and the dispatcher's resync (30 s) lines it up again with a fresh count: a bug that fails
# every start no longer spins on one Job, an outage is still retried for as long as it lasts. The formula is the
# operator's one back-off (``reconcile/backoff.py``).
START_ATTEMPTS = 12
START_BACKOFF = Backoff(first=BACKOFF_FIRST_SECONDS, cap=BACKOFF_CAP_SECONDS, attempts=START_ATTEMPTS)


def writes_retrying(failures: int) -> bool:
    """Only the first failure in a row writes ``StartRetrying``: a long outage costs one write."""
    return failures == 1


def retrying_message(exc: BaseException) -> str:
    """The ``StartRetrying`` condition's message for a start that failed with ``exc``."""
    return (f"Starting the job failed ({type(exc).__name__}: {str(exc)[:300]}); it is retried with a back-off "
            "of up to a minute, and the Jobs queued behind it start meanwhile.")
