"""``X-Hub-Signature-256``: GitHub's HMAC-SHA256 of the raw body, keyed with the webhook secret.

The check runs on the raw bytes before anything parses them, and compares in constant time
(:func:`hmac.compare_digest`), so neither a parser bug nor response timing is reachable without
the secret. The older SHA-1 ``X-Hub-Signature`` header is never consulted.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import threading

from pidispatch.events import emit
from pidispatch.receiver.settings import read_secret_file

HEADER = "X-Hub-Signature-256"
PREFIX = "sha256="
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def sign(secret: bytes, body: bytes) -> str:
    """The header value GitHub sends for ``body``: ``sha256=<hex>``."""
    return PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def header_problem(value: str | None) -> str | None:
    """Why a header value cannot be a signature (missing, wrong scheme, not 64 hex digits), else ``None``.

    Checked before the body is read, so a request that could never verify costs nothing.
    """
    if value is None or value == "":
        return f"no {HEADER} header: the webhook has no secret configured, or this is not GitHub"
    if not value.startswith(PREFIX):
        return f"{HEADER} is not of the form sha256=<hex>"
    if not _HEX_DIGEST.fullmatch(value[len(PREFIX):].lower()):
        return f"{HEADER} is not of the form sha256=<64 hex digits>"
    return None


def signature_matches(secret: bytes, body: bytes, value: str) -> bool:
    """Whether ``value`` is the signature of ``body`` under ``secret``, compared in constant time."""
    expected = sign(secret, body).encode("ascii")
    # GitHub sends lowercase hex; accept either case rather than fail a correct signature on style.
    given = value[:len(PREFIX)] + value[len(PREFIX):].lower()
    return hmac.compare_digest(expected, given.encode("ascii", "replace"))


class WebhookSecret:
    """The secret, re-read when its file changes: a rotated Kubernetes Secret takes effect without a restart.

    A file that vanishes or turns empty mid-rotation keeps the last good secret (and logs it), so a
    half-written update never opens the receiver to unsigned deliveries.
    """

    def __init__(self, secret: bytes, path: str | None = None) -> None:
        self._secret = secret
        self._path = path
        self._stamp = self._stat()
        self._lock = threading.Lock()

    def _stat(self) -> tuple[int, int, int] | None:
        if self._path is None:
            return None
        try:
            st = os.stat(self._path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def current(self) -> bytes:
        if self._path is None:
            return self._secret
        stamp = self._stat()
        if stamp is not None and stamp != self._stamp:
            with self._lock:
                try:
                    self._secret = read_secret_file(self._path)
                    emit("receiver_secret_reloaded")
                except (OSError, ValueError):
                    emit("receiver_secret_reload_failed", why="unreadable or empty; keeping the last good secret")
                self._stamp = stamp
        return self._secret
