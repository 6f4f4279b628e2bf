"""The transfer server's limits: what a connection may cost before and after its token is checked.

Real sockets on loopback against the real server (``transfer/server.py`` behind ``transfer/gate.py``) with
short limits: a flood of idle connections against a server whose process may open few files, one
connection over the cap, connections that never finish their handshake or head, a body that trickles,
and two uploads of one job at once. Each test takes a few seconds at most.
"""

from __future__ import annotations

import hashlib
import os
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pidispatch.settings.staging import TransferLimits
from pidispatch.transfer import archive, client, protocol
from pidispatch.transfer.token import job_token
from testkit.transferkit import Pki, Server, make_pki, server_process

KEY = b"k" * 16 + os.urandom(16)
CAP = 4 * 1024 * 1024
TRANSCRIPT = b'{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/workspace"}\n'
SHORT = TransferLimits(max_connections=8, head_seconds=0.5, idle_seconds=1.0, body_seconds=1.0)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), "limits")


@pytest.fixture
def staging(tmp_path: Path) -> Path:
    root = tmp_path / "jobs"
    root.mkdir()
    return root


@pytest.fixture
def server(staging: Path, pki: Pki) -> Iterator[Server]:
    running = Server(staging, pki, CAP, KEY, SHORT)
    yield running
    running.close()


def stage_job(staging: Path) -> str:
    uid = str(uuid.uuid4())
    (staging / uid / "session").mkdir(parents=True)
    (staging / uid / "session" / "current.jsonl").write_bytes(TRANSCRIPT)
    return uid


def uploads_in_flight(staging: Path, uid: str) -> list[str]:
    return [p.name for p in (staging / uid).iterdir() if p.name.startswith(protocol.UPLOAD_PREFIX)]


