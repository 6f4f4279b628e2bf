"""How a job Pod gets its staged copy (``sessions.staging.mode``, issue 33 item 2).

* ``mount`` (the default): the job Pod mounts its ``<uid>/session`` subPath of the staging claim.
* ``transfer``: the job Pod mounts no claim; its runner fetches the copy from the operator's transfer
  server over in-cluster HTTPS and hands the result back (``pidispatch/transfer``). The server needs its
  TLS certificate and key, the key its per-job tokens are made with, a cap, and the address job Pods
  reach it at; job Pods need the ConfigMap that holds the CA. Every one of them is required in this mode:
  a transfer without TLS, or with a token anyone could make, is not a mode the operator starts in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pidispatch.settings.errors import ConfigError
from pidispatch.settings.readers import absolute_path, given, integer, object_name, one_of

STAGING_MODES = ("mount", "transfer")
DEFAULT_TRANSFER_PORT = 8443
DEFAULT_TRANSFER_MAX_BYTES = 32 * 2**20
MIN_TRANSFER_MAX_BYTES = 1024  # the chart schema's minimum: an archive's frame alone is ~50 bytes
MAX_TRANSFER_MAX_BYTES = 2**40
# The server's bounds on what a connection may cost (transfer/gate.py, docs/security.md#transfer-server-limits).
# Connections open at once: a job holds one at a time (its fetch, later its upload), and an idle TLS
# connection costs the operator up to ~300 KiB, so 256 is ~75 MiB at worst, far inside the 512Mi limit,
# and far below the file descriptors the process may open.
DEFAULT_TRANSFER_MAX_CONNECTIONS = 256
MAX_TRANSFER_MAX_CONNECTIONS = 16384
# From the accept to a complete first request head (TLS handshake included): an in-cluster client needs
# milliseconds; an idle connection holds a slot of the cap no longer than this.
DEFAULT_TRANSFER_HEAD_SECONDS = 10
# An idle keep-alive connection (the runner opens one per request, so never one it needs) and a later
# request's head.
DEFAULT_TRANSFER_IDLE_SECONDS = 15
# A whole body, either way: the cap's 32 MiB in 300 s is ~110 KiB/s, far below what a cluster's network
# carries, so only a body that trickles (or a reader that stalls) meets it.
DEFAULT_TRANSFER_BODY_SECONDS = 300
MAX_TRANSFER_SECONDS = 86400

STAGING_VARIABLES = (
    "PI_DISPATCH_STAGING_MODE",
    "PI_DISPATCH_TRANSFER_PORT",
    "PI_DISPATCH_TRANSFER_URL",
    "PI_DISPATCH_TRANSFER_CERT_FILE",
    "PI_DISPATCH_TRANSFER_KEY_FILE",
    "PI_DISPATCH_TRANSFER_TOKEN_KEY_FILE",
    "PI_DISPATCH_TRANSFER_MAX_BYTES",
    "PI_DISPATCH_TRANSFER_CA_CONFIGMAP",
    "PI_DISPATCH_TRANSFER_MAX_CONNECTIONS",
    "PI_DISPATCH_TRANSFER_HEAD_SECONDS",
    "PI_DISPATCH_TRANSFER_IDLE_SECONDS",
    "PI_DISPATCH_TRANSFER_BODY_SECONDS",
)

# https://host[:port], nothing else: the operator appends /v1/jobs/<uid>/session (transfer/protocol.py).
_BASE_URL = re.compile(r"https://[A-Za-z0-9.-]+(:[0-9]{1,5})?")


@dataclass(frozen=True)
class TransferLimits:
    """What one connection to the transfer server may hold, and for how long (``transfer/gate.py``)."""

    max_connections: int = DEFAULT_TRANSFER_MAX_CONNECTIONS  # open at once; one more is aborted unread
    head_seconds: float = DEFAULT_TRANSFER_HEAD_SECONDS  # accept → TLS handshake → first request head
    idle_seconds: float = DEFAULT_TRANSFER_IDLE_SECONDS  # an idle keep-alive connection, a later head
    body_seconds: float = DEFAULT_TRANSFER_BODY_SECONDS  # a whole body, upload or fetch


@dataclass(frozen=True)
class Transfer:
    """The transfer server's settings and what job Pods are given to reach it."""

    base_url: str  # what job Pods connect to (the Service's name, which the certificate carries)
    port: int  # where the server listens in the operator's Pod
    cert_file: str
    key_file: str
    token_key_file: str  # the HMAC key of the per-job tokens (transfer/token.py)
    ca_configmap: str  # key ca.crt: mounted read-only into job Pods
    max_bytes: int
    limits: TransferLimits = TransferLimits()


