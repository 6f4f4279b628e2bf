"""Host tools an end-to-end test runs directly, and what to do when one is missing.

The test kubelet runs job Pods as local processes, so the agent's ``bash`` tool uses this machine's ``git`` and
``gh`` (the job image carries its own; the test kubelet has no image). ``make tools`` installs them (Debian's
packages, as root); ``make test`` depends on it. Where a tool is still missing, a test that needs it is skipped with
the command that installs it, except under CI (``CI=true``) or ``PIDISPATCH_REQUIRE_TOOLS=1``, where the skip would
hide a broken install step and the test fails instead.
"""

from __future__ import annotations

import os
import shutil

import pytest

#: tool -> the Debian package that provides it (the job image installs the same packages: Dockerfile)
PACKAGES = {"git": "git", "gh": "gh"}


def required() -> bool:
    """True where a missing tool must fail the test rather than skip it (CI, or asked for)."""
    return os.environ.get("CI") == "true" or os.environ.get("PIDISPATCH_REQUIRE_TOOLS") == "1"


def missing(*tools: str) -> list[str]:
    """The tools of ``tools`` not on PATH."""
    return [tool for tool in tools if shutil.which(tool) is None]


def require(*tools: str) -> None:
    """Skip (or, under CI, fail) the calling test when one of ``tools`` is not on PATH, naming the install."""
    absent = missing(*tools)
    if not absent:
        return
    packages = " ".join(PACKAGES.get(tool, tool) for tool in absent)
    why = (f"{', '.join(absent)} not on PATH: job Pods on the test kubelet run the host's tools; "
           f"`make tools` (root) or apt-get install {packages}")
    if required():
        pytest.fail(f"{why} (CI=true or PIDISPATCH_REQUIRE_TOOLS=1: a missing tool fails)")
    pytest.skip(why)
