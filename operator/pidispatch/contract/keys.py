"""How a session key is made (spec §1), shared by the store (``store/keys.py``) and the receiver, which
names the SessionKey a closed pull request or issue retires and never imports the store.

The first 32 hex of SHA-256 over ``forge NUL repository NUL branch``; an issue's branch is ``pi/issue-<n>``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def key_from_parts(parts: Sequence[str]) -> str:
    """Hash the parts; the NUL separator keeps ``a/b␀c`` and ``a␀b/c`` apart."""
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:32]


def issue_branch(number: int) -> str:
    """The branch an issue job is told to push to, and so the branch its key is named after."""
    return f"pi/issue-{number}"
