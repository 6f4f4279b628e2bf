"""The runner's own secrets out of the agent's reach through ``/proc`` (docs/security.md#the-runners-own-secrets).

In the job Pod the runner (PID 1) and pi, with everything pi's bash tool runs (a fork's build scripts), share
one uid. Leaving a secret out of pi's environment (``pi.pi_env``) is not enough: a same-uid process reads the
runner's ``/proc/<pid>/environ``, its memory through ``/proc/<pid>/mem`` or ``process_vm_readv``, or attaches
with ptrace. Linux allows all of these only while the target is *dumpable*; ``prctl(PR_SET_DUMPABLE, 0)``
makes the runner's ``/proc/<pid>/*`` root-owned and refuses every ptrace-mode access to a process without
``CAP_SYS_PTRACE`` (the job container drops every capability), which covers the initial environment block
still in the runner's memory too. ``execve`` makes a process dumpable again with a fresh memory image, so pi
and its children are unaffected and hold only their own environment.

Called first thing in ``main.main``, before any thread or child exists. When it cannot be done (no Linux
``prctl``) and the runner holds a runner-only secret, the runner refuses (fail closed): the agent would
otherwise be able to read it.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Mapping

from pidispatch.events import emit
from pidispatch.transfer.protocol import ENV_TOKEN as TRANSFER_TOKEN

# The secrets the runner holds that pi must not: the transfer token hands the session back, and with it an
# agent could upload any session as this Job's result. The forge token, the model keys and run.secrets are
# pi's own (it pushes, calls the model, and the job reads its secrets), so they are not listed here.
RUNNER_ONLY = (TRANSFER_TOKEN,)

PR_GET_DUMPABLE = 3  # <linux/prctl.h>
PR_SET_DUMPABLE = 4

Prctl = Callable[[int, int, int, int, int], int]


def runner_only(env: Mapping[str, str]) -> list[str]:
    """The names of the runner-only secrets set (and non-empty) in ``env``."""
    return [name for name in RUNNER_ONLY if env.get(name)]


def _libc_prctl() -> Prctl | None:
    """libc's ``prctl``, or None off Linux or without a C library to call it through."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return function


def make_undumpable(prctl: Prctl | None = None) -> str | None:
    """Mark this process non-dumpable and read the flag back; None when done, else why it could not be."""
    call = prctl if prctl is not None else _libc_prctl()
    if call is None:
        return f"prctl is not available on this platform ({sys.platform})"
    if call(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        return f"prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(ctypes.get_errno())}"
    state = call(PR_GET_DUMPABLE, 0, 0, 0, 0)
    if state != 0:
        return f"prctl(PR_SET_DUMPABLE, 0) did not hold (PR_GET_DUMPABLE says {state})"
    return None


def protect(env: Mapping[str, str], prctl: Prctl | None = None) -> str | None:
    """Make the runner non-dumpable. Returns the refusal message when that failed while the runner holds a
    runner-only secret (fail closed); None otherwise (a failure with nothing to protect is only logged)."""
    problem = make_undumpable(prctl)
    if problem is None:
        return None
    held = runner_only(env)
    emit("runner_dumpable", reason=problem, refused=bool(held), secrets=held)  # names, never values
    if not held:
        return None
    return (f"the runner cannot keep {', '.join(held)} from the agent: {problem}; "
            "the runner must run on Linux, where a process can make itself non-dumpable")
