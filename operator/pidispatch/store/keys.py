"""Session keys (docs/store-contract.md#keys): the first 32 hex of SHA-256 over the NUL-joined parts.

The key is a name, not an identity: anyone who knows repository and branch can compute it. It is
always 32 characters of ``[0-9a-f]``, so it is a safe single directory name.
"""

from __future__ import annotations

import re

from pidispatch.contract.keys import issue_branch, key_from_parts

__all__ = ["FORGE_KINDS", "KEY_PATTERN", "branch_key", "is_key", "issue_branch", "issue_key", "key_from_parts",
           "pull_request_key"]

FORGE_KINDS = ("github", "gitlab", "forgejo", "azure")
KEY_PATTERN = re.compile(r"[0-9a-f]{32}")


def issue_key(kind: str, repo: str, number: object) -> str | None:
    """Key of an issue job; ``None`` unless the forge kind is known, repo non-empty, number a positive int."""
    if kind not in FORGE_KINDS or not isinstance(repo, str) or not repo:
        return None
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        return None
    return key_from_parts([kind, repo, issue_branch(number)])


def pull_request_key(kind: str, repo: str, head_ref: str | None, head_repo: str | None) -> str | None:
    """Key of a pull-request job, or ``None`` for a fork, a missing head or an unknown forge.

    ``head_repo`` must equal ``repo`` exactly (case-sensitive): this is the fork gate, and a
    deleted fork (no head repository) never gets a key.
    """
    if kind not in FORGE_KINDS or not isinstance(repo, str) or not repo:
        return None
    if not isinstance(head_ref, str) or not head_ref or head_repo != repo:
        return None
    return key_from_parts([kind, repo, head_ref])


def branch_key(kind: str, repo: str, branch: str) -> str | None:
    """Key for an explicit branch of ``repo`` (what ``pidispatch key --branch`` prints)."""
    return pull_request_key(kind, repo, branch, repo)


def is_key(text: str) -> bool:
    """True for a well-formed key, the only names the store treats as key directories by contract."""
    return bool(KEY_PATTERN.fullmatch(text))
