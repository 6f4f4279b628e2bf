"""`pidispatch runner` as a process, with the real pi 0.73.1 and the scripted model.

The runner runs the way the job image runs it: a subprocess with only its environment as input, pi
from `make pi` (via `PI_BIN`), the model on loopback. What the model received is read from its request
log; what the runner reported, from the termination-message file and the last stdout line. A missing
pi fails these tests (it never skips them) and says to run `make pi`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pidispatch.contract.report import RunnerReport
from pidispatch.store.transcriptscan import redact_lines
from pidispatch.transcript.parser import check_transcript, parse_transcript
from testkit.pitool import pi_env, pinned_version
from testkit.runner import Job, Result, real_pi_job
from testkit.scripted_model import Usage, text_of
from testkit.transcripts import sample

pytestmark = pytest.mark.pi  # runs the real pi (make pi): not in `make unit`

ROOT = Path(__file__).resolve().parents[2]

@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    with real_pi_job(tmp_path) as world:
        yield world


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [text_of(m.get("content")) for m in messages if m.get("role") == "user"]


def conversation(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(role, text) of what the model was sent, without the system prompt."""
    return [(m["role"], text_of(m.get("content"))) for m in messages if m.get("role") != "system"]


def assert_report_survives_the_operator(result: Result) -> None:
    """The report is the last stdout line too, and the operator's parser keeps every field of it."""
    assert result.stdout.splitlines()[-1] == result.termination
    parsed = RunnerReport.from_message(result.termination)
    report = result.report
    assert parsed is not None
    assert parsed.outcome == report["outcome"] and parsed.pi_version == report.get("piVersion")
    if "session" in report:
        assert parsed.session is not None
        assert (parsed.session.resumed, parsed.session.reason) == (report["session"]["resumed"],
                                                                   report["session"]["reason"])
    ctx = report.get("context")
    assert parsed.context == ((ctx["tokens"], ctx["window"]) if ctx else None)
    assert parsed.tokens == report.get("tokens", {})


def rpc_context_usage(job: Job) -> dict[str, Any]:
    """pi's own figure: `get_session_stats` over RPC on the session file (docs/pi-behaviour.md#context-usage; reads,
    never writes)."""
    command = json.dumps({"id": "stats", "type": "get_session_stats"}) + "\n"
    done = subprocess.run([str(job.pi), "--mode", "rpc", "--session", str(job.session_file)], input=command,
                          capture_output=True, text=True, cwd=job.workspace, timeout=60,
                          env=pi_env(job.agent, job.tmp / "home"))
    for line in done.stdout.splitlines():
        message = json.loads(line) if line.startswith("{") else {}
        if message.get("id") == "stats" and message.get("type") == "response":
            assert message["success"], message
            return message["data"]["contextUsage"]
    raise AssertionError(f"pi --mode rpc gave no get_session_stats answer; stdout:\n{done.stdout}\n"
                         f"stderr:\n{done.stderr}")


# --- the main path -------------------------------------------------------------------------------------


def test_cold_run_then_resumed_run_on_the_same_file(job: Job) -> None:
    job.stage(b"")
    job.model.reply("I fixed it in a branch.", usage=Usage(prompt_tokens=1000, completion_tokens=7))
    first = job.run(host_resume=False)
    assert first.code == 0, first.stderr
    assert first.report == {
        "session": {"resumed": False, "reason": "absent"},
        "context": {"tokens": 1007, "window": 32000},
        # fake-model has no prices in models.json: no cost, one unpriced reply
        "tokens": {"input": 1000, "output": 7, "cacheRead": 0, "cacheWrite": 0, "total": 1007, "calls": 1,
                   "unpriced": 1},
        "piVersion": pinned_version(), "outcome": "completed"}
    assert_report_survives_the_operator(first)
    (cold_prompt,) = user_texts(job.model.messages(0))
    assert cold_prompt.startswith("You are working on issue #7 in octo/repo.") and "please fix it" in cold_prompt
    after_first = job.session_file.read_bytes()
    assert check_transcript(after_first) == []
    assert parse_transcript(after_first).header.cwd == str(job.workspace)

    job.model.reply("Renamed as asked.", usage=Usage(prompt_tokens=2000, completion_tokens=11, cached_tokens=500))
    second = job.run(host_resume=True, comment="also rename foo")
    assert second.code == 0, second.stderr
    assert second.report == {
        "session": {"resumed": True, "reason": "resumed"},
        "context": {"tokens": 2011, "window": 32000},
        "tokens": {"input": 1500, "output": 11, "cacheRead": 500, "cacheWrite": 0, "total": 2011, "calls": 1,
                   "unpriced": 1},  # this run only
        "piVersion": pinned_version(), "outcome": "completed"}
    assert_report_survives_the_operator(second)
    sent = conversation(job.model.messages(1))
    assert sent[:2] == [("user", cold_prompt), ("assistant", "I fixed it in a branch.")]  # the first turn
    assert sent[2][0] == "user" and sent[2][1].startswith("You are continuing your own earlier work on issue #7")
    assert "also rename foo" in sent[2][1] and len(sent) == 3
    final = job.session_file.read_bytes()
    assert final.startswith(after_first) and check_transcript(final) == []  # pi appended, nothing else moved

    stats = rpc_context_usage(job)
    assert (stats["tokens"], stats["contextWindow"]) == (second.report["context"]["tokens"],
                                                         second.report["context"]["window"])


