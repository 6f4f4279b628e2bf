"""A pull request's head, as the forge API reports it, and why it gives no session key
(docs/store-contract.md#pull-request-heads).

The head branch and repository come only from ``GET /repos/{owner}/{repo}/pulls/{n}``, never from
the webhook payload. Anything short of a same-repository head gives no key; the job then runs exactly
as it would without the resume feature, and the reason goes to the log as one of the closed
:class:`NoHead` tokens (never the repository or branch names).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class NoHead(StrEnum):
    """Why a pull-request job has no key. Closed: the ``pr_head_unresolved`` log event carries one."""

    FORK = "fork"  # head.repo.full_name differs from the base repository (exact, case-sensitive)
    DELETED_FORK = "deleted-fork"  # head.repo is null: the fork was deleted
    NO_HEAD_REF = "no-head-ref"  # head.ref missing or empty
    FORK_BY_PAYLOAD = "fork-by-payload"  # the delivery itself said fork: no lookup is needed to say no
    LOOKUP_HTTP_ERROR = "lookup-http-error"  # a non-2xx answer (404, 5xx, 401, ...)
    LOOKUP_TIMEOUT = "lookup-timeout"
    LOOKUP_UNREACHABLE = "lookup-unreachable"  # connection refused, DNS, TLS
    LOOKUP_MALFORMED = "lookup-malformed"  # a 2xx answer that is not a pull request's JSON
    NO_CREDENTIALS = "no-credentials"  # the operator could not get a token for its own call
    NO_CLIENT = "no-github-client"  # no GitHub client configured and no spec.resolved on the Job


@dataclass(frozen=True)
class Head:
    """What the lookup found: ``repository`` ``None`` is a deleted fork; ``failure`` a lookup that failed."""

    ref: str | None = None
    repository: str | None = None
    failure: NoHead | None = None

    @classmethod
    def failed(cls, why: NoHead) -> Head:
        return cls(failure=why)


def head_from_pull(payload: Any) -> Head:
    """``head.ref`` and ``head.repo.full_name`` of a pull request's JSON; malformed JSON is a failure."""
    head = payload.get("head") if isinstance(payload, dict) else None
    if not isinstance(head, dict):
        return Head.failed(NoHead.LOOKUP_MALFORMED)
    ref = head.get("ref")
    repo = head.get("repo")
    if repo is None:
        return Head(ref=ref if isinstance(ref, str) else None, repository=None)
    full_name = repo.get("full_name") if isinstance(repo, dict) else None
    if not isinstance(full_name, str):
        return Head.failed(NoHead.LOOKUP_MALFORMED)
    return Head(ref=ref if isinstance(ref, str) else None, repository=full_name)


def no_key_reason(repository: str, head: Head) -> NoHead | None:
    """``None`` when ``head`` names a branch of ``repository`` itself; otherwise the closed reason."""
    if head.failure is not None:
        return head.failure
    if head.repository is None:
        return NoHead.DELETED_FORK
    # Exact: "Octo/repo" is not "octo/repo" (the fork gate of docs/store-contract.md#key-parts).
    if head.repository != repository:
        return NoHead.FORK
    if not head.ref:
        return NoHead.NO_HEAD_REF
    return None
