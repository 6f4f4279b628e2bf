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
from pidispatch.settings import ConfigError, GitHubSettings
from pidispatch.settings.readers import integer, object_name, one_of, refuse_empty

NAMESPACE = "PI_DISPATCH_NAMESPACE"
SECRET = "GITHUB_WEBHOOK_SECRET"
SECRET_FILE = "GITHUB_WEBHOOK_SECRET_FILE"
PORT = "PI_DISPATCH_RECEIVER_PORT"
MAX_BODY = "PI_DISPATCH_RECEIVER_MAX_BODY"
AUTH_SOURCE = "GITHUB_AUTH_SOURCE"
HEALTH_PORT = "PI_DISPATCH_RECEIVER_HEALTH_PORT"
MAX_CONNECTIONS = "PI_DISPATCH_RECEIVER_MAX_CONNECTIONS"
IGNORE_LOGINS = "PI_DISPATCH_RECEIVER_IGNORE_LOGINS"
MODE = "PI_DISPATCH_RECEIVER_MODE"
POLL_INTERVAL = "PI_DISPATCH_RECEIVER_POLL_INTERVAL_SECONDS"
POLL_CURSOR = "PI_DISPATCH_RECEIVER_POLL_CURSOR"

ENV_NAMES = (NAMESPACE, SECRET, SECRET_FILE, PORT, MAX_BODY, AUTH_SOURCE, HEALTH_PORT, MAX_CONNECTIONS,
             IGNORE_LOGINS, MODE, POLL_INTERVAL, POLL_CURSOR)

# How events arrive: GitHub's webhook deliveries, or the receiver reading the forge's REST API
# (docs/triggers.md#polling-instead-of-a-webhook).
MODES = ("webhook", "poll")
DEFAULT_POLL_INTERVAL = 60
MIN_POLL_INTERVAL = 10  # GitHub's events endpoints ask for 60 s (X-Poll-Interval); the poller obeys them anyway
MAX_POLL_INTERVAL = 3600
DEFAULT_POLL_CURSOR = "pi-dispatch-poll-cursor"

DEFAULT_PORT = 8000
# /healthz, /readyz and /metrics listen here, never on the webhook port: the webhook port is the one
# put on the internet, and what the probes and metrics say (Trigger counts, delivery results) is not
# anyone's business there.
DEFAULT_HEALTH_PORT = 8001
# Connections open at once on the webhook port; one more is answered 503 and closed unread. GitHub
# opens one per delivery; 256 is far above one installation's rate, and far below the file descriptors
# a container gets.
DEFAULT_MAX_CONNECTIONS = 256
MAX_MAX_CONNECTIONS = 16384
DEFAULT_MAX_BODY = 1024 * 1024
# GitHub caps webhook payloads at 25 MB; a larger cap can only ever admit something that is not GitHub.
MAX_MAX_BODY = 25 * 1024 * 1024

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# A GitHub login (letters, digits, hyphens; at most 39), or an App's bot account (``name[bot]``).
_LOGIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,38}(\[bot\])?")


def parse_logins(raw: str) -> tuple[str, ...]:
    """``PI_DISPATCH_RECEIVER_IGNORE_LOGINS``: comma-separated GitHub logins, each checked; none may be empty.

    These are the accounts the jobs' own tokens act as (a ``pat``'s or ``gh``'s user): their comments
    start no job, so the agent quoting a Trigger's phrase cannot start the next one.
    """
    logins = tuple(part.strip() for part in raw.split(","))
    if not all(_LOGIN.fullmatch(login) for login in logins):
        raise ConfigError(IGNORE_LOGINS, raw, "comma-separated GitHub logins (letters, digits and '-', at most "
                          "39 each, or an App's name[bot]), or unset for none")
    return logins


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
    health_port: int = DEFAULT_HEALTH_PORT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    ignore_logins: tuple[str, ...] = ()
    mode: str = "webhook"
    poll_interval: int = DEFAULT_POLL_INTERVAL
    poll_cursor: str = DEFAULT_POLL_CURSOR
    github: GitHubSettings | None = None  # poll mode: how the forge is read (the operator's own credential)

    @property
    def polling(self) -> bool:
        return self.mode == "poll"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReceiverSettings:
        """Read and validate every setting; raise :class:`ConfigError` on the first unusable one."""
        env = os.environ if env is None else env
        refuse_empty(env, ENV_NAMES)

        namespace = (env.get(NAMESPACE) or "").strip()
        if not _DNS_LABEL.fullmatch(namespace):
            raise ConfigError(NAMESPACE, env.get(NAMESPACE, ""), "the namespace whose Triggers this receiver "
                              "serves (a DNS-1123 label; the chart sets it to the release namespace)")

        mode = one_of(env, MODE, MODES, f"one of {', '.join(MODES)}, or unset for webhook") or "webhook"
        inline, path = env.get(SECRET), env.get(SECRET_FILE)
        if inline and path:
            # Never echo the inline value: ConfigError prints what it was given.
            raise ConfigError(SECRET_FILE, path, f"either {SECRET} or {SECRET_FILE}, not both")
        if mode == "poll" and not (inline or path):
            secret = b""  # no webhook listener: nothing to verify
        elif path:
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

        auth = one_of(env, AUTH_SOURCE, AUTH_SOURCES, f"one of {', '.join(AUTH_SOURCES)}, or unset")
        github = GitHubSettings.from_env(env, auth or "gh") if mode == "poll" else None

        port = integer(env, PORT, "a TCP port from 1 to 65535", default=DEFAULT_PORT, minimum=1, maximum=65535)
        health_port = integer(env, HEALTH_PORT, "a TCP port from 1 to 65535", default=DEFAULT_HEALTH_PORT,
                              minimum=1, maximum=65535)
        if health_port == port:
            raise ConfigError(HEALTH_PORT, str(health_port), f"a TCP port other than {PORT} ({port}): the probes "
                              f"and metrics must not be reachable where the webhooks arrive")

        return cls(
            namespace=namespace,
            secret=secret,
            secret_file=path or None,
            port=port,
            max_body=integer(env, MAX_BODY, f"a whole number of bytes from 1024 to {MAX_MAX_BODY}",
                             default=DEFAULT_MAX_BODY, minimum=1024, maximum=MAX_MAX_BODY),
            auth_source=auth,
            health_port=health_port,
            max_connections=integer(env, MAX_CONNECTIONS,
                                    f"a whole number of connections from 1 to {MAX_MAX_CONNECTIONS}",
                                    default=DEFAULT_MAX_CONNECTIONS, minimum=1, maximum=MAX_MAX_CONNECTIONS),
            ignore_logins=parse_logins(env[IGNORE_LOGINS]) if IGNORE_LOGINS in env else (),
            mode=mode,
            poll_interval=integer(env, POLL_INTERVAL, f"a whole number of seconds from {MIN_POLL_INTERVAL} to "
                                  f"{MAX_POLL_INTERVAL}", default=DEFAULT_POLL_INTERVAL, minimum=MIN_POLL_INTERVAL,
                                  maximum=MAX_POLL_INTERVAL),
            poll_cursor=object_name(env, POLL_CURSOR, "the name of the ConfigMap the poller keeps its cursor in")
            or DEFAULT_POLL_CURSOR,
            github=github,
        )
