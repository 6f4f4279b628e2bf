"""The session header line: a bounded read and the checks of gates 11 and 13.

The gate ladder judges a transcript by its first line only (docs/store-contract.md#gates, gate 11), and it
runs on every delivery, so it must not read an 8 MiB transcript to judge one line: at most
`HEADER_READ_LIMIT` bytes are read. Stdlib only, so the CLI and the store import it cheaply.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

from pidispatch.transcript._jsjson import loads

# pi's header is ~130 bytes plus the cwd path; 64 KiB leaves room for any real path while keeping the
# read bounded. A first line longer than this is not a header pi wrote: it is judged unparseable.
HEADER_READ_LIMIT: int = 65536

# Read in blocks so a normal header costs one small pread, not a 64 KiB one.
_BLOCK = 4096

Pread = Callable[[int, int, int], bytes]


def read_first_line(fd: int, size: int, *, pread: Pread = os.pread) -> bytes | None:
    """Return the bytes before the first newline of the open file `fd`, reading at most the limit.

    `size` is the size the gates judged (from lstat/fstat); never more than
    `min(size, HEADER_READ_LIMIT)` bytes are read, from offset 0 with `pread` (the descriptor's own
    offset is left alone, so a later staged copy is unaffected). Returns all bytes read when the file
    has no newline and is not larger than the limit (a header-only file missing its final newline);
    returns `None` when no newline occurs within the limit of a larger file, which the header gate
    treats as unparseable. `pread` is a seam for tests that count reads; it defaults to `os.pread`.
    """
    limit = min(max(size, 0), HEADER_READ_LIMIT)
    parts: list[bytes] = []
    read = 0
    while read < limit:
        block = pread(fd, min(_BLOCK, limit - read), read)
        if not block:
            break
        newline = block.find(b"\n")
        if newline >= 0:
            parts.append(block[:newline])
            return b"".join(parts)
        parts.append(block)
        read += len(block)
    if size > HEADER_READ_LIMIT:
        return None
    return b"".join(parts)


def _parse_object(line: bytes) -> dict[str, object] | None:
    try:
        text = bytes(line).decode("utf-8")
    except (UnicodeDecodeError, TypeError):
        return None
    ok, value = loads(text)
    return value if ok and isinstance(value, dict) else None


def is_session_header(line: bytes) -> bool:
    """Gate 11: is `line` (the text before the first newline) a JSON object with `type` "session"?

    Invalid UTF-8, anything JavaScript's JSON.parse would reject (including NaN/Infinity), a
    non-object and a non-string type all answer False. Never raises: a hostile first line must
    produce the `unparseable` verdict, not a store fault.
    """
    header = _parse_object(line)
    return header is not None and header.get("type") == "session"


# YYYY-MM-DDTHH:MM:SS(.fraction)?(Z|±HH:MM). re.ASCII keeps \d to 0-9: Python's \d also matches
# other scripts' digits, and fromisoformat accepts shapes (space separator, week dates, compact
# forms) that are not the ISO-8601 form pi writes; both would widen what the age gate accepts.
_ISO_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:(Z)|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_iso_timestamp_ms(value: object) -> float | None:
    """Epoch milliseconds of an ISO-8601 timestamp with `Z` or an offset, else None.

    Fractions are truncated to milliseconds, as JavaScript's Date does. Out-of-range fields (month
    13, hour 24, second 60, year 0000) answer None: the age gate fails closed on them.
    """
    if not isinstance(value, str):
        return None
    match = _ISO_TIMESTAMP.fullmatch(value)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    try:
        if zulu:
            zone = UTC
        else:
            if int(off_m) > 59:
                return None
            offset = timedelta(hours=int(off_h), minutes=int(off_m))
            zone = timezone(-offset if sign == "-" else offset)
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=zone)
        millis = int((fraction or "")[:3].ljust(3, "0"))
        delta = moment - _EPOCH
    except (ValueError, OverflowError):
        return None
    return (delta.days * 86_400 + delta.seconds) * 1000.0 + millis


def header_timestamp_ms(line: bytes) -> float | None:
    """Gate 13: the header's `timestamp` as epoch milliseconds, or None when it cannot be used.

    None for a line that is not a JSON object, a missing or non-string timestamp, and any string
    that is not `YYYY-MM-DDTHH:MM:SS(.fff)?(Z|±HH:MM)`. The age gate refuses on None (fail closed),
    so only the shape pi writes passes. Never raises.
    """
    header = _parse_object(line)
    if header is None:
        return None
    return parse_iso_timestamp_ms(header.get("timestamp"))
