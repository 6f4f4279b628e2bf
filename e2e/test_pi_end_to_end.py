"""Real pi, end to end: the operator installed by its chart runs job Pods with ``pidispatch runner`` and the
pinned pi 0.73.1, talking to the scripted model on loopback. The proof that a delivery resumed is in
what the model received: the second delivery's request carries the first delivery's turn; a cold
start's request does not.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import TAMPER as STORE_TAMPER
from e2e.framework.release import TAMPER_BOUNDS, Release, base_values, installed, merge
from pidispatch.kubeapi import Api
from pidispatch.receiver.cluster import ApiCluster
from pidispatch.store.keys import issue_key
from pidispatch.transcript.parser import check_transcript
from testkit.pitool import pi_binary, pi_env
from testkit.receiver import Running
from testkit.scripted_model import ScriptedModel, Usage, text_of, write_agent_dir

pytestmark = pytest.mark.e2e

BOUNDS = TAMPER_BOUNDS
WINDOW = 32000


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


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet, pi_home: dict[str, Path]) -> Iterator[Release]:
    job = {"command": ["pidispatch", "runner"],
           "env": {"PI_BIN": str(pi_binary()), "PI_CODING_AGENT_DIR": str(pi_home["agent"]),
                   "HOME": str(pi_home["home"])}}
    with installed(cluster, kube, "pi-e2e", merge(base_values(), {"sessions": {"enabled": True, **BOUNDS},
                                                                   "job": job})) as r:
        yield r


_issues = iter(range(1, 100000))


def deliver(r: Release, model: ScriptedModel, issue: int, comment: str) -> tuple[dict[str, Any], list[dict]]:
    """Run one Job; return it and the requests the model received while it ran."""
    before = len(model.requests)
    job = r.run(f"i{issue}-{uuid.uuid4().hex[:5]}", issue=issue, comment=comment, timeout=120)
    assert job["status"]["phase"] == "Succeeded", (json.dumps(job["status"]), r.pod_log(job["status"]["podName"]))
    return job, model.requests[before:]


def conversation(requests: list[dict]) -> str:
    """Every message text the model was sent, one string."""
    return "\n".join(text_of(m.get("content")) for body in requests for m in body.get("messages", []))


def key_of(issue: int) -> str:
    key = issue_key("github", "acme/widgets", issue)
    assert key is not None
    return key


def test_a_second_delivery_continues_the_first_conversation(release: Release, model: ScriptedModel) -> None:
    issue = next(_issues)
    model.reply("I looked at the flaky test: it races on the cache.", usage=Usage(900, 40))
    first, seen1 = deliver(release, model, issue, "@pi the cache test is flaky, fix it")
    assert len(seen1) == 1
    assert "the cache test is flaky" in conversation(seen1)
    assert first["status"]["session"] == {"resumed": False, "reason": "absent",
                                          "bytes": first["status"]["session"]["bytes"], "redacted": 0}
    assert first["status"]["tokens"]["input"] == 900 and first["status"]["tokens"]["output"] == 40
    stored = (release.key_dir(key_of(issue)) / "current.jsonl").read_bytes()
    assert check_transcript(stored) == [], "the store must hold a valid pi session"

    second, seen2 = deliver(release, model, issue, "@pi also add a regression test")
    text = conversation(seen2)
    # the proof: delivery 2's request carries delivery 1's user and assistant messages
    assert "the cache test is flaky" in text
    assert "it races on the cache" in text
    assert "also add a regression test" in text
    assert second["status"]["session"]["resumed"] is True and second["status"]["session"]["reason"] == "resumed"
    assert second["status"]["tokens"]["calls"] == 1


def pi_tokens(usage: Usage) -> dict[str, int]:
    """What pi makes of the scripted model's usage, as a job's ``status.tokens`` carries it: the fake model has
    no prices in models.json, so no cost and one unpriced reply. pi 0.73.1's parseChunkUsage (pi-ai
    openai-completions.js) reads cached_tokens as hits plus this request's writes when cache_write_tokens is
    given (OpenRouter's way), so cacheRead is cached - written (docs/pi-behaviour.md#usage-mapping has input -
    written instead)."""
    read = usage.cached_tokens - usage.cache_write_tokens if usage.cache_write_tokens else usage.cached_tokens
    fresh = usage.prompt_tokens - read - usage.cache_write_tokens
    return {"input": fresh, "output": usage.completion_tokens, "cacheRead": read,
            "cacheWrite": usage.cache_write_tokens,
            "total": fresh + usage.completion_tokens + read + usage.cache_write_tokens, "calls": 1, "unpriced": 1}


def test_the_keys_token_figures_equal_the_models_usage_for_a_cold_then_a_resumed_job(
        release: Release, model: ScriptedModel, cluster: Cluster) -> None:
    issue = next(_issues)
    cold_usage = Usage(1200, 30, cached_tokens=200)
    resumed_usage = Usage(1500, 20, cached_tokens=1100, cache_write_tokens=100)
    model.reply("Cold: I read the code.", usage=cold_usage)
    cold, _ = deliver(release, model, issue, "@pi the parser drops the last line")
    model.reply("Resumed: fixed.", usage=resumed_usage)
    resumed, _ = deliver(release, model, issue, "@pi now fix it")
    assert cold["status"]["session"]["reason"] == "absent" and resumed["status"]["session"]["resumed"] is True
    assert cold["status"]["tokens"] == pi_tokens(cold_usage)
    assert resumed["status"]["tokens"] == pi_tokens(resumed_usage), "the job's own turn, not the resumed history"

    # The SessionKey is written before the Job's terminal status: both jobs are counted by now.
    usage = release.sessionkey(key_of(issue))["status"]["usage"]  # type: ignore[index]
    assert usage["cold"] == {"jobs": 1, **pi_tokens(cold_usage)}
    assert usage["resumed"] == {"jobs": 1, **pi_tokens(resumed_usage)}
    assert "rethreaded" not in usage

    # `pidispatch report` prints the same from the cluster.
    done = subprocess.run([sys.executable, "-m", "pidispatch", "report", "--namespace", release.ns, "-o", "json"],
                          capture_output=True, text=True, env=cluster.env(), timeout=60)
    assert done.returncode == 0, done.stderr
    (row,) = [r for r in json.loads(done.stdout)["keys"] if r["key"] == key_of(issue)]
    assert (row["cold"]["jobs"], row["cold"]["total"]) == (1, pi_tokens(cold_usage)["total"])
    assert (row["resumed"]["jobs"], row["resumed"]["perJob"]) == (1, pi_tokens(resumed_usage)["total"])
    assert row["resumeRate"] == 0.5
    table = subprocess.run([sys.executable, "-m", "pidispatch", "report", "--namespace", release.ns],
                           capture_output=True, text=True, env=cluster.env(), timeout=60)
    assert table.returncode == 0 and key_of(issue) in table.stdout, table.stderr


def test_a_job_without_a_session_reports_its_tokens(release: Release, model: ScriptedModel) -> None:
    release.trigger("no-session", resume=False)
    usage = Usage(700, 12, cached_tokens=100)
    model.reply("Done, no session kept.", usage=usage)
    job = release.run(f"nosession-{uuid.uuid4().hex[:5]}", trigger="no-session", issue=next(_issues),
                      comment="@pi quick look", timeout=120)
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    assert job["status"]["session"]["reason"] == "disabled"
    assert job["status"]["tokens"] == pi_tokens(usage)


def test_the_stored_context_reading_matches_pis_own_figure(release: Release, model: ScriptedModel,
                                                            pi_home: dict[str, Path], tmp_path: Path) -> None:
    issue = next(_issues)
    deliver(release, model, issue, "@pi first")
    deliver(release, model, issue, "@pi second")  # the context is stamped after a resumed run
    key_dir = release.key_dir(key_of(issue))
    tokens, window, stamped_model = (key_dir / "context").read_text().split()
    assert (int(window), stamped_model) == (WINDOW, "fake/fake-model")
    copy = tmp_path / "s.jsonl"
    copy.write_bytes((key_dir / "current.jsonl").read_bytes())
    command = json.dumps({"id": "stats", "type": "get_session_stats"}) + "\n"
    (tmp_path / "ws").mkdir()
    done = subprocess.run([str(pi_binary()), "--mode", "rpc", "--session", str(copy)], input=command,
                          capture_output=True, text=True, cwd=tmp_path / "ws", timeout=60,
                          env=pi_env(pi_home["agent"], pi_home["home"]))
    stats = next(json.loads(line) for line in done.stdout.splitlines()
                 if line.startswith("{") and json.loads(line).get("id") == "stats")
    assert stats["data"]["contextUsage"]["tokens"] == int(tokens), stats


# pi's window here is 32000, so the context reading that refuses is stamped against it.
TAMPER = {**STORE_TAMPER, "context-too-full": lambda d: d.joinpath("context").write_text("31000 32000 fake/fake-model")}


@pytest.mark.parametrize("reason", list(TAMPER), ids=list(TAMPER))
def test_each_cold_reason_sends_no_earlier_conversation(release: Release, model: ScriptedModel, reason: str) -> None:
    issue = next(_issues)
    secret = f"remember the word {uuid.uuid4().hex[:8]}"
    deliver(release, model, issue, f"@pi {secret}")
    TAMPER[reason](release.key_dir(key_of(issue)))
    job, seen = deliver(release, model, issue, "@pi what was the word?")
    assert job["status"]["session"]["reason"] == reason
    assert job["status"]["session"]["resumed"] is False
    assert secret not in conversation(seen), "a cold start must not carry the earlier conversation"


def test_a_torn_tail_is_cut_and_the_history_before_it_kept(release: Release, model: ScriptedModel) -> None:
    issue = next(_issues)
    deliver(release, model, issue, "@pi the first request survives")
    with (release.key_dir(key_of(issue)) / "current.jsonl").open("ab") as f:
        f.write(b'{"type":"message","id":"torn","parentId":')  # a write cut short
    job, seen = deliver(release, model, issue, "@pi and the follow-up")
    session = job["status"]["session"]
    assert (session["resumed"], session["reason"]) == (True, "resumed")
    assert "the first request survives" in conversation(seen)
    assert check_transcript((release.key_dir(key_of(issue)) / "current.jsonl").read_bytes()) == []


def test_a_body_pi_cannot_read_is_quarantined_and_the_job_starts_fresh(release: Release,
                                                                        model: ScriptedModel) -> None:
    issue = next(_issues)
    deliver(release, model, issue, "@pi words from before the damage")
    with (release.key_dir(key_of(issue)) / "current.jsonl").open("ab") as f:
        f.write(b"\x00\x01 not json at all\n")  # the header still passes the gate; the body does not parse
    job, seen = deliver(release, model, issue, "@pi after the damage")
    assert job["status"]["session"]["reason"] == "unparseable"
    assert "words from before the damage" not in conversation(seen)
    # the fresh transcript is what got promoted, and it is whole
    stored = (release.key_dir(key_of(issue)) / "current.jsonl").read_bytes()
    assert check_transcript(stored) == [] and b"after the damage" in stored


def test_a_closed_issue_retires_its_conversation_and_the_next_delivery_starts_fresh(
        cluster: Cluster, release: Release, model: ScriptedModel) -> None:
    """Issue 34 item 1 with real pi: a signed ``issues.closed`` through the receiver (in this process, on the real
    apiserver with the admin's credentials; its Role is held to ``patch`` on sessionkeys by e2e/test_receiver.py)
    retires the key (``sessions.retire: delete``), and the next delivery on the issue's branch is a new
    conversation: the model is sent nothing of the one before."""
    issue = next(_issues)
    key = key_of(issue)
    model.reply("Noted. The word is PELICAN.", usage=Usage(700, 20))
    deliver(release, model, issue, "@pi remember the word PELICAN")
    model.reply("Yes, PELICAN.", usage=Usage(800, 10))
    _, seen = deliver(release, model, issue, "@pi which word?")
    assert "remember the word PELICAN" in conversation(seen), "before the close, the second delivery resumes the first"

    admin = Api(cluster.server, ca_file=str(cluster.ca_file), cert_file=str(cluster.pki / "admin.crt"),
                key_file=str(cluster.pki / "admin.key"))
    receiver = Running(ApiCluster(admin, release.ns, cache_seconds=0))  # type: ignore[arg-type]
    try:
        sent = receiver.hooks.send(receiver.hooks.issues_event(issue, "closed"))
    finally:
        receiver.stop()
    assert (sent.status, sent.json) == (202, {"retired": key, "reason": "issue-closed"}), sent.json

    sk = release.sessionkey_when(key, "Retired", status="True")
    assert (release.condition(sk, "Resumable") or {}).get("reason") == "Retired"
    assert not release.key_dir(key).exists(), "sessions.retire: delete removes the key directory"

    model.reply("Which word? I have no earlier conversation.", usage=Usage(600, 12))
    after, seen = deliver(release, model, issue, "@pi which word did I ask you to remember?")
    assert (after["status"]["session"]["resumed"], after["status"]["session"]["reason"]) == (False, "retired")
    assert "PELICAN" not in conversation(seen), "a retired conversation is never sent to the model again"


def test_three_failed_resumes_quarantine_the_transcript_and_the_fourth_delivery_starts_fresh(
        release: Release, model: ScriptedModel) -> None:
    """Issue 34 item 2 with real pi: three resumed jobs in a row whose pi fails (the model refuses: pi exits 1)
    quarantine the transcript (``sessions.quarantineAfter: 3``), which is kept as it was; the fourth delivery
    is a new conversation, and the model is sent nothing of the quarantined one. That job succeeds, so its
    conversation replaces the quarantined one and the key resumes it from then on (a person's release, the
    other way out, is proven in e2e/test_operator_lifecycle.py)."""
    issue = next(_issues)
    key = key_of(issue)
    model.reply("Noted. The word is HERON.", usage=Usage(700, 20))
    deliver(release, model, issue, "@pi remember the word HERON")
    poisoned = release.digest(key)
    for i in range(3):
        model.error(400, {"error": {"message": "the model refuses", "type": "invalid_request_error"}})
        failed = release.run(f"i{issue}-fail-{i}", issue=issue, comment="@pi go on", timeout=120)
        assert failed["status"]["phase"] == "Failed", json.dumps(failed["status"])
        assert failed["status"]["session"]["resumed"] is True, "each failure was a resumed job"

    sk = release.sessionkey_when(key, "Resumable", reason="Quarantined")
    assert "3 resumed jobs in a row ended Failed" in release.condition(sk, "Resumable")["message"]
    assert release.digest(key) == poisoned, "the quarantined transcript is kept as it was"

    model.reply("Which word? I have no earlier conversation.", usage=Usage(600, 12))
    fresh, seen = deliver(release, model, issue, "@pi which word?")
    assert (fresh["status"]["session"]["resumed"], fresh["status"]["session"]["reason"]) == (False, "quarantined")
    assert "HERON" not in conversation(seen), "a quarantined transcript is never sent to the model"

    release.sessionkey_when(key, "Resumable", status="True")
    model.reply("You asked which word.", usage=Usage(900, 5))
    after, seen = deliver(release, model, issue, "@pi what did I ask last?")
    assert (after["status"]["session"]["resumed"], after["status"]["session"]["reason"]) == (True, "resumed")
    text = conversation(seen)
    assert "@pi which word?" in text and "HERON" not in text, "the fresh conversation is the key's now"
