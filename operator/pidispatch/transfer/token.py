"""A job's transfer credential: bound to its Job's uid, made and checked by the operator alone.

``token(uid) = hex(HMAC-SHA256(key, "pi-dispatch transfer v1\\0" + uid))``. The operator keeps one key
(32+ random bytes, from a file: the chart's Secret) and needs no per-job state: it recomputes the token of
the uid in the request's URL and compares in constant time. A job's token opens only its own uid's copy;
the domain string keeps the key from ever being usable for another purpose's MAC of the same uid.
"""

from __future__ import annotations

import hashlib
import hmac

DOMAIN = b"pi-dispatch transfer v1\0"
MIN_KEY_BYTES = 32


class TransferKeyError(ValueError):
    """The key file is missing, unreadable or too short (the message names the file, never the key)."""


def load_key(path: str) -> bytes:
    """The operator's key from ``path`` (a mounted Secret's key: its link is followed, as Secret volumes need).

    A trailing newline is dropped (a key pasted by hand); fewer than 32 bytes is refused.
    """
    try:
        with open(path, "rb") as handle:
            key = handle.read(4096).rstrip(b"\r\n")
    except OSError as exc:
        raise TransferKeyError(f"cannot read the transfer key file {path}: {exc.strerror}") from None
    if len(key) < MIN_KEY_BYTES:
        raise TransferKeyError(f"the transfer key in {path} has {len(key)} bytes; it needs at least {MIN_KEY_BYTES} "
                        "random bytes (the chart makes one in its transfer Secret)")
    return key


def job_token(key: bytes, uid: str) -> str:
    """The credential the operator puts in the Job's Secret (hex)."""
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the transfer key needs at least {MIN_KEY_BYTES} bytes")
    return hmac.new(key, DOMAIN + uid.encode("ascii"), hashlib.sha256).hexdigest()


def token_matches(key: bytes, uid: str, presented: str | None) -> bool:
    """True when ``presented`` is ``uid``'s token (constant time in the token's content)."""
    if not presented:
        return False
    return hmac.compare_digest(job_token(key, uid).encode("ascii"), presented.encode("utf-8", "replace"))
