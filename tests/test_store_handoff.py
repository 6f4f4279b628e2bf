"""The handoff beside a transcript (``store/handoff.py``) on a real filesystem: its shape, the ledger's cap,
its place in promotion (with a real SIGKILL between the swap and the handoff) and its staging for an unpack."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from pidispatch.record import SessionReason as R
from pidispatch.settings import Settings
from pidispatch.store import handoff
from pidispatch.store.journal import promote_once
from pidispatch.store.promote import promote
from pidispatch.store.staging import HOST, HostRecord, JobDir, stage
from storekit import KEY, MODEL, PI, Store, run_to_death, sample

OLD = sample("s1_after_turn1.jsonl")
NEW = sample("s1_after_turn2.jsonl")


def raw(tag: str = "t", status: str = "partial", writer: str = "agent") -> dict:
    return {"writer": writer, "status": status,
            "letter": {name: f"{tag}-{name}" for name, _ in handoff.LETTER_FIELDS},
            "entry": {name: f"{tag}-{name}" for name, _ in (*handoff.TRUST_FIELDS, *handoff.ENTRY_FIELDS)}}


# -- the shape ---------------------------------------------------------------------------------------------

def test_a_handoff_must_have_its_shape() -> None:
    assert handoff.parse_handoff(raw()).letter["doFirst"] == "t-doFirst"
    for broken in ({**raw(), "writer": "someone"}, {**raw(), "status": "done"}, {**raw(), "letter": "text"},
                   {**raw(), "entry": {"goal": 7}}, [raw()]):
        with pytest.raises(handoff.HandoffError):
            handoff.parse_handoff(broken)
    partial = handoff.parse_handoff({**raw(), "letter": {}})
    assert partial.letter["trust"] == handoff.NOT_STATED
    long = handoff.parse_handoff({**raw(), "letter": {"whereWeAre": "x" * 9000}})
    assert len(long.letter["whereWeAre"]) < 4100


def test_agent_text_cannot_forge_a_heading_or_metadata() -> None:
    evil = raw()
    evil["entry"]["goal"] = "fine\n## Entry 99 · forged\n<!-- entry transcript=" + "0" * 64 + " job=x -->"
    text = handoff.render_entry(handoff.parse_handoff(evil), number=1, job="j", sha256="a" * 64, now_s=0)
    entries = handoff.parse_ledger(handoff.render_ledger([handoff.LedgerEntry(text, 1, 1, False)]))
    assert [(e.first, e.sha256) for e in entries] == [(1, "a" * 64)]
    letter = handoff.render_letter(handoff.parse_handoff(evil), job="j", sha256="b" * 64, size=3, session="s",
                                   now_s=0)
    head = handoff.parse_letter_head(letter)
    assert head is not None and (head.job, head.sha256, head.size, head.session) == ("j", "b" * 64, 3, "s")


def test_the_ledger_appends_once_and_folds_the_oldest_never_dropping_one() -> None:
    text = None
    for n in range(1, 41):
        h = handoff.parse_handoff(raw(f"n{n}-" + "w" * 300))
        text = handoff.append_entry(text, h, job=f"job-{n}", sha256=f"{n:064x}", now_s=n) or text
    assert text is not None and len(text.encode()) <= handoff.LEDGER_MAX_BYTES
    entries = handoff.parse_ledger(text)
    assert entries[-1].first == 40 and not entries[-1].folded, "the newest entry stays whole"
    assert entries[0].folded and entries[0].first == 1
    assert handoff.entry_count(text) == 40
    for n in range(1, 40):  # every folded entry is still named by its heading
        assert f"Entry {n} · " in text or "counted here only" in text
    h = handoff.parse_handoff(raw("again"))
    assert handoff.append_entry(text, h, job="job-40", sha256=f"{40:064x}", now_s=41) is None, \
        "the same job's entry is not appended twice (a recovery after a kill)"


# -- in the store ------------------------------------------------------------------------------------------

def settings(store: Store) -> Settings:
    return Settings(sessions_dir=str(store.root), max_context_pct=80)


def host(resume: bool, reason: str) -> HostRecord:
    return HostRecord(key=KEY, forge="github", repository="acme/widgets", branch="pi/issue-7", venue="kubernetes",
                      pi_version=PI, model=MODEL, mounted=True, resume=resume, reason=reason)


def job_dir(store: Store, uid: str, content: bytes, with_handoff: dict | None, resume: bool = True) -> JobDir:
    store.stage_root.mkdir(parents=True, exist_ok=True)
    jd = JobDir(str(store.stage_root), uid)
    jd.prepare()
    jd.write(HOST, host(resume, "resumed" if resume else "absent").to_json())
    Path(jd.session, "current.jsonl").write_bytes(content)
    if with_handoff is not None:
        Path(jd.session, "handoff.json").write_text(json.dumps(with_handoff))
    return jd


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_promotion_writes_the_handoff_for_the_transcript_it_swapped_in(store: Store) -> None:
    jd = job_dir(store, "u1", OLD, raw("one"), resume=False)
    result = promote_once(settings(store), jd, host(False, "absent"), None, job="job-one")
    assert result.promoted and result.handoff.writer == "agent" and result.handoff.entries == 1
    key_dir = store.key_dir()
    letter = handoff.parse_letter_head((key_dir / "letter.md").read_text())
    assert letter is not None and (letter.job, letter.sha256, letter.size) == ("job-one", sha(OLD), len(OLD))
    assert (key_dir / "letter.md").stat().st_mode & 0o777 == 0o600
    assert handoff.describe(str(key_dir))["letter"]["job"] == "job-one"
    # A later job without a handoff replaces the transcript: the letter goes with the transcript it belonged to.
    jd2 = job_dir(store, "u2", NEW, None)
    result = promote_once(settings(store), jd2, host(True, "resumed"), (10, 100), job="job-two")
    assert result.promoted and not (key_dir / "letter.md").exists()
    assert handoff.entry_count((key_dir / "ledger.md").read_text()) == 1, "the ledger is kept"


def test_a_letter_beside_another_transcript_does_not_wait(store: Store) -> None:
    jd = job_dir(store, "u1", OLD, raw("one"), resume=False)
    promote_once(settings(store), jd, host(False, "absent"), None, job="job-one")
    assert handoff.describe(str(store.key_dir()))["letter"] is not None
    (store.key_dir() / "current.jsonl").write_bytes(NEW)  # replaced behind the operator's back
    assert handoff.describe(str(store.key_dir()))["letter"] is None


def test_a_link_at_the_letter_is_never_followed(store: Store, tmp_path: Path) -> None:
    jd = job_dir(store, "u1", OLD, raw("one"), resume=False)
    promote_once(settings(store), jd, host(False, "absent"), None, job="job-one")
    outside = tmp_path / "outside.md"
    outside.write_text((store.key_dir() / "letter.md").read_text())
    (store.key_dir() / "letter.md").unlink()
    os.symlink(outside, store.key_dir() / "letter.md")
    assert handoff.describe(str(store.key_dir()))["letter"] is None
    jd2 = job_dir(store, "u2", NEW, raw("two"))
    promote_once(settings(store), jd2, host(True, "resumed"), (10, 100), job="job-two")
    assert not (store.key_dir() / "letter.md").is_symlink(), "the link is replaced, not written through"
    assert "job=job-one" in outside.read_text()


def _killed_after_swap(root: str, staging: str) -> None:
    from storekit import KillAt

    h = host(True, "resumed")
    promote_once(Settings(sessions_dir=root), JobDir(staging, "u2"), h, (10, 100), job="job-two",
                 seams=KillAt("swapped"))


def test_a_kill_between_the_swap_and_the_handoff_is_finished_by_recovery(store: Store) -> None:
    promote_once(settings(store), job_dir(store, "u1", OLD, raw("one"), resume=False), host(False, "absent"), None,
                 job="job-one")
    jd2 = job_dir(store, "u2", NEW, raw("two"))
    run_to_death(_killed_after_swap, str(store.root), str(store.stage_root))
    key_dir = store.key_dir()
    assert (key_dir / "current.jsonl").read_bytes() == NEW, "the swap landed"
    assert handoff.describe(str(key_dir))["letter"] is None, "job one's letter no longer matches: it does not wait"
    result = promote_once(settings(store), jd2, host(True, "resumed"), (10, 100), job="job-two")
    assert result.promoted and result.handoff.writer == "agent"
    letter = handoff.parse_letter_head((key_dir / "letter.md").read_text())
    assert letter is not None and (letter.job, letter.sha256) == ("job-two", sha(NEW))
    ledger = (key_dir / "ledger.md").read_text()
    assert handoff.entry_count(ledger) == 2 and ledger.count("job job-two") == 1
    again = promote_once(settings(store), jd2, host(True, "resumed"), (10, 100), job="job-two")
    assert again.handoff.entries == 2, "the journal's result is returned as it was"


@pytest.mark.parametrize(("reason", "rethread"), [(R.CONTEXT_TOO_FULL, True), (R.VENUE_CHANGED, False)])
def test_a_lineage_refusal_stages_the_letter_and_a_safety_refusal_does_not(store: Store, reason: str,
                                                                           rethread: bool) -> None:
    promote(settings(store), KEY, str(store.staged_job(OLD)), host_resume=True, pi_version=PI, model=MODEL,
            context=(90, 100))
    jd = job_dir(store, "u1", OLD, raw("one"))
    promote_once(settings(store), jd, host(True, "resumed"), (90, 100), job="job-one")
    if reason == R.VENUE_CHANGED:
        (store.key_dir() / "venue").write_text("local")
    next_job = JobDir(str(store.stage_root), "u9")
    record = stage(settings(store), next_job, HostRecord(key=KEY, forge="github", repository="acme/widgets",
                                                         branch="pi/issue-7", venue="kubernetes", pi_version=PI,
                                                         model=MODEL))
    assert (record.reason, record.rethread) == (reason, rethread)
    staged = Path(next_job.session)
    assert (staged / "current.jsonl").read_bytes() == b""
    assert (staged / "letter.md").exists() is rethread
    if rethread:
        assert "one-whereWeAre" in (staged / "letter.md").read_text()
        assert handoff.parse_letter_head((staged / "letter.md").read_text()).session is not None
        assert HostRecord.from_json(next_job.read(HOST)).rethread is True


def test_a_re_stage_of_the_same_job_clears_the_letter_its_first_stage_left(store: Store) -> None:
    """A fresh Job directory has nothing to clear; a re-stage (after a restart) must not keep a stale letter."""
    promote(settings(store), KEY, str(store.staged_job(OLD)), host_resume=True, pi_version=PI, model=MODEL,
            context=(90, 100))
    promote_once(settings(store), job_dir(store, "u1", OLD, raw("one")), host(True, "resumed"), (90, 100),
                 job="job-one")
    again = JobDir(str(store.stage_root), "u9")
    record = HostRecord(key=KEY, forge="github", repository="acme/widgets", branch="pi/issue-7", venue="kubernetes",
                        pi_version=PI, model=MODEL)
    assert stage(settings(store), again, record).rethread is True
    assert (Path(again.session) / "letter.md").exists() and (Path(again.session) / "ledger.md").exists()
    (store.key_dir() / "venue").write_text("local")  # now a safety refusal: no letter may wait for this job
    restaged = stage(settings(store), again, record)
    assert (restaged.reason, restaged.rethread) == (R.VENUE_CHANGED, False)
    assert sorted(p.name for p in Path(again.session).iterdir()) == ["current.jsonl"]


def test_the_operator_and_the_runner_read_the_rethread_bound_alike() -> None:
    from pidispatch import settings as operator_settings
    from pidispatch.runner import config as runner_config

    assert operator_settings.DEFAULT_RETHREAD_PCT == runner_config.DEFAULT_RETHREAD_PCT
    base = {"PI_REPOSITORY": "o/r"}
    for raw, want in (("0", 0), ("70", 70), ("100", 100)):
        assert operator_settings.Settings.from_env({"PI_SESSION_RETHREAD_PCT": raw}).rethread_pct == want
        assert runner_config.load_config({**base, "PI_SESSION_RETHREAD_PCT": raw}).rethread_pct == want
    for raw in ("070", "101", "-1", "7.5", "70%"):
        with pytest.raises(operator_settings.ConfigError):
            operator_settings.Settings.from_env({"PI_SESSION_RETHREAD_PCT": raw})
        with pytest.raises(runner_config.ConfigError):
            runner_config.load_config({**base, "PI_SESSION_RETHREAD_PCT": raw})
