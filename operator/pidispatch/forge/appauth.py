"""GitHub App authentication: the App's RS256 JWT and the installation tokens it is exchanged for.

The private key is read from a file (a Secret mounted read-only into the operator Pod), never through
the Kubernetes API. The JWT lives for under ten minutes (GitHub's limit) and is backdated a minute
against clock drift, as GitHub recommends. Installation tokens are wrapped so that printing one —
in a log line, an exception, a ``repr`` — shows only when it expires.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

JWT_LIFETIME_SECONDS = 540
JWT_BACKDATE_SECONDS = 60


class AppKeyError(Exception):
    """The App's private key file cannot be used (missing, unreadable, not an RSA private key in PEM)."""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def load_private_key(path: str) -> Any:
    """The App's RSA private key from a PEM file; :class:`AppKeyError` names the file and what is wrong."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        with open(path, "rb") as f:
            pem = f.read()
    except OSError as exc:
        raise AppKeyError(f"GITHUB_APP_PRIVATE_KEY_FILE={path}: cannot read it ({exc.strerror})") from None
    try:
        key = load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise AppKeyError(f"GITHUB_APP_PRIVATE_KEY_FILE={path}: not a PEM private key without a passphrase "
                          "(download the App's key from its settings page)") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise AppKeyError(f"GITHUB_APP_PRIVATE_KEY_FILE={path}: GitHub App keys are RSA keys; this one is not")
    return key


def app_jwt(app_id: int, private_key: Any, now: float | None = None) -> str:
    """The App's JWT: RS256 over ``{"iat", "exp", "iss": app id}``."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    issued = int(time.time() if now is None else now) - JWT_BACKDATE_SECONDS
    header = {"alg": "RS256", "typ": "JWT"}
    claims = {"iat": issued, "exp": issued + JWT_BACKDATE_SECONDS + JWT_LIFETIME_SECONDS, "iss": str(app_id)}
    signing_input = ".".join(_b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims))
    signature = private_key.sign(signing_input.encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64url(signature)}"


@dataclass(frozen=True)
class InstallationToken:
    """An installation token. ``value`` is kept out of ``repr``: only the expiry and scope show."""

    value: str = field(repr=False)
    expires_at: float  # epoch seconds
    repositories: tuple[str, ...] = ()
    # What GitHub says the token may do (its answer's ``permissions``), sorted (name, level) pairs.
    permissions: tuple[tuple[str, str], ...] = ()

    def fresh(self, margin: float = 300, now: float | None = None) -> bool:
        """Still valid for at least ``margin`` seconds."""
        return self.expires_at - (time.time() if now is None else now) > margin

    def __str__(self) -> str:
        return repr(self)


LEVELS = {"read": 1, "write": 2, "admin": 3}


def broader_than(granted: dict[str, str], asked: dict[str, str]) -> list[str]:
    """The permissions of ``granted`` beyond ``asked`` (a name not asked for, or a higher level): a token
    GitHub answered with more than was asked is not handed to a job."""
    return sorted(name for name, level in granted.items()
                  if LEVELS.get(str(level), 99) > LEVELS.get(asked.get(name, ""), 0))


def parse_expiry(text: Any) -> float | None:
    """``expires_at`` of GitHub's answer (``2016-07-11T22:14:10Z``) in epoch seconds, ``None`` if malformed."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
