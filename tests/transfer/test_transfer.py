"""Staging by transfer (issue 33 item 2): a job fetches its staged copy and hands the result back over HTTPS.

Real TLS on loopback with a CA and certificates made here, a real aiohttp server on its own loop, the
runner's standard-library client, and real files in a temporary staging directory. Requests the client
would never make (a forged archive, a wrong digest, a body cut off, a stream past the cap) are sent raw.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pidispatch.transfer import archive, client, protocol
from pidispatch.transfer.server import TransferConfig, TransferTLSError, build_app, server_ssl_context, start
from pidispatch.transfer.token import TransferKeyError, job_token, load_key, token_matches
from testkit.transferkit import WAIT, Pki, Server, make_pki

KEY = b"k" * 16 + os.urandom(16)
CAP = 4 * 1024 * 1024
TRANSCRIPT = b'{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/workspace"}\n'


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT:.0f}s: {what}")
        time.sleep(0.01)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), "transfer")


@pytest.fixture(scope="module")
def rogue(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("rogue"), "rogue")



@pytest.fixture
def staging(tmp_path: Path) -> Path:
    root = tmp_path / "jobs"
    root.mkdir()
    return root


@pytest.fixture
def server(staging: Path, pki: Pki) -> Iterator[Server]:
    running = Server(staging, pki, CAP, KEY)
    yield running
    running.close()


def stage_job(staging: Path, files: dict[str, bytes] | None = None) -> str:
    """A Job's staging directory as ``store/staging.py`` makes it: ``<uid>/session/`` with the staged copy."""
    uid = str(uuid.uuid4())
    session = staging / uid / "session"
    session.mkdir(parents=True)
    for name, data in (files if files is not None else {"current.jsonl": TRANSCRIPT}).items():
        (session / name).write_bytes(data)
    return uid


def snapshot(staging: Path, uid: str) -> dict[str, object]:
    """Everything under the Job's directory (names, and bytes of files), to show a refusal changed nothing."""
    base = staging / uid
    seen: dict[str, object] = {}
    for path in sorted(base.rglob("*")):
        rel = str(path.relative_to(base))
        seen[rel] = path.read_bytes() if path.is_file() and not path.is_symlink() else "dir"
    return seen


def leftovers(staging: Path, uid: str) -> list[str]:
    return [p.name for p in (staging / uid).iterdir() if p.name.startswith(protocol.UPLOAD_PREFIX)]


def raw_archive(entries: list[tuple[bytes, bytes]], *, trailer: bytes | None = None, tail: bytes = b"") -> bytes:
    """An archive in the wire format with whatever names and a right (or given) trailer: what a forger sends."""
    body = archive.MAGIC
    for name, data in entries:
        body += struct.pack(">H", len(name)) + name + struct.pack(">Q", len(data)) + data
    body += struct.pack(">H", 0)
    return body + (trailer if trailer is not None else hashlib.sha256(body).digest()) + tail


def connect(server: Server, pki: Pki) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection("localhost", server.port, context=client.client_ssl_context(str(pki.ca)),
                                       timeout=WAIT)


