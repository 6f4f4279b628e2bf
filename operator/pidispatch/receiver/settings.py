"""The receiver's settings from the environment, parsed as strictly as the operator's.

A missing or empty webhook secret is a configuration error (exit 2): a receiver that cannot verify
signatures must not start, because the only alternative would be to accept unsigned deliveries.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pidispatch.api.vocabulary import AUTH_SOURCES
from pidispatch.settings import ConfigError, parse_strict_int

NAMESPACE = "PI_DISPATCH_NAMESPACE"
SECRET = "GITHUB_WEBHOOK_SECRET"
SECRET_FILE = "GITHUB_WEBHOOK_SECRET_FILE"
PORT = "PI_DISPATCH_RECEIVER_PORT"
MAX_BODY = "PI_DISPATCH_RECEIVER_MAX_BODY"
AUTH_SOURCE = "GITHUB_AUTH_SOURCE"

ENV_NAMES = (NAMESPACE, SECRET, SECRET_FILE, PORT, MAX_BODY, AUTH_SOURCE)

DEFAULT_PORT = 8000
DEFAULT_MAX_BODY = 1024 * 1024
# GitHub caps webhook payloads at 25 MB; a larger cap can only ever admit something that is not GitHub.
MAX_MAX_BODY = 25 * 1024 * 1024

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def read_secret_file(path: str) -> bytes:
    """The secret in ``path``, without the trailing newline an editor or ``echo`` leaves behind.

    Raises :class:`OSError` when the file cannot be read and :class:`ValueError` when it is empty.
    """
    with open(path, "rb") as f:
        data = f.read()
    secret = data.rstrip(b"\r\n")
    if not secret:
        raise ValueError("empty")
    return secret


@dataclass(frozen=True)
class ReceiverSettings:
    """What ``pidispatch receiver`` runs with. ``secret`` is never printed (``repr=False``)."""

    namespace: str
    secret: bytes = field(repr=False)
    secret_file: str | None = None
    port: int = DEFAULT_PORT
    max_body: int = DEFAULT_MAX_BODY
    auth_source: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReceiverSettings:
        """Read and validate every setting; raise :class:`ConfigError` on the first unusable one."""
        env = os.environ if env is None else env

        namespace = (env.get(NAMESPACE) or "").strip()
        if not _DNS_LABEL.fullmatch(namespace):
            raise ConfigError(NAMESPACE, env.get(NAMESPACE, ""), "the namespace whose Triggers this receiver "
                              "serves (a DNS-1123 label; the chart sets it to the release namespace)")

        inline, path = env.get(SECRET), env.get(SECRET_FILE)
        if inline and path:
            # Never echo the inline value: ConfigError prints what it was given.
            raise ConfigError(SECRET_FILE, path, f"either {SECRET} or {SECRET_FILE}, not both")
        if path:
            try:
                secret = read_secret_file(path)
            except OSError as exc:
                raise ConfigError(SECRET_FILE, path, f"a readable file holding the webhook secret "
                                  f"({exc.strerror or exc})") from None
            except ValueError:
                raise ConfigError(SECRET_FILE, path, "a file holding the webhook secret (this one is empty)") from None
        elif inline:
            secret = inline.encode()
        else:
            raise ConfigError(SECRET, "", f"the GitHub webhook secret, in {SECRET} or in a file named by "
                              f"{SECRET_FILE}: without it no delivery can be verified")

        def integer(name: str, default: int, accepted: str, minimum: int, maximum: int) -> int:
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                return default
            return parse_strict_int(name, raw, accepted, minimum, maximum)

        auth = env.get(AUTH_SOURCE) or None
        if auth is not None and auth not in AUTH_SOURCES:
            raise ConfigError(AUTH_SOURCE, auth, f"one of {', '.join(AUTH_SOURCES)}, or unset")

        return cls(
            namespace=namespace,
            secret=secret,
            secret_file=path or None,
            port=integer(PORT, DEFAULT_PORT, "a TCP port from 1 to 65535", 1, 65535),
            max_body=integer(MAX_BODY, DEFAULT_MAX_BODY, f"a whole number of bytes from 1024 to {MAX_MAX_BODY}",
                             1024, MAX_MAX_BODY),
            auth_source=auth,
        )
