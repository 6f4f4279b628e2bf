"""The operator's transfer server: a job fetches its staged copy and hands its result back, over TLS only.

``GET /v1/jobs/<uid>/session`` streams the regular files directly in ``<staging>/<uid>/session/``
(names from the directory's listing, on the allow-list, opened without following a link).
``PUT /v1/jobs/<uid>/session`` takes the result (``protocol.py`` has the answers):

1. the uid is checked to be a Kubernetes uid, then the token to be that uid's, then its staging
   directory to exist (a request never creates one), then no other upload of that uid to be in
   flight (else 409 with ``Retry-After``: the staging volume holds one upload per job at most);
2. the body streams into ``<uid>/upload-<random>/.body``, counted against the cap as it arrives (413
   and the connection closed the moment it passes: the rest is never read) and hashed;
3. the hash must be the ``X-Pi-Transfer-Digest`` header's (else 400), and the archive must unpack
   under the allow-list (else 400) into ``upload-<random>/``;
4. under the uid's lock: the marker ``uploaded.json`` is removed, the new directory is exchanged
   with ``session/`` in one ``renameat2(RENAME_EXCHANGE)`` (two renames where the filesystem cannot
   exchange), the old copy removed, then the marker written (digest, bytes, files, time).

Whatever fails before step 4 (a cut connection, the cap, a bad digest or archive) removes the upload
directory and leaves ``session/`` and the marker as they were; so does a body that does not arrive whole
within the body deadline (408, the connection closed). A fetch whose reader stalls past the same deadline
is cut off. The connection cap and the head deadline are the listener's (``gate.py``).

The marker is the commit: the completion treats a succeeded Pod whose Job has no marker as Failed
(nothing promoted), so a crash inside step 4 is a Job that fails, never half a result promoted. The same
bytes uploaded again give the same files and the same marker (but its time): a runner may retry an
upload whose answer it did not see.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import hashlib
import json
import os
import secrets
import shutil
import ssl
import time
import weakref
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from pidispatch.events import emit
from pidispatch.settings.staging import TransferLimits
from pidispatch.transfer import archive
from pidispatch.transfer.gate import ConnectionGate
from pidispatch.transfer.protocol import (
    DIGEST_HEADER,
    MARKER,
    SESSION_PATH,
    UPLOAD_PREFIX,
    is_uid,
    parse_digest_header,
)
from pidispatch.transfer.token import token_matches

SESSION = "session"  # store/staging.py's SESSION: the directory a mount would have put at /session
BODY = ".body"  # the raw upload inside upload-<random>/ (not on the allow-list, so never unpacked over)
CONTENT_TYPE = "application/vnd.pi-dispatch.transfer.v1"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_RENAME_EXCHANGE = 2
# What a runner refused for an upload of its job already in flight is told to wait (its own earlier
# attempt, whose answer it did not see, is still being read or committed).
BUSY_RETRY_AFTER = 2


class TransferTLSError(ValueError):
    """The server was asked to start without a usable certificate and key: it never serves plain HTTP."""


@dataclass(frozen=True)
class TransferConfig:
    """What the server needs: the staging root, the operator's key, the cap on a body in bytes, the limits."""

    staging_root: str
    key: bytes
    max_bytes: int
    limits: TransferLimits = TransferLimits()


CONFIG_KEY: web.AppKey[TransferConfig] = web.AppKey("transfer", TransferConfig)


def server_ssl_context(cert_file: str | None, key_file: str | None) -> ssl.SSLContext:
    """The server's TLS context from a PEM certificate (chain) and key; refuses to make one without them."""
    if not cert_file or not key_file:
        raise TransferTLSError("the transfer server needs a TLS certificate and key (it never serves plain HTTP): "
                               "set both files (the chart mounts its transfer TLS Secret)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise TransferTLSError(f"cannot load the transfer server's certificate {cert_file} and key {key_file}: "
                               f"{exc}") from None
    return context


class _Refused(Exception):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.why = why


def _answer(status: int, why: str, uid: str | None, method: str) -> web.Response:
    emit("transfer_refused", job=uid, method=method, status=status, why=why)
    response = web.json_response({"error": why}, status=status)
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="pi-dispatch transfer"'
    return response