def raw_put(server: Server, pki: Pki, uid: str, body: bytes, *, token: str | None = None,
            digest: str | None = None) -> tuple[int, dict[str, object]]:
    connection = connect(server, pki)
    try:
        headers = {"Authorization": f"Bearer {token or job_token(KEY, uid)}",
                   protocol.DIGEST_HEADER: protocol.digest_header(digest or hashlib.sha256(body).hexdigest())}
        connection.request("PUT", f"/v1/jobs/{uid}/session", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def no_sleep(calls: list[float]) -> Callable[[float], None]:
    return calls.append


# -- the round trip ---------------------------------------------------------------------------------------------
def test_round_trip_lands_the_result_in_the_staged_session_and_writes_the_marker(
        server: Server, pki: Pki, staging: Path, tmp_path: Path) -> None:
    uid = stage_job(staging, {"current.jsonl": TRANSCRIPT, "letter.md": b"# letter\n", "ledger.md": b"# Ledger\n"})
    pod = tmp_path / "pod-session"
    pod.mkdir()
    token = job_token(KEY, uid)

    fetched = client.fetch(server.url(uid), token, str(pki.ca), str(pod), max_bytes=CAP)

    assert sorted(name for name, _ in fetched.files) == ["current.jsonl", "ledger.md", "letter.md"]
    assert (pod / "current.jsonl").read_bytes() == TRANSCRIPT
    assert sorted(os.listdir(pod)) == ["current.jsonl", "ledger.md", "letter.md"]  # no .incoming-* left
    grown = TRANSCRIPT + b'{"type":"message","id":"m1"}\n' * 1000
    (pod / "current.jsonl").write_bytes(grown)
    (pod / "handoff.json").write_bytes(b'{"status":"landed"}')
    (pod / "letter.md").unlink()

    sent = client.upload(server.url(uid), token, str(pki.ca), str(pod), max_bytes=CAP)

    session = staging / uid / "session"
    assert sorted(os.listdir(session)) == ["current.jsonl", "handoff.json", "ledger.md"]
    assert (session / "current.jsonl").read_bytes() == grown
    marker = json.loads((staging / uid / protocol.MARKER).read_text())
    assert marker["digest"] == sent.digest and marker["bytes"] == sent.bytes
    assert sorted(os.listdir(staging / uid)) == ["session", protocol.MARKER]  # no upload-* or old copy left


def test_a_retried_identical_upload_gives_the_same_result(server: Server, pki: Pki, staging: Path) -> None:
    uid = stage_job(staging)
    body = raw_archive([(b"current.jsonl", TRANSCRIPT + b'{"type":"message","id":"m2"}\n')])

    first = raw_put(server, pki, uid, body)
    after_first = snapshot(staging, uid)
    second = raw_put(server, pki, uid, body)

    assert first[0] == second[0] == 200
    assert {k: v for k, v in first[1].items() if k != "at"} == {k: v for k, v in second[1].items() if k != "at"}
    after_second = snapshot(staging, uid)
    assert {k: v for k, v in after_second.items() if k != protocol.MARKER} == \
        {k: v for k, v in after_first.items() if k != protocol.MARKER}


# -- who may ask ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("token", [
    pytest.param(lambda other: job_token(KEY, other), id="another-jobs-token"),
    pytest.param(lambda other: "", id="no-token"),
    pytest.param(lambda other: job_token(b"x" * 32, other), id="a-token-made-with-another-key"),
])
def test_a_token_that_is_not_the_jobs_own_reads_and_writes_nothing(
        server: Server, pki: Pki, staging: Path, tmp_path: Path, token: Callable[[str], str]) -> None:
    victim = stage_job(staging, {"current.jsonl": b"secret conversation\n"})
    other = stage_job(staging)
    before = snapshot(staging, victim)
    pod = tmp_path / "pod"
    pod.mkdir()
    (pod / "current.jsonl").write_bytes(b"overwritten\n")
    sleeps: list[float] = []

    with pytest.raises(client.TransferRefused) as fetched:
        client.fetch(server.url(victim), token(other), str(pki.ca), str(tmp_path), max_bytes=CAP,
                     sleep=no_sleep(sleeps))
    with pytest.raises(client.TransferRefused) as uploaded:
        client.upload(server.url(victim), token(other), str(pki.ca), str(pod), max_bytes=CAP, sleep=no_sleep(sleeps))

    assert fetched.value.status == uploaded.value.status == 401
    assert sleeps == []  # a refusal is final, not retried
    assert snapshot(staging, victim) == before
    assert not any(p.name.startswith(".incoming") for p in tmp_path.iterdir())


def test_tokens_are_bound_to_a_uid_and_a_key(tmp_path: Path) -> None:
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    assert job_token(KEY, a) == job_token(KEY, a) and len(job_token(KEY, a)) == 64
    assert job_token(KEY, a) != job_token(KEY, b)
    assert token_matches(KEY, a, job_token(KEY, a))
    assert not token_matches(KEY, a, job_token(KEY, b))
    assert not token_matches(KEY, a, None)
    short = tmp_path / "short"
    short.write_bytes(b"too short\n")
    with pytest.raises(TransferKeyError, match="at least 32"):
        load_key(str(short))
    good = tmp_path / "good"
    good.write_bytes(KEY + b"\n")
    assert load_key(str(good)) == KEY


