"""A Trigger's ``on.schedule``: standard 5-field cron, in ``on.timeZone`` (UTC unless set) on the operator's clock
(pure).

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

The fields are matched against the wall clock of the schedule's time zone (an IANA name, ``on.timeZone``; UTC
when unset); a slot is the instant that wall-clock minute names. ``TZ=``/``CRON_TZ=`` in the schedule is refused,
as Kubernetes refuses it (the zone is its own field). A slot is a whole minute; a schedule that no date ever
matches (``0 0 30 2 *``) is an error.

Daylight saving, as robfig/cron (Kubernetes' CronJob) does it, because :func:`next_slot` walks as it does: forward
in real time, a minute or an hour at a time, reading the wall clock at each step
(docs/cron.md#daylight-saving-time):

* a wall-clock time the spring-forward gap skips (02:30 in Europe/Berlin on its last Sunday of March) does not
  exist, and its slot does not fire that day;
* a wall-clock time the fall-back overlap repeats (02:30 on the last Sunday of October) fires at both of its
  instants, as a CronJob does.

Why this module and not a library (croniter, cronsim): see docs/cron.md#the-parser.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MONTHS = {name: i + 1 for i, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}
WEEKDAYS = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
               "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
# A leap day falls at least once in any 8 years (2096 -> 2104): a schedule with no slot in 9 never fires.
HORIZON_YEARS = 9
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
# One path component of a zone name, as Kubernetes' CronJob validation allows it (validateTimeZone): this keeps
# names like ../../etc/passwd from reaching the zone database's file lookup at all.
_ZONE_PART = re.compile(r"^[A-Za-z.\-_0-9+]{1,14}$")


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
    zone: tzinfo = UTC  # the wall clock the fields are matched against (on.timeZone)

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


def zone_problem(name: str) -> str | None:
    """Why ``name`` is not a time zone a schedule can run in, or ``None``: Kubernetes' CronJob rules (an IANA name
    the zone database knows; not empty, not ``Local``, no ``.``/``..`` path parts), so a ``timeZone`` a CronJob
    takes is taken here and one it refuses is refused."""
    if not name:
        return "the time zone is empty: leave on.timeZone out for UTC, or name a zone"
    if name.lower() == "local":
        return "'Local' is the operator's own zone, not a fixed one: name a zone from the IANA database"
    for part in name.split("/"):
        if part in (".", "..") or part.startswith("-") or not _ZONE_PART.match(part):
            return f"{name!r} is not the form of an IANA time zone name (e.g. Europe/Berlin, America/New_York)"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return f"{name!r} is not a time zone of the IANA database (e.g. Europe/Berlin, America/New_York, UTC)"
    return None


def zone(name: str | None) -> tzinfo:
    """The zone ``name`` names (UTC for ``None``); :class:`CronError` when it is not one."""
    if name is None:
        return UTC
    why = zone_problem(name)
    if why is not None:
        raise CronError(why)
    return ZoneInfo(name)


def parse(text: str, time_zone: str | None = None) -> Schedule:
    """``text`` in ``time_zone`` (UTC when ``None``) as a :class:`Schedule`; :class:`CronError` says what is wrong
    with it."""
    written = text.strip()
    if written.upper().startswith(("TZ=", "CRON_TZ=")):
        raise CronError("a time zone inside the schedule is not supported: name it in on.timeZone (as a CronJob's "
                        "spec.timeZone)")
    where = zone(time_zone)
    expanded = DESCRIPTORS.get(written.lower(), written)
    if expanded.startswith("@"):
        raise CronError(f"{written!r} is not a known descriptor (" + ", ".join(DESCRIPTORS) + ")")
    fields = expanded.split()
    if len(fields) != 5:
        raise CronError(f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}")
    (minutes, _), (hours, _), (days, days_star), (months, _), (weekdays, weekdays_star) = (
        _field(t, f) for t, f in zip(fields, _FIELDS, strict=True))
    schedule = Schedule(written, minutes, hours, days, months, frozenset(d % 7 for d in weekdays), days_star,
                        weekdays_star, where)
    if next_slot(schedule, datetime(2000, 1, 1, tzinfo=UTC)) is None:
        raise CronError(f"no date ever matches {written!r}")
    return schedule


def problem(text: str, time_zone: str | None = None) -> str | None:
    """Why ``text`` is not a valid schedule (in ``time_zone``), or ``None``."""
    try:
        parse(text, time_zone)
    except CronError as exc:
        return str(exc)
    return None


def _floor(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(second=0, microsecond=0)


def _at(wall: datetime, where: tzinfo) -> datetime:
    """The instant (UTC) of the naive wall-clock ``wall`` in ``where``; a time the spring-forward gap skips reads
    with the offset before the change (``fold=0``), as Go's ``time.Date`` reads it: 02:30 -> 03:30 after it."""
    return wall.replace(tzinfo=where, fold=0).astimezone(UTC)


def next_slot(schedule: Schedule, after: datetime) -> datetime | None:
    """The first slot strictly after ``after``, as a UTC instant, or ``None`` if none comes within the horizon.

    ``t`` is an instant; each step reads ``t``'s wall clock in the schedule's zone and moves ``t`` on: to the
    first day of the next month or to the next day (wall-clock midnight), or by an hour or a minute of real
    time. The real-time steps are robfig/cron's (``SpecSchedule.Next``), and what they make of daylight saving is
    what a CronJob does (the module's docstring)."""
    where = schedule.zone
    t = _floor(after) + MINUTE
    limit = t + timedelta(days=366 * HORIZON_YEARS)
    while t < limit:
        wall = t.astimezone(where)
        if wall.month not in schedule.months:
            first = wall.replace(day=1, hour=0, minute=0, tzinfo=None)  # day 1 first: the next month may be shorter
            t = _at(first.replace(year=wall.year + 1, month=1) if wall.month == 12 else
                    first.replace(month=wall.month + 1), where)
        elif not schedule.day_matches(wall):
            t = _at((wall.replace(tzinfo=None) + timedelta(days=1)).replace(hour=0, minute=0), where)
        elif wall.hour not in schedule.hours:
            t = t - timedelta(minutes=wall.minute) + HOUR  # the top of the next hour, in real time
        elif wall.minute not in schedule.minutes:
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
