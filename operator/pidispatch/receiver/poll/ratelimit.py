"""How long the poller waits before its next request, from what the forge's last answer said. Pure.

GitHub's rules (docs.github.com, "Rate limits for the REST API" and "Best practices for using the REST API"):

* ``retry-after`` (a 403 or 429 of a secondary rate limit): wait that many seconds;
* ``x-ratelimit-remaining: 0``: wait until ``x-ratelimit-reset`` (UTC epoch seconds);
* a 403 or 429 saying neither: wait at least a minute, longer each time it repeats;
* ``X-Poll-Interval`` on the events endpoints: poll no more often than that ("In times of high server load, the
  time may increase. Please obey the header.");
* a ``304 Not Modified`` to a conditional request does not count against the primary rate limit.

Besides obeying them, the poller paces itself: when the remaining budget would run out before the reset at the
current pace, the interval stretches so that it does not, leaving :data:`RESERVE` requests for the operator and
the jobs, which share an App installation's (or a token's) budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# A 403/429 without retry-after or an exhausted budget: a minute, doubled on each repeat, at most this.
SECONDARY_MIN = 60.0
BACKOFF_MAX = 900.0
# A 5xx or no answer at all: the forge is having trouble; back off the same way, from a shorter start.
FAULT_MIN = 10.0
# Requests the poller leaves to the operator and the jobs when pacing itself against the budget.
RESERVE = 500


def _number(headers: Mapping[str, str], name: str) -> float | None:
    """A header as a non-negative number (names matched ignoring case), else ``None``."""
    for key, value in headers.items():
        if key.lower() == name:
            try:
                number = float(value.strip())
            except ValueError:
                return None
            return number if number >= 0 else None
    return None


@dataclass(frozen=True)
class Wait:
    """The pause before the next request, and why (a log line's words); ``limited``: the forge asked for it."""

    seconds: float
    why: str
    limited: bool = False


def after(status: int, headers: Mapping[str, str], *, now: float, interval: float, failures: int = 0,
          requests_per_pass: int = 1) -> Wait:
    """The wait after an answer of ``status`` with ``headers`` (``status`` 0: no answer), at ``now`` (epoch
    seconds), for a poller that makes ``requests_per_pass`` counted requests every ``interval`` seconds.
    ``failures``: how many answers in a row before this one were refusals or faults (the back-off's exponent)."""
    retry_after = _number(headers, "retry-after")
    remaining = _number(headers, "x-ratelimit-remaining")
    reset = _number(headers, "x-ratelimit-reset")
    if retry_after is not None and status in (403, 429, 503):
        return Wait(max(retry_after, 1.0), f"the forge said retry-after {retry_after:.0f}s", limited=True)
    if remaining == 0 and reset is not None:
        return Wait(max(reset - now, 0.0) + 1.0, "the rate limit is spent until its reset", limited=True)
    if status in (403, 429):
        return Wait(min(SECONDARY_MIN * 2 ** failures, BACKOFF_MAX), f"refused ({status}) without a retry-after: "
                    f"backing off", limited=True)
    if status == 0 or status >= 500:
        return Wait(min(FAULT_MIN * 2 ** failures, BACKOFF_MAX), f"the forge failed ({status or 'no answer'}): "
                    f"backing off")
    wait, why = interval, "the poll interval"
    poll = _number(headers, "x-poll-interval")
    if poll is not None and poll > wait:
        wait, why = poll, f"the forge's X-Poll-Interval ({poll:.0f}s)"
    if remaining is not None and reset is not None and reset > now:
        spare = remaining - RESERVE
        paced = (reset - now) * requests_per_pass / spare if spare > 0 else reset - now + 1.0
        if paced > wait:
            wait, why = paced, f"pacing: {remaining:.0f} requests left until the reset"
    return Wait(wait, why)
