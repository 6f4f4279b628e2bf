"""A Trigger's population: the GitHub author associations whose people may start its jobs
(docs/sessions.md#who-may-resume-a-conversation).

The store stamps it on the conversation a job promotes, and a job resumes only a conversation whose stamp
holds every association its own Trigger admits (``store/population.py``). What decides who starts a job, and so
what goes into the set:

* comments and reviews (``issue_comment.created``, ``pull_request_review.submitted``,
  ``pull_request_review_comment.created``): the author's association must be one of ``on.authorAssociations``,
  unset meaning ``OWNER``, ``MEMBER``, ``COLLABORATOR`` (``receiver/trust.py``, the receiver's rule);
* ``issues.labeled``: adding a label takes triage rights or more, a role in the repository, so the same
  default set (the receiver checks no association on a label);
* ``cron``: nobody outside starts it; its prompt is the Trigger's own, written by whoever administers the
  deployment. The default set, so that a maintainers' review continues what a cron job began.

Nothing else widens it: ``run.forks`` admits jobs on a fork's pull request, but such a job has no key
(docs/store-contract.md#key-parts), so it never meets a stored conversation; a bot, the receiver's own logins and
the operator's own comments start nothing. A hand-made Job runs under its Trigger's population.
"""

from __future__ import annotations

from pidispatch.api.models import TriggerOn
from pidispatch.api.trigger import PHRASE_EVENTS
from pidispatch.api.vocabulary import DEFAULT_AUTHOR_ASSOCIATIONS


def trigger_population(on: TriggerOn) -> frozenset[str]:
    """The author associations whose people may start a job of a Trigger with this ``on``."""
    if on.event in PHRASE_EVENTS and on.authorAssociations:
        return frozenset(on.authorAssociations)
    return frozenset(DEFAULT_AUTHOR_ASSOCIATIONS)
