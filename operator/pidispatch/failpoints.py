"""Named crash points for the restart tests: ``PIDISPATCH_FAILPOINT=<step>`` kills the process there.

The operator must converge after being killed at any step of the job flow (no duplicate Pod, no
double promotion, no lost Job). Tests prove it by setting this variable in the operator's Deployment.

* ``PIDISPATCH_FAILPOINT``: comma-separated ``step`` or ``step@job`` (only for that Job);
* ``PIDISPATCH_FAILPOINT_MARK``: makes each failpoint fire once. A directory gets one mark file per
  ``step@job``; any other path is the one mark file. The restarted container sees the mark and runs on;
* ``PIDISPATCH_FAILPOINT_ACTION=sleep:<seconds>``: pause there instead of dying (to make two
  promotions overlap).

Steps of the job flow: ``staged``, ``pod-created``, ``status-written``, ``commented``,
``key-forgotten@<key>`` (a SessionKey's finalizer, after the store forgot the key); and the
promotion's steps as ``promote:<step>``: the journal's ``journaled`` (intent durable, store untouched)
and ``promoted`` (result not yet journaled), and the store's own (see ``store/promote.py``'s seams).
Unset, :func:`at` is one dictionary lookup and nothing more.
"""

from __future__ import annotations

import os
import signal
import time


def _armed(step: str, job: str | None) -> str | None:
    for entry in os.environ.get("PIDISPATCH_FAILPOINT", "").split(","):
        name, _, only = entry.partition("@")
        if name == step and (not only or only == job):
            return f"{step}@{job}" if only else step
    return None


def at(step: str, job: str | None = None) -> None:
    """Act if a failpoint names ``step`` (and ``job``, when limited to one) and its mark is not yet set."""
    if "PIDISPATCH_FAILPOINT" not in os.environ:
        return
    point = _armed(step, job)
    if point is None:
        return
    action = os.environ.get("PIDISPATCH_FAILPOINT_ACTION", "kill")
    if action.startswith("sleep:"):
        time.sleep(float(action.split(":", 1)[1]))
        return
    mark = os.environ.get("PIDISPATCH_FAILPOINT_MARK")
    if mark:
        if os.path.isdir(mark):
            mark = os.path.join(mark, point.replace("/", "_"))
        try:
            os.close(os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)


class FailpointSeams:
    """Store seams that act at ``promote:<step>`` (the store's named promotion steps) for one Job."""

    def __init__(self, job: str | None = None) -> None:
        self.job = job

    def at(self, step: str) -> None:
        at(f"promote:{step}", self.job)
