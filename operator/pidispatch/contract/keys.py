"""How a session key is made (docs/store-contract.md#keys), shared by the store (``store/keys.py``) and the receiver,
which names the SessionKey a closed pull request or issue retires and never imports the store.

The first 32 hex of SHA-256 over ``forge NUL repository NUL branch``; an issue's branch is ``pi/issue-<n>``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# A cron Trigger's conversation is keyed by the synthetic branch ``pi/cron-<namespace>-<trigger>``
# (``jobflow/key.py``); no pull request's close ends it (docs/sessions.md#a-conversation-ends-with-its-branch).
CRON_BRANCH_PREFIX = "pi/cron-"
_ISSUE_BRANCH = re.compile(r"pi/issue-([1-9][0-9]{0,18})")


def key_from_parts(parts: Sequence[str]) -> str:
    """Hash the parts; the NUL separator keeps ``a/b␀c`` and ``a␀b/c`` apart."""
    import hashlib  # here: loading OpenSSL's hashes is most of a key check's import cost (docs/cli.md#start-up-cost)

    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:32]


def issue_branch(number: int, replica: int | None = None) -> str:
    """The branch an issue job is told to push to, and so the branch its key is named after; replica ``i`` of a
    Trigger's ``run.replicas`` works on ``pi/issue-<n>-r<i>`` (every replica suffixed: none is the original).
    A replica has no key: resume is refused with replicas."""
    return f"pi/issue-{number}" if replica is None else f"pi/issue-{number}-r{replica}"


def issue_of_branch(branch: str) -> int | None:
    """``n`` when ``branch`` is exactly :func:`issue_branch` ``(n)`` (an issue job's own branch, which has a key;
    a replica's ``-r<i>`` branch has none), else ``None``."""
    found = _ISSUE_BRANCH.fullmatch(branch)
    return int(found.group(1)) if found else None
