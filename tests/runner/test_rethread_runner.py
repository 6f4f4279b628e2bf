"""The runner's rethread, as a process with the real pi 0.73.1 and the scripted model (no cluster).

Pack: a run that ends at the bound is continued with the pack turn (pi's handoff tool, loaded by ``-e``), or
the summary side call; the handoff lands as ``/session/handoff.json``. Unpack: a staged letter becomes the
first message of a new session whose header names the old one. The model's usage sets the context.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pidispatch.store.handoff import HANDOFF_MAX_BYTES, parse_handoff
from pidispatch.store.handoffdir import read_staged_handoff
from testkit.runner import Job, real_pi_job
from testkit.scripted_model import Usage, text_of

pytestmark = pytest.mark.pi  # runs the real pi (make pi): not in `make unit`


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    with real_pi_job(tmp_path) as world:
        yield world


WINDOW = 32000  # write_agent_dir's default
AT_BOUND = Usage(23000, 100)
LOW = Usage(900, 30)
ARGS = {"status": "landed",
        "letter": {"whereWeAre": "W", "doFirst": "F", "watchOut": "O", "dontRedo": "R", "trust": "T"},
        "entry": {"verified": "V", "assumed": "A", "stillBroken": "B", "goal": "G", "done": "D", "decisions": "C",
                  "files": "X", "commands": "M", "openProblems": "P", "nextSteps": "N"}}


def handoff_file(job: Job) -> Path:
    return job.session_file.parent / "handoff.json"


def test_below_the_bound_there_is_no_pack_turn(job: Job) -> None:
    job.stage(b"")
    job.model.reply("done", usage=LOW)
    result = job.run(host_resume=False)
    assert result.code == 0 and len(job.model.requests) == 1
    assert "rethread" not in result.report and not handoff_file(job).exists()


def test_at_the_bound_the_agent_packs_through_the_tool(job: Job) -> None:
    job.stage(b"")
    job.model.reply("worked", usage=AT_BOUND)
    job.model.tool_call("rethread_handoff", ARGS, usage=Usage(23500, 200))
    result = job.run(host_resume=False)
    assert result.code == 0, result.stderr
    assert len(job.model.requests) == 2
    assert [t["function"]["name"] for t in job.model.requests[1]["tools"]] == ["rethread_handoff"]
    assert result.report["rethread"] == {"unpacked": False, "packed": "agent"}
    written = json.loads(handoff_file(job).read_text())
    assert parse_handoff(written).letter["whereWeAre"] == "W" and written["writer"] == "agent"
    # the pack turn is part of the run's cost and of the context the next delivery is judged by
    assert result.report["tokens"]["calls"] == 2
    assert result.report["context"]["tokens"] >= 23700


def test_a_handoff_in_many_bytes_a_character_is_written_so_the_operator_can_read_it(job: Job) -> None:
    """Every field 4 000 CJK characters: as ``\\u`` escapes the file would pass the operator's cap and be lost."""
    wide = {"status": "partial", "letter": {name: "中" * 4000 for name in ARGS["letter"]},
            "entry": {name: "文" * 4000 for name in ARGS["entry"]}}
    job.stage(b"")
    job.model.reply("worked", usage=AT_BOUND)
    job.model.tool_call("rethread_handoff", wide, usage=Usage(23500, 200))
    result = job.run(host_resume=False)
    assert result.code == 0, result.stderr
    assert result.report["rethread"] == {"unpacked": False, "packed": "agent"}
    assert handoff_file(job).stat().st_size <= HANDOFF_MAX_BYTES
    kept = read_staged_handoff(str(handoff_file(job).parent))
    assert kept is not None and kept.writer == "agent" and kept.letter["whereWeAre"] == "中" * 4000


def test_zero_turns_the_pack_off(job: Job) -> None:
    job.stage(b"")
    job.model.reply("worked", usage=AT_BOUND)
    result = job.run(host_resume=False, extra={"PI_SESSION_RETHREAD_PCT": "0"})
    assert result.code == 0 and len(job.model.requests) == 1 and "rethread" not in result.report


def test_a_malformed_bound_is_a_configuration_error(job: Job) -> None:
    result = job.run(host_resume=False, extra={"PI_SESSION_RETHREAD_PCT": "70%"})
    assert result.code == 2 and "PI_SESSION_RETHREAD_PCT" in result.stderr and not job.model.requests


def test_an_agent_that_writes_no_handoff_gets_a_summary(job: Job) -> None:
    job.stage(b"")
    job.model.reply("worked on the parser", usage=AT_BOUND)
    job.model.reply("no handoff from me", usage=Usage(23500, 10))
    job.model.reply("## Status\npartial\n## Where we are\nsummarised\n## Goal\nthe parser", usage=LOW)
    result = job.run(host_resume=False, comment="fix the parser please")
    assert result.code == 0, result.stderr
    assert result.report["rethread"]["packed"] == "summary"
    side = job.model.requests[2]
    assert "tools" not in side or not side["tools"]
    assert "fix the parser please" in "\n".join(text_of(m.get("content")) for m in side["messages"])
    written = parse_handoff(json.loads(handoff_file(job).read_text()))
    assert (written.writer, written.status) == ("summary", "partial")
    assert written.letter["whereWeAre"] == "summarised" and written.entry["goal"] == "the parser"
    assert written.letter["doFirst"] == "(not stated)"
    # the job's bill: its turn, the unanswered pack turn (in its session) and the summary call (in a file of its own)
    tokens = result.report["tokens"]
    assert (tokens["calls"], tokens["input"], tokens["output"]) == (3, 23000 + 23500 + 900, 100 + 10 + 30), tokens


