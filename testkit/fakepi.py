"""A scripted stand-in for the job image (runner + pi) in the operator's end-to-end tests.

Real pi with a scripted model arrives with the runner; here the operator's side of the container
contract is what is under test, so this script does what the runner does to ``/session`` in the
plain case: continue the transcript it was handed (or start one when it is empty), append a user
and an assistant message in pi's v3 format, and write the runner's report to the termination
message. Directives in the Job's comment script the odd cases, e.g. ``@pi exit=1``,
``@pi sleep=3``, ``@pi report=garbage``, ``@pi session=symlink``, ``@pi session=empty``;
``@pi token=log`` logs ``gh-token sha256:<hex>`` (or ``gh-token absent``): whether ``GH_TOKEN``
arrived, and which one, without printing it; ``@pi env-sha=<VAR>`` does the same for any variable (a model
credential). ``@pi hold=<name>`` keeps the job running until a file
``<name>`` appears beside the session file (the test creates it on the staging volume), so a test can
act while the job is in flight without guessing at timings.
"""

from __future__ import annotations

import hashlib
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


def main() -> int:
    spec = json.loads(os.environ.get("PI_JOB_SPEC", "{}"))
    script = directives(spec.get("comment", ""))
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
        report["session"] = {"resumed": resumed, "reason": "resumed" if resumed else "absent"}
        report["context"] = {"tokens": 600 * turn + 10, "window": 128000}
        report["tokens"] = {"input": 600 * turn, "output": 10, "total": 600 * turn + 10}
    message = "{not json" if script.get("report") == "garbage" else json.dumps(report)
    with open("/dev/termination-log", "w") as f:
        f.write(message)
    return int(script.get("exit", "0"))


if __name__ == "__main__":
    sys.exit(main())