def result_archive(size: int) -> bytes:
    """A valid archive of about ``size`` bytes: what a runner hands back."""
    members = [(b"current.jsonl", TRANSCRIPT + b'{"type":"message"}\n' * (size // 19))]
    body = archive.MAGIC
    for name, data in members:
        body += len(name).to_bytes(2, "big") + name + len(data).to_bytes(8, "big") + data
    body += (0).to_bytes(2, "big")
    return body + hashlib.sha256(body).digest()


def tls(port: int, pki: Pki) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return client.client_ssl_context(str(pki.ca)).wrap_socket(raw, server_hostname="localhost")


def put_head(uid: str, body: bytes) -> bytes:
    return (f"PUT /v1/jobs/{uid}/session HTTP/1.1\r\nHost: localhost\r\n"
            f"Authorization: Bearer {job_token(KEY, uid)}\r\nContent-Length: {len(body)}\r\n"
            f"{protocol.DIGEST_HEADER}: {protocol.digest_header(hashlib.sha256(body).hexdigest())}\r\n\r\n").encode()


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` (reading and dropping what it sends), or ``None`` if it did not."""
    started = time.monotonic()
    sock.settimeout(0.05)
    while time.monotonic() - started < seconds:
        try:
            if not sock.recv(65536):
                return time.monotonic() - started
        except TimeoutError:
            continue
        except (ConnectionError, ssl.SSLError):
            return time.monotonic() - started
    return None


def answer_of(sock: socket.socket) -> bytes:
    """What the server sends until it closes, or goes quiet for 0.3 s once it has begun (5 s at most)."""
    data = b""
    deadline = time.monotonic() + 5
    sock.settimeout(0.3)
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if data:
                break
            continue
        except (ConnectionError, ssl.SSLError):
            break
        if not chunk:
            break
        data += chunk
    return data


# -- connections ------------------------------------------------------------------------------------------------
def test_a_flood_of_idle_connections_does_not_stop_a_jobs_fetch(staging: Path, pki: Pki, tmp_path: Path) -> None:
    """300 idle connections against a server process that may open 256 files: the process never runs out
    (the cap keeps it far below; a connection over it is closed a few turns of the loop after its accept),
    the idle ones are dropped at the head deadline, and a job's fetch,
    with the runner's own retries, gets its copy."""
    uid = stage_job(staging)
    limits = TransferLimits(max_connections=32, head_seconds=1.0, idle_seconds=1.0, body_seconds=5.0)
    flood: list[socket.socket] = []
    with server_process(staging, pki, CAP, KEY, limits, max_files=256) as running:
        try:
            for _ in range(300):
                try:
                    flood.append(socket.create_connection(("127.0.0.1", running.port), timeout=0.2))
                except OSError:
                    pass  # a backlog that is full: the server stopped accepting
            # A connection over the cap is closed a few turns of the server's loop after its accept: give
            # the last ones a moment (well inside the head deadline, which would free the admitted ones too).
            settle = time.monotonic() + 0.4
            while (held := len(os.listdir(f"/proc/{running.pid}/fd"))) >= 32 + 24 and time.monotonic() < settle:
                time.sleep(0.02)
            assert held < 32 + 24, f"the server holds {held} files with 300 idle connections open"
            pod = tmp_path / "pod"
            pod.mkdir()
            fetched = client.fetch(running.url(uid), job_token(KEY, uid), str(pki.ca), str(pod), max_bytes=CAP,
                                   attempts=5, backoff=0.2, timeout=1.5)
            assert [name for name, _ in fetched.files] == ["current.jsonl"]
            assert (pod / "current.jsonl").read_bytes() == TRANSCRIPT
        finally:
            for sock in flood:
                sock.close()


def test_a_connection_over_the_cap_is_closed_at_once_unread(server: Server, pki: Pki, staging: Path,
                                                           tmp_path: Path) -> None:
    held = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(SHORT.max_connections)]
    try:
        time.sleep(0.1)  # accepted
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        with extra:
            assert closed_within(extra, 0.3) is not None, "the connection over the cap was kept"
    finally:
        for sock in held:
            sock.close()
    uid = stage_job(staging)  # the slots come back as the held connections close
    pod = tmp_path / "pod"
    pod.mkdir()
    client.fetch(server.url(uid), job_token(KEY, uid), str(pki.ca), str(pod), max_bytes=CAP, attempts=3,
                 backoff=0.1, timeout=2)


def _plain(port: int, pki: Pki) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _handshaken(port: int, pki: Pki) -> socket.socket:
    return tls(port, pki)


@pytest.mark.parametrize("opened", [_plain, _handshaken], ids=["no TLS handshake", "no request head"])
def test_a_connection_without_a_request_head_is_closed_at_the_head_deadline(server: Server, pki: Pki,
                                                                            opened: object) -> None:
    assert callable(opened)
    sock = opened(server.port, pki)
    with sock:
        after = closed_within(sock, SHORT.head_seconds + 2.0)
    assert after is not None, "the connection was still open 2 s past the head deadline"
    assert after < SHORT.head_seconds + 1.0


def test_a_request_head_that_trickles_is_cut_at_the_head_deadline(server: Server, pki: Pki) -> None:
    """A byte of the head every 50 ms (it would take seconds), the last line never sent; one thread both
    sends and watches, as an SSL socket is not to be shared between threads."""
    head = put_head(str(uuid.uuid4()), b"x")[:-2]
    sock = tls(server.port, pki)
    started = time.monotonic()
    closed = None
    with sock:
        sock.settimeout(0.05)
        for byte in head:
            if time.monotonic() - started > SHORT.head_seconds + 2.0:
                break
            try:
                if not sock.recv(65536):
                    closed = time.monotonic() - started
                    break
            except TimeoutError:
                pass
            except (ConnectionError, ssl.SSLError):
                closed = time.monotonic() - started
                break
            try:
                sock.send(bytes([byte]))
            except OSError:
                closed = time.monotonic() - started
                break
    assert closed is not None, "a head was still being trickled 2 s past the head deadline"
    assert closed < SHORT.head_seconds + 1.0


def test_an_idle_keep_alive_connection_is_closed(server: Server, pki: Pki, staging: Path) -> None:
    uid = stage_job(staging)
    sock = tls(server.port, pki)
    with sock:
        sock.sendall(f"GET /v1/jobs/{uid}/session HTTP/1.1\r\nHost: localhost\r\n"
                     f"Authorization: Bearer {job_token(KEY, uid)}\r\n\r\n".encode())
        sock.settimeout(3)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        after = closed_within(sock, SHORT.idle_seconds + 2.0)
    assert after is not None, "an idle keep-alive connection was still open 2 s past the idle bound"


# -- bodies -----------------------------------------------------------------------------------------------------
def test_a_trickled_upload_is_cut_at_the_body_deadline(server: Server, pki: Pki, staging: Path) -> None:
    uid = stage_job(staging)
    body = result_archive(64 * 1024)
    sock = tls(server.port, pki)
    with sock:
        sock.sendall(put_head(uid, body))
        started = time.monotonic()
        sent = 0
        answer = b""
        sock.settimeout(0.1)
        while time.monotonic() - started < 5 and sent < len(body):
            try:
                answer = sock.recv(65536)
                break
            except TimeoutError:
                pass
            sock.send(body[sent:sent + 16])  # 160 bytes a second: the body would take minutes
            sent += 16
        elapsed = time.monotonic() - started
        answer += answer_of(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"did not arrive within 1s" in answer
    assert elapsed < SHORT.body_seconds + 1.0
    assert uploads_in_flight(staging, uid) == []
    assert (staging / uid / "session" / "current.jsonl").read_bytes() == TRANSCRIPT
    assert not (staging / uid / protocol.MARKER).exists()


def test_a_second_concurrent_upload_of_one_job_is_refused(staging: Path, pki: Pki) -> None:
    running = Server(staging, pki, CAP, KEY, TransferLimits(max_connections=8, head_seconds=2, idle_seconds=2,
                                                            body_seconds=8))
    try:
        uid = stage_job(staging)
        other = stage_job(staging)
        body = result_archive(256 * 1024)
        first = tls(running.port, pki)
        with first:
            first.sendall(put_head(uid, body) + body[:len(body) // 2])
            deadline = time.monotonic() + 5
            while not uploads_in_flight(staging, uid) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(uploads_in_flight(staging, uid)) == 1

            second = tls(running.port, pki)
            with second:
                second.sendall(put_head(uid, body) + body)
                refused = answer_of(second)
            assert refused.startswith(b"HTTP/1.1 409"), refused[:200]
            assert b"Retry-After: " in refused and b"already in flight" in refused
            assert len(uploads_in_flight(staging, uid)) == 1  # the second never made a directory

            another = tls(running.port, pki)  # another job's upload is not held up
            with another:
                other_body = result_archive(1024)
                another.sendall(put_head(other, other_body) + other_body)
                assert answer_of(another).startswith(b"HTTP/1.1 200")

            first.sendall(body[len(body) // 2:])
            assert answer_of(first).startswith(b"HTTP/1.1 200")
        assert uploads_in_flight(staging, uid) == []
        assert (staging / uid / "session" / "current.jsonl").read_bytes() == body[len(archive.MAGIC) + 2 + 13 + 8:
                                                                                  -(2 + 32)]
        third = tls(running.port, pki)  # the job's slot is free again
        with third:
            third.sendall(put_head(uid, body) + body)
            assert answer_of(third).startswith(b"HTTP/1.1 200")
    finally:
        running.close()
