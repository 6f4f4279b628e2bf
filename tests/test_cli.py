"""The ``pidispatch`` command line as a person or a script calls it: real processes, exact JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.store import DAY_MS, KEY, PI, Store, sample
from testkit.transcripts import pi_context

S1_TOKENS = pi_context("s1_after_turn2.jsonl")["tokens"]  # pi's context figure for the transcript Store.put() stores

ENV_KEYS = ("PI_SESSIONS_DIR", "PI_SESSIONS_TTL_DAYS", "PI_SESSION_MAX_BYTES", "PI_SESSION_MAX_AGE_DAYS",
            "PI_SESSION_MAX_RESUME_CHAIN", "PI_SESSION_MAX_CONTEXT_PCT", "PI_SESSIONS_ALLOW_GH_SOURCE")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    return subprocess.run([sys.executable, "-m", "pidispatch", *args], capture_output=True, text=True,
                          env={**base, **(env or {})}, stdin=subprocess.DEVNULL, timeout=60)


@pytest.mark.parametrize(("args", "out"), [
    (["--forge", "github", "--repo", "octo/repo", "--issue", "7"], "7a5b816df58a1c8345ced1323e654287\n"),
    (["--forge", "github", "--repo", "octo/repo", "--branch", "feature/x"], "f3b24ae404dee0f185778be159855147\n"),
    (["--forge", "gitlab", "--repo", "octo/repo", "--branch", "pi/issue-7"], "65b41b583641efb9d20f29901d699b89\n"),
])
def test_key(args: list[str], out: str) -> None:
    result = run("key", *args)
    assert (result.returncode, result.stdout) == (0, out)


@pytest.mark.parametrize("args", [
    ["--forge", "github", "--repo", "", "--issue", "7"],
    ["--forge", "github", "--repo", "o/r", "--issue", "0"],
    ["--forge", "github", "--repo", "o/r", "--issue", "-3"],
    ["--forge", "github", "--repo", "o/r", "--issue", "07"],
    ["--forge", "github", "--repo", "o/r", "--branch", ""],
    ["--forge", "bitbucket", "--repo", "o/r", "--branch", "x"],
], ids=["empty repo", "issue 0", "negative issue", "issue 07", "empty branch", "unknown forge"])
def test_key_refuses_bad_input(args: list[str]) -> None:
    result = run("key", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip(), "a message says what is wrong"


def test_resolve_and_promote_round_trip(store: Store, tmp_path: Path) -> None:
    env = {"PI_SESSIONS_DIR": str(store.root)}
    stage = tmp_path / "job" / "session"
    first = run("store", "resolve", "--key", KEY, "--stage", str(stage), "--pi-version", PI, env=env)
    assert first.returncode == 0
    assert json.loads(first.stdout) == {"resume": False, "reason": "absent", "bytes": None}
    assert (stage / "current.jsonl").read_bytes() == b""
    (stage / "current.jsonl").write_bytes(sample("s1_after_turn1.jsonl"))
    promoted = run("store", "promote", "--key", KEY, "--stage", str(stage), "--host-resume", "false",
                   "--pi-version", PI, "--model", "fake/fake-model", env=env)
    assert json.loads(promoted.stdout) == {"promoted": True, "reason": "promoted",
                                           "bytes": len(sample("s1_after_turn1.jsonl"))}
    assert '"event":"session_promoted"' in promoted.stderr, "structured events go to stderr"
    again = run("store", "resolve", "--key", KEY, "--stage", str(tmp_path / "job2"), "--pi-version", PI, env=env)
    assert json.loads(again.stdout) == {"resume": True, "reason": "resumed",
                                        "bytes": len(sample("s1_after_turn1.jsonl"))}
    no_version = run("store", "resolve", "--key", KEY, "--stage", str(tmp_path / "job3"), env=env)
    assert json.loads(no_version.stdout)["reason"] == "pi-version-changed"


def test_resolve_fault_prints_no_reason_and_exits_1(store: Store, tmp_path: Path) -> None:
    """A store fault has no reason token (the job runs as if it had no key): ``reason`` is null, exit
    1, and the cause is the ``session_store_failed`` event on stderr (docs/commands.md, "Output and exit codes")."""
    store.put()
    blocker = tmp_path / "job"
    blocker.write_text("a file where the staging directory should go")
    result = run("store", "resolve", "--key", KEY, "--stage", str(blocker / "session"), "--pi-version", PI,
                 env={"PI_SESSIONS_DIR": str(store.root)})
    assert result.returncode == 1
    assert json.loads(result.stdout) == {"resume": False, "reason": None, "bytes": None}
    (event,) = [json.loads(line) for line in result.stderr.splitlines() if "session_store_failed" in line]
    assert event["phase"] == "resolve"


def test_promote_with_context(store: Store, tmp_path: Path) -> None:
    stage = store.staged_job(sample("s1_after_turn2.jsonl"))
    result = run("store", "promote", "--key", KEY, "--stage", str(stage), "--host-resume", "true",
                 "--pi-version", PI, "--model", "Fake/Fake-Model", "--context", f"{S1_TOKENS} 32000",
                 env={"PI_SESSIONS_DIR": str(store.root)})
    assert json.loads(result.stdout)["promoted"] is True
    assert (store.key_dir() / "context").read_text() == f"{S1_TOKENS} 32000 fake/fake-model"
    assert (store.key_dir() / "resume-chain").read_text() == "1"


@pytest.mark.parametrize(("env", "args", "needle"), [
    ({"PI_SESSION_MAX_BYTES": "1e3"}, ["store", "reap"], "PI_SESSION_MAX_BYTES"),
    ({"PI_SESSIONS_TTL_DAYS": "07"}, ["store", "reap"], "PI_SESSIONS_TTL_DAYS"),
    ({"PI_SESSION_MAX_CONTEXT_PCT": "101"}, ["store", "inspect"], "PI_SESSION_MAX_CONTEXT_PCT"),
    ({}, ["store", "reap"], "PI_SESSIONS_DIR"),
    ({"PI_SESSIONS_DIR": "/tmp"}, ["store", "resolve", "--key", "../etc", "--stage", "/tmp/x"], "session key"),
    ({"PI_SESSIONS_DIR": "/tmp"}, ["store", "promote", "--key", KEY, "--stage", "/tmp/x", "--host-resume", "yes"],
     "host-resume"),
    ({"PI_SESSIONS_DIR": "/tmp"}, ["store", "promote", "--key", KEY, "--stage", "/tmp/x", "--host-resume",
                                   "true", "--context", "10"], "TOKENS WINDOW"),
], ids=["float-ish bytes", "leading zero ttl", "percent out of range", "store unset", "key not hex",
        "host-resume not boolean", "context one field"])
def test_configuration_errors_exit_2_with_one_line(store: Store, env, args, needle: str) -> None:
    if env.get("PI_SESSIONS_DIR") is None and "PI_SESSIONS_DIR" != needle:
        env = {"PI_SESSIONS_DIR": str(store.root), **env}
    result = run(*args, env=env)
    assert result.returncode == 2
    assert needle in result.stderr
    assert result.stdout == ""


def test_reap_prints_one_json_line_per_key(store: Store) -> None:
    store.put(key="1" * 32, idle_ms=400 * DAY_MS)
    store.put(key="2" * 32, idle_ms=0)  # relative to the fixed test clock: far in the future for the CLI
    (store.root / "stray").write_text("x")
    result = run("store", "reap", env={"PI_SESSIONS_DIR": str(store.root)})
    lines = sorted(json.loads(line)["event"] + ":" + json.loads(line)["key"] for line in result.stdout.splitlines())
    assert lines == ["reaped_session:" + "1" * 32, "session_not_reaped:stray"]


def test_inspect_table_and_json(store: Store) -> None:
    store.put(context=f"{S1_TOKENS} 32000 fake/fake-model", chain="2")
    (store.key_dir() / "lock").touch()
    env = {"PI_SESSIONS_DIR": str(store.root)}
    table = run("store", "inspect", env=env)
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split() == ["KEY", "SIZE", "IDLE", "VENUE", "PI", "CHAIN", "CONTEXT",
                                                    "LOCK", "LEDGER", "LETTER", "NEXT"]
    assert KEY in table.stdout and "kubernetes" in table.stdout and f"{S1_TOKENS}/32000" in table.stdout
    one = json.loads(run("store", "inspect", KEY, "--json", "--pi-version", "0.1.0", env=env).stdout)
    assert one["next"] == "pi-version-changed" and one["resumeChain"] == 2 and one["lock"]["state"] == "live"
    assert one["context"] == {"tokens": S1_TOKENS, "window": 32000, "model": "fake/fake-model"}
    assumed = json.loads(run("store", "inspect", KEY, "--json", env=env).stdout)
    assert assumed["next"] == "resumed" and assumed["assumedPiVersion"] is True


def test_transcript_check(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_bytes(sample("s2_tool_call.jsonl"))
    assert run("transcript", "check", str(good)).returncode == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(sample("edge/d_torn_last.before.jsonl"))
    result = run("transcript", "check", str(bad))
    assert result.returncode == 1
    assert result.stdout.startswith(f"{bad}:7:"), result.stdout
    assert run("transcript", "check", str(tmp_path / "missing.jsonl")).returncode == 2


def test_ledger_prints_the_key_s_ledger_and_inspect_shows_the_letter(store: Store) -> None:
    from pidispatch.store import handoff

    store.put()
    key_dir = store.key_dir()
    h = handoff.parse_handoff({"writer": "agent", "status": "landed", "letter": {"whereWeAre": "here"},
                               "entry": {"goal": "the goal"}})
    import hashlib

    digest = hashlib.sha256((key_dir / "current.jsonl").read_bytes()).hexdigest()
    size = (key_dir / "current.jsonl").stat().st_size
    (key_dir / "ledger.md").write_text(handoff.append_entry(None, h, job="j1", sha256=digest, now_s=0) or "")
    (key_dir / "letter.md").write_text(handoff.render_letter(h, job="j1", sha256=digest, size=size, session=None,
                                                             now_s=0))
    env = {"PI_SESSIONS_DIR": str(store.root)}
    printed = run("ledger", KEY, env=env)
    assert printed.returncode == 0 and "## Entry 1" in printed.stdout and "the goal" in printed.stdout
    row = json.loads(run("store", "inspect", KEY, "--json", env=env).stdout)
    letter = {"job": "j1", "writer": "agent", "written": "1970-01-01T00:00:00Z"}
    assert row["ledger"] == {"entries": 1, "letter": letter}
    assert "waits (agent, j1)" in run("store", "inspect", env=env).stdout
    (key_dir / "ledger.md").unlink()
    missing = run("ledger", KEY, env=env)
    assert missing.returncode == 1 and "has no ledger" in missing.stderr


def test_ledger_never_prints_a_raw_control_byte_whoever_wrote_the_file(store: Store) -> None:
    """A ledger written before the escapes were removed (or by another writer) still holds them: shown, not obeyed."""
    from pidispatch.store import handoff

    store.put()
    h = handoff.parse_handoff({"writer": "agent", "status": "landed", "letter": {}, "entry": {"goal": "the goal"}})
    text = handoff.append_entry(None, h, job="j1", sha256="a" * 64, now_s=0) or ""
    planted = text.replace("the goal", "the goal\x1b]0;owned\x07 \x1b[2J\x1b[31mred\x9b1m\rover\x00")
    (store.key_dir() / "ledger.md").write_text(planted)
    printed = subprocess.run([sys.executable, "-m", "pidispatch", "ledger", KEY], capture_output=True, timeout=60,
                             env={**os.environ, "PI_SESSIONS_DIR": str(store.root)}, stdin=subprocess.DEVNULL)
    assert printed.returncode == 0, printed.stderr
    out = printed.stdout.decode("utf-8")
    assert not [c for c in out if (ord(c) < 0x20 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f]
    assert "the goal\\x1b]0;owned\\x07 \\x1b[2J\\x1b[31mred\\x9b1m\\x0dover\\x00" in out, "shown, visibly"
