"""Gate 3a, the population (docs/sessions.md#who-may-resume-a-conversation): a job resumes only a conversation
built under a Trigger that admitted everyone its own Trigger admits; on a real filesystem store, through the
same ``resolve``, ``stage`` and ``promote`` the operator calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pidispatch.api.models import TriggerOn
from pidispatch.api.population import trigger_population
from pidispatch.api.vocabulary import AUTHOR_ASSOCIATIONS
from pidispatch.record import SessionReason as R
from pidispatch.settings import Settings
from pidispatch.store import handoff, population
from pidispatch.store.gates import LADDER, population_has_widened
from pidispatch.store.journal import promote_once
from pidispatch.store.promote import promote
from pidispatch.store.resolve import dry_run, resolve
from pidispatch.store.staging import HOST, HostRecord, JobDir, stage
from testkit.store import DAY_MS, KEY, MODEL, NOW_MS, PI, Store, sample

MAINTAINERS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
OWNERS = frozenset({"OWNER"})
ANYONE = frozenset(AUTHOR_ASSOCIATIONS)
OLD = sample("s1_after_turn1.jsonl")
NEW = sample("s1_after_turn2.jsonl")


def put(store: Store, stamp: str | None = "COLLABORATOR MEMBER OWNER", **kw: object) -> Path:
    return store.put(population=stamp, **kw)  # type: ignore[arg-type]


def judge(store: Store, admits: frozenset[str] | None) -> tuple[str, bytes]:
    stage_dir = store.stage()
    result = resolve(store.settings, KEY, str(stage_dir), pi_version=PI, model=MODEL, population=admits,
                     clock=NOW_MS)
    assert result is not None, "resolve reported a store fault"
    return result.verdict.reason, (stage_dir / "current.jsonl").read_bytes()


# -- the rule ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("admits", "reason"), [
    (MAINTAINERS, R.RESUMED),
    (OWNERS, R.RESUMED),
    (MAINTAINERS | {"NONE"}, R.POPULATION_WIDENED),
    (ANYONE, R.POPULATION_WIDENED),
    (frozenset({"CONTRIBUTOR"}), R.POPULATION_WIDENED),
], ids=["the same population", "a narrower one", "one more association", "anyone", "another one"])
def test_a_job_resumes_only_within_the_population_that_built_the_conversation(store: Store, admits: frozenset[str],
                                                                              reason: str) -> None:
    put(store)
    got, staged = judge(store, admits)
    assert got == reason
    assert (staged == sample("s1_after_turn2.jsonl")) is (reason == R.RESUMED), "a refusal stages 0 bytes"
    if reason != R.RESUMED:
        assert staged == b""


@pytest.mark.parametrize("stamp", [
    None,  # a store from before the stamp: unknown
    "",  # empty: the read rule's no value
    "OWNER MEMBER",  # not sorted: not what a promotion writes
    "MEMBER MEMBER OWNER",  # a token twice
    "member owner",  # lower case
    "MEMBER  OWNER",  # two spaces
    "MEMBER,OWNER",
    " ".join(f"A{chr(65 + i)}" for i in range(17)),  # more tokens than any Trigger admits
], ids=["missing", "empty", "unsorted", "duplicate", "lower-case", "double-space", "comma", "too-many"])
def test_an_unknown_or_malformed_stamp_admits_nobody(store: Store, stamp: str | None) -> None:
    put(store, stamp)
    assert judge(store, OWNERS) == (R.POPULATION_WIDENED, b"")


def test_a_stamp_that_is_a_link_or_a_directory_reads_unknown(store: Store, tmp_path: Path) -> None:
    put(store, None)
    outside = tmp_path / "wide"
    outside.write_text(" ".join(sorted(ANYONE)))
    (store.key_dir() / "population").symlink_to(outside)
    assert judge(store, ANYONE)[0] == R.POPULATION_WIDENED, "a planted link is never followed"
    (store.key_dir() / "population").unlink()
    (store.key_dir() / "population").mkdir()
    assert judge(store, OWNERS)[0] == R.POPULATION_WIDENED


def test_a_delivery_without_a_trigger_is_not_judged_by_the_population(store: Store) -> None:
    """The store commands (``pidispatch store resolve``) carry no Trigger: gate 3a does not judge them."""
    put(store, None)
    assert judge(store, None)[0] == R.RESUMED


# -- its place in the ladder -------------------------------------------------------------------------------

def test_the_gate_sits_after_the_transcript_is_found_and_before_every_lineage_gate() -> None:
    names = [gate.__name__ for gate in LADDER]
    at = LADDER.index(population_has_widened)
    assert names[at - 1] == "transcript_is_empty" and names[at + 1] == "transcript_is_too_large"
    for lineage in ("transcript_is_too_large", "pi_version_stamp_differs", "resume_chain_is_too_long",
                    "context_is_too_full", "compaction_summary_is_empty", "conversation_is_too_old"):
        assert names.index(lineage) > at, lineage


@pytest.mark.parametrize(("shape", "reason"), [
    ("no key", R.ABSENT), ("empty transcript", R.ABSENT), ("key is a file", R.KEY_NOT_A_DIRECTORY)])
def test_a_key_with_no_conversation_says_so_rather_than_population_widened(store: Store, shape: str,
                                                                           reason: str) -> None:
    if shape == "empty transcript":
        put(store, None, transcript=b"")
    elif shape == "key is a file":
        store.key_dir().write_text("x")
    assert judge(store, ANYONE)[0] == reason


@pytest.mark.parametrize("also", ["too-large", "expired", "venue-changed", "pi-version-changed",
                                  "resume-chain-too-long"])
def test_a_wider_population_is_named_before_any_later_gate(store: Store, also: str) -> None:
    store.configure(max_bytes=100, max_resume_chain=3)
    kw: dict[str, object] = {
        "too-large": {"transcript": b"x" * 101}, "expired": {"idle_ms": 15 * DAY_MS},
        "venue-changed": {"venue": "podman"}, "pi-version-changed": {"pi_version": "0.1.0"},
        "resume-chain-too-long": {"chain": "3"}}[also]
    if also != "too-large":
        store.configure(max_bytes=0)
    put(store, **kw)
    assert judge(store, MAINTAINERS)[0] == also, "the gate itself is what refuses"
    assert judge(store, ANYONE)[0] == R.POPULATION_WIDENED


def settings(store: Store) -> Settings:
    return Settings(sessions_dir=str(store.root), max_resume_chain=1)


def record(admits: frozenset[str] | None) -> HostRecord:
    return HostRecord(key=KEY, forge="github", repository="acme/widgets", branch="pi/issue-7", venue="kubernetes",
                      pi_version=PI, model=MODEL, population=None if admits is None else tuple(sorted(admits)))


def letter_and_ledger(store: Store, admits: frozenset[str]) -> None:
    """A maintainers' conversation with its letter and ledger, at the end of its chain (a lineage refusal next)."""
    store.stage_root.mkdir(parents=True, exist_ok=True)
    jd = JobDir(str(store.stage_root), f"built-{len(list(store.stage_root.iterdir()))}")
    jd.prepare()
    host = record(admits)
    jd.write(HOST, host.to_json())
    Path(jd.session, "current.jsonl").write_bytes(OLD)
    Path(jd.session, "handoff.json").write_text(json.dumps({
        "writer": "agent", "status": "partial",
        "letter": {name: f"secret-{name}" for name, _ in handoff.LETTER_FIELDS},
        "entry": {name: f"secret-{name}" for name, _ in (*handoff.TRUST_FIELDS, *handoff.ENTRY_FIELDS)}}))
    assert promote_once(settings(store), jd, host, None, job="built").promoted, "the maintainers' conversation"
    (store.key_dir() / "resume-chain").write_text("1")