class _Handlers:
    def __init__(self, config: TransferConfig) -> None:
        self.config = config
        # One commit per uid at a time; an entry lives while someone holds or awaits it.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        # The uids with an upload in flight, from before its directory is made to after it is gone.
        self._uploading: set[str] = set()

    def _lock(self, uid: str) -> asyncio.Lock:
        lock = self._locks.get(uid)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[uid] = lock
        return lock

    def _job_dir(self, request: web.Request) -> tuple[str, int]:
        """The uid and an fd of its staging directory, or :class:`_Refused` (404 before 401 only for a non-uid)."""
        uid = request.match_info["uid"]
        if not is_uid(uid):
            raise _Refused(404, "no such job")
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token_matches(self.config.key, uid, presented.strip()):
            raise _Refused(401, "the token is not this job's")
        try:
            return uid, os.open(os.path.join(self.config.staging_root, uid), _DIR)
        except OSError:
            raise _Refused(404, "no staging directory for this job") from None

    async def fetch(self, request: web.Request) -> web.StreamResponse:
        uid: str | None = None
        try:
            uid, job_fd = self._job_dir(request)
            try:
                session_fd = os.open(SESSION, _DIR, dir_fd=job_fd)
            except OSError:
                raise _Refused(404, "no staged session for this job") from None
            finally:
                os.close(job_fd)
        except _Refused as refused:
            return _answer(refused.status, refused.why, uid or None, "GET")
        try:
            members, skipped = archive.open_members(session_fd)
        finally:
            os.close(session_fd)
        response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE, "Cache-Control": "no-store"})
        try:
            response.content_length = archive.archive_size(members)
            await asyncio.wait_for(self._send(request, response, members), self.config.limits.body_seconds)
        except TimeoutError:
            # The answer has begun: no status can say so. The runner sees a short body and retries.
            emit("transfer_refused", job=uid, method="GET", status=408,
                 why=f"the staged copy was not read within {self.config.limits.body_seconds:g}s")
            if request.transport is not None:
                request.transport.abort()
            return response
        finally:
            archive.close_members(members)
        emit("transfer_fetched", job=uid, bytes=response.content_length, files=[m.name for m in members],
             skipped=len(skipped))
        return response

    @staticmethod
    async def _send(request: web.Request, response: web.StreamResponse, members: list[archive.Member]) -> None:
        await response.prepare(request)
        for chunk in archive.stream(members):
            await response.write(chunk)
        await response.write_eof()

    async def upload(self, request: web.Request) -> web.StreamResponse:
        uid: str | None = None
        try:
            uid, job_fd = self._job_dir(request)
        except _Refused as refused:
            return _answer(refused.status, refused.why, None, "PUT")
        if uid in self._uploading:
            os.close(job_fd)
            response = _answer(409, "an upload of this job is already in flight; retry when it has ended", uid,
                               "PUT")
            response.headers["Retry-After"] = str(BUSY_RETRY_AFTER)
            response.force_close()  # its body is never read
            return response
        self._uploading.add(uid)
        upload = f"{UPLOAD_PREFIX}{secrets.token_hex(8)}"
        made = False
        try:
            declared = parse_digest_header(request.headers.get(DIGEST_HEADER))
            if declared is None:
                raise _Refused(400, f"{DIGEST_HEADER}: sha256=<hex of the body> is required")
            if request.content_length is not None and request.content_length > self.config.max_bytes:
                raise _Refused(413, f"the body is larger than the cap of {self.config.max_bytes} bytes")
            os.mkdir(upload, 0o700, dir_fd=job_fd)
            made = True
            try:
                received, size = await asyncio.wait_for(self._receive(request, job_fd, upload),
                                                        self.config.limits.body_seconds)
            except TimeoutError:
                raise _Refused(408, f"the body did not arrive within {self.config.limits.body_seconds:g}s") \
                    from None
            if received != declared:
                raise _Refused(400, "the body's SHA-256 is not the one in " + DIGEST_HEADER)
            unpacked = await asyncio.to_thread(_unpack, job_fd, upload, self.config.max_bytes)
            async with self._lock(uid):
                marker = await asyncio.to_thread(_commit, job_fd, upload, received, size, unpacked)
                made = False
        except _Refused as refused:
            response = _answer(refused.status, refused.why, uid, "PUT")
            if refused.status in (408, 413):
                response.force_close()  # the rest of the body is never read
            return response
        finally:
            if made:
                shutil.rmtree(upload, dir_fd=job_fd, ignore_errors=True)
            os.close(job_fd)
            self._uploading.discard(uid)
        emit("transfer_uploaded", job=uid, bytes=size, files=[name for name, _ in unpacked.files])
        return web.json_response(marker)

    async def _receive(self, request: web.Request, job_fd: int, upload: str) -> tuple[str, int]:
        """Stream the body into ``upload/.body``: (its SHA-256, its length); 413 as soon as it passes the cap."""
        digest = hashlib.sha256()
        total = 0
        upload_fd = os.open(upload, _DIR, dir_fd=job_fd)
        try:
            fd = os.open(BODY, _CREATE, 0o600, dir_fd=upload_fd)
        finally:
            os.close(upload_fd)
        try:
            while chunk := await request.content.read(archive.CHUNK):
                total += len(chunk)
                if total > self.config.max_bytes:
                    raise _Refused(413, f"the body is larger than the cap of {self.config.max_bytes} bytes")
                digest.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return digest.hexdigest(), total


def _unpack(job_fd: int, upload: str, max_bytes: int) -> archive.Unpacked:
    """Unpack ``upload/.body`` into ``upload/`` and remove the body; 400 on an archive out of shape."""
    upload_fd = os.open(upload, _DIR, dir_fd=job_fd)
    try:
        body = os.open(BODY, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=upload_fd)
        try:
            with os.fdopen(body, "rb", closefd=False) as handle:
                unpacked = archive.unpack(handle.read, upload_fd, max_bytes=max_bytes)
        except archive.ArchiveError as exc:
            raise _Refused(413 if isinstance(exc, archive.OverCap) else 400, str(exc)) from None
        finally:
            os.close(body)
        os.unlink(BODY, dir_fd=upload_fd)
        os.fsync(upload_fd)
        return unpacked
    finally:
        os.close(upload_fd)


