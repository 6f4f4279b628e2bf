"""The gate ladder: every gate, its exact comparison, and the order rules (docs/store-contract.md#gates,
docs/store-contract.md#why-this-order)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pidispatch.store.gates import LADDER
from pidispatch.store.resolve import resolve
from testkit.store import DAY_MS, KEY, MODEL, NOW_MS, PI, Store, header, sample
from testkit.transcripts import entry_ids

CAP = 8 * 1024 * 1024


def judge(store: Store, *, venue: str | None = "kubernetes", pi_version: str | None = PI,
          model: str | None = MODEL) -> tuple[str, Path]:
    stage = store.stage()
    result = resolve(store.settings, KEY, str(stage), venue=venue, pi_version=pi_version, model=model,
                     clock=NOW_MS)
    assert result is not None, "resolve reported a store fault"
    return result.verdict.reason, stage


_, _, _, _, SECOND_USER, LEAF = entry_ids("s1_after_turn2.jsonl")  # what Store.put() stores by default


def compaction_line(summary: str) -> bytes:
    """A compaction entry to append to ``s1_after_turn2``: on its leaf, keeping its second turn."""
    entry = {"type": "compaction", "id": "c0ffee00", "parentId": LEAF, "timestamp": "2026-11-29T13:00:00.000Z",
             "summary": summary, "firstKeptEntryId": SECOND_USER, "tokensBefore": 20050,
             "details": {"readFiles": [], "modifiedFiles": []}, "fromHook": False}
    return (json.dumps(entry) + "\n").encode()


Setup = Callable[[Store], None]

CASES: list[tuple[str, Setup, str]] = [
    ("all gates pass", lambda s: s.put(), "resumed"),
    ("key path is a symlink to a directory", lambda s: (s.root.joinpath("elsewhere").mkdir(),
                                                        s.key_dir().symlink_to(s.root / "elsewhere")),
     "key-not-a-directory"),
    ("key path is a regular file", lambda s: s.key_dir().write_text("x"), "key-not-a-directory"),
    ("key path is a symlink to a file", lambda s: (s.root.joinpath("a-file").write_text("x"),
                                                   s.key_dir().symlink_to(s.root / "a-file")),
     "key-not-a-directory"),
    ("key path is a FIFO", lambda s: os.mkfifo(s.key_dir()), "key-not-a-directory"),
    ("key path is a dangling symlink", lambda s: s.key_dir().symlink_to(s.root / "gone"), "key-not-a-directory"),
    ("key never promoted", lambda s: None, "absent"),
    ("key directory without transcript", lambda s: s.key_dir().mkdir(), "absent"),
    ("transcript is a symlink to a regular file", lambda s: (
        s.put(), s.root.joinpath("real.jsonl").write_bytes(sample("s1_after_turn2.jsonl")),
        (s.key_dir() / "current.jsonl").unlink(),
        (s.key_dir() / "current.jsonl").symlink_to(s.root / "real.jsonl")), "not-a-regular-file"),
    ("transcript is a dangling symlink", lambda s: (
        s.put(), (s.key_dir() / "current.jsonl").unlink(),
        (s.key_dir() / "current.jsonl").symlink_to("/nonexistent")), "not-a-regular-file"),
    ("transcript is a directory", lambda s: (s.put(), (s.key_dir() / "current.jsonl").unlink(),
                                             (s.key_dir() / "current.jsonl").mkdir()), "not-a-regular-file"),
    ("transcript is a FIFO", lambda s: (s.put(), (s.key_dir() / "current.jsonl").unlink(),
                                        os.mkfifo(s.key_dir() / "current.jsonl")), "not-a-regular-file"),
    ("transcript is empty", lambda s: s.put(b""), "absent"),
    ("transcript one byte over the cap", lambda s: (s.configure(max_bytes=100), s.put(header() + b"x" * 100)),
     "too-large"),
    ("transcript exactly at the cap passes", lambda s: (s.configure(max_bytes=len(header())), s.put(header())),
     "resumed"),
    ("cap 0 means no cap", lambda s: (s.configure(max_bytes=0), s.put(header() + b" " * 200 + b"\n")),
     "resumed"),
    ("idle one ms past the TTL", lambda s: s.put(idle_ms=14 * DAY_MS + 1), "expired"),
    ("idle exactly the TTL passes", lambda s: s.put(idle_ms=14 * DAY_MS), "resumed"),
    ("TTL 0 keeps forever", lambda s: (s.configure(ttl_days=0), s.put(idle_ms=3650 * DAY_MS)), "resumed"),
    ("venue stamp from another venue", lambda s: s.put(venue="podman"), "venue-changed"),
    ("missing venue reads local", lambda s: s.put(venue=None), "venue-changed"),
    ("venue stamp is the pending sentinel", lambda s: s.put(venue="(pending)"), "venue-changed"),
    ("venue stamp is a dangling link", lambda s: (s.put(venue=None),
                                                  (s.key_dir() / "venue").symlink_to("/nonexistent")),
     "venue-changed"),
    ("venue stamp is empty", lambda s: s.put(venue=""), "venue-changed"),
    ("pi-version stamp differs", lambda s: s.put(pi_version="0.72.0"), "pi-version-changed"),
    ("pi-version stamp empty (invalidated)", lambda s: s.put(pi_version=""), "pi-version-changed"),
    ("pi-version stamp missing", lambda s: s.put(pi_version=None), "pi-version-changed"),
    ("pi-version stamp with trailing newline", lambda s: s.put(pi_version=PI + "\n"), "resumed"),
    ("chain at the bound", lambda s: (s.configure(max_resume_chain=3), s.put(chain="3")), "resume-chain-too-long"),
    ("chain below the bound", lambda s: (s.configure(max_resume_chain=3), s.put(chain="2")), "resumed"),
    ("chain bound off ignores the counter", lambda s: s.put(chain="999"), "resumed"),
    ("corrupt chain reads 0", lambda s: (s.configure(max_resume_chain=1), s.put(chain="07")), "resumed"),
    ("context exactly at the bound", lambda s: (s.configure(max_context_pct=80), s.put(context="160000 200000")),
     "context-too-full"),
    ("context just under the bound", lambda s: (s.configure(max_context_pct=80), s.put(context="159999 200000")),
     "resumed"),
    ("context of the same model", lambda s: (s.configure(max_context_pct=80),
                                             s.put(context="190000 200000 Fake/Fake-Model")), "context-too-full"),
    ("context of a foreign model passes", lambda s: (s.configure(max_context_pct=80),
                                                    s.put(context="190000 200000 other/model")), "resumed"),
    ("context unparseable passes", lambda s: (s.configure(max_context_pct=80), s.put(context="lots 200000")),
     "resumed"),
    ("context with zero window passes", lambda s: (s.configure(max_context_pct=1), s.put(context="5 0")),
     "resumed"),
    ("context bound unset ignores a full reading", lambda s: s.put(context="200000 200000"), "resumed"),
    ("first line not JSON", lambda s: s.put(sample("edge/c_garbage_first.before.jsonl")), "unparseable"),
    ("first line JSON but not a header", lambda s: s.put(sample("edge/c2_no_header.before.jsonl")), "unparseable"),
    ("header is a JSON array", lambda s: s.put(b'["session"]\n'), "unparseable"),
    ("empty compaction summary", lambda s: s.put(sample("s1_after_turn2.jsonl") + compaction_line("")),
     "compaction-summary-empty"),
    ("placeholder compaction summary", lambda s: s.put(sample("s1_after_turn2.jsonl")
                                                       + compaction_line("No prior history.")),
     "compaction-summary-empty"),
    ("real compaction summary", lambda s: s.put(sample("s5_auto_compaction_then_resume.jsonl")), "resumed"),
    ("conversation older than the bound", lambda s: (s.configure(max_age_days=1),
                                                     s.put(header("2020-01-01T00:00:00Z"))),
     "conversation-too-old"),
    ("conversation age bound with missing timestamp", lambda s: (s.configure(max_age_days=1), s.put(header(None))),
     "conversation-too-old"),
    ("conversation age bound with non-ISO timestamp", lambda s: (s.configure(max_age_days=1),
                                                                 s.put(header("yesterday"))),
     "conversation-too-old"),
    ("future header timestamp passes", lambda s: (s.configure(max_age_days=1),
                                                  s.put(header("2099-01-01T00:00:00.000+02:00"))), "resumed"),
    ("age bound off ignores a missing timestamp", lambda s: s.put(header(None)), "resumed"),
]


@pytest.mark.parametrize(("setup", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gate(store: Store, setup: Setup, expected: str) -> None:
    setup(store)
    reason, stage = judge(store)
    assert reason == expected
    staged = (stage / "current.jsonl").read_bytes()
    if expected == "resumed":
        assert staged == (store.key_dir() / "current.jsonl").read_bytes()
    else:
        assert staged == b"", "a refused read stages a 0-byte file"


ORDER: list[tuple[str, Setup, dict, str]] = [
    ("too large wins over expired", lambda s: (s.configure(max_bytes=10), s.put(idle_ms=30 * DAY_MS)), {},
     "too-large"),
    ("expired wins over a venue change", lambda s: s.put(venue="podman", idle_ms=30 * DAY_MS), {}, "expired"),
    ("venue change wins over a pi change", lambda s: s.put(venue="podman", pi_version="0.1.0"), {},
     "venue-changed"),
    ("job without a venue never resumes", lambda s: s.put(), {"venue": None}, "venue-changed"),
    ("job venue cannot impersonate the sentinel", lambda s: s.put(venue="(pending)"), {"venue": "(pending)"},
     "venue-changed"),
    ("unknown job pi version", lambda s: s.put(), {"pi_version": None}, "pi-version-changed"),
    ("placeholder job pi version", lambda s: s.put(pi_version="<no value>"), {"pi_version": "<no value>"},
     "pi-version-changed"),
    ("chain wins over an unparseable body", lambda s: (s.configure(max_resume_chain=1),
                                                       s.put(b"garbage\n", chain="1")), {},
     "resume-chain-too-long"),
    ("context wins over an unparseable body", lambda s: (s.configure(max_context_pct=50),
                                                         s.put(b"garbage\n", context="60 100")), {},
     "context-too-full"),
    ("unparseable wins over an empty compaction", lambda s: s.put(b"garbage\n" + compaction_line("")), {},
     "unparseable"),
    ("unparseable wins over too old", lambda s: (s.configure(max_age_days=1), s.put(b"garbage\n")), {},
     "unparseable"),
    ("empty compaction wins over too old", lambda s: (
        s.configure(max_age_days=1), s.put(header("2020-01-01T00:00:00Z") + compaction_line(""))), {},
     "compaction-summary-empty"),
    ("key shape is judged first", lambda s: (s.root.joinpath("d").mkdir(),
                                             s.key_dir().symlink_to(s.root / "d")), {"venue": None},
     "key-not-a-directory"),
    ("job model is compared lower-cased", lambda s: (s.configure(max_context_pct=80),
                                                     s.put(context="190000 200000 fake/fake-model")),
     {"model": "FAKE/Fake-Model"}, "context-too-full"),
    ("reading counts when the job has no model", lambda s: (s.configure(max_context_pct=80),
                                                            s.put(context="190000 200000 a/b")),
     {"model": None}, "context-too-full"),
]


@pytest.mark.parametrize(("setup", "job", "expected"), [c[1:] for c in ORDER], ids=[c[0] for c in ORDER])
def test_order(store: Store, setup: Setup, job: dict, expected: str) -> None:
    setup(store)
    assert judge(store, **job)[0] == expected


def test_ladder_is_the_spec_order() -> None:
    assert [gate.__name__ for gate in LADDER] == [
        "key_is_not_a_directory", "transcript_is_missing", "transcript_is_not_a_regular_file",
        "transcript_is_empty", "population_has_widened", "transcript_is_too_large", "transcript_has_expired",
        "venue_has_changed",
        "job_pi_version_is_unknown", "pi_version_stamp_differs", "resume_chain_is_too_long",
        "context_is_too_full", "transcript_was_replaced", "header_is_unparseable", "compaction_summary_is_empty",
        "conversation_is_too_old",
    ]


def test_header_gate_reads_one_bounded_line(store: Store) -> None:
    """An 8 MiB transcript whose body is garbage after a valid first line passes gates 11 and 13."""
    body = header() + b"\x00" * (CAP - len(header()) - 1) + b"\n"
    store.put(body)
    reason, stage = judge(store)
    assert reason == "resumed"
    assert (stage / "current.jsonl").stat().st_size == CAP


def test_resolve_logs_session_resolved(store: Store, events) -> None:
    store.put(venue="podman")
    judge(store)
    assert {"event": "session_resolved", "key": KEY, "resume": False, "reason": "venue-changed"} in events()


def test_no_store_or_no_key_returns_no_session(store: Store, tmp_path: Path) -> None:
    from dataclasses import replace

    assert resolve(replace(store.settings, sessions_dir=None), KEY, str(tmp_path / "s")) is None
    assert resolve(store.settings, None, str(tmp_path / "s")) is None
    assert not (tmp_path / "s").exists(), "no key: nothing is written"


def test_resolve_creates_a_private_stage_and_never_the_key_dir(store: Store) -> None:
    reason, stage = judge(store)
    assert reason == "absent"
    assert stage.stat().st_mode & 0o777 == 0o700
    assert not store.key_dir().exists(), "the read side never creates the key directory"


def test_resolve_fault_removes_staging(store: Store, events) -> None:
    store.put()
    blocker = store.stage_root / "job-x"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("a file where the staging directory should go")
    result = resolve(store.settings, KEY, str(blocker / "session"), pi_version=PI, clock=NOW_MS)
    assert result is None
    assert [e["phase"] for e in events() if e["event"] == "session_store_failed"] == ["resolve"]


def test_refused_stage_truncates_a_leftover_copy(store: Store) -> None:
    store.put(venue="podman")
    stage = store.stage()
    stage.mkdir(parents=True)
    (stage / "current.jsonl").write_bytes(b"left over from an earlier attempt\n")
    result = resolve(store.settings, KEY, str(stage), pi_version=PI, clock=NOW_MS)
    assert result is not None and result.verdict.reason == "venue-changed"
    assert (stage / "current.jsonl").read_bytes() == b""


STAGED_SHAPES: dict[str, Callable[[Path, Path], None]] = {
    "a FIFO": lambda staged, outside: os.mkfifo(staged),
    "a symlink to a file": lambda staged, outside: staged.symlink_to(outside),
    "a dangling symlink": lambda staged, outside: staged.symlink_to(outside.parent / "gone"),
    "a directory": lambda staged, outside: (staged.mkdir(), (staged / "x").write_text("x")),
}


@pytest.mark.parametrize("resume", [True, False], ids=["resumed", "refused"])
@pytest.mark.parametrize("shape", list(STAGED_SHAPES))
def test_whatever_sits_at_the_staged_name_is_replaced_by_a_fresh_file(
    store: Store, tmp_path: Path, shape: str, resume: bool
) -> None:
    """A reused staging directory may hold anything at ``current.jsonl``: a FIFO must not block the
    stage (it used to, forever), a link must not redirect the copy. It is removed, never followed."""
    content = sample("s1_after_turn2.jsonl")
    store.put(content, venue="kubernetes" if resume else "podman")
    stage = store.stage()
    stage.mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("not the agent's to overwrite")
    STAGED_SHAPES[shape](stage / "current.jsonl", outside)

    result = resolve(store.settings, KEY, str(stage), pi_version=PI, model=MODEL, clock=NOW_MS)

    assert result is not None and result.verdict.reason == ("resumed" if resume else "venue-changed")
    staged = stage / "current.jsonl"
    assert staged.is_file() and not staged.is_symlink()
    assert staged.read_bytes() == (content if resume else b"")
    assert outside.read_text() == "not the agent's to overwrite"


def test_a_staging_path_that_is_a_link_is_a_fault_not_followed(store: Store, tmp_path: Path, events) -> None:
    store.put()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = store.stage_root / "job-y" / "session"
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere)
    assert resolve(store.settings, KEY, str(link), pi_version=PI, clock=NOW_MS) is None
    assert list(elsewhere.iterdir()) == [], "nothing staged through the link"
    (failed,) = [e for e in events() if e["event"] == "session_store_failed"]
    assert "not a real directory" in failed["reason"]