def test_a_wider_job_gets_neither_the_transcript_nor_the_letter_and_ledger(store: Store) -> None:
    """A lineage refusal stages the letter and ledger (a rethread); a wider population is refused before any."""
    letter_and_ledger(store, MAINTAINERS)
    narrower = stage(settings(store), JobDir(str(store.stage_root), "same"), record(MAINTAINERS))
    assert (narrower.reason, narrower.rethread) == (R.RESUME_CHAIN_TOO_LONG, True), "the letter waits for them"
    jd = JobDir(str(store.stage_root), "stranger")
    wider = stage(settings(store), jd, record(ANYONE))
    assert (wider.resume, wider.reason, wider.rethread) == (False, R.POPULATION_WIDENED, False)
    assert sorted(p.name for p in Path(jd.session).iterdir()) == ["current.jsonl"]
    assert Path(jd.session, "current.jsonl").read_bytes() == b""


# -- the stamp ---------------------------------------------------------------------------------------------

def stamp_of(store: Store) -> str | None:
    path = store.key_dir() / "population"
    return path.read_text() if path.exists() else None


def test_every_promotion_stamps_its_job_s_population_and_a_cold_one_replaces_the_conversation(store: Store) -> None:
    s = Settings(sessions_dir=str(store.root))
    assert promote(s, KEY, str(store.staged_job(OLD)), host_resume=False, pi_version=PI, model=MODEL,
                   population=MAINTAINERS).promoted
    assert stamp_of(store) == "COLLABORATOR MEMBER OWNER"
    (store.key_dir() / "context").write_text("10 100")
    # The stranger's job started cold (population-widened): its promotion replaces the conversation, as any cold
    # start's does (chain 0, context gone), and the stamp widens with it.
    assert promote(s, KEY, str(store.staged_job(NEW)), host_resume=False, pi_version=PI, model=MODEL,
                   population=ANYONE).promoted
    assert (store.key_dir() / "current.jsonl").read_bytes() == NEW
    assert stamp_of(store) == " ".join(sorted(ANYONE))
    assert (store.key_dir() / "resume-chain").read_text() == "0" and not (store.key_dir() / "context").exists()
    # A job of the store commands (no Trigger) leaves the population unknown: no Trigger's job resumes it.
    assert promote(s, KEY, str(store.staged_job(OLD)), host_resume=False, pi_version=PI, model=MODEL).promoted
    assert stamp_of(store) is None
    reason, _ = dry_run(s, KEY, pi_version=PI, model=MODEL, population=OWNERS, clock=NOW_MS)
    assert reason == R.POPULATION_WIDENED


