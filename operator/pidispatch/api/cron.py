"""A Trigger's ``on.schedule``: standard 5-field cron, evaluated in UTC on the operator's clock (pure).

The syntax is the one Kubernetes' CronJob takes (its parser, robfig/cron's standard one), so a schedule
written for a CronJob means the same here:

* five fields, minute (0-59), hour (0-23), day of month (1-31), month (1-12 or JAN-DEC), day of week
  (0-6 or SUN-SAT, 7 also Sunday), separated by blanks;
* each field a comma list of ``*`` (or ``?`` in the day fields), ``N``, ``A-B``, each with an optional
  ``/step``; ``N/step`` means ``N-max/step``;
* the descriptors ``@yearly`` (``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``),
  ``@hourly``;
* day of month and day of week: when both are restricted (neither is a bare ``*`` or ``?``), a day
  matching either fires (the cron rule); ``*/2`` counts as restricted, as in Kubernetes.

No time zone: every slot is a UTC minute (``TZ=`` prefixes are refused, as Kubernetes refuses them in
``schedule``). A slot is a whole minute; a schedule that no date ever matches (``0 0 30 2 *``) is an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MONTHS = {name: i + 1 for i, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}
WEEKDAYS = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
               "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
# A leap day falls at least once in any 8 years (2096 -> 2104): a schedule with no slot in 9 never fires.
HORIZON_YEARS = 9
MINUTE = timedelta(minutes=1)


class CronError(ValueError):
    """The schedule is not valid cron; the message says where and how, in words for a person."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None


_FIELDS = (_Field("minute", 0, 59), _Field("hour", 0, 23), _Field("day of month", 1, 31),
           _Field("month", 1, 12, MONTHS), _Field("day of week", 0, 7, WEEKDAYS))


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule: the values each field allows; ``*_star`` whether a day field is unrestricted."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday (a written 7 is stored as 0)
    days_star: bool
    weekdays_star: bool

    def day_matches(self, when: datetime) -> bool:
        """The day rule: both day fields restricted -> either matches; otherwise both must."""
        dom = when.day in self.days
        dow = (when.isoweekday() % 7) in self.weekdays
        if self.days_star or self.weekdays_star:
            return dom and dow
        return dom or dow


def _number(text: str, f: _Field) -> int:
    value = f.names.get(text.lower()) if f.names else None
    if value is None:
        if not text.isdigit() or not text.isascii():
            what = f"a number from {f.low} to {f.high}" + (" or a name" if f.names else "")
            raise CronError(f"{f.name}: {text!r} is not {what}")
        value = int(text)
    if not f.low <= value <= f.high:
        raise CronError(f"{f.name}: {value} is out of range {f.low}-{f.high}")
    return value


def _part(text: str, f: _Field) -> tuple[set[int], bool]:
    """One comma-separated part: its values, and whether it was a bare ``*`` (or ``?``)."""
    span, slash, step_text = text.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit() or not step_text.isascii() or int(step_text) == 0:
            raise CronError(f"{f.name}: the step in {text!r} must be a positive number")
        step = int(step_text)
    star = span in ("*", "?")
    if span == "?" and f.name not in ("day of month", "day of week"):
        raise CronError(f"{f.name}: '?' is only allowed in the day fields")
    if star:
        low, high = f.low, f.high
    elif "-" in span:
        a, _, b = span.partition("-")
        low, high = _number(a, f), _number(b, f)
        if low > high:
            raise CronError(f"{f.name}: the range {span!r} runs backwards")
    else:
        low = _number(span, f)
        high = f.high if slash else low
    return set(range(low, high + 1, step)), star and step == 1


def _field(text: str, f: _Field) -> tuple[frozenset[int], bool]:
    values: set[int] = set()
    star = False
    for part in text.split(","):
        if not part:
            raise CronError(f"{f.name}: an empty item in {text!r}")
        got, bare = _part(part, f)
        values |= got
        star = star or bare
    return frozenset(values), star


def parse(text: str) -> Schedule:
    """``text`` as a :class:`Schedule`; :class:`CronError` says what is wrong with it."""
    written = text.strip()
    if written.upper().startswith(("TZ=", "CRON_TZ=")):
        raise CronError("a time zone in the schedule is not supported: schedules run in UTC")
    expanded = DESCRIPTORS.get(written.lower(), written)
    if expanded.startswith("@"):
        raise CronError(f"{written!r} is not a known descriptor (" + ", ".join(DESCRIPTORS) + ")")
    fields = expanded.split()
    if len(fields) != 5:
        raise CronError(f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}")
    (minutes, _), (hours, _), (days, days_star), (months, _), (weekdays, weekdays_star) = (
        _field(t, f) for t, f in zip(fields, _FIELDS, strict=True))
    schedule = Schedule(written, minutes, hours, days, months, frozenset(d % 7 for d in weekdays), days_star,
                        weekdays_star)
    if next_slot(schedule, datetime(2000, 1, 1, tzinfo=UTC)) is None:
        raise CronError(f"no date ever matches {written!r}")
    return schedule


def problem(text: str) -> str | None:
    """Why ``text`` is not a valid schedule, or ``None``."""
    try:
        parse(text)
    except CronError as exc:
        return str(exc)
    return None


def _floor(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(second=0, microsecond=0)


def next_slot(schedule: Schedule, after: datetime) -> datetime | None:
    """The first slot strictly after ``after`` (UTC), or ``None`` if none comes within the horizon."""
    t = _floor(after) + MINUTE
    limit = t + timedelta(days=366 * HORIZON_YEARS)
    while t < limit:
        if t.month not in schedule.months:
            first = t.replace(day=1, hour=0, minute=0)  # day 1 first: the next month may be shorter
            t = first.replace(year=t.year + 1, month=1) if t.month == 12 else first.replace(month=t.month + 1)
        elif not schedule.day_matches(t):
            t = (t + timedelta(days=1)).replace(hour=0, minute=0)
        elif t.hour not in schedule.hours:
            t = (t + timedelta(hours=1)).replace(minute=0)
        elif t.minute not in schedule.minutes:
            t += MINUTE
        else:
            return t
    return None


def slots_between(schedule: Schedule, after: datetime, until: datetime) -> Iterator[datetime]:
    """The slots in ``(after, until]``, oldest first."""
    t = next_slot(schedule, after)
    while t is not None and t <= until:
        yield t
        t = next_slot(schedule, t)
