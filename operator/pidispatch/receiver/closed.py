"""A closed pull request or issue (``pull_request.closed``, ``issues.closed``): the key whose conversation is over.

It starts no Job: :func:`closed` names the key it retires, :func:`retirement_problem` checks that a
resume-armed Trigger serves the repository and trusts whoever closed it, and the receiver's shell annotates
that SessionKey (``pi-dispatch.dev/retire``, and for a pull request its number in
``pi-dispatch.dev/retire-pull-request``) for the operator to retire (``jobflow/retire.py``), which retires a
pull request's head branch only when the job system owns it (docs/sessions.md#a-conversation-ends-with-its-branch).
No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pidispatch.api.views import TriggerView
from pidispatch.contract.keys import CRON_BRANCH_PREFIX, issue_branch, key_from_parts
from pidispatch.receiver.payload import Ignored, Malformed, full_name_at, number_at, object_at, string_at
from pidispatch.receiver.trust import association_refused

# X-GitHub-Event → the action that ends a conversation: the key it names is retired.
CLOSING = {"issues": "closed", "pull_request": "closed"}


@dataclass(frozen=True)
class Closed:
    """A pull request closed (merged or not) or an issue closed: the conversation on ``branch`` of ``repository``
    is over. ``reason``: one of ``api.vocabulary.RETIRE_REASONS``.

    Who closed it: ``by_author`` when the sender opened the issue or pull request, and then ``association`` is
    theirs (the payload's ``author_association``). A webhook carries no association for its sender otherwise;
    GitHub lets only the author, or someone with triage rights on the repository or more, close an issue or a
    pull request, so a close by anyone else is by someone the repository trusts (as adding a label is, which
    no Trigger checks either). ``pull_request``: the closed pull request's number.
    """

    repository: str
    branch: str
    reason: str
    by_author: bool = True
    association: str | None = None
    pull_request: int | None = None

    @property
    def key(self) -> str:
        """The SessionKey's name (docs/store-contract.md#keys: the same key the operator's jobs on that branch use)."""
        return key_from_parts(["github", self.repository, self.branch])


def _by_author(payload: dict[str, Any], subject: dict[str, Any]) -> tuple[bool, str | None]:
    """Whether the sender is the subject's author (by account id; by login, ignoring case, when an id is
    missing), and the author's association. An author the payload does not name counts as the sender: the
    association then decides, the safe side."""
    association = subject.get("author_association")
    association = association if isinstance(association, str) and 0 < len(association) <= 32 else None
    author = subject.get("user")
    if not isinstance(author, dict):
        return True, association
    sender = object_at(payload, "sender", "")
    sender_id, author_id = sender.get("id"), author.get("id")
    if isinstance(sender_id, int) and isinstance(author_id, int):
        return sender_id == author_id, association
    login, author_login = string_at(sender, "login", "sender."), author.get("login")
    return not isinstance(author_login, str) or (login or "").casefold() == author_login.casefold(), association


def closed(event: str, payload: dict[str, Any]) -> Closed | Ignored:
    """The retirement a verified ``issues.closed`` or ``pull_request.closed`` payload asks for.

    A pull request retires its head branch's key only when its head repository is the base repository, exactly
    as the key is made (``store.keys.pull_request_key``, case-sensitive): a fork's head ref is a name its owner
    chose, and ``main`` in a fork must not retire ``main`` of the base repository. A fork's pull request never
    had a key to retire, so nothing is lost. A deleted head repository is a fork. A head branch
    ``pi/cron-…`` is a cron Trigger's conversation, which no pull request's close ends: anyone may open a pull
    request from any branch of a public repository.
    """
    repository = full_name_at(object_at(payload, "repository", ""), "repository.")
    if event == "issues":
        issue = object_at(payload, "issue", "")
        number = number_at(issue, "number", "issue.")
        by_author, association = _by_author(payload, issue)
        return Closed(repository, issue_branch(number), "issue-closed", by_author, association)
    pull_request = object_at(payload, "pull_request", "")
    head = object_at(pull_request, "head", "pull_request.")
    ref = string_at(head, "ref", "pull_request.head.")
    head_repo = head.get("repo")
    if not isinstance(head_repo, dict) or full_name_at(head_repo, "pull_request.head.repo.") != repository:
        return Ignored("a pull request from another repository (a fork) retires no key")
    assert ref is not None
    if not ref or len(ref) > 255:
        raise Malformed("pull_request.head.ref is empty or longer than 255")
    if ref.startswith(CRON_BRANCH_PREFIX):
        return Ignored(f"a pull request from a {CRON_BRANCH_PREFIX}… branch retires no key: a cron Trigger's "
                       f"conversation ends by hand or by the reaper")
    number = number_at(pull_request, "number", "pull_request.")
    merged = pull_request.get("merged") is True
    by_author, association = _by_author(payload, pull_request)
    return Closed(repository, ref, "pull-request-merged" if merged else "pull-request-closed", by_author,
                  association, number)


def retirement_problem(triggers: list[dict[str, Any]], close: Closed) -> Ignored | None:
    """Why no key is retired for ``close``, or ``None``.

    Only a Trigger that asks for ``resume`` and serves the repository (``api/serves.py``) keeps conversations to
    retire. One that names no repository still counts (its resume is off, but conversations stored before it
    was may remain, and retiring is the safe side). Of those, one must trust whoever closed it: its
    ``on.authorAssociations`` (``receiver/trust.py``, the rule a job's start follows) holds the author's
    association when the author closed it; a close by anyone else took triage rights (:class:`Closed`).
    """
    views = [TriggerView.of(trigger) for trigger in triggers]
    serving = [trigger for trigger, view in zip(triggers, views, strict=True)
               if not view.meta.deletion and view.requested and view.serves(close.repository)]
    if not serving:
        return Ignored("no Trigger that arms resume serves this repository: there is no conversation to retire")
    if not close.by_author:
        return None
    refusals = [association_refused((trigger.get("spec") or {}).get("on") or {}, close.association, "closer")
                for trigger in serving]
    if any(why is None for why in refusals):
        return None
    return Ignored(f"no Trigger that would resume this key trusts whoever closed it: {refusals[0]} "
                   f"(on.authorAssociations)")