def test_a_population_stamp_that_cannot_be_written_leaves_the_key_pending(store: Store) -> None:
    """A stamp left from the conversation this one replaced may be wider than its builders: never let it stand."""
    s = Settings(sessions_dir=str(store.root))
    put(store, None)
    (store.key_dir() / "population").mkdir()
    (store.key_dir() / "population" / "x").write_text("")  # a non-empty directory: nothing renames over it
    result = promote(s, KEY, str(store.staged_job(NEW)), host_resume=False, pi_version=PI, model=MODEL,
                     population=MAINTAINERS)
    assert result.promoted, "the transcript landed: never promote-failed"
    assert (store.key_dir() / "venue").read_text() == "(pending)"
    # Two refusals now stand: the stamp reads unknown (gate 3a, named first), and (pending) matches no venue.
    assert judge(store, MAINTAINERS) == (R.POPULATION_WIDENED, b"")
    assert resolve(s, KEY, str(store.stage()), pi_version=PI,
                   model=MODEL).verdict.reason == R.VENUE_CHANGED  # type: ignore[union-attr]


def test_a_wider_job_s_promotion_drops_the_narrower_letter_and_ledger(store: Store) -> None:
    letter_and_ledger(store, MAINTAINERS)
    assert (store.key_dir() / "ledger.md").exists() and (store.key_dir() / "letter.md").exists()
    assert promote(settings(store), KEY, str(store.staged_job(NEW)), host_resume=False, pi_version=PI,
                   model=MODEL, population=ANYONE).promoted
    assert not (store.key_dir() / "ledger.md").exists() and not (store.key_dir() / "letter.md").exists()
    # A narrower job's promotion keeps what a wider population wrote: they may read it.
    letter_and_ledger(store, ANYONE)
    assert promote(settings(store), KEY, str(store.staged_job(NEW)), host_resume=True, pi_version=PI,
                   model=MODEL, population=OWNERS).promoted
    assert handoff.entry_count((store.key_dir() / "ledger.md").read_text()) >= 1
    assert stamp_of(store) == "OWNER"


def test_the_host_record_keeps_the_population_and_an_older_one_reads_unknown(tmp_path: Path) -> None:
    rec = record(MAINTAINERS)
    assert HostRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec
    older = {k: v for k, v in rec.to_json().items() if k != "population"}
    assert HostRecord.from_json(older).population is None  # type: ignore[union-attr]
    assert HostRecord.from_json({**older, "population": "OWNER"}).admits() is None  # type: ignore[union-attr]


def test_the_sidecar_round_trips_and_is_sorted() -> None:
    assert population.render(ANYONE) == " ".join(sorted(AUTHOR_ASSOCIATIONS))
    assert population.parse(population.render(MAINTAINERS)) == MAINTAINERS
    assert population.within(OWNERS, MAINTAINERS) and not population.within(MAINTAINERS, OWNERS)
    assert not population.within(OWNERS, None)


# -- a Trigger's population --------------------------------------------------------------------------------

@pytest.mark.parametrize(("on", "admits"), [
    ({"event": "issue_comment.created", "phrase": "@pi"}, MAINTAINERS),
    ({"event": "issue_comment.created", "phrase": "@pi", "authorAssociations": ["OWNER"]}, OWNERS),
    ({"event": "pull_request_review.submitted", "authorAssociations": list(AUTHOR_ASSOCIATIONS)}, ANYONE),
    ({"event": "pull_request_review_comment.created", "phrase": "@pi", "authorAssociations": ["NONE"]},
     frozenset({"NONE"})),
    ({"event": "issues.labeled", "label": "pi"}, MAINTAINERS),
    ({"event": "cron", "schedule": "0 * * * *", "repository": "acme/widgets"}, MAINTAINERS),
], ids=["comment, unset", "comment, owners", "review, anyone", "review comment, strangers only", "label", "cron"])
def test_a_trigger_s_population_is_who_the_receiver_lets_start_its_jobs(on: dict, admits: frozenset[str]) -> None:
    assert trigger_population(TriggerOn.model_validate(on)) == admits