@pytest.mark.parametrize("method", ["GET", "PUT"])
def test_a_uid_without_a_staging_directory_is_404_and_none_is_made(
        server: Server, pki: Pki, staging: Path, method: str) -> None:
    unknown = str(uuid.uuid4())
    connection = connect(server, pki)
    body = raw_archive([(b"current.jsonl", TRANSCRIPT)])
    connection.request(method, f"/v1/jobs/{unknown}/session", body=body if method == "PUT" else None,
                       headers={"Authorization": f"Bearer {job_token(KEY, unknown)}",
                                protocol.DIGEST_HEADER: protocol.digest_header(hashlib.sha256(body).hexdigest())})
    assert connection.getresponse().status == 404
    connection.close()
    assert not (staging / unknown).exists()
    assert os.listdir(staging) == []


@pytest.mark.parametrize("uid", ["not-a-uid", "..", "ABCDEF01-2345-6789-abcd-ef0123456789", "%2e%2e"])
def test_a_path_that_is_not_a_kubernetes_uid_is_404(server: Server, pki: Pki, staging: Path, uid: str) -> None:
    (staging / "not-a-uid" / "session").mkdir(parents=True)  # even where a directory of that name exists
    (staging / "not-a-uid" / "session" / "current.jsonl").write_bytes(TRANSCRIPT)
    connection = connect(server, pki)
    connection.request("GET", f"/v1/jobs/{uid}/session", headers={"Authorization": f"Bearer {job_token(KEY, uid)}"})
    assert connection.getresponse().status == 404
    connection.close()


# -- what may travel --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    pytest.param(raw_archive([(b"../escape", b"x")]), id="dot-dot"),
    pytest.param(raw_archive([(b"/etc/cron.d/x", b"x")]), id="absolute"),
    pytest.param(raw_archive([(b"session/current.jsonl", b"x")]), id="a-subdirectory"),
    pytest.param(raw_archive([(b"notes.txt", b"x")]), id="unknown-name"),
    pytest.param(raw_archive([(b".current.jsonl.runner-7.tmp", b"x")]), id="the-runners-temp-file"),
    pytest.param(raw_archive([(b"current.jsonl", b"a"), (b"current.jsonl", b"b")]), id="a-name-twice"),
    pytest.param(raw_archive([(b"current.jsonl", TRANSCRIPT)], trailer=b"\0" * 32), id="wrong-trailer"),
    pytest.param(raw_archive([(b"current.jsonl", TRANSCRIPT)], tail=b"more"), id="bytes-after-the-end"),
    pytest.param(raw_archive([(b"current.jsonl", TRANSCRIPT)])[:-40], id="truncated"),
    pytest.param(b"\x1f\x8b" + b"\0" * 64, id="not-this-format"),
])
def test_an_archive_out_of_shape_is_refused_and_the_staged_copy_kept(
        server: Server, pki: Pki, staging: Path, body: bytes) -> None:
    uid = stage_job(staging)
    before = snapshot(staging, uid)

    status, answer = raw_put(server, pki, uid, body)

    assert status == 400, answer
    assert snapshot(staging, uid) == before
    assert not (staging.parent / "escape").exists()


def test_a_digest_that_does_not_match_the_body_is_refused(server: Server, pki: Pki, staging: Path) -> None:
    uid = stage_job(staging)
    before = snapshot(staging, uid)
    body = raw_archive([(b"current.jsonl", b"changed\n")])

    status, answer = raw_put(server, pki, uid, body, digest=hashlib.sha256(body + b"x").hexdigest())

    assert status == 400 and "SHA-256" in str(answer["error"])
    assert snapshot(staging, uid) == before