@dataclass(frozen=True)
class Staging:
    """``mode`` and, in ``transfer`` mode, its settings (``None`` in ``mount`` mode)."""

    mode: str = "mount"
    transfer: Transfer | None = None


def _required(name: str, value: str | None, what: str) -> str:
    if value is None:
        raise ConfigError(name, "", f"{what} (required with PI_DISPATCH_STAGING_MODE=transfer; the chart sets it)")
    return value


def staging_settings(env: Mapping[str, str]) -> Staging:
    """Read ``PI_DISPATCH_STAGING_MODE`` and, in ``transfer`` mode, the server's settings (each required)."""
    mode = one_of(env, "PI_DISPATCH_STAGING_MODE", STAGING_MODES, "mount or transfer (unset: mount)") or "mount"
    port = integer(env, "PI_DISPATCH_TRANSFER_PORT", "a TCP port from 1 to 65535",
                   default=DEFAULT_TRANSFER_PORT, minimum=1, maximum=65535)
    max_bytes = integer(env, "PI_DISPATCH_TRANSFER_MAX_BYTES",
                        f"a whole number of bytes from {MIN_TRANSFER_MAX_BYTES} to {MAX_TRANSFER_MAX_BYTES}",
                        default=DEFAULT_TRANSFER_MAX_BYTES, minimum=MIN_TRANSFER_MAX_BYTES,
                        maximum=MAX_TRANSFER_MAX_BYTES)
    limits = transfer_limits(env)
    base = given(env, "PI_DISPATCH_TRANSFER_URL")
    if base is not None and not _BASE_URL.fullmatch(base.strip().rstrip("/")):
        raise ConfigError("PI_DISPATCH_TRANSFER_URL", base,
                          "https://<host>[:<port>] with no path (TLS is never off), e.g. "
                          "https://pi-dispatch-transfer.pi.svc:8443")
    cert = absolute_path(env, "PI_DISPATCH_TRANSFER_CERT_FILE")
    key = absolute_path(env, "PI_DISPATCH_TRANSFER_KEY_FILE")
    token_key = absolute_path(env, "PI_DISPATCH_TRANSFER_TOKEN_KEY_FILE")
    ca = object_name(env, "PI_DISPATCH_TRANSFER_CA_CONFIGMAP")
    if mode != "transfer":
        return Staging(mode)
    return Staging(mode, Transfer(
        base_url=_required("PI_DISPATCH_TRANSFER_URL", base, "the https:// address job Pods reach the "
                                                                   "operator at").strip().rstrip("/"),
        port=port,
        cert_file=_required("PI_DISPATCH_TRANSFER_CERT_FILE", cert, "the server certificate's PEM file"),
        key_file=_required("PI_DISPATCH_TRANSFER_KEY_FILE", key, "the server key's PEM file"),
        token_key_file=_required("PI_DISPATCH_TRANSFER_TOKEN_KEY_FILE", token_key,
                                 "the file of the per-job tokens' key"),
        ca_configmap=_required("PI_DISPATCH_TRANSFER_CA_CONFIGMAP", ca, "the ConfigMap (key ca.crt) job Pods "
                                                                           "verify the operator with"),
        max_bytes=max_bytes,
        limits=limits,
    ))


def transfer_limits(env: Mapping[str, str]) -> TransferLimits:
    """``PI_DISPATCH_TRANSFER_MAX_CONNECTIONS`` and the three deadlines, in whole seconds (each checked in any mode)."""
    def seconds(name: str, default: int) -> int:
        return integer(env, name, f"a whole number of seconds from 1 to {MAX_TRANSFER_SECONDS}", default=default,
                       minimum=1, maximum=MAX_TRANSFER_SECONDS)

    return TransferLimits(
        max_connections=integer(env, "PI_DISPATCH_TRANSFER_MAX_CONNECTIONS",
                                f"a whole number of connections from 1 to {MAX_TRANSFER_MAX_CONNECTIONS}",
                                default=DEFAULT_TRANSFER_MAX_CONNECTIONS, minimum=1,
                                maximum=MAX_TRANSFER_MAX_CONNECTIONS),
        head_seconds=seconds("PI_DISPATCH_TRANSFER_HEAD_SECONDS", DEFAULT_TRANSFER_HEAD_SECONDS),
        idle_seconds=seconds("PI_DISPATCH_TRANSFER_IDLE_SECONDS", DEFAULT_TRANSFER_IDLE_SECONDS),
        body_seconds=seconds("PI_DISPATCH_TRANSFER_BODY_SECONDS", DEFAULT_TRANSFER_BODY_SECONDS),
    )
