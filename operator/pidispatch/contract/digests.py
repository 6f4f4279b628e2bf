"""A job's own secret as the operator may know it: its length and a SHA-256 over a domain prefix and the value,
never the value. The runner reports its secrets so (``contract/report.py``), the operator computes the App token's
itself, the host record keeps them, and the store's scan looks for them (``store/redact.py``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

# The SHA-256 is over this prefix and the value: a digest of a secret that is only ever used here, never
# one that matches a digest published elsewhere for the same value.
DIGEST_DOMAIN = b"pi-dispatch secret v1\x00"
# A secret shorter than this is not reported by digest (a short value's digest could be brute-forced
# from the Pod's termination message, which namespace readers see) and not searched for.
SECRET_MIN_LENGTH = 20
SECRET_MAX_LENGTH = 512
# The characters of a token as the job's secrets are searched for: a value with others is not reported.
SECRET_CHARS = re.compile(rb"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class SecretDigest:
    """One of the job's own secret values, as the operator may know it: its length and its digest (hex)."""

    length: int
    sha256: str


def digest_of(value: str | bytes) -> SecretDigest | None:
    """The :class:`SecretDigest` of ``value``; ``None`` for a value the scan cannot look for (too short,
    too long, or with characters outside ``[A-Za-z0-9_-]``), which is then not reported at all."""
    raw = value.encode() if isinstance(value, str) else value
    if not SECRET_MIN_LENGTH <= len(raw) <= SECRET_MAX_LENGTH or not SECRET_CHARS.fullmatch(raw):
        return None
    return SecretDigest(len(raw), hashlib.sha256(DIGEST_DOMAIN + raw).hexdigest())


MAX_SECRETS = 16
_HEX64 = re.compile(r"[0-9a-f]{64}")


def parse_digests(value: object) -> tuple[SecretDigest, ...]:
    """Digests as the runner's report or a host record carries them (``[{"length", "sha256"}]``), each
    accepted only in that exact shape; at most :data:`MAX_SECRETS`."""
    found: list[SecretDigest] = []
    for item in value[:MAX_SECRETS] if isinstance(value, list) else []:
        length = item.get("length") if isinstance(item, dict) else None
        digest = item.get("sha256") if isinstance(item, dict) else None
        if (isinstance(length, int) and not isinstance(length, bool)
                and SECRET_MIN_LENGTH <= length <= SECRET_MAX_LENGTH
                and isinstance(digest, str) and _HEX64.fullmatch(digest)):
            found.append(SecretDigest(length, digest))
    return tuple(dict.fromkeys(found))


def as_json(digests: tuple[SecretDigest, ...]) -> list[dict[str, object]]:
    return [{"length": d.length, "sha256": d.sha256} for d in digests]
