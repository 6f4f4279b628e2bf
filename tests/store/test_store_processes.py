"""The store under real processes on a real filesystem: racing promotions, and SIGKILL at every step.

No mocks and no sleeps. Children are started with ``spawn`` (a fresh interpreter, nothing inherited
but what is passed) and coordinated with a barrier, events and queues; every wait has a deadline and
says what it was waiting for. Crashes are real: a seam sends SIGKILL to its own process at a named
step of ``promote`` or ``resolve``, so no ``finally`` and no ``except`` gets to run.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import signal
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from pidispatch.settings import Settings
from pidispatch.store.promote import COPY_CHUNK, promote
from pidispatch.store.resolve import CHUNK, resolve
from testkit.store import DEADLINE_S, KEY, MODEL, PI, SPAWN, KillAt, Store, run_to_death, sample

WRITERS = 6
LOCK_STALE_MS = 3_600_000
TEMP_NAME = re.compile(r"current\.jsonl\.(\d+)\.(\d+)\.([0-9a-f]{12})\.incoming")
# The lock's candidate (store/lock.py): while a lock is held, ``lock`` and it are one inode.
CANDIDATE_NAME = re.compile(r"lock\.(\d+)\.(\d+)\.([0-9a-f]{12})\.incoming")


# --------------------------------------------------------------------------------------------------
# Content: distinct, recognisable transcripts of a few MiB, so a torn or mixed copy cannot pass.


def transcript(writer: str, size: int) -> bytes:
    """A pi-shaped transcript of about ``size`` bytes whose every line names ``writer``."""
    head = sample("s1_after_turn2.jsonl")
    pad = (writer * 64)[:64]

    def line(n: int) -> str:
        return f'{{"type":"custom","customType":"fill","data":{{"writer":"{writer}","n":{n:07d}}},"pad":"{pad}"}}\n'

    lines = [line(n) for n in range(max(1, (size - len(head)) // len(line(0))))]
    return head + "".join(lines).encode()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def entries(key_dir: Path) -> set[str]:
    return {p.name for p in key_dir.iterdir()}


# --------------------------------------------------------------------------------------------------
# Child-process entry points (module level, so ``spawn`` can import them by name).


class _RaceSeams:
    """Records when the swap happened; optionally holds the lock at "locked" until released."""

    def __init__(self, writer: int, hold: bool, results, release) -> None:
        self.writer, self.hold, self.results, self.release = writer, hold, results, release
        self.swapped_at: int | None = None

    def at(self, step: str) -> None:
        if step == "swapped":
            # CLOCK_MONOTONIC is system-wide on Linux: comparable across the racing processes.
            self.swapped_at = time.monotonic_ns()
        if step == "locked" and self.hold:
            self.results.put(("holding", self.writer))
            if not self.release.wait(DEADLINE_S):
                raise TimeoutError("the parent never released the lock holder")


def _promoter(writer: int, commands, results, barrier, release) -> None:
    """A long-lived writer: for each command, wait at the barrier with the others, then promote."""
    while True:
        command = commands.get(timeout=DEADLINE_S * 4)
        if command is None:
            return
        root, stage, hold, context = command
        seams = _RaceSeams(writer, hold, results, release)
        barrier.wait(DEADLINE_S)
        result = promote(
            Settings(sessions_dir=root),
            KEY,
            stage,
            host_resume=True,
            pi_version=PI,
            model=MODEL,
            context=context,
            seams=seams,
        )
        results.put(("result", writer, result.promoted, str(result.reason), result.bytes, seams.swapped_at))


def _resolver(root: str, stage_root: str, stop, results) -> None:
    """Resolve the key over and over while the writers race; report what each staged copy held."""
    seen: Counter[tuple[str, str, int]] = Counter()
    settings = Settings(sessions_dir=root)
    n = 0
    while not stop.is_set():
        n += 1
        stage = os.path.join(stage_root, f"read-{n}", "session")
        resolution = resolve(settings, KEY, stage, pi_version=PI, model=MODEL)
        if resolution is None:
            seen[("store-fault", "", 0)] += 1
            continue
        data = Path(stage, "current.jsonl").read_bytes()
        seen[(str(resolution.verdict.reason), digest(data), len(data))] += 1
        Path(stage, "current.jsonl").unlink()
    results.put(("resolutions", dict(seen)))


def _promote_then_die(root: str, stage: str, step: str, pi_version: str = PI) -> None:
    promote(
        Settings(sessions_dir=root),
        KEY,
        stage,
        host_resume=True,
        pi_version=pi_version,
        model=MODEL,
        context=(1234, 200000),
        seams=KillAt(step),
    )


def _resolve_then_die(root: str, stage: str, step: str) -> None:
    resolve(Settings(sessions_dir=root), KEY, stage, pi_version=PI, model=MODEL, seams=KillAt(step))


# --------------------------------------------------------------------------------------------------
# 1. Several real processes promoting one key at once.


@dataclass
class Writers:
    commands: list
    results: object
    barrier: object
    release: object
    processes: list

    def send_round(self, root: Path, stages: list[Path], hold: bool, contexts: list[tuple[int, int]]) -> None:
        self.release.clear()
        for commands, stage, context in zip(self.commands, stages, contexts, strict=True):
            commands.put((str(root), str(stage), hold, context))

    def next_message(self, what: str, deadline: float):
        try:
            return self.results.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self.release.set()  # never leave a holder blocked behind a failed test
            pytest.fail(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def writers():
    results = SPAWN.Queue()
    barrier = SPAWN.Barrier(WRITERS)
    release = SPAWN.Event()
    commands = [SPAWN.Queue() for _ in range(WRITERS)]
    processes = [
        SPAWN.Process(target=_promoter, args=(i, commands[i], results, barrier, release), daemon=True)
        for i in range(WRITERS)
    ]
    for p in processes:
        p.start()
    yield Writers(commands, results, barrier, release, processes)
    release.set()
    for c in commands:
        c.put(None)
    for p in processes:
        p.join(DEADLINE_S)
        if p.is_alive():
            p.kill()


def stage_round(store: Store, round_: int, size: int = 3 << 20) -> tuple[list[Path], list[bytes]]:
    contents = [transcript(f"r{round_}w{i}", size) for i in range(WRITERS)]
    return [store.staged_job(c) for c in contents], contents


def assert_settled(key_dir: Path, landed: bytes, context: tuple[int, int], chain: int) -> None:
    """Whatever the race, the key ends as exactly one promotion left it, with nothing in flight."""
    assert (key_dir / "current.jsonl").read_bytes() == landed
    leftovers = sorted(n for n in entries(key_dir) if n == "lock" or n.endswith(".incoming"))
    assert leftovers == [], f"a completed race left {leftovers}"
    assert (key_dir / "venue").read_text() == "kubernetes"
    assert (key_dir / "pi-version").read_text() == PI
    # The context of the promotion whose transcript landed: stamps and transcript never mix.
    assert (key_dir / "context").read_text() == f"{context[0]} {context[1]} {MODEL}"
    # Every completed host-resume promotion counted once: no increment lost or doubled under the race.
    assert (key_dir / "resume-chain").read_text() == str(chain)


def test_racing_promotions_each_land_whole_and_the_last_swap_wins(store: Store, writers: Writers, tmp_path):
    """Free-running race of 6 writers (and a reader) per round: promoted or ``locked``, never mixed."""
    stop = SPAWN.Event()
    reader_results = SPAWN.Queue()
    reader = SPAWN.Process(target=_resolver, args=(str(store.root), str(tmp_path / "reads"), stop, reader_results))
    reader.start()
    everything: dict[str, bytes] = {}
    promoted_total = 0
    locked_total = 0
    try:
        for round_ in range(4):
            stages, contents = stage_round(store, round_)
            everything.update({digest(c): c for c in contents})
            contexts = [(1000 * round_ + i, 200000) for i in range(WRITERS)]
            writers.send_round(store.root, stages, hold=False, contexts=contexts)
            deadline = time.monotonic() + DEADLINE_S
            outcomes = {}
            while len(outcomes) < WRITERS:
                kind, writer, *rest = writers.next_message(f"round {round_} results ({len(outcomes)} so far)", deadline)
                assert kind == "result", f"unexpected message {kind} from writer {writer}"
                outcomes[writer] = rest
            reasons = {w: o[1] for w, o in outcomes.items()}
            assert set(reasons.values()) <= {"promoted", "locked"}, f"round {round_}: {reasons}"
            landed = [w for w, o in outcomes.items() if o[0]]
            assert landed, f"round {round_}: nobody promoted ({reasons})"
            for w in landed:
                assert outcomes[w][2] == len(contents[w])
                assert outcomes[w][3] is not None
            last = max(landed, key=lambda w: outcomes[w][3])
            promoted_total += len(landed)
            locked_total += WRITERS - len(landed)
            assert_settled(store.key_dir(), contents[last], contexts[last], chain=promoted_total)
    finally:
        stop.set()
    kind, seen = reader_results.get(timeout=DEADLINE_S)
    reader.join(DEADLINE_S)
    assert kind == "resolutions" and seen, "the reader resolved nothing"
    for (reason, sha, size), count in seen.items():
        if reason == "resumed":
            # A reader racing six writers still stages one whole transcript, byte for byte.
            assert sha in everything, f"{count} staged copies of {size} bytes match no writer's transcript"
        else:
            # absent: before the first landing; venue-changed: a promotion's (pending) sentinel, which
            # stands until every other stamp is written (so never pi-version-changed, even on the key's
            # first promotion); transcript-replaced: a swap during the copy.
            assert reason in {"absent", "venue-changed", "transcript-replaced"}, (
                reason,
                count,
            )
            assert size == 0, f"a refused read ({reason}) staged {size} bytes"
    # Reported, not asserted: how much the writers actually overlapped is up to the scheduler.
    print(
        f"race: {promoted_total} promoted, {locked_total} locked; reader: "
        f"{dict(Counter(r for (r, _, _), n in seen.items() for _ in range(n)))}"
    )


def test_overlapping_promotions_land_exactly_one_and_the_rest_are_locked(store: Store, writers: Writers):
    """The lock holder waits at "locked" until every rival has returned: exactly one landing per round."""
    for round_ in range(3):
        stages, contents = stage_round(store, round_)
        contexts = [(10 * round_ + i, 100000) for i in range(WRITERS)]
        writers.send_round(store.root, stages, hold=True, contexts=contexts)
        deadline = time.monotonic() + DEADLINE_S
        holders, outcomes = [], {}
        while len(outcomes) < WRITERS - 1 or not holders:
            kind, writer, *rest = writers.next_message(
                f"round {round_}: a lock holder and {WRITERS - 1} rivals (have {holders}, {outcomes})", deadline
            )
            if kind == "holding":
                holders.append(writer)
                if len(holders) > 1:
                    writers.release.set()
                    pytest.fail(f"round {round_}: {len(holders)} processes held the lock at once: {holders}")
            else:
                outcomes[writer] = rest
        assert all(o[:2] == [False, "locked"] for o in outcomes.values()), outcomes
        (holder,) = holders
        assert (store.key_dir() / "lock").exists(), "the holder's lock is not on disk"
        writers.release.set()
        kind, writer, *rest = writers.next_message(f"round {round_}: the holder's result", deadline)
        assert (kind, writer) == ("result", holder)
        assert rest[:3] == [True, "promoted", len(contents[holder])]
        assert_settled(store.key_dir(), contents[holder], contexts[holder], chain=round_ + 1)


# --------------------------------------------------------------------------------------------------
# 2. SIGKILL at each step of a promotion.

OLD = transcript("old", 1 << 20)
NEW = transcript("new", 1 << 20)
NEWER = transcript("newer", 1 << 20)
BASE = {"current.jsonl", "venue", "pi-version", "resume-chain"}  # what the old promotion left


@dataclass(frozen=True)
class AfterKill:
    transcript: bytes
    venue: str
    chain: str
    lock_leaked: bool
    temp_leaked: bool
    context: bool
    next_resolve: str  # the next delivery's reason
    temp: bytes | None = None  # what a leaked temp holds, when not the whole new transcript


# The old promotion was a host cold start (chain 0, no context); the killed one a host resume with a
# context reading (chain 1, context written), so each stamp shows whether it was reached.
KILLS: list[tuple[str, AfterKill]] = [
    ("key-dir-ready", AfterKill(OLD, "kubernetes", "0", False, False, False, "resumed")),
    ("locked", AfterKill(OLD, "kubernetes", "0", True, False, False, "resumed")),
    ("temp-created", AfterKill(OLD, "kubernetes", "0", True, True, False, "resumed", temp=b"")),
    ("temp-chunk", AfterKill(OLD, "kubernetes", "0", True, True, False, "resumed")),  # one chunk: all of it
    ("temp-written", AfterKill(OLD, "kubernetes", "0", True, True, False, "resumed")),
    ("sync-temp", AfterKill(OLD, "(pending)", "0", True, True, False, "venue-changed")),
    ("sync-before-swap", AfterKill(OLD, "(pending)", "0", True, True, False, "venue-changed")),
    ("sentinel-written", AfterKill(OLD, "(pending)", "0", True, True, False, "venue-changed")),
    ("swapped", AfterKill(NEW, "(pending)", "0", True, False, False, "venue-changed")),
    # The venue is stamped last, so every kill between the swap and that stamp keeps (pending).
    ("stamped-pi-version", AfterKill(NEW, "(pending)", "0", True, False, False, "venue-changed")),
    ("stamped-resume-chain", AfterKill(NEW, "(pending)", "1", True, False, False, "venue-changed")),
    ("stamped-context", AfterKill(NEW, "(pending)", "1", True, False, True, "venue-changed")),
    ("sync-after-swap", AfterKill(NEW, "(pending)", "1", True, False, True, "venue-changed")),
    ("stamped-venue", AfterKill(NEW, "kubernetes", "1", True, False, True, "resumed")),
    ("unlocked", AfterKill(NEW, "kubernetes", "1", False, False, True, "resumed")),
]


@pytest.mark.parametrize(
    ("step", "expected"),
    KILLS,
    ids=[
        f"killed at {step}: {'old' if e.transcript is OLD else 'new'} transcript, venue {e.venue}" for step, e in KILLS
    ],
)
def test_a_promotion_killed_at_any_step_leaves_a_whole_transcript_and_a_recoverable_key(
    store: Store, events, step: str, expected: AfterKill
):
    first = promote(store.settings, KEY, str(store.staged_job(OLD)), host_resume=False, pi_version=PI, model=MODEL)
    assert first.promoted
    key_dir = store.key_dir()
    assert entries(key_dir) == BASE

    run_to_death(_promote_then_die, str(store.root), str(store.staged_job(NEW)), step)

    # The transcript is whole: the old bytes or the new ones, never a prefix or a mix.
    assert (key_dir / "current.jsonl").read_bytes() == expected.transcript
    assert (key_dir / "venue").read_text() == expected.venue
    assert (key_dir / "pi-version").read_text() == PI
    assert (key_dir / "resume-chain").read_text() == expected.chain
    if expected.context:
        assert (key_dir / "context").read_text() == f"1234 200000 {MODEL}"
    temps = [n for n in entries(key_dir) if TEMP_NAME.fullmatch(n)]
    candidates = [n for n in entries(key_dir) if CANDIDATE_NAME.fullmatch(n)]
    leaked = BASE | ({"lock"} if expected.lock_leaked else set()) | ({"context"} if expected.context else set())
    assert entries(key_dir) - set(temps) - set(candidates) == leaked
    if expected.lock_leaked:
        # The dead writer's lock is provably its own: the same inode as its candidate.
        assert len(candidates) == 1, candidates
        assert (key_dir / "lock").lstat().st_ino == (key_dir / candidates[0]).lstat().st_ino
    else:
        assert candidates == []
    if expected.temp_leaked:
        # A kill before the swap leaks the fsynced temp under its random name (docs/store-contract.md#design-rules,
        # rule 11).
        assert len(temps) == 1, temps
        assert (key_dir / temps[0]).read_bytes() == (NEW if expected.temp is None else expected.temp)
    else:
        assert temps == []

    # The next delivery: a cold start named venue-changed while (pending) stands, else the whole file.
    stage = store.stage()
    resolution = resolve(store.settings, KEY, str(stage), pi_version=PI, model=MODEL)
    assert resolution is not None
    assert resolution.verdict.reason == expected.next_resolve
    staged = (stage / "current.jsonl").read_bytes()
    assert staged == (expected.transcript if expected.next_resolve == "resumed" else b"")

    # A leaked lock is fresh, so the next promotion is refused (its turns are lost: docs/store-contract.md#design-rules,
    # rule 17) ...
    newer_stage = str(store.staged_job(NEWER))
    retry = promote(store.settings, KEY, newer_stage, host_resume=False, pi_version=PI, model=MODEL)
    if expected.lock_leaked:
        assert (retry.promoted, retry.reason) == (False, "locked")
        assert (key_dir / "current.jsonl").read_bytes() == expected.transcript
        # ... until it is more than an hour old: then it is taken over and the promotion lands.
        later = promote(
            store.settings,
            KEY,
            newer_stage,
            host_resume=False,
            pi_version=PI,
            model=MODEL,
            clock=lambda: time.time_ns() / 1e6 + LOCK_STALE_MS + 1,
        )
        assert (later.promoted, later.reason) == (True, "promoted")
        taken = [e for e in events() if e["event"] == "session_lock_stale_taken"]
        assert len(taken) == 1 and taken[0]["key"] == KEY
        assert LOCK_STALE_MS < taken[0]["ageMs"] < LOCK_STALE_MS + DEADLINE_S * 1000
    else:
        assert (retry.promoted, retry.reason) == (True, "promoted")
        assert not [e for e in events() if e["event"] == "session_lock_stale_taken"]
    assert (key_dir / "current.jsonl").read_bytes() == NEWER
    assert (key_dir / "venue").read_text() == "kubernetes"
    assert (key_dir / "resume-chain").read_text() == "0"
    # The crashed writer's temp (and its lock's candidate) stay until the reaper removes the key
    # (docs/store-contract.md#design-rules, rule 11); the operator's journal removes both itself (store/journal.py).
    assert [n for n in entries(key_dir) if TEMP_NAME.fullmatch(n)] == temps
    assert [n for n in entries(key_dir) if CANDIDATE_NAME.fullmatch(n)] == candidates
    assert entries(key_dir) - set(temps) - set(candidates) == BASE


@pytest.mark.parametrize("step", ["swapped", "stamped-pi-version", "stamped-resume-chain", "stamped-context",
                                  "stamped-venue"])
def test_killed_after_the_swap_no_job_resumes_under_a_pi_that_did_not_write_it(store: Store, step: str):
    """docs/store-contract.md#promotion-steps: "a transcript is never resumed under a pi version that did not write it",
    even when the operator dies between two stamps (the reason the venue stamp comes last here)."""
    upgraded = "0.74.0"
    assert promote(store.settings, KEY, str(store.staged_job(OLD)), host_resume=False, pi_version=PI).promoted
    run_to_death(_promote_then_die, str(store.root), str(store.staged_job(NEW)), step, upgraded, step=step)
    assert (store.key_dir() / "current.jsonl").read_bytes() == NEW
    # The next job still runs the old pi (a rollback, or a trigger pinned to the old image).
    stage = store.stage()
    resolution = resolve(store.settings, KEY, str(stage), pi_version=PI, model=MODEL)
    assert resolution is not None
    assert resolution.verdict.reason in ("venue-changed", "pi-version-changed"), (
        f"a job under pi {PI} got {resolution.verdict.reason!r} for a transcript written by pi {upgraded}"
    )
    assert (stage / "current.jsonl").read_bytes() == b""


def test_a_promotion_killed_in_the_middle_of_its_copy_leaves_the_old_transcript_whole(store: Store):
    """The copy into the temp goes in chunks; a kill after the first of three leaves a torn temp under
    its random name, never at ``current.jsonl``, and the next delivery resumes the old transcript."""
    assert promote(store.settings, KEY, str(store.staged_job(OLD)), host_resume=False, pi_version=PI,
                   model=MODEL).promoted
    run_to_death(_promote_then_die, str(store.root), str(store.staged_job(LONG)), "temp-chunk")
    key_dir = store.key_dir()
    (temp,) = [n for n in entries(key_dir) if TEMP_NAME.fullmatch(n)]
    assert (key_dir / temp).read_bytes() == LONG[:COPY_CHUNK], "killed after exactly one chunk"
    assert (key_dir / "current.jsonl").read_bytes() == OLD
    assert (key_dir / "venue").read_text() == "kubernetes", "the sentinel comes after the copy"
    stage = store.stage()
    resolution = resolve(store.settings, KEY, str(stage), pi_version=PI, model=MODEL)
    assert resolution is not None and resolution.verdict.reason == "resumed"
    assert (stage / "current.jsonl").read_bytes() == OLD


def test_the_leaked_temp_is_named_for_the_killed_writer(store: Store):
    """``current.jsonl.<pid>.<seq>.<12hex>.incoming``: the dead child's pid, its first sequence number."""
    assert promote(store.settings, KEY, str(store.staged_job(OLD)), host_resume=False, pi_version=PI).promoted
    child = SPAWN.Process(target=_promote_then_die, args=(str(store.root), str(store.staged_job(NEW)), "temp-written"))
    child.start()
    child.join(DEADLINE_S)
    assert child.exitcode == -signal.SIGKILL
    (name,) = [n for n in entries(store.key_dir()) if n.endswith(".incoming") and not CANDIDATE_NAME.fullmatch(n)]
    match = TEMP_NAME.fullmatch(name)
    assert match is not None, name
    assert (int(match[1]), int(match[2])) == (child.pid, 1)