def test_a_run_without_a_session_reports_its_tokens_and_keeps_no_file(job: Job) -> None:
    scratch = job.tmp / "tmp"
    scratch.mkdir()
    job.model.reply("done", usage=Usage(prompt_tokens=800, completion_tokens=9, cached_tokens=200))
    result = job.run(session=False, extra={"TMPDIR": str(scratch)})
    assert result.code == 0, result.stderr
    assert result.report == {"session": {"resumed": False, "reason": "disabled"},
                             "tokens": {"input": 600, "output": 9, "cacheRead": 200, "cacheWrite": 0, "total": 809,
                                        "calls": 1, "unpriced": 1},
                             "piVersion": pinned_version(), "outcome": "completed"}
    assert_report_survives_the_operator(result)
    assert len(job.model.requests) == 1
    assert not job.session_file.parent.exists()
    assert not (job.agent / "sessions").exists()  # pi kept nothing in its own session directory
    assert list(scratch.iterdir()) == []  # and the runner's scratch file, read for the usage, is gone


def test_a_priced_model_reports_the_cost_pi_computed(job: Job) -> None:
    """models.json prices fake-model (dollars per million tokens): the report carries pi's own cost."""
    models = json.loads((job.agent / "models.json").read_text())
    models["providers"]["fake"]["models"][0]["cost"] = {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 0}
    (job.agent / "models.json").write_text(json.dumps(models))
    job.model.reply("done", usage=Usage(prompt_tokens=1000, completion_tokens=100, cached_tokens=500))
    result = job.run(session=False)
    assert result.code == 0, result.stderr
    tokens = result.report["tokens"]
    assert (tokens["input"], tokens["cacheRead"], tokens["output"], tokens["unpriced"]) == (500, 500, 100, 0)
    assert tokens["cost"] == pytest.approx((500 * 3 + 500 * 0.3 + 100 * 15) / 1e6)
    assert_report_survives_the_operator(result)


def test_host_resume_with_an_empty_file_still_briefs_by_the_envelope(job: Job) -> None:
    """Host and runner disagree (host staged, the file is empty): the envelope's self-orientation covers it."""
    job.stage(b"")
    result = job.run(host_resume=True)
    assert result.code == 0, result.stderr
    assert result.report["session"] == {"resumed": False, "reason": "absent"}
    (prompt,) = user_texts(job.model.messages(0))
    assert prompt.startswith("You are continuing") and "no memory" in prompt


# --- files pi would damage ----------------------------------------------------------------------------------


def test_unparseable_file_is_quarantined_and_pi_starts_fresh(job: Job) -> None:
    garbage = sample("edge/c_garbage_first.before.jsonl")
    job.stage(garbage)
    result = job.run(host_resume=True)
    assert result.code == 0, result.stderr
    assert result.report["session"] == {"resumed": False, "reason": "unparseable"}
    assert result.report["outcome"] == "completed" and result.report["tokens"]["calls"] == 1
    assert_report_survives_the_operator(result)
    (quarantined,) = job.session_file.parent.glob("current.jsonl.invalid-*")
    assert quarantined.name.removeprefix("current.jsonl.invalid-").isdigit()
    assert quarantined.read_bytes() == garbage
    sent = conversation(job.model.messages(0))
    assert [role for role, _ in sent] == ["user"] and sent[0][1].startswith("You are continuing")
    assert "first question" not in json.dumps(job.model.requests[0])  # no earlier conversation reached the model
    fresh = job.session_file.read_bytes()
    assert check_transcript(fresh) == [] and parse_transcript(fresh).header.cwd == str(job.workspace)
    (event,) = result.events("session_resume_degraded")
    assert event["reason"] == "unparseable" and quarantined.name in event["detail"]