def test_a_summary_that_writes_no_handoff_is_still_billed(job: Job) -> None:
    job.stage(b"")
    job.model.reply("worked", usage=AT_BOUND)
    job.model.reply("no handoff from me", usage=Usage(23500, 10))
    job.model.reply("nothing useful", usage=Usage(700, 5))
    result = job.run(host_resume=False)
    assert result.code == 0, result.stderr
    assert result.report["rethread"] == {"unpacked": False, "packed": None,
                                         "detail": "the summary had none of the handoff's sections"}
    tokens = result.report["tokens"]
    assert (tokens["calls"], tokens["input"], tokens["output"]) == (3, 23000 + 23500 + 700, 100 + 10 + 5), tokens
    assert not handoff_file(job).exists()


def test_a_handoff_the_agent_left_in_session_is_not_kept(job: Job) -> None:
    job.stage(b"")
    handoff_file(job).write_text(json.dumps({**ARGS, "writer": "agent"}))
    job.model.reply("done", usage=LOW)
    result = job.run(host_resume=False)
    assert result.code == 0 and not handoff_file(job).exists(), "only the runner's pack writes a handoff"


LETTER = ("<!-- pi-dispatch letter v1 job=j2 writer=agent transcript=" + "a" * 64 + " size=10 "
          "session=019ad000-0000-7000-8000-00000000000f written=2026-12-02T18:00:00Z -->\n"
          "# Letter to the next session\n\n## Where we are\n\nUNIQUE-LETTER-TEXT\n")


def test_unpack_starts_a_new_session_from_the_letter(job: Job) -> None:
    job.stage(b"")
    (job.session_file.parent / "letter.md").write_text(LETTER)
    (job.session_file.parent / "ledger.md").write_text("# Ledger\n\n## Entry 1 · x\nUNIQUE-LEDGER-TEXT\n")
    job.model.reply("Goal: g\nFirst action: f\nMain risk: r", usage=LOW)
    result = job.run(host_resume=False, comment="the new event",
                     extra={"PI_SESSION_RETHREAD": "context-too-full"})
    assert result.code == 0, result.stderr
    sent = "\n".join(text_of(m.get("content")) for m in job.model.requests[0]["messages"])
    assert "UNIQUE-LETTER-TEXT" in sent and "UNIQUE-LEDGER-TEXT" in sent and "the new event" in sent
    assert "pi-dispatch letter v1" not in sent, "the metadata line is for machines"
    assert "context-too-full" in sent and "Main risk:" in sent
    header = json.loads(job.session_file.read_bytes().split(b"\n", 1)[0])
    assert header["parentSession"] == "019ad000-0000-7000-8000-00000000000f"
    assert result.report["rethread"] == {"unpacked": True}
    assert result.report["session"] == {"resumed": False, "reason": "absent"}


def test_an_unpack_already_over_the_bound_does_not_pack_again(job: Job) -> None:
    job.stage(b"")
    (job.session_file.parent / "letter.md").write_text(LETTER)
    job.model.reply("Goal: g\nFirst action: f\nMain risk: r", usage=AT_BOUND)
    result = job.run(host_resume=False, extra={"PI_SESSION_RETHREAD": "resume-chain-too-long"})
    assert result.code == 0, result.stderr
    assert len(job.model.requests) == 1, "no pack turn: the handoff would only copy itself forward"
    assert result.report["rethread"]["packed"] is None and result.report["rethread"]["unpacked"] is True


def test_an_unknown_rethread_reason_is_refused(job: Job) -> None:
    result = job.run(host_resume=False, extra={"PI_SESSION_RETHREAD": "venue-changed"})
    assert result.code == 2 and "PI_SESSION_RETHREAD" in result.stderr


def _git(repo: Path, *args: str) -> str:
    import subprocess

    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x", "PATH": "/usr/bin:/bin", "HOME": str(repo)}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def test_a_repository_overrides_a_template_by_object_id_never_through_a_link(tmp_path: Path) -> None:
    from pidispatch.runner import rethread

    repo = tmp_path / "ws"
    (repo / ".pi" / "rethread").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / ".pi" / "rethread" / "pack.md").write_text("OUR PACK {{pct}}")
    (tmp_path / "secret.md").write_text("not for the prompt")
    (repo / ".pi" / "rethread" / "summary.md").symlink_to(tmp_path / "secret.md")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "templates")
    commit = _git(repo, "rev-parse", "HEAD")
    (repo / ".pi" / "rethread" / "pack.md").write_text("EDITED IN THE WORKING TREE")  # not what is read
    env = {"PATH": "/usr/bin:/bin"}
    assert rethread.template("pack", str(repo), commit, env) == "OUR PACK {{pct}}"
    assert rethread.template("summary", str(repo), commit, env) == rethread.default_template("summary")
    assert rethread.template("unpack", str(repo), commit, env) == rethread.default_template("unpack")
    assert rethread.template("pack", str(repo), None, env) == rethread.default_template("pack")
    assert rethread.fill("{{pct}} {{x}} {{pct}}", {"pct": "{{x}}"}) == "{{x}} {{x}} {{x}}"


def test_the_summary_is_read_into_the_handoff_s_fields() -> None:
    from pidispatch.runner import rethread

    parsed = rethread.parse_summary("## Status\nLanded.\n## Where we are\nhere\n## Trust\nall verified\n"
                                    "## Still broken\nnothing\n## Next steps\nship it")
    assert parsed is not None
    h = parse_handoff(parsed)
    assert (h.writer, h.status) == ("summary", "landed")
    assert h.letter["whereWeAre"] == "here" and h.letter["trust"] == "all verified"
    assert h.entry["stillBroken"] == "nothing" and h.entry["nextSteps"] == "ship it"
    assert rethread.parse_summary("no headings at all") is None
