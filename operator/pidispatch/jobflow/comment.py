"""The refusal comment: one per refused delivery, on the issue or pull request (docs/store-contract.md#refusals), also
when the delivery matched several Triggers (the marker names the delivery, ``forge/comments.py``).

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
from pidispatch.api.views import JobView
from pidispatch.events import emit
from pidispatch.forge.comments import posts_comment, refusal_comment
from pidispatch.forge.github import Forge, GitHubError
from pidispatch.jobflow.summarize import COMMENTED, Commented

COMMENT_RETRY_SECONDS = 3600


def comment_pending(job: JobView, now: float | None = None) -> bool:
    """A refused Job whose comment is neither recorded nor given up (``CommentFailed`` is retried a while)."""
    status = job.status
    if status.phase != "Refused" or not posts_comment(status.reason):
        return False
    done = next((c for c in status.conditions or () if c.type == COMMENTED), None)
    if done is None:
        return True
    if done.reason != "CommentFailed":
        return False
    return _age_seconds(status.completedAt, time.time() if now is None else now) < COMMENT_RETRY_SECONDS


def comment_refusal(forge: Forge | None, job: JobView) -> Commented | None:
    """Post the refused Job's comment if it is owed; the ``Commented`` change to record, or ``None``."""
    spec = job.spec
    if not comment_pending(job) or spec is None:  # a spec the schema refuses was refused without a comment
        return None
    number = spec.issue or spec.pullRequest
    body = refusal_comment(str(job.status.reason), spec.trigger, job.uid, spec.deliveryId)
    if body is None:
        return None
    if forge is None:
        return Commented(False, "NotCommented", "No GitHub client is configured for the operator (github.app or "
                         "github.token values), so the refusal was not commented on the issue.")
    if number is None:
        return Commented(False, "NotCommented", "The Job names no issue or pull request to comment on.")
    try:
        posted = forge.comment_once(spec.repository, number, body, job.uid, spec.deliveryId)
    except GitHubError as exc:
        emit("refusal_comment_failed", job=job.name, status=exc.status)
        return Commented(False, "CommentFailed", f"Posting the refusal comment failed ({exc}); retried for an hour.")
    if posted:
        failpoints.at("commented", job.name)
    emit("refusal_commented", job=job.name, posted=posted)
    if posted:
        return Commented(True, "Posted", "The refusal was explained in a comment on the issue.")
    return Commented(True, "AlreadyPosted", "The refusal comment was already on the issue (posted before a restart).")


def _age_seconds(stamp: Any, now: float) -> float:
    try:
        return now - calendar.timegm(time.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return float("inf")