def test_planted_symlink_is_quarantined_not_followed(job: Job) -> None:
    target = job.tmp / "outside.jsonl"
    target.write_bytes(sample("s1_after_turn2.jsonl"))
    job.session_file.parent.mkdir(mode=0o700)
    job.session_file.symlink_to(target)
    result = job.run()
    assert result.code == 0, result.stderr
    assert result.report["session"] == {"resumed": False, "reason": "unparseable"}
    (quarantined,) = job.session_file.parent.glob("current.jsonl.invalid-*")
    assert quarantined.is_symlink() and target.read_bytes() == sample("s1_after_turn2.jsonl")
    assert not job.session_file.is_symlink() and check_transcript(job.session_file.read_bytes()) == []


def test_torn_tail_and_foreign_cwd_are_repaired_so_pi_keeps_the_history(job: Job) -> None:
    """Unrepaired, pi would glue its entry onto the fragment and orphan the history (edge case d)."""
    torn = sample("edge/d_torn_last.before.jsonl")  # header cwd /workspace: not this test's workspace
    job.stage(torn)
    result = job.run(host_resume=True)
    assert result.code == 0, result.stderr
    assert result.report["session"] == {"resumed": True, "reason": "resumed"}
    assert [e["repairs"] for e in result.events("session_normalised")] == [["cut-torn-tail", "pinned-cwd"]]
    sent = conversation(job.model.messages(0))
    assert [role for role, _ in sent] == ["user", "assistant", "user", "user"]  # the torn reply is gone
    assert sent[0][1] == "first question"
    final = job.session_file.read_bytes()
    assert check_transcript(final) == []
    kept = torn[: torn.rfind(b"\n") + 1]
    assert final.partition(b"\n")[2].startswith(kept.partition(b"\n")[2])


# --- refusals and failures ----------------------------------------------------------------------------------


def test_version_mismatch_exits_2_before_any_model_request(job: Job) -> None:
    garbage = sample("edge/c_garbage_first.before.jsonl")
    job.stage(garbage)
    result = job.run(extra={"PI_VERSION": "0.0.1"})
    assert result.code == 2
    (line,) = result.stderr.splitlines()
    assert f"pi {pinned_version()}" in line and "PI_VERSION=0.0.1" in line
    assert job.model.requests == []
    assert job.session_file.read_bytes() == garbage  # nothing touched: no quarantine either
    assert list(job.session_file.parent.iterdir()) == [job.session_file]
    assert result.report == {"piVersion": pinned_version(), "outcome": "refused"}
    assert_report_survives_the_operator(result)


def test_undeclared_version_runs_and_reports_what_pi_says(job: Job) -> None:
    job.stage(b"")
    result = job.run(extra={"PI_VERSION": None})  # type: ignore[dict-item]
    assert result.code == 0, result.stderr
    assert result.report["piVersion"] == pinned_version()


@pytest.mark.parametrize(("case", "words"), [
    ("missing-file", ["PI_SESSION_FILE=", "missing"]),
    ("missing-dir", ["cannot enter", f"uid {os.geteuid()}"]),
])
def test_mount_fault_exits_2_and_never_starts_pi(job: Job, case: str, words: list[str]) -> None:
    if case == "missing-file":
        job.session_file.parent.mkdir()
    marker = job.tmp / "pi-was-started"
    fake_pi = job.tmp / "pi-marker"
    fake_pi.write_text(f"#!/bin/sh\ntouch {marker}\nexec {job.pi} \"$@\"\n")
    fake_pi.chmod(0o755)
    result = job.run(extra={"PI_BIN": str(fake_pi)})
    assert result.code == 2
    (line,) = result.stderr.splitlines()
    assert all(word in line for word in words), line
    assert not marker.exists() and job.model.requests == []
    assert result.report == {"outcome": "refused"}


def test_missing_pi_exits_2_naming_pi_bin(job: Job) -> None:
    job.stage(b"")
    result = job.run(extra={"PI_BIN": str(job.tmp / "no-such-pi")})
    assert result.code == 2
    (line,) = result.stderr.splitlines()
    assert "PI_BIN=" in line and "not found" in line


