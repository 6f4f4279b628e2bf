"""The runner's side of a transfer: fetch the job's staged copy before pi starts, upload the result after.

Standard library only (``http.client``, ``ssl``): the runner imports no aiohttp (``.importlinter``). The
server is always verified against the CA file the Pod mounts (hostname included); there is no way to
turn verification off. Both calls are idempotent and retried with back-off on a connection error, a
timeout or a 5xx/429, and an upload's 409 (an earlier attempt of the same upload, whose answer never
arrived, is still in flight on the server); any other answer is final (:class:`TransferRefused`). No
proxy is used: the server is an in-cluster Service, and a job's ``HTTPS_PROXY`` is for the forge.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import secrets
import shutil
import ssl
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pidispatch.transfer import archive
from pidispatch.transfer.protocol import DIGEST_HEADER, digest_header

DEFAULT_ATTEMPTS = 5
DEFAULT_BACKOFF = 0.5  # seconds before the second attempt; doubled each time, capped at MAX_BACKOFF
MAX_BACKOFF = 8.0
DEFAULT_TIMEOUT = 30.0  # seconds per socket operation
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_RETRIED_STATUS = frozenset({409, 429, 500, 502, 503, 504})


class TransferError(Exception):
    """A transfer that did not happen (after its retries); the message is for the job's log."""


class TransferRefused(TransferError):
    """The server answered with a final refusal (4xx): retrying the same request cannot help."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(f"the operator refused the transfer ({status}): {why}")
        self.status = status


@dataclass(frozen=True)
class Fetched:
    files: tuple[tuple[str, int], ...]
    bytes: int


@dataclass(frozen=True)
class Uploaded:
    digest: str
    bytes: int
    files: tuple[str, ...]
    skipped: tuple[str, ...]  # what was in the directory but may not travel (links, unknown names)
    marker: dict[str, Any]


def client_ssl_context(ca_file: str) -> ssl.SSLContext:
    """A context that trusts only ``ca_file`` and checks the server's name: never unverified."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _target(url: str) -> tuple[str, int, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise TransferError(f"the transfer URL must be https://host[:port]/path, not {url!r}")
    return parts.hostname, parts.port or 443, parts.path or "/"


class _Retry(Exception):
    """An attempt that may be repeated (connection error, timeout, 5xx)."""


def _retrying(attempt: Callable[[], Any], *, attempts: int, backoff: float, what: str,
              sleep: Callable[[float], None]) -> Any:
    delay = backoff
    last = ""
    for number in range(1, attempts + 1):
        try:
            return attempt()
        except _Retry as exc:
            last = str(exc)
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, ssl.SSLCertVerificationError):
                raise TransferError(f"{what}: the server's certificate is not trusted: {exc.verify_message}") \
                    from None
            last = f"{type(exc).__name__}: {exc}"
        if number < attempts:
            sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF)
    raise TransferError(f"{what} failed after {attempts} attempts; last: {last}")


def _why(response: http.client.HTTPResponse) -> str:
    body = response.read(4096)
    try:
        return str(json.loads(body).get("error"))
    except (ValueError, AttributeError):
        return body.decode("utf-8", "replace")[:200]


def _judge(response: http.client.HTTPResponse) -> None:
    if response.status in _RETRIED_STATUS:
        raise _Retry(f"the server answered {response.status}: {_why(response)}")
    if response.status != 200:
        raise TransferRefused(response.status, _why(response))