def test_the_client_sends_no_link_and_no_unknown_name(server: Server, pki: Pki, staging: Path, tmp_path: Path) -> None:
    uid = stage_job(staging)
    secret = tmp_path / "secret"
    secret.write_bytes(b"the operator's private key\n")
    pod = tmp_path / "pod"
    pod.mkdir()
    (pod / "current.jsonl").symlink_to(secret)
    (pod / "ledger.md").symlink_to(secret)
    (pod / "notes.txt").write_bytes(b"the agent's own file\n")
    os.mkfifo(pod / "handoff.json")
    (pod / "letter.md").write_bytes(b"# letter\n")

    sent = client.upload(server.url(uid), job_token(KEY, uid), str(pki.ca), str(pod), max_bytes=CAP)

    assert sent.files == ("letter.md",)
    assert sorted(sent.skipped) == ["current.jsonl", "handoff.json", "ledger.md", "notes.txt"]
    session = staging / uid / "session"
    assert os.listdir(session) == ["letter.md"]
    assert not any(p.is_symlink() for p in session.iterdir())


def test_a_link_planted_in_the_staged_session_is_not_followed(
        server: Server, pki: Pki, staging: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"the operator's private key\n")
    uid = stage_job(staging, {"letter.md": b"# letter\n"})
    session = staging / uid / "session"
    (session / "current.jsonl").symlink_to(secret)
    os.mkfifo(session / "ledger.md")  # opened O_NONBLOCK: it does not hang the server

    connection = connect(server, pki)
    connection.request("GET", f"/v1/jobs/{uid}/session", headers={"Authorization": f"Bearer {job_token(KEY, uid)}"})
    response = connection.getresponse()
    body = response.read()
    connection.close()

    assert response.status == 200
    assert b"private key" not in body
    assert body == raw_archive([(b"letter.md", b"# letter\n")])


# -- sizes and failures -----------------------------------------------------------------------------------------
def test_an_upload_over_the_cap_is_refused_while_it_streams(
        staging: Path, pki: Pki) -> None:
    server = Server(staging, pki, 1024 * 1024, KEY)
    try:
        uid = stage_job(staging)
        before = snapshot(staging, uid)
        total = 256 * 1024 * 1024
        consumed = 0

        def endless() -> Iterator[bytes]:
            nonlocal consumed
            chunk = b"\0" * (256 * 1024)
            while consumed < total:
                consumed += len(chunk)
                yield chunk

        connection = connect(server, pki)
        status = None
        try:
            connection.request("PUT", f"/v1/jobs/{uid}/session", body=endless(), encode_chunked=True,
                               headers={"Authorization": f"Bearer {job_token(KEY, uid)}",
                                        protocol.DIGEST_HEADER: protocol.digest_header("0" * 64)})
            status = connection.getresponse().status
        except OSError:
            pass  # the server closed the connection under the send: the refusal's other face
        finally:
            connection.close()

        assert status in (413, None)
        assert consumed < total // 4, f"the server read {consumed} of {total} bytes past a 1 MiB cap"
        wait_until(lambda: not leftovers(staging, uid), "the refused upload's directory removed")
        assert snapshot(staging, uid) == before
    finally:
        server.close()


def test_an_upload_declared_over_the_cap_is_refused_before_its_body(
        staging: Path, pki: Pki, tmp_path: Path) -> None:
    server = Server(staging, pki, 64 * 1024, KEY)
    try:
        uid = stage_job(staging)
        before = snapshot(staging, uid)
        pod = tmp_path / "pod"
        pod.mkdir()
        (pod / "current.jsonl").write_bytes(os.urandom(256 * 1024))
        with pytest.raises(client.TransferRefused) as refused:
            client.upload(server.url(uid), job_token(KEY, uid), str(pki.ca), str(pod), max_bytes=CAP,
                          sleep=no_sleep([]))
        assert refused.value.status == 413
        assert snapshot(staging, uid) == before
        with pytest.raises(client.TransferRefused):  # and the client's own cap, before a byte is sent
            client.upload(server.url(uid), job_token(KEY, uid), str(pki.ca), str(pod), max_bytes=1024)
    finally:
        server.close()


def test_a_fetch_over_the_clients_cap_is_refused_and_leaves_nothing(
        server: Server, pki: Pki, staging: Path, tmp_path: Path) -> None:
    uid = stage_job(staging, {"current.jsonl": os.urandom(128 * 1024)})
    pod = tmp_path / "pod"
    pod.mkdir()
    with pytest.raises(client.TransferRefused) as refused:
        client.fetch(server.url(uid), job_token(KEY, uid), str(pki.ca), str(pod), max_bytes=64 * 1024)
    assert refused.value.status == 413
    assert os.listdir(pod) == []


