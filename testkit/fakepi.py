"""A scripted stand-in for the job image (runner + pi) in the operator's end-to-end tests.

Real pi with a scripted model arrives with the runner; here the operator's side of the container
contract is what is under test, so this script does what the runner does to ``/session`` in the
plain case: continue the transcript it was handed (or start one when it is empty), append a user
and an assistant message in pi's v3 format, and write the runner's report to the termination
message. Directives in the Job's comment script the odd cases, e.g. ``@pi exit=1``,
``@pi sleep=3``, ``@pi report=garbage``, ``@pi session=symlink``, ``@pi session=empty``;
``@pi token=log`` logs ``gh-token sha256:<hex>`` (or ``gh-token absent``): whether ``GH_TOKEN``
arrived, and which one, without printing it; ``@pi env-sha=<VAR>`` does the same for any variable (a model
credential), ``@pi file-sha=<path>`` for a file (a run.secrets key). ``@pi hold=<name>`` keeps the job running
until a file ``<name>`` appears beside the session file (the test creates it on the staging volume), so a test can
act while the job is in flight without guessing at timings.

Staging by transfer (``PI_TRANSFER_URL`` set, as the operator sets it in transfer mode): the copy is fetched into
``/session`` first and handed back after, with the runner's own client (``pidispatch.transfer.client``). The
directives ``@pi peek=<uid>`` (GET another Job's copy with this job's token; logs ``peek <status>``),
``@pi upload=cut`` (send half the upload, drop the connection and exit 0, as a job killed mid-upload whose Pod
still reads Succeeded) and ``@pi upload=stream-big`` (stream a body past the cap without a length; logs
``upload <status>`` and exits 1, as the runner does) script the transfer's failures.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import sys
import time
import uuid
from datetime import UTC, datetime


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(ts * 1000) % 1000:03d}Z"


def directives(comment: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in comment.split() if "=" in word)


def last_id(lines: list[bytes]) -> str | None:
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            return None
        if entry.get("type") != "session":
            return entry.get("id")
    return None


def _transfer() -> tuple[str, str, str, int] | None:
    url = os.environ.get("PI_TRANSFER_URL")
    if not url:
        return None
    env = os.environ
    return url, env["PI_TRANSFER_TOKEN"], env["PI_TRANSFER_CA_FILE"], int(env["PI_TRANSFER_MAX_BYTES"])


def _connection(url: str, ca: str) -> tuple[http.client.HTTPSConnection, str]:
    from urllib.parse import urlsplit

    from pidispatch.transfer.client import client_ssl_context

    parts = urlsplit(url)
    return http.client.HTTPSConnection(parts.hostname or "", parts.port or 443, context=client_ssl_context(ca),
                                       timeout=30), parts.path


def peek(url: str, token: str, ca: str, uid: str) -> int:
    """GET another Job's copy with this job's token: the status the operator answers."""
    other = url.replace(url.split("/")[-2], uid)
    connection, path = _connection(other, ca)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        return connection.getresponse().status
    finally:
        connection.close()


def cut_upload(url: str, token: str, ca: str, session_dir: str) -> None:
    """Start the upload as the runner would, send half the body and drop the connection."""
    from pidispatch.transfer import archive
    from pidispatch.transfer.protocol import DIGEST_HEADER, digest_header

    fd = os.open(session_dir, os.O_RDONLY | os.O_DIRECTORY)
    members, _ = archive.open_members(fd)
    os.close(fd)
    body = b"".join(archive.stream(members))
    archive.close_members(members)
    connection, path = _connection(url, ca)
    connection.putrequest("PUT", path)
    for name, value in (("Authorization", f"Bearer {token}"), ("Content-Length", str(len(body))),
                        (DIGEST_HEADER, digest_header(hashlib.sha256(body).hexdigest()))):
        connection.putheader(name, value)
    connection.endheaders()
    connection.send(body[:len(body) // 2])
    connection.close()


def stream_big(url: str, token: str, ca: str, cap: int) -> int:
    """Stream twice the cap without a Content-Length (chunked): the status the operator answers."""
    from pidispatch.transfer.protocol import DIGEST_HEADER, digest_header

    connection, path = _connection(url, ca)
    connection.putrequest("PUT", path)
    for name, value in (("Authorization", f"Bearer {token}"), ("Transfer-Encoding", "chunked"),
                        (DIGEST_HEADER, digest_header("0" * 64))):
        connection.putheader(name, value)
    connection.endheaders()
    chunk = b"x" * 65536
    try:
        for _ in range(2 * cap // len(chunk) + 2):
            connection.send(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        connection.send(b"0\r\n\r\n")
    except OSError:
        pass  # the operator stopped reading: its answer is on the wire
    try:
        return connection.getresponse().status
    finally:
        connection.close()


def main() -> int:
    spec = json.loads(os.environ.get("PI_JOB_SPEC", "{}"))
    script = directives(spec.get("comment", ""))
    transfer = _transfer()
    if transfer is not None:
        from pidispatch.transfer import client

        url, token, ca, cap = transfer
        session_dir = os.path.dirname(os.environ["PI_SESSION_FILE"])
        fetched = client.fetch(url, token, ca, session_dir, max_bytes=cap)
        print("fetched", fetched.bytes, flush=True)
        if "peek" in script:
            print("peek", peek(url, token, ca, script["peek"]), flush=True)
    if "sleep" in script:
        time.sleep(float(script["sleep"]))
    if "hold" in script:
        release = os.path.join(os.path.dirname(os.environ.get("PI_SESSION_FILE", "/session/x")), script["hold"])
        deadline = time.monotonic() + 300
        while not os.path.exists(release):
            if time.monotonic() > deadline:
                print("hold: never released", flush=True)
                return 1
            time.sleep(0.1)
    if "env-sha" in script:  # whether a credential arrived, and which, without printing it
        value = os.environ.get(script["env-sha"])
        seen = f"sha256:{hashlib.sha256(value.encode()).hexdigest()}" if value else "absent"
        print("env-sha", script["env-sha"], seen, flush=True)
    if "file-sha" in script:  # a mounted file (a run.secrets key): whether it arrived, and which, not its value
        try:
            with open(script["file-sha"], "rb") as mounted:
                print("file-sha", script["file-sha"], f"sha256:{hashlib.sha256(mounted.read()).hexdigest()}",
                      flush=True)
        except OSError as error:
            print("file-sha", script["file-sha"], "absent", error.strerror, flush=True)
    if script.get("token") == "log":
        token = os.environ.get("GH_TOKEN")
        print("gh-token", f"sha256:{hashlib.sha256(token.encode()).hexdigest()}" if token else "absent", flush=True)
    path = os.environ.get("PI_SESSION_FILE")
    report: dict = {"piVersion": os.environ.get("PI_VERSION", "0.73.1"), "outcome": "completed"}
    now = time.time()
    if path is None:
        report["session"] = {"resumed": False, "reason": "disabled"}
    else:
        with open(path, "rb") as f:
            received = f.read()
        print("received", hashlib.sha256(received).hexdigest() if received else "empty", flush=True)
        lines = [line for line in received.split(b"\n") if line]
        resumed = bool(lines)
        if not lines:
            lines = [json.dumps({"type": "session", "version": 3, "id": str(uuid.uuid4()), "timestamp": iso(now),
                                 "cwd": "/workspace"}).encode()]
        parent = last_id(lines)
        turn = sum(1 for line in lines if b'"role":"user"' in line) + 1
        user_id, reply_id = uuid.uuid4().hex[:8], uuid.uuid4().hex[:8]
        ms = int(now * 1000)
        lines.append(json.dumps({"type": "message", "id": user_id, "parentId": parent, "timestamp": iso(now),
                                 "message": {"role": "user", "content": [{"type": "text", "text": f"turn {turn}"}],
                                             "timestamp": ms}}, separators=(",", ":")).encode())
        usage = {"input": 600 * turn, "output": 10, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 600 * turn + 10,
                 "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}
        lines.append(json.dumps({"type": "message", "id": reply_id, "parentId": user_id, "timestamp": iso(now),
                                 "message": {"role": "assistant", "content": [{"type": "text",
                                                                               "text": f"reply {turn}"}],
                                             "api": "openai-completions", "provider": "fake", "model": "fake-model",
                                             "usage": usage, "stopReason": "stop", "timestamp": ms}},
                                separators=(",", ":")).encode())
        with open(path, "wb") as f:
            f.write(b"\n".join(lines) + b"\n")
        if script.get("session") == "empty":
            open(path, "wb").close()
        elif script.get("session") == "symlink":
            os.unlink(path)
            os.symlink("/etc/hostname", path)
        with open(path, "rb") as f:
            print("wrote", hashlib.sha256(f.read()).hexdigest(), flush=True)
        report["session"] = {"resumed": resumed, "reason": "resumed" if resumed else "absent"}
        report["context"] = {"tokens": 600 * turn + 10, "window": 128000}
        report["tokens"] = {"input": 600 * turn, "output": 10, "total": 600 * turn + 10}
    if transfer is not None and path is not None:
        url, token, ca, cap = transfer
        if script.get("upload") == "cut":
            cut_upload(url, token, ca, os.path.dirname(path))
            print("upload cut", flush=True)
        elif script.get("upload") == "stream-big":
            status = stream_big(url, token, ca, cap)
            print("upload", status, flush=True)
            return 1
        else:
            from pidispatch.transfer import client

            uploaded = client.upload(url, token, ca, os.path.dirname(path), max_bytes=cap)
            print("uploaded", uploaded.digest, flush=True)
    message = "{not json" if script.get("report") == "garbage" else json.dumps(report)
    with open("/dev/termination-log", "w") as f:
        f.write(message)
    return int(script.get("exit", "0"))


if __name__ == "__main__":
    sys.exit(main())
