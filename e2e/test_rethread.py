"""Rethreading, end to end with real pi: a job that ends at the bound packs a letter and a ledger entry; a later
job refused for a lineage reason starts a new session from them instead of a cold start.

The operator is installed by its chart; job Pods run ``pidispatch runner`` with the pinned pi 0.73.1 and
pi's handoff tool (``runner/rethread/handoff.ts``), against the scripted model. The model's usage figures
set the measured context: the window is 32000, the rethread bound 70 % and the context bound 80 %.
The proof is in what the model received (the pack turn, the unpack's first request) and in the store.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import TAMPER, Release, base_values, installed, merge
from pidispatch.store.handoff import LETTER_CUT, LETTER_MAX_BYTES
from pidispatch.store.keys import issue_key
from testkit.pitool import pi_binary
from testkit.scripted_model import ScriptedModel, Usage, text_of, write_agent_dir

pytestmark = pytest.mark.e2e

WINDOW = 32000
BOUNDS = {"maxContextPct": 80, "rethreadPct": 70, "maxBytes": 1024 * 1024, "maxResumeChain": 3,
          "maxAgeDays": 30, "ttlDays": 14}
LOW = Usage(1000, 40)  # 3 % of the window
AT_BOUND = Usage(23000, 100)  # 72 %: at or above the rethread bound, below the context bound
OVER = Usage(25700, 300)  # 81 %: the next delivery is refused context-too-full
MARKS = "/var/lib/pi-dispatch/jobs/.failpoints"


def handoff_args(tag: str, status: str = "partial") -> dict[str, Any]:
    """The tool call's arguments, every field marked with ``tag`` so the next session's request can be searched."""
    return {"status": status,
            "letter": {"whereWeAre": f"{tag}: the cache race is understood, the fix is half done",
                       "doFirst": f"{tag}: run pytest tests/test_cache.py -k race",
                       "watchOut": f"{tag}: the lock in cache.py is re-entrant",
                       "dontRedo": f"{tag}: the bisect is done: commit abc1234 introduced it",
                       "trust": f"{tag}: verified by the failing test; assumed: only Linux is affected"},
            "entry": {"verified": f"{tag}-verified: the test fails 3 times in 10", "assumed": "only Linux",
                      "stillBroken": "tests/test_cache.py::test_race", "goal": f"{tag}-goal: fix the flaky cache test",
                      "done": "bisected; wrote a reproduction", "decisions": "keep the lock, order the writes",
                      "files": "src/cache.py, tests/test_cache.py", "commands": "pytest tests/test_cache.py",
                      "openProblems": "the Windows runner", "nextSteps": "order the writes; run the test 50 times"}}


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as m:
        yield m


@pytest.fixture(scope="module")
def pi_home(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModel) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pi")
    agent = write_agent_dir(root / "agent", model.base_url, context_window=WINDOW)
    (root / "home").mkdir()
    return {"agent": agent, "home": root / "home"}


def values(pi_home: dict[str, Path], **env: str) -> dict[str, Any]:
    job = {"command": ["pidispatch", "runner"],
           "env": {"PI_BIN": str(pi_binary()), "PI_CODING_AGENT_DIR": str(pi_home["agent"]),
                   "HOME": str(pi_home["home"])}}
    return merge(base_values(**env), {"sessions": {"enabled": True, **BOUNDS}, "job": job})


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet, pi_home: dict[str, Path]) -> Iterator[Release]:
    with installed(cluster, kube, "rethread", values(pi_home)) as r:
        yield r


_issues = iter(range(1, 100000))


def deliver(r: Release, model: ScriptedModel, issue: int, comment: str, name: str | None = None
            ) -> tuple[dict[str, Any], list[dict]]:
    before = len(model.requests)
    job = r.run(name or f"rt{issue}-{uuid.uuid4().hex[:5]}", issue=issue, comment=comment, timeout=150)
    assert job["status"]["phase"] == "Succeeded", (json.dumps(job["status"]), r.pod_log(job["status"]["podName"]))
    return job, model.requests[before:]


def words(body: dict) -> str:
    return "\n".join(text_of(m.get("content")) for m in body.get("messages", []))


def key_of(issue: int) -> str:
    key = issue_key("github", "acme/widgets", issue)
    assert key is not None
    return key


def letter_head(key_dir: Path) -> dict[str, str]:
    first = (key_dir / "letter.md").read_text().split("\n", 1)[0]
    return dict(re.findall(r"(\w+)=(\S+)", first))


def header(transcript: bytes) -> dict[str, Any]:
    return json.loads(transcript.split(b"\n", 1)[0])


def packed_key(r: Release, model: ScriptedModel, tag: str) -> tuple[int, dict[str, Any]]:
    """A key whose one job ended at the bound and packed through the tool: (issue, that job)."""
    issue = next(_issues)
    model.reply(f"{tag}: worked on it", usage=AT_BOUND)
    model.tool_call("rethread_handoff", handoff_args(tag), usage=OVER)
    job, _ = deliver(r, model, issue, f"@pi {tag} start")
    assert (job["status"].get("handoff") or {}).get("writer") == "agent", json.dumps(job["status"])
    return issue, job


def test_pack_at_the_bound_then_unpack_after_context_too_full(release: Release, model: ScriptedModel) -> None:
    issue = next(_issues)
    key = key_of(issue)
    key_dir = release.key_dir(key)
    model.reply("D1: I looked at the flaky cache test.", usage=LOW)
    first, seen1 = deliver(release, model, issue, "@pi D1-the cache test is flaky")
    assert first["status"]["session"]["reason"] == "absent" and len(seen1) == 1
    assert not (key_dir / "letter.md").exists(), "a job far below the bound packs nothing"

    # Delivery 2 resumes; its context ends at 72 %: the runner continues the session with the pack turn.
    model.reply("D2: the race is in the writer; half fixed.", usage=AT_BOUND)
    model.tool_call("rethread_handoff", handoff_args("T1"), usage=OVER)
    second, seen2 = deliver(release, model, issue, "@pi D2-keep going")
    assert second["status"]["session"]["resumed"] is True
    assert len(seen2) == 2, "the run, then exactly one pack turn (the tool ends the turn)"
    pack_turn = seen2[1]
    assert [t["function"]["name"] for t in pack_turn.get("tools") or []] == ["rethread_handoff"]
    assert "hand the work over" in text_of(pack_turn["messages"][-1]["content"])
    assert second["status"]["handoff"] == {"writer": "agent", "status": "partial", "entries": 1}
    transcript = (key_dir / "current.jsonl").read_bytes()
    head = letter_head(key_dir)
    assert head["job"] == second["metadata"]["name"] and head["writer"] == "agent"
    assert head["transcript"] == hashlib.sha256(transcript).hexdigest(), "the letter names the stored transcript"
    assert head["session"] == header(transcript)["id"]
    ledger = (key_dir / "ledger.md").read_text()
    assert ledger.count("\n## Entry ") == 1 and "T1-goal: fix the flaky cache test" in ledger
    assert "T1-verified" in ledger.split("### Goal")[0], "the entry opens with its verified / assumed line"
    assert (key_dir / "resume-chain").read_text().strip() == "1"

    # Delivery 3: the stored context (81 %) is over the context bound; the letter waits: rethread.
    model.reply("Goal: fix the flaky cache test\nFirst action: run pytest tests/test_cache.py -k race\n"
                "Main risk: the re-entrant lock", usage=LOW)
    third, seen3 = deliver(release, model, issue, "@pi D3-please finish it")
    assert third["status"]["session"] == {"resumed": False, "reason": "context-too-full",
                                          "bytes": third["status"]["session"]["bytes"], "rethreaded": True,
                                          "redacted": 0}
    assert len(seen3) == 1
    opening = words(seen3[0])
    assert "T1: the cache race is understood" in opening and "T1-goal: fix the flaky cache test" in opening
    assert "D3-please finish it" in opening, "the new event rides with the handoff"
    for earlier in ("D1-the cache test is flaky", "D1: I looked", "D2-keep going", "D2: the race is in"):
        assert earlier not in opening, f"the new session must not carry the old conversation ({earlier!r})"
    assert "First action:" in opening, "the unpack asks for the three-line readback"
    new = (key_dir / "current.jsonl").read_bytes()
    assert header(new)["parentSession"] == header(transcript)["id"]
    replies = [json.loads(line)["message"] for line in new.split(b"\n") if b'"role":"assistant"' in line]
    assert text_of(replies[0]["content"]).startswith("Goal: fix the flaky cache test"), "the readback comes first"
    assert (key_dir / "resume-chain").read_text().strip() == "0", "the chain restarts with the new session"
    assert not (key_dir / "letter.md").exists(), "the letter was used: it goes with the transcript it belonged to"
    assert (key_dir / "ledger.md").read_text().count("\n## Entry ") == 1, "the ledger stays"

    sk = release.sessionkey(key)
    assert sk is not None
    rethreaded = release.condition(sk, "Rethreaded")
    assert rethreaded and rethreaded["status"] == "True" and rethreaded["reason"] == "ContextTooFull", sk["status"]
    assert sk["status"]["ledger"] == {"entries": 1}, "no letter waits: the one there was used"
    assert sk["status"]["resumeChain"] == 0
    with urllib.request.urlopen(f"http://127.0.0.1:{release.values['metrics']['port']}/metrics", timeout=10) as rsp:
        metrics = rsp.read().decode()
    assert re.search(r'pidispatch_rethreads_total\{reason="context-too-full"\} [1-9]', metrics), metrics[-2000:]
    # A rethreaded job is its own start, neither cold nor resumed: per key and fleet-wide.
    usage = sk["status"]["usage"]
    assert {start: usage[start]["jobs"] for start in ("cold", "resumed", "rethreaded")} == {
        "cold": 1, "resumed": 1, "rethreaded": 1}, usage
    assert usage["resumed"]["calls"] == 2, "the run and its pack turn"
    assert [usage[s]["total"] for s in ("cold", "resumed", "rethreaded")] == [
        job["status"]["tokens"]["total"] for job in (first, second, third)]
    assert re.search(r'pidispatch_jobs_ended_total\{session="rethreaded"\} [1-9]', metrics), metrics[-2000:]
    assert re.search(r'pidispatch_job_tokens_total\{session="rethreaded"\} [1-9]', metrics), metrics[-2000:]


def test_the_agent_that_ignores_the_pack_turn_gets_a_summary_handoff(release: Release, model: ScriptedModel) -> None:
    issue = next(_issues)
    key_dir = release.key_dir(key_of(issue))
    model.reply("S1: the flaky test is in the cache layer", usage=AT_BOUND)
    model.reply("I would rather keep working than write a handoff.", usage=OVER)  # no tool call
    summary = ("## Status\nblocked\n## Where we are\nS-where: the cache layer\n## Do first\nS-first: rerun\n"
               "## Watch out\nthe lock\n## Don't redo\nthe bisect\n## Trust\nnothing verified\n"
               "## Verified\nS-verified: nothing\n## Assumed\nLinux only\n## Still broken\nthe race\n"
               "## Goal\nS-goal: a green cache test\n## Done\nread the code\n## Decisions\nnone yet\n"
               "## Files\nsrc/cache.py\n## Commands\npytest\n## Open problems\nthe race\n## Next steps\nfix it")
    model.reply(summary, usage=LOW)
    job, seen = deliver(release, model, issue, "@pi S1-the summary case")
    assert len(seen) == 3, "the run, the unanswered pack turn, the side call"
    side = seen[2]
    assert not side.get("tools"), "the side call offers no tools"
    assert "S1: the flaky test is in the cache layer" in words(side), "the side call reads the transcript"
    assert job["status"]["handoff"] == {"writer": "summary", "status": "blocked", "entries": 1}
    assert letter_head(key_dir)["writer"] == "summary"
    letter = (key_dir / "letter.md").read_text()
    assert "S-where: the cache layer" in letter and "written by a summary" in letter
    assert "by summary" in (key_dir / "ledger.md").read_text()


def test_a_hostile_letter_past_its_cap_is_handed_out_cut_and_inert(release: Release, model: ScriptedModel) -> None:
    """Three fields of 4 000 CJK characters (36 000 bytes), a heading forged behind a lone CR and by a setext
    underline, terminal escapes: the letter is stored within its cap, marked where it was cut, and handed out."""
    tag = "HOSTILE"
    args = handoff_args(tag)
    args["letter"].update(whereWeAre=f"{tag}-where " + "中" * 4000, doFirst=f"{tag}-first " + "中" * 4000,
                          watchOut=f"{tag}-careful\r## Forged by a CR\x1b[2J\x1b[31m " + "中" * 4000,
                          dontRedo=f"{tag}-dontredo\nForged by an underline\n===",
                          trust=f"\x1b]0;owned\x07{tag}-trusted")
    issue = next(_issues)
    key_dir = release.key_dir(key_of(issue))
    model.reply(f"{tag}: looked at it", usage=LOW)
    deliver(release, model, issue, f"@pi {tag} start")  # a cold job's context is not stamped: resume once
    model.reply(f"{tag}: worked on it", usage=AT_BOUND)
    model.tool_call("rethread_handoff", args, usage=OVER)
    packed, _ = deliver(release, model, issue, f"@pi {tag} go on")
    assert (packed["status"].get("handoff") or {}).get("writer") == "agent", json.dumps(packed["status"])
    stored = (key_dir / "letter.md").read_bytes()
    assert len(stored) <= LETTER_MAX_BYTES and stored.count(LETTER_CUT.encode()) == 3, len(stored)
    assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", stored), "no control byte is stored"
    assert b"\n## Forged" not in stored and b"\n===" not in stored

    model.reply("Goal: finish\nFirst action: read the letter\nMain risk: the cut", usage=LOW)
    job, seen = deliver(release, model, issue, f"@pi {tag} next")
    assert job["status"]["session"].get("rethreaded") is True, json.dumps(job["status"])
    opening = words(seen[0])
    for kept in (f"{tag}-where 中中", f"{tag}-first 中中", f"{tag}-careful", LETTER_CUT, f"{tag}-dontredo",
                 f"{tag}-trusted"):
        assert kept in opening, f"the next session reads {kept!r}"
    assert "\x1b" not in opening and "\r" not in opening


@pytest.mark.parametrize("reason", ["venue-changed", "unparseable"])
def test_a_safety_refusal_starts_cold_even_with_a_letter(release: Release, model: ScriptedModel, reason: str) -> None:
    tag = f"SAFE-{reason}"
    issue, _ = packed_key(release, model, tag)
    key_dir = release.key_dir(key_of(issue))
    TAMPER[reason](key_dir)
    if reason == "unparseable":
        # The letter must still match the transcript it sits beside, so only the reason can refuse it.
        data = (key_dir / "current.jsonl").read_bytes()
        letter = (key_dir / "letter.md").read_text()
        letter = re.sub(r"transcript=[0-9a-f]{64} size=\d+",
                        f"transcript={hashlib.sha256(data).hexdigest()} size={len(data)}", letter, count=1)
        (key_dir / "letter.md").write_text(letter)
    model.reply("a cold start", usage=LOW)
    job, seen = deliver(release, model, issue, f"@pi {tag} again")
    assert job["status"]["session"]["reason"] == reason
    assert "rethreaded" not in job["status"]["session"]
    assert f"{tag}: the cache race" not in words(seen[0]), "a safety refusal never hands out the letter"


def test_a_lineage_refusal_without_a_letter_is_a_cold_start(release: Release, model: ScriptedModel) -> None:
    issue = next(_issues)
    key_dir = release.key_dir(key_of(issue))
    model.reply("N1", usage=LOW)
    deliver(release, model, issue, "@pi N1-remember this")
    TAMPER["resume-chain-too-long"](key_dir)
    model.reply("N2", usage=LOW)
    job, seen = deliver(release, model, issue, "@pi N2")
    assert job["status"]["session"]["reason"] == "resume-chain-too-long"
    assert "rethreaded" not in job["status"]["session"]
    assert "N1-remember this" not in words(seen[0])


@pytest.fixture(scope="module")
def crashing(cluster: Cluster, kube: Kube, kubelet, pi_home: dict[str, Path]) -> Iterator[Release]:
    armed = "promote:swapped@rt-kill-2"
    with installed(cluster, kube, "rethread-kill",
                   values(pi_home, PIDISPATCH_FAILPOINT=armed, PIDISPATCH_FAILPOINT_MARK=MARKS)) as r:
        (r.staging / ".failpoints").mkdir(exist_ok=True)
        yield r


def test_a_kill_between_the_swap_and_the_handoff_keeps_them_together(crashing: Release,
                                                                     model: ScriptedModel) -> None:
    r = crashing
    issue = next(_issues)
    key_dir = r.key_dir(key_of(issue))
    model.reply("K1", usage=AT_BOUND)
    model.tool_call("rethread_handoff", handoff_args("K1"), usage=OVER)
    deliver(r, model, issue, "@pi K1", name="rt-kill-1")
    assert letter_head(key_dir)["job"] == "rt-kill-1"

    # Job 2 resumes (a cold job's context is not stamped) and ends at the bound again: it packs K2. The
    # operator is killed right after its transcript's swap, before the handoff is written.
    model.reply("K2 work", usage=AT_BOUND)
    model.tool_call("rethread_handoff", handoff_args("K2"), usage=OVER)
    job, _ = deliver(r, model, issue, "@pi K2", name="rt-kill-2")
    assert (r.staging / ".failpoints" / "promote:swapped@rt-kill-2").exists(), "the failpoint never fired"
    assert job["status"]["session"]["resumed"] is True
    transcript = (key_dir / "current.jsonl").read_bytes()
    assert b"@pi K2" in transcript
    head = letter_head(key_dir)
    assert head["job"] == "rt-kill-2", "after recovery the letter is the job's whose transcript is stored"
    assert head["transcript"] == hashlib.sha256(transcript).hexdigest()
    ledger = (key_dir / "ledger.md").read_text()
    assert ledger.count("\n## Entry ") == 2 and ledger.rstrip().count("job rt-kill-2") >= 1
    assert job["status"]["handoff"]["entries"] == 2