def test_pi_failure_is_exit_1_with_a_failed_report(job: Job) -> None:
    job.stage(b"")
    job.model.error(500, {"error": {"message": "the scripted model is down", "type": "server_error"}})
    result = job.run()
    assert result.code == 1
    report = result.report
    assert report["outcome"] == "failed" and report["session"] == {"resumed": False, "reason": "absent"}
    assert report["tokens"]["calls"] == 1  # the error reply is in the file, and counted
    assert_report_survives_the_operator(result)
    assert "the scripted model is down" in result.stderr


def test_an_open_stdin_does_not_hang_pi(job: Job) -> None:
    """The runner inherits whatever stdin the container has; pi must get /dev/null
    (docs/pi-behaviour.md#running-pi-in-tests)."""
    job.stage(b"")
    read_end, write_end = os.pipe()  # nobody writes to it or closes it until the runner has exited
    try:
        result = job.run(stdin=read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert result.code == 0, result.stderr
    assert len(job.model.requests) == 1


def test_sigterm_is_forwarded_to_pi_and_reported_as_aborted(job: Job) -> None:
    """The kubelet signals only the runner (PID 1); pi must stop too, and the report still comes out."""
    job.stage(b"")
    job.model.reply("too late", delay=30)
    process = job.start()
    job.model.wait_for_requests(1, timeout=30)
    process.send_signal(signal.SIGTERM)
    result = job.finish(process)
    assert result.code == 128 + signal.SIGTERM
    assert result.report["outcome"] == "aborted" and result.report["session"] == {"resumed": False,
                                                                                  "reason": "absent"}
    assert_report_survives_the_operator(result)
    assert result.report["tokens"]["calls"] == 0  # killed in its first turn: no reply reached the file
    final = job.session_file.read_bytes()
    assert check_transcript(final) == [] and parse_transcript(final).entries == []  # at most pi's header


# --- what the operator stores: redacted, and pi resumes it (issue 31 item 5) ------------------------------

LEAKED = "ghs_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zA0b1"
MODEL_KEY = "Zq8Lr2Nv5Tx7Wb1Yd4Fh6Jk9Mp3Rs0Ug"


def test_pi_resumes_a_transcript_whose_leaked_token_and_model_key_were_redacted(job: Job) -> None:
    """The agent printed the forge token and a model key, the key once more wrapped in two lines; the scan before
    the promotion redacts each (the key by the digest the runner reported, never its value, in the values as
    pi decodes them), and real pi resumes what is left."""
    job.stage(b"")
    command = (f'echo token={LEAKED}; echo key=$MY_MODEL_KEY; '
               'printf "%s\\n" "${MY_MODEL_KEY:0:9}" "${MY_MODEL_KEY:9}"')
    job.model.tool_call("bash", {"command": command}).reply("Printed them.")
    first = job.run(host_resume=False, extra={"MY_MODEL_KEY": MODEL_KEY, "PI_SECRET_ENV": "MY_MODEL_KEY"})
    assert first.code == 0, first.stderr
    assert MODEL_KEY not in first.termination and LEAKED not in (first.termination or "")
    reported = RunnerReport.from_message(first.termination)
    assert reported is not None and len(reported.secrets) == 1, "the runner reports the key's digest"
    leaked = job.session_file.read_bytes()
    assert LEAKED.encode() in leaked and MODEL_KEY.encode() in leaked, "pi wrote both into its session file"

    assert (MODEL_KEY[:9] + "\\n" + MODEL_KEY[9:]).encode() in leaked, "the key wrapped, as JSON escapes it"
    result = redact_lines(leaked, reported.secrets)
    # the token in the call's arguments and its output; the key, and the key wrapped
    assert dict(result.kinds) == {"github-token": 2, "job-secret": 2}
    job.stage(result.data)
    assert check_transcript(result.data) == []
    assert [json.loads(raw) and len(raw) for raw in result.data.splitlines()], "every line is still JSON"

    job.model.reply("Resumed without them.")
    second = job.run(host_resume=True, comment="carry on")
    assert second.code == 0, second.stderr
    assert second.report["session"] == {"resumed": True, "reason": "resumed"}
    sent = json.dumps(job.model.messages(2))
    assert "[REDACTED:github-token]" in sent and "[REDACTED:job-secret]" in sent, "pi replayed the redacted history"
    assert LEAKED not in sent and MODEL_KEY not in sent and MODEL_KEY[9:] not in sent
    assert "Printed them." in sent and "carry on" in sent
    final = job.session_file.read_bytes()
    assert final.startswith(result.data) and check_transcript(final) == []
