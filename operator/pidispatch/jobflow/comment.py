"""The refusal comment: one per refused delivery, on the issue or pull request (spec §10), also when the
delivery matched several Triggers (the marker names the delivery, ``forge/comments.py``).

Recorded by the Job's ``Commented`` condition; a kill right after the POST leaves the condition
unwritten, and the next attempt finds the comment's hidden marker among the issue's comments and
records ``AlreadyPosted`` instead of posting again. A comment GitHub refused is retried by the resync
for an hour.
"""

from __future__ import annotations

import calendar
import time
from typing import Any

from pidispatch import failpoints
from pidispatch.api.conditions import get_condition
from pidispatch.events import emit
from pidispatch.forge.comments import posts_comment, refusal_comment
from pidispatch.forge.github import Forge, GitHubError
from pidispatch.jobflow.summarize import COMMENTED, Commented

COMMENT_RETRY_SECONDS = 3600


def comment_pending(job: dict[str, Any], now: float | None = None) -> bool:
    """A refused Job whose comment is neither recorded nor given up (``CommentFailed`` is retried a while)."""
    status = job.get("status") or {}
    if status.get("phase") != "Refused" or not posts_comment(status.get("reason")):
        return False
    done = get_condition(status.get("conditions"), COMMENTED)
    if done is None:
        return True
    if done.get("reason") != "CommentFailed":
        return False
    return _age_seconds(status.get("completedAt"), time.time() if now is None else now) < COMMENT_RETRY_SECONDS


def comment_refusal(forge: Forge | None, job: dict[str, Any]) -> Commented | None:
    """Post the refused Job's comment if it is owed; the ``Commented`` change to record, or ``None``."""
    if not comment_pending(job):
        return None
    spec, status, name = job["spec"], job.get("status") or {}, job["metadata"]["name"]
    number = spec.get("issue") or spec.get("pullRequest")
    delivery = spec.get("deliveryId") if isinstance(spec.get("deliveryId"), str) else None
    body = refusal_comment(str(status.get("reason")), str(spec.get("trigger", "")), job["metadata"]["uid"], delivery)
    if body is None:
        return None
    if forge is None:
        return Commented(False, "NotCommented", "No GitHub client is configured for the operator (github.app or "
                         "github.token values), so the refusal was not commented on the issue.")
    if not isinstance(number, int):
        return Commented(False, "NotCommented", "The Job names no issue or pull request to comment on.")
    try:
        posted = forge.comment_once(str(spec.get("repository")), number, body, job["metadata"]["uid"], delivery)
    except GitHubError as exc:
        emit("refusal_comment_failed", job=name, status=exc.status)
        return Commented(False, "CommentFailed", f"Posting the refusal comment failed ({exc}); retried for an hour.")
    if posted:
        failpoints.at("commented", name)
    emit("refusal_commented", job=name, posted=posted)
    if posted:
        return Commented(True, "Posted", "The refusal was explained in a comment on the issue.")
    return Commented(True, "AlreadyPosted", "The refusal comment was already on the issue (posted before a restart).")


def _age_seconds(stamp: Any, now: float) -> float:
    try:
        return now - calendar.timegm(time.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return float("inf")
