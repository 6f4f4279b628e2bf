"""What a job cost, counted by how it started (pure): resumed, rethreaded, cold, or without a session.

The runner reports the tokens of the job's own replies (``contract/report.py``); this module names the
job's start for the fleet's metrics and adds its figures to its SessionKey's ``status.usage``, one counter
set per start, so what resume saves per key can be read off the resource: tokens per job resumed against
tokens per job cold.

Counting happens when a job ends, before its terminal status is written; a kill between the two ends the
job again after the restart. The key remembers the last jobs it counted (``recentJobs``), so the second
end counts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from pidispatch.api.models import JobSession, KeyUsage, StartUsage
from pidispatch.contract import TOKEN_FIELDS

STARTS = ("resumed", "rethreaded", "cold")  # a SessionKey's counters; "none" is a job without a session
NO_SESSION = "none"
RECENT_JOBS = 16  # more jobs than can end on one key between a SessionKey write and its Job's status write


@dataclass(frozen=True)
class JobUsage:
    """A job that ended on a key: its name, how it started (:func:`session_start`) and its reported tokens."""

    job: str
    start: str
    tokens: dict[str, float] | None


def session_start(session: JobSession | None) -> str:
    """How the job started: ``resumed`` (it continued the stored conversation), ``rethreaded`` (a new session
    from the stored letter and ledger), ``cold``, or ``none`` (no session: the Trigger does not resume)."""
    if session is None or session.reason == "disabled":
        return NO_SESSION
    if session.resumed:
        return "resumed"
    return "rethreaded" if session.rethreaded else "cold"


def _number(value: object) -> float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _whole(value: float) -> float:
    """Token counts stay integers in the status (the schema types them as numbers either way)."""
    return int(value) if float(value).is_integer() else round(value, 10)


def counted(usage: KeyUsage | None, job: str, start: str, tokens: dict[str, float] | None) -> KeyUsage:
    """``usage`` (a SessionKey's ``status.usage`` as its view read it, or ``None``) with ``job`` counted under
    ``start``: one more job and its tokens added. Unchanged when ``job`` was counted already or ``start`` is
    not a key's start."""
    usage = usage if usage is not None else KeyUsage()
    recent = list(usage.recentJobs or [])
    if start not in STARTS or job in recent:
        return usage
    before = getattr(usage, start)
    part: dict[str, float] = before.model_dump(exclude_unset=True) if before is not None else {}
    part["jobs"] = int(_number(part.get("jobs"))) + 1
    for name in TOKEN_FIELDS:
        if tokens and name in tokens:
            part[name] = _whole(_number(part.get(name)) + tokens[name])
    return usage.model_copy(update={start: StartUsage.model_validate(part),
                                    "recentJobs": [*recent, job][-RECENT_JOBS:]})


def usage_patch(usage: KeyUsage) -> dict[str, object]:
    """``usage`` as ``status.usage`` carries it: the fields it holds, the counters whole where they are whole (the
    model reads every token figure as a float)."""
    dumped = usage.model_dump(mode="json", exclude_unset=True)
    for start in STARTS:
        part = dumped.get(start)
        if isinstance(part, dict):
            dumped[start] = {k: _whole(v) if isinstance(v, float) else v for k, v in part.items()}
    return dumped


def per_job(usage: KeyUsage | None, start: str, field: str = "total") -> float | None:
    """The mean of ``field`` per job of ``start`` on a key (``None``: no such job yet)."""
    part = getattr(usage, start) if usage is not None else None
    jobs = _number(part.jobs) if part is not None else 0
    return _number(getattr(part, field)) / jobs if jobs else None
