"""A REST object the poller read, as the webhook payload GitHub sends for the same event. Pure.

The payload carries what ``receiver/delivery.py`` and ``receiver/closed.py`` read of a webhook and nothing they
would read differently: the poller then hands it to ``receiver/intake.py``, the webhook's own path, so a polled
comment is matched, trusted and turned into Jobs by the very code a delivered one is. What a listing lacks and a
webhook carries is filled in from GitHub's own fields, never guessed:

* an issue comment's issue number is the end of its ``issue_url``; it is a pull request's when its ``html_url`` is
  ``…/pull/<n>#issuecomment-…`` (GitHub's ``issue_comment`` payload marks it with ``issue.pull_request``);
* a review comment's and a closed pull request's ``pull_request`` is the pull request read from the forge
  (``GET /repos/{owner}/{repo}/pulls/{n}``), so its head repository, and so the fork rule, is GitHub's answer;
* the ``sender`` is the comment's author (a comment's webhook is sent as its author), or the issue event's
  ``actor`` (who added the label, who closed it);
* ``repository.full_name`` is read from the object's own API URL, GitHub's spelling of the name, as a webhook has it.

A labelled pull request is GitHub's ``pull_request.labeled``, which no Trigger matches: it is passed over, as the
webhook path ignores it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

_REPO_IN_URL = re.compile(r"/repos/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)/")
_NUMBER_AT_END = re.compile(r"/(\d+)$")
_PULL_HTML = re.compile(r"/pull/\d+#")


@dataclass(frozen=True)
class Polled:
    """One event read from a listing: the webhook's event name and payload, and its identity on the forge
    (``kind`` and ``id``: a comment's id, an issue event's id) from which its Jobs are named."""

    event: str
    payload: dict[str, Any]
    kind: str  # "comment", "review-comment" or "event"
    id: int
    repository: str

    @property
    def delivery(self) -> str:
        """The Jobs' ``deliveryId``: ``poll-<kind>-<id>``, a delivery id's characters, one per forge event."""
        return f"poll-{self.kind}-{self.id}"

    @property
    def digest(self) -> str:
        """What names the Jobs (``delivery.job_name``), as a webhook body's SHA-256 does: the same for every read
        of this event (a replay is a 409 at the API server), another for any other event."""
        return hashlib.sha256(f"poll\0{self.repository.casefold()}\0{self.kind}\0{self.id}".encode()).hexdigest()


def repository_of(api_url: Any) -> str | None:
    """``OWNER/NAME`` from a REST URL (``…/repos/OWNER/NAME/…``), as GitHub spells it; ``None`` if there is none."""
    found = _REPO_IN_URL.search(api_url) if isinstance(api_url, str) else None
    return found.group(1) if found else None


def number_of(api_url: Any) -> int | None:
    """The number at the end of an issue's or a pull request's API URL."""
    found = _NUMBER_AT_END.search(api_url) if isinstance(api_url, str) else None
    return int(found.group(1)) if found else None


def _id(obj: dict[str, Any]) -> int | None:
    value = obj.get("id")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def comment(obj: dict[str, Any]) -> Polled | None:
    """An issue (or pull-request conversation) comment → ``issue_comment.created``; ``None``: not one."""
    repository, number, ident = repository_of(obj.get("issue_url")), number_of(obj.get("issue_url")), _id(obj)
    if repository is None or number is None or ident is None:
        return None
    issue: dict[str, Any] = {"number": number}
    html = obj.get("html_url")
    if isinstance(html, str) and _PULL_HTML.search(html):
        issue["pull_request"] = {"url": str(obj.get("issue_url")).replace("/issues/", "/pulls/")}
    payload = {"action": "created", "issue": issue, "comment": obj, "repository": {"full_name": repository},
               "sender": obj.get("user")}
    return Polled("issue_comment", payload, "comment", ident, repository)


def review_comment(obj: dict[str, Any], pull: dict[str, Any]) -> Polled | None:
    """A pull-request review comment, with its pull request as read → ``pull_request_review_comment.created``."""
    repository, ident = repository_of(obj.get("pull_request_url")), _id(obj)
    if repository is None or ident is None:
        return None
    payload = {"action": "created", "pull_request": pull, "comment": obj, "repository": {"full_name": repository},
               "sender": obj.get("user")}
    return Polled("pull_request_review_comment", payload, "review-comment", ident, repository)


def pull_number(event: dict[str, Any]) -> int | None:
    """The pull request an issue event is about (``None``: an issue's, or none): what :func:`issue_event` needs read."""
    issue = event.get("issue")
    if not isinstance(issue, dict) or not isinstance(issue.get("pull_request"), dict):
        return None
    number = issue.get("number")
    return number if isinstance(number, int) and not isinstance(number, bool) else None


def issue_event(event: dict[str, Any], pull: dict[str, Any] | None = None) -> Polled | None:
    """An issue event → ``issues.labeled``, ``issues.closed`` or ``pull_request.closed`` (``pull``: the pull request
    as read, for a pull request's close); ``None`` for every other event, and for a pull request's label."""
    issue, ident = event.get("issue"), _id(event)
    if not isinstance(issue, dict) or ident is None:
        return None
    repository = repository_of(issue.get("repository_url", "") + "/") if isinstance(
        issue.get("repository_url"), str) else None
    if repository is None:
        return None
    common = {"repository": {"full_name": repository}, "sender": event.get("actor")}
    kind = event.get("event")
    is_pull = pull_number(event) is not None
    if kind == "labeled" and not is_pull:
        payload = {"action": "labeled", "issue": issue, "label": event.get("label"), **common}
        return Polled("issues", payload, "event", ident, repository)
    if kind == "closed" and not is_pull:
        return Polled("issues", {"action": "closed", "issue": issue, **common}, "event", ident, repository)
    if kind == "closed" and pull is not None:
        payload = {"action": "closed", "number": issue.get("number"), "pull_request": pull, **common}
        return Polled("pull_request", payload, "event", ident, repository)
    return None