# --------------------------------------------------------------------------------------------------
# 3. SIGKILL during a resolve leaves the canonical store untouched.


def snapshot(key_dir: Path) -> dict[str, tuple[int, int, int, bytes]]:
    return {
        p.name: (p.lstat().st_ino, p.lstat().st_mtime_ns, p.lstat().st_size, p.read_bytes())
        for p in sorted(key_dir.iterdir())
    }


LONG = transcript("long", 2 * CHUNK + CHUNK // 2)  # the copy takes three chunks, the last one short
RESOLVE_KILLS = [
    ("gates-judged", 0),
    ("transcript-opened", 0),
    ("copy-chunk", CHUNK),  # the first chunk has been written to the staged file
    ("copied", len(LONG)),
]


@pytest.mark.parametrize(
    ("step", "staged_bytes"),
    RESOLVE_KILLS,
    ids=[f"killed at {s}: canonical untouched, {n} bytes staged" for s, n in RESOLVE_KILLS],
)
def test_a_resolve_killed_mid_copy_leaves_the_store_untouched(store: Store, step: str, staged_bytes: int):
    assert promote(store.settings, KEY, str(store.staged_job(LONG)), host_resume=False, pi_version=PI).promoted
    before = snapshot(store.key_dir())
    stage = store.stage()

    run_to_death(_resolve_then_die, str(store.root), str(stage), step)

    # Same names, same inodes, same mtimes (the TTL clock moves only on promotion), same bytes.
    assert snapshot(store.key_dir()) == before
    # The dead reader's staged copy is a prefix at most; whoever retries the delivery re-stages it.
    staged = (stage / "current.jsonl").read_bytes()
    assert staged == LONG[:staged_bytes]
    again = resolve(store.settings, KEY, str(stage), pi_version=PI, model=MODEL)
    assert again is not None and again.verdict.reason == "resumed"
    assert (stage / "current.jsonl").read_bytes() == LONG
    assert snapshot(store.key_dir()) == before