def fetch(url: str, token: str, ca_file: str, dest_dir: str, *, max_bytes: int,
          attempts: int = DEFAULT_ATTEMPTS, backoff: float = DEFAULT_BACKOFF, timeout: float = DEFAULT_TIMEOUT,
          sleep: Callable[[float], None] = time.sleep) -> Fetched:
    """Fetch the job's staged copy into ``dest_dir`` (a name already there is replaced).

    Each attempt unpacks into a fresh ``dest_dir/.incoming-<random>/`` and only a whole, checked archive
    is moved into ``dest_dir``: a failed attempt leaves nothing behind.
    """
    host, port, path = _target(url)
    context = client_ssl_context(ca_file)

    def attempt() -> Fetched:
        connection = http.client.HTTPSConnection(host, port, context=context, timeout=timeout)
        try:
            connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
            response = connection.getresponse()
            _judge(response)
            if response.length is not None and response.length > max_bytes:
                raise TransferRefused(413, f"the staged copy ({response.length} bytes) is larger than the "
                                           f"cap of {max_bytes} bytes")
            return _unpack_into(dest_dir, response.read, max_bytes)
        except archive.ArchiveError as exc:
            # A short or damaged body (the server cut it off) is worth another try; an over-cap one is not.
            if isinstance(exc, archive.OverCap):
                raise TransferRefused(413, str(exc)) from None
            raise _Retry(f"the staged copy did not arrive whole: {exc}") from None
        finally:
            connection.close()

    return _retrying(attempt, attempts=attempts, backoff=backoff, what="fetching the staged session", sleep=sleep)


def _unpack_into(dest_dir: str, read: Callable[[int], bytes], max_bytes: int) -> Fetched:
    dest_fd = os.open(dest_dir, _DIR)
    incoming = f".incoming-{secrets.token_hex(6)}"
    try:
        os.mkdir(incoming, 0o700, dir_fd=dest_fd)
        try:
            incoming_fd = os.open(incoming, _DIR, dir_fd=dest_fd)
            try:
                unpacked = archive.unpack(read, incoming_fd, max_bytes=max_bytes)
                for name, _ in unpacked.files:
                    os.rename(name, name, src_dir_fd=incoming_fd, dst_dir_fd=dest_fd)
            finally:
                os.close(incoming_fd)
        finally:
            shutil.rmtree(incoming, dir_fd=dest_fd, ignore_errors=True)
        os.fsync(dest_fd)
    finally:
        os.close(dest_fd)
    return Fetched(unpacked.files, unpacked.bytes)


def upload(url: str, token: str, ca_file: str, src_dir: str, *, max_bytes: int,
           attempts: int = DEFAULT_ATTEMPTS, backoff: float = DEFAULT_BACKOFF, timeout: float = DEFAULT_TIMEOUT,
           sleep: Callable[[float], None] = time.sleep) -> Uploaded:
    """Hand the allowed regular files directly in ``src_dir`` back to the operator (links are not followed).

    The archive is built once (in a temporary file) and the same bytes are sent on every attempt, so a
    retry after an answer that never arrived leaves the server where the first attempt did.
    """
    host, port, path = _target(url)
    context = client_ssl_context(ca_file)
    src_fd = os.open(src_dir, _DIR)
    try:
        members, skipped = archive.open_members(src_fd)
    finally:
        os.close(src_fd)
    with tempfile.TemporaryFile() as body:
        digest = hashlib.sha256()
        try:
            for chunk in archive.stream(members):
                digest.update(chunk)
                body.write(chunk)
        finally:
            archive.close_members(members)
        size = body.tell()
        if size > max_bytes:
            raise TransferRefused(413, f"the session ({size} bytes) is larger than the cap of {max_bytes} bytes")
        hex_digest = digest.hexdigest()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/vnd.pi-dispatch.transfer.v1",
                   "Content-Length": str(size), DIGEST_HEADER: digest_header(hex_digest)}

        def attempt() -> dict[str, Any]:
            body.seek(0)
            connection = http.client.HTTPSConnection(host, port, context=context, timeout=timeout)
            try:
                try:
                    connection.request("PUT", path, body=body, headers=headers)
                except OSError as sending:
                    # The server may answer before the body is in (a 413 from Content-Length) and close:
                    # the send then fails, but its answer is already on the wire. Read it; else the send's error.
                    try:
                        response = connection.getresponse()
                    except (OSError, http.client.HTTPException):
                        raise sending from None
                else:
                    response = connection.getresponse()
                _judge(response)
                marker = json.loads(response.read(64 * 1024))
                if not isinstance(marker, dict) or marker.get("digest") != hex_digest:
                    raise _Retry("the server's answer does not name this upload's digest")
                return marker
            finally:
                connection.close()

        marker = _retrying(attempt, attempts=attempts, backoff=backoff, what="uploading the session", sleep=sleep)
    return Uploaded(hex_digest, size, tuple(m.name for m in members), tuple(skipped), marker)
