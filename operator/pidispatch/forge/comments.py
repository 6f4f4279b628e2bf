"""The issue comments of the two per-delivery refusals (spec §10.1, §10.2), in our words.

One comment per delivery, even across operator restarts: each carries a hidden marker naming the Job's
uid, and the operator lists the issue's comments for that marker before it posts (the Job's
``Commented`` condition then spares a finished Job the listing).
"""

from __future__ import annotations

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

TEXTS: dict[str, str] = {JobReason.SESSIONS_DIR_UNSET: SESSIONS_DIR_UNSET, JobReason.CONFIG_REFUSED: CONFIG_REFUSED}


def posts_comment(reason: object) -> bool:
    """Whether a Job refused for ``reason`` owes the issue a comment (only the two spec refusals do)."""
    return isinstance(reason, str) and reason in TEXTS


def marker(job_uid: str) -> str:
    """The hidden line that makes a comment recognisable as this delivery's."""
    return f"<!-- pi-dispatch:job={job_uid} -->"


def refusal_comment(reason: str, trigger: str, job_uid: str) -> str | None:
    """The comment for a refused Job, or ``None`` for a reason that posts none."""
    text = TEXTS.get(reason)
    if text is None:
        return None
    return text.format(trigger=trigger) + "\n" + marker(job_uid) + "\n"


def has_marker(comments: Iterable[Any], job_uid: str) -> bool:
    """Whether one of an issue's comments (GitHub's JSON) already carries this delivery's marker."""
    needle = marker(job_uid)
    return any(isinstance(c, dict) and isinstance(c.get("body"), str) and needle in c["body"] for c in comments)