def test_a_connection_cut_mid_upload_leaves_the_staged_copy_and_no_marker(
        server: Server, pki: Pki, staging: Path) -> None:
    uid = stage_job(staging)
    before = snapshot(staging, uid)
    body = raw_archive([(b"current.jsonl", os.urandom(2 * 1024 * 1024))])
    head = (f"PUT /v1/jobs/{uid}/session HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(body)}\r\n"
            f"Authorization: Bearer {job_token(KEY, uid)}\r\n"
            f"{protocol.DIGEST_HEADER}: {protocol.digest_header(hashlib.sha256(body).hexdigest())}\r\n\r\n").encode()
    context = client.client_ssl_context(str(pki.ca))
    sock = context.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=WAIT),
                               server_hostname="localhost")
    sock.sendall(head + body[: len(body) // 2])

    def receiving() -> bool:
        return any((staging / uid / name / ".body").exists() and (staging / uid / name / ".body").stat().st_size > 0
                   for name in leftovers(staging, uid))

    wait_until(receiving, "the server receiving the upload")
    sock.close()

    wait_until(lambda: not leftovers(staging, uid), "the cut upload's directory removed")
    assert snapshot(staging, uid) == before
    assert not (staging / uid / protocol.MARKER).exists()


# -- TLS --------------------------------------------------------------------------------------------------------
def test_the_client_refuses_a_server_its_ca_did_not_sign(staging: Path, rogue: Pki, pki: Pki, tmp_path: Path) -> None:
    impostor = Server(staging, rogue, CAP, KEY)
    try:
        uid = stage_job(staging)
        sleeps: list[float] = []
        with pytest.raises(client.TransferError, match="certificate"):
            client.fetch(impostor.url(uid), job_token(KEY, uid), str(pki.ca), str(tmp_path), max_bytes=CAP,
                         sleep=no_sleep(sleeps))
        pod = tmp_path / "pod"
        pod.mkdir()
        (pod / "current.jsonl").write_bytes(b"the result\n")
        with pytest.raises(client.TransferError, match="certificate"):
            client.upload(impostor.url(uid), job_token(KEY, uid), str(pki.ca), str(pod), max_bytes=CAP,
                          sleep=no_sleep(sleeps))
        assert sleeps == []
        assert (staging / uid / "session" / "current.jsonl").read_bytes() == TRANSCRIPT
    finally:
        impostor.close()


def test_the_server_cannot_start_without_tls(staging: Path, pki: Pki, tmp_path: Path) -> None:
    app = build_app(TransferConfig(str(staging), KEY, CAP))
    with pytest.raises(TransferTLSError):
        asyncio.run(start(app, "127.0.0.1", 0, None))
    with pytest.raises(TransferTLSError):
        server_ssl_context(None, None)
    with pytest.raises(TransferTLSError):
        server_ssl_context(str(pki.cert), "")
    with pytest.raises(TransferTLSError, match="cannot load"):
        server_ssl_context(str(tmp_path / "missing.crt"), str(pki.key))


def test_the_server_does_not_answer_plain_http(server: Server, staging: Path) -> None:
    uid = stage_job(staging)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT)
    try:
        connection.request("GET", f"/v1/jobs/{uid}/session", headers={"Authorization": f"Bearer {job_token(KEY, uid)}"})
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException):
        status = None
    finally:
        connection.close()
    assert status != 200


# -- the client's retries ---------------------------------------------------------------------------------------
def test_the_client_retries_a_connection_error_with_back_off(pki: Pki, tmp_path: Path) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    sleeps: list[float] = []
    uid = str(uuid.uuid4())
    with pytest.raises(client.TransferError, match="after 4 attempts"):
        client.fetch(protocol.session_url(f"https://localhost:{port}", uid), "t", str(pki.ca), str(tmp_path),
                     max_bytes=CAP, attempts=4, backoff=0.5, sleep=no_sleep(sleeps))
    assert sleeps == [0.5, 1.0, 2.0]


def test_the_client_imports_no_server_dependency() -> None:
    code = ("import sys, pidispatch.transfer.client; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('aiohttp', 'kubernetes', 'kopf', 'pydantic')); "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
