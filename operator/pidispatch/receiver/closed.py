"""A closed pull request or issue (``pull_request.closed``, ``issues.closed``): the key whose conversation is over.

It starts no Job: :func:`closed` names the key it retires, :func:`retirement_problem` checks that a
resume-armed Trigger serves the repository, and the receiver's shell annotates that SessionKey
(``pi-dispatch.dev/retire``) for the operator to retire (``jobflow/retire.py``). No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pidispatch.api import serves
from pidispatch.contract.keys import issue_branch, key_from_parts
from pidispatch.receiver.payload import Ignored, Malformed, full_name_at, number_at, object_at, string_at

# X-GitHub-Event → the action that ends a conversation: the key it names is retired.
CLOSING = {"issues": "closed", "pull_request": "closed"}


@dataclass(frozen=True)
class Closed:
    """A pull request closed (merged or not) or an issue closed: the conversation on ``branch`` of ``repository``
    is over. ``reason``: one of ``api.vocabulary.RETIRE_REASONS``."""

    repository: str
    branch: str
    reason: str

    @property
    def key(self) -> str:
        """The SessionKey's name (docs/store-contract.md#keys: the same key the operator's jobs on that branch use)."""
        return key_from_parts(["github", self.repository, self.branch])


def closed(event: str, payload: dict[str, Any]) -> Closed | Ignored:
    """The retirement a verified ``issues.closed`` or ``pull_request.closed`` payload asks for.

    A pull request retires its head branch's key only when its head repository is the base repository, exactly
    as the key is made (``store.keys.pull_request_key``, case-sensitive): a fork's head ref is a name its owner
    chose, and ``main`` in a fork must not retire ``main`` of the base repository. A fork's pull request never
    had a key to retire, so nothing is lost. A deleted head repository is a fork.
    """
    repository = full_name_at(object_at(payload, "repository", ""), "repository.")
    if event == "issues":
        number = number_at(object_at(payload, "issue", ""), "number", "issue.")
        return Closed(repository, issue_branch(number), "issue-closed")
    pull_request = object_at(payload, "pull_request", "")
    head = object_at(pull_request, "head", "pull_request.")
    ref = string_at(head, "ref", "pull_request.head.")
    head_repo = head.get("repo")
    if not isinstance(head_repo, dict) or full_name_at(head_repo, "pull_request.head.repo.") != repository:
        return Ignored("a pull request from another repository (a fork) retires no key")
    assert ref is not None
    if not ref or len(ref) > 255:
        raise Malformed("pull_request.head.ref is empty or longer than 255")
    merged = pull_request.get("merged") is True
    return Closed(repository, ref, "pull-request-merged" if merged else "pull-request-closed")


def retirement_problem(triggers: list[dict[str, Any]], close: Closed) -> Ignored | None:
    """Why no key is retired for ``close``, or ``None``: only a Trigger that asks for ``resume`` and serves the
    repository (``api/serves.py``) keeps conversations to retire. One that names no repository still counts
    (its resume is off, but conversations stored before it was may remain, and retiring is the safe side)."""
    for trigger in triggers:
        if (trigger.get("metadata") or {}).get("deletionTimestamp"):
            continue
        spec = trigger.get("spec") or {}
        if ((spec.get("run") or {}).get("resume") is True
                and serves.serves(serves.entries_of(spec.get("on")), close.repository)):
            return None
    return Ignored("no Trigger that arms resume serves this repository: there is no conversation to retire")
