"""Named crash points for the restart tests: ``PIDISPATCH_FAILPOINT=<step>`` kills the process there.

The operator must converge after being killed at any step of the job flow (no duplicate Pod, no
double promotion, no lost Job). Tests prove it by setting this variable in the operator's Deployment;
``PIDISPATCH_FAILPOINT_MARK`` names a file that makes the crash happen once (the restarted container
sees the mark and runs on). ``PIDISPATCH_FAILPOINT_JOB`` limits it to one Job, and
``PIDISPATCH_FAILPOINT_ACTION=sleep:<seconds>`` pauses there instead of dying (to make two promotions
overlap). Unset, :func:`at` is a dictionary lookup and nothing more.
"""

from __future__ import annotations

import os
import signal
import time

STEPS = ("staged", "pod-created", "promotion-started", "promoted", "status-written")


def at(step: str, job: str | None = None) -> None:
    """Act if the failpoint names ``step`` (and ``job``, when limited to one) and its mark is not yet set."""
    if os.environ.get("PIDISPATCH_FAILPOINT") != step:
        return
    only = os.environ.get("PIDISPATCH_FAILPOINT_JOB")
    if only and only != job:
        return
    action = os.environ.get("PIDISPATCH_FAILPOINT_ACTION", "kill")
    if action.startswith("sleep:"):
        time.sleep(float(action.split(":", 1)[1]))
        return
    mark = os.environ.get("PIDISPATCH_FAILPOINT_MARK")
    if mark:
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