def _commit(job_fd: int, upload: str, digest: str, size: int, unpacked: archive.Unpacked) -> dict[str, Any]:
    """Put ``upload/`` in place of ``session/``, remove the old copy, then write the marker (the commit)."""
    try:
        os.unlink(MARKER, dir_fd=job_fd)
    except FileNotFoundError:
        pass
    os.fsync(job_fd)
    old = _swap(job_fd, upload)
    if old is not None:
        shutil.rmtree(old, dir_fd=job_fd, ignore_errors=True)
    marker = {"digest": digest, "bytes": size, "files": [list(f) for f in unpacked.files],
              "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    data = json.dumps(marker, separators=(",", ":"), sort_keys=True).encode()
    temp = f".{MARKER}.incoming-{secrets.token_hex(4)}"
    fd = os.open(temp, _CREATE, 0o600, dir_fd=job_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, MARKER, src_dir_fd=job_fd, dst_dir_fd=job_fd)
    os.fsync(job_fd)
    return marker


def _swap(job_fd: int, upload: str) -> str | None:
    """Make ``upload`` the new ``session``; the name the old copy now has (to remove), or ``None``."""
    try:
        os.stat(SESSION, dir_fd=job_fd, follow_symlinks=False)
    except FileNotFoundError:  # a crash inside an earlier fallback swap left none
        os.rename(upload, SESSION, src_dir_fd=job_fd, dst_dir_fd=job_fd)
        return None
    if _exchange(job_fd, upload, SESSION):
        os.fsync(job_fd)
        return upload
    aside = f"{upload}.old"
    os.rename(SESSION, aside, src_dir_fd=job_fd, dst_dir_fd=job_fd)
    os.rename(upload, SESSION, src_dir_fd=job_fd, dst_dir_fd=job_fd)
    os.fsync(job_fd)
    return aside


def _exchange(dir_fd: int, a: str, b: str) -> bool:
    """``renameat2(RENAME_EXCHANGE)``: swap two names atomically; False where the system or filesystem cannot."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(dir_fd, a.encode(), dir_fd, b.encode(), _RENAME_EXCHANGE) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(error, f"exchange of {a} and {b}: {os.strerror(error)}")


_LIBC: Any = None


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def build_app(config: TransferConfig) -> web.Application:
    """The transfer app (serve it only with :func:`start`, which insists on TLS)."""
    if config.max_bytes <= 0:
        raise ValueError("the transfer cap must be a positive number of bytes")
    if min(config.limits.max_connections, config.limits.head_seconds, config.limits.idle_seconds,
           config.limits.body_seconds) <= 0:
        raise ValueError(f"the transfer limits must be positive: {config.limits}")
    handlers = _Handlers(config)
    app = web.Application()
    app[CONFIG_KEY] = config
    app.router.add_get(SESSION_PATH, handlers.fetch, allow_head=False)
    app.router.add_put(SESSION_PATH, handlers.upload)
    return app


async def start(app: web.Application, host: str | None, port: int,
                ssl_context: ssl.SSLContext | None) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` with TLS; the runner (``await runner.cleanup()`` to stop) and the bound port.

    Refuses (:class:`TransferTLSError`) without an SSL context: there is no plain-HTTP mode to turn on.
    The listener is a :class:`ConnectionGate` with the app's limits, not aiohttp's ``TCPSite``: the cap
    and the head deadline must sit in front of the TLS handshake.
    """
    if not isinstance(ssl_context, ssl.SSLContext):
        raise TransferTLSError("the transfer server serves TLS only: give it the context from server_ssl_context()")
    limits = app[CONFIG_KEY].limits
    # lingering_time=0: aiohttp would otherwise read (and drop) the rest of a refused body for 10 s, which
    # is exactly the reading the cap exists to stop. keepalive_timeout bounds an idle connection.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=5.0, lingering_time=0,
                           keepalive_timeout=limits.idle_seconds)
    gate = ConnectionGate(lambda: _server(runner)(), ssl_context, limit=limits.max_connections,
                          head_seconds=limits.head_seconds)
    app.middlewares.append(gate.middleware)
    app.on_shutdown.append(gate.shutdown)
    await runner.setup()
    try:
        bound = await gate.listen(host, port)
    except BaseException:
        await runner.cleanup()
        raise
    emit("transfer_listening", port=bound, maxConnections=limits.max_connections, headSeconds=limits.head_seconds,
         idleSeconds=limits.idle_seconds, bodySeconds=limits.body_seconds)
    return runner, bound


def _server(runner: web.AppRunner) -> web.Server:
    server = runner.server
    if server is None:
        raise RuntimeError("the transfer runner is not set up")
    return server
