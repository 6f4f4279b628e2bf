"""The issue comments of the per-delivery refusals (docs/store-contract.md#refusals, and a fork's job under a token that
cannot be narrowed), in our words.

One comment per delivery, even across operator restarts and when one delivery matched several
Triggers (one refused Job each): each comment carries a hidden marker naming the delivery (the Job's
``spec.deliveryId``, set by the receiver; a Job created without one: its uid), and the operator lists
the issue's comments for that marker before it posts (the Job's ``Commented`` condition then spares a
finished Job the listing). Markers of earlier versions, which named the Job's uid, are still recognised.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

from pidispatch.record import JobReason

SESSIONS_DIR_UNSET = """\
pi-dispatch did not run this job.

The Trigger `{trigger}` asks to continue the previous conversation on this branch (`run.resume: true`), \
but this deployment has no session store. Running the job anyway would have thrown that conversation away \
while looking like a success, so it was not started.

There are two ways out, for whoever runs the pi-dispatch operator:

* enable the session store with the Helm value `sessions.enabled=true` (the store is a private volume of the \
operator, outside every repository), or
* remove `run.resume` from the Trigger `{trigger}`, so that its jobs start a fresh conversation each time.

Then comment again to start the job.
"""

CONFIG_REFUSED = """\
pi-dispatch did not start this job because of a configuration problem in this deployment \
(Trigger `{trigger}`).

Nothing ran and nothing was spent. Please let whoever runs the pi-dispatch operator know: \
`pidispatch doctor`, run in the operator's Pod (`kubectl exec deploy/<operator> -- pidispatch doctor`), \
names the problem and the ways to fix it.
"""

FORK_NOT_ALLOWED = """\
pi-dispatch did not run this job: this pull request comes from a fork (or its head could not be confirmed \
as a branch of this repository).

The Trigger `{trigger}` gives its jobs this deployment's own GitHub token, which can write to this repository \
and cannot be narrowed for one job. A job checks out and runs the pull request's code, so the fork's author \
could have written to this repository with it. Nothing ran and no token was handed out.

There are two ways out, for whoever runs the pi-dispatch operator:

* give the Trigger `{trigger}` the GitHub App (`run.auth: app`, or the Helm value `github.authSource=app`): \
a fork's job then gets a token that cannot push or change files (it can still comment), or
* set `run.forks: true` on the Trigger `{trigger}`, knowing that the fork's code then runs with that token.

Then comment again to start the job.
"""

TEXTS: dict[str, str] = {JobReason.SESSIONS_DIR_UNSET: SESSIONS_DIR_UNSET, JobReason.CONFIG_REFUSED: CONFIG_REFUSED,
                         JobReason.FORK_NOT_ALLOWED: FORK_NOT_ALLOWED}


def posts_comment(reason: object) -> bool:
    """Whether a Job refused for ``reason`` owes the issue a comment (the store contract's two refusals and a fork's do;
    ``beyond-trigger`` does not: only a hand-made Job meets it, and its repository may not be the Trigger's)."""
    return isinstance(reason, str) and reason in TEXTS


_PLAIN_ID = re.compile(r"[A-Za-z0-9._-]{1,100}")  # a GitHub delivery GUID; anything else is hashed


def marker(job_uid: str, delivery_id: str | None = None) -> str:
    """The hidden line that makes a comment recognisable as this delivery's: by its delivery id when the
    Job has one (every Job of the delivery shares it), else by the Job's uid (the earlier form)."""
    if not delivery_id:
        return f"<!-- pi-dispatch:job={job_uid} -->"
    # A hand-made Job's deliveryId could close the HTML comment ("-->") and show text on the issue.
    key = delivery_id if _PLAIN_ID.fullmatch(delivery_id) else \
        "sha256-" + hashlib.sha256(delivery_id.encode()).hexdigest()[:32]
    return f"<!-- pi-dispatch:delivery={key} -->"


def refusal_comment(reason: str, trigger: str, job_uid: str, delivery_id: str | None = None) -> str | None:
    """The comment for a refused Job, or ``None`` for a reason that posts none."""
    text = TEXTS.get(reason)
    if text is None:
        return None
    return text.format(trigger=trigger) + "\n" + marker(job_uid, delivery_id) + "\n"


def has_marker(comments: Iterable[Any], job_uid: str, delivery_id: str | None = None) -> bool:
    """Whether one of an issue's comments (GitHub's JSON) already carries this delivery's marker (or this
    Job's, the form before delivery markers: a comment posted before an upgrade is not posted again)."""
    needles = {marker(job_uid), marker(job_uid, delivery_id)}
    return any(isinstance(c, dict) and isinstance(c.get("body"), str) and any(n in c["body"] for n in needles)
               for c in comments)
