"""Named crash points for the restart tests: ``PIDISPATCH_FAILPOINT=<step>`` kills the process there.

The operator must converge after being killed at any step of the job flow (no duplicate Pod, no
double promotion, no lost Job). Tests prove it by setting this variable in the operator's Deployment;
``PIDISPATCH_FAILPOINT_MARK`` names a file that makes the crash happen once (the restarted container
sees the mark and runs on). Unset, :func:`at` is a dictionary lookup and nothing more.
"""

from __future__ import annotations

import os
import signal

STEPS = ("staged", "pod-created", "promotion-started", "promoted", "status-written")


def at(step: str) -> None:
    """SIGKILL this process if the failpoint names ``step`` and its one-shot mark is not yet set."""
    if os.environ.get("PIDISPATCH_FAILPOINT") != step:
        return
    mark = os.environ.get("PIDISPATCH_FAILPOINT_MARK")
    if mark:
        try:
            os.close(os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)


class FailpointSeams:
    """Store seams that crash at ``promote:<step>`` (the store's named promotion steps)."""

    def at(self, step: str) -> None:
        at(f"promote:{step}")
