"""The runner in transfer mode (issue 33 item 2): the real runner process and the real pi against the operator's real
transfer server (``transfer/server.py``) over TLS on loopback, with a CA made here.

A job Pod with no claim: its session directory starts empty, the runner fetches the staged copy into it
before pi starts and hands it back once pi succeeded; the server's commit (the marker) is what the operator
promotes. A refused fetch starts no pi; a refused hand-back fails the job.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pidispatch.transfer import protocol
from pidispatch.transfer.token import job_token
from testkit.runner import Job, real_pi_job
from testkit.scripted_model import Usage, text_of
from testkit.transferkit import Pki, Server, make_pki

pytestmark = pytest.mark.pi  # runs the real pi (make pi): not in `make unit`

KEY = b"runner-transfer-key-" + b"k" * 32
CAP = 4 * 1024 * 1024


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    with real_pi_job(tmp_path) as world:
        yield world


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki", "transfer")


@pytest.fixture
def staging(tmp_path: Path) -> Path:
    root = tmp_path / "jobs"
    root.mkdir()
    return root


def stage(staging: Path, transcript: bytes) -> str:
    """A Job's staging as the operator leaves it before the Pod starts: ``<uid>/session/current.jsonl``."""
    uid = str(uuid.uuid4())
    (staging / uid / "session").mkdir(parents=True)
    (staging / uid / "session" / "current.jsonl").write_bytes(transcript)
    return uid


def transfer_env(server: Server, pki: Pki, uid: str, *, token: str | None = None,
                 max_bytes: int = CAP) -> dict[str, str]:
    return {protocol.ENV_URL: server.url(uid), protocol.ENV_TOKEN: token or job_token(KEY, uid),
            protocol.ENV_CA_FILE: str(pki.ca), protocol.ENV_MAX_BYTES: str(max_bytes)}


def fresh_pod(job: Job) -> None:
    """A new job Pod: its session directory (an emptyDir) starts empty."""
    shutil.rmtree(job.session_file.parent, ignore_errors=True)


def test_a_cold_job_hands_back_its_transcript_and_the_next_job_resumes_it(job: Job, pki: Pki,
                                                                        staging: Path) -> None:
    server = Server(staging, pki, CAP, KEY)
    try:
        cold = stage(staging, b"")  # a cold start: the operator stages an empty file
        job.model.reply("I fixed it in a branch.", usage=Usage(prompt_tokens=1000, completion_tokens=7))
        fresh_pod(job)
        first = job.run(host_resume=False, extra=transfer_env(server, pki, cold))
        assert first.code == 0, first.stderr
        handed = (staging / cold / "session" / "current.jsonl").read_bytes()
        assert handed == job.session_file.read_bytes() and b"I fixed it in a branch." in handed
        marker = json.loads((staging / cold / protocol.MARKER).read_text())
        assert marker["files"] == [["current.jsonl", len(handed)]]
        assert job_token(KEY, cold) not in first.stdout + first.stderr, "the token is never logged"

        warm = stage(staging, handed)  # the operator promoted it; the next job of the key gets it staged
        job.model.reply("Renamed as asked.", usage=Usage(prompt_tokens=2000, completion_tokens=11))
        fresh_pod(job)
        second = job.run(host_resume=True, comment="also rename foo", extra=transfer_env(server, pki, warm))
        assert second.code == 0, second.stderr
        assert second.report["session"] == {"resumed": True, "reason": "resumed"}
        sent = [text_of(m.get("content")) for m in job.model.messages(1) if m.get("role") == "assistant"]
        assert sent == ["I fixed it in a branch."], "pi was sent the fetched conversation"
        final = (staging / warm / "session" / "current.jsonl").read_bytes()
        assert final.startswith(handed) and b"Renamed as asked." in final
    finally:
        server.close()


def test_a_token_for_another_job_fetches_nothing_and_pi_never_starts(job: Job, pki: Pki, staging: Path) -> None:
    server = Server(staging, pki, CAP, KEY)
    try:
        mine, theirs = stage(staging, b""), stage(staging, b'{"type":"session"}\n')
        fresh_pod(job)
        result = job.run(host_resume=False, extra=transfer_env(server, pki, theirs, token=job_token(KEY, mine)))
        assert result.code == 2, result.stderr
        assert "refused the transfer (401)" in result.stderr and "pi was not started" in result.stderr
        assert job.model.requests == []
        assert result.report["outcome"] == "refused"
        assert not (job.session_file.parent / "current.jsonl").exists()
    finally:
        server.close()


def test_a_hand_back_over_the_servers_cap_fails_the_job_and_commits_nothing(job: Job, pki: Pki,
                                                                          staging: Path) -> None:
    server = Server(staging, pki, 1024, KEY)  # the operator's cap; the runner is told a larger one
    try:
        uid = stage(staging, b"")
        job.model.reply("A long answer. " * 200)
        fresh_pod(job)
        result = job.run(host_resume=False, extra=transfer_env(server, pki, uid))
        assert result.code == 1, result.stderr
        assert "could not be handed back" in result.stderr and "(413)" in result.stderr
        assert "promotes nothing" in result.stderr
        assert result.report["outcome"] == "failed"
        assert not (staging / uid / protocol.MARKER).exists()
        assert (staging / uid / "session" / "current.jsonl").read_bytes() == b"", "the staged copy is untouched"
        assert not [p for p in (staging / uid).iterdir() if p.name.startswith(protocol.UPLOAD_PREFIX)]
    finally:
        server.close()


def test_an_operator_out_of_reach_fails_the_job_before_pi(job: Job, pki: Pki, staging: Path) -> None:
    server = Server(staging, pki, CAP, KEY)
    uid = stage(staging, b"")
    env = transfer_env(server, pki, uid)
    server.close()  # nothing listens there any more
    fresh_pod(job)
    result = job.run(host_resume=False, extra=env)
    assert result.code == 1, result.stderr
    assert "could not be fetched from the operator" in result.stderr and job.model.requests == []
