"""The gate ladder (docs/store-contract.md#gates): an ordered chain of small checks; the first refusal names the reason.

Each gate is a predicate of failure over an :class:`Observation` of one key directory, returning a
reason token or ``None``. The order of :data:`LADDER` *is* the documented order — read one against
the other line by line — and :func:`judge` runs it, for a delivery (``resolve``) and for the
``Resumable`` dry run alike. Gates 0–10 look at ``lstat`` results and sidecars; then the descriptor
step opens the transcript once (docs/store-contract.md#staging, step 1), and gates 11–13 read only through it: the
header line, and the body once. In a resolve, that single read of the body *is* the staged copy (the observation's body
reader, see :data:`BodyReader`), so gate cost does not grow with the transcript.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Generic, TypeVar

from pidispatch.record import SessionReason as R
from pidispatch.settings import Settings
from pidispatch.store import fsio, scanmemo, sidecars
from pidispatch.store.population import Population, read_population, within
from pidispatch.store.seams import NO_SEAMS, Seams
from pidispatch.transcript.header import header_timestamp_ms, is_session_header, read_first_line

DAY_MS = 86_400_000
UNKNOWN_PI_VERSIONS = ("", "<no value>")


@dataclass(frozen=True)
class Delivery:
    """What the job brings to the gates: where it runs, which pi, which model (already normalised), and the
    population its Trigger admits (``None``: no Trigger's delivery, the pi-dispatch-compatible commands; gate 3a
    then does not judge it, and a promotion leaves the key's population unknown)."""

    venue: str | None
    pi_version: str | None
    model_id: str | None
    population: Population | None = None


@lru_cache(maxsize=256)
def make_delivery(venue: str | None, pi_version: str | None, model: str | None,
                  admits: Population | None = None) -> Delivery:
    """A delivery's venue, pi version, model and population as the gates and the stamps compare them.

    Cached: an operator's deliveries repeat a handful of (venue, pi, model) triples, a delivery is
    immutable, and normalising one (a regular expression, a frozen dataclass) was a measurable part
    of a 1 KiB stage (docs/benchmarks.md).
    """
    return Delivery(normalise_venue(venue), pi_version, sidecars.normalise_model_id(model), admits)


def normalise_venue(venue: str | None) -> str | None:
    """Only a non-empty string is a venue; parentheses are refused so nothing can equal ``(pending)``."""
    if not isinstance(venue, str) or not venue or "(" in venue or ")" in venue:
        return None
    return venue


_T = TypeVar("_T")


class cached_read(Generic[_T]):
    """``functools.cached_property`` without its per-class lock (Python 3.11 takes an ``RLock`` on every
    first access; 3.12 dropped it). An observation belongs to one call on one thread, and a stage makes
    about ten first accesses, so the lock was a measurable part of a 1 KiB stage (docs/benchmarks.md).
    Computed on first access and stored in the instance, which then shadows this descriptor.
    """

    def __init__(self, read: Callable[[Any], _T]) -> None:
        self.read = read
        self.name = read.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type | None = None) -> _T:
        if instance is None:
            return self  # type: ignore[return-value]  # looked up on the class (introspection)
        value: _T = self.read(instance)
        instance.__dict__[self.name] = value
        return value


class Observation:
    """Lazy, cached reads of one key directory, in the order the gates ask for them.

    Laziness matters: a gate must not open a file an earlier gate judged unsafe (a FIFO, a link),
    and the metadata gates must not read transcript bytes at all.
    """

    def __init__(
        self,
        store_root: str,
        key: str,
        settings: Settings,
        delivery: Delivery,
        now_ms: float,
        read_body: BodyReader | None = None,
        header_memo: scanmemo.HeaderMemo | None = None,
    ) -> None:
        self.key_dir = os.path.join(store_root, key)
        self.transcript_path = os.path.join(self.key_dir, sidecars.TRANSCRIPT)
        self.settings = settings
        self.delivery = delivery
        self.now_ms = now_ms
        self.fd: int | None = None
        self.fd_stat: os.stat_result | None = None  # the open transcript's fstat (its version: scanmemo.py)
        # The header gate's first read through ``fd`` (from offset 0). When it holds the whole judged
        # size, gate 12's body read uses these bytes instead of reading them again (resolve.read_judged).
        self.first_block: bytes | None = None
        self._read_body = read_body
        # The dry run's memo of gates 11 and 13's facts per transcript version (scanmemo.HeaderMemo);
        # ``None`` (a stage) reads the header line every time.
        self._header_memo = header_memo

    @cached_read
    def key_dir_stat(self) -> os.stat_result | None:
        return fsio.lstat_or_none(self.key_dir)

    @cached_read
    def pinned_dir(self) -> tuple[int, int] | None:
        st = self.key_dir_stat
        return (st.st_dev, st.st_ino) if fsio.is_real_dir(st) else None  # type: ignore[union-attr]

    @cached_read
    def transcript_stat(self) -> os.stat_result | None:
        return fsio.lstat_or_none(self.transcript_path)

    @cached_read
    def judged_identity(self) -> fsio.Identity:
        assert self.transcript_stat is not None
        return fsio.Identity.of(self.transcript_stat)

    @cached_read
    def venue_stamp(self) -> str | None:
        return sidecars.read_venue(self.key_dir)

    @cached_read
    def population_stamp(self) -> Population | None:
        return read_population(self.key_dir)

    @cached_read
    def pi_version_stamp(self) -> str | None:
        return sidecars.read_sidecar(self.key_dir, sidecars.PI_VERSION)

    @cached_read
    def chain(self) -> int:
        return sidecars.read_chain(self.key_dir)

    @cached_read
    def context(self) -> tuple[int, int, str | None] | None:
        return sidecars.read_context(self.key_dir)

    def open_transcript(self) -> bool:
        """Open the judged transcript once; ``False`` when what opens is not what the gates judged."""
        try:
            self.fd = os.open(self.transcript_path, fsio.READ_FLAGS)
        except OSError:
            return False
        self.fd_stat = os.fstat(self.fd)
        return self.judged_identity.matches(self.fd_stat)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    @cached_read
    def header_line(self) -> bytes | None:
        assert self.fd is not None, "content gates need open_transcript() first"
        return read_first_line(self.fd, self.judged_identity.size, pread=self._pread_keeping_first_block)

    @cached_read
    def remembered_header(self) -> scanmemo.HeaderFacts | None:
        """This very version's header facts from the header memo, if there is one and it knows them."""
        if self._header_memo is None:
            return None
        assert self.fd_stat is not None, "content gates need open_transcript() first"
        return self._header_memo.get(scanmemo.version_of(self.fd_stat))

    @cached_read
    def header_is_session(self) -> bool:
        known = self.remembered_header
        if known is not None:
            return known is not False
        line = self.header_line
        return line is not None and is_session_header(line)

    @cached_read
    def header_started_ms(self) -> float | None:
        known = self.remembered_header
        if known is not None:
            return None if isinstance(known, bool) else known
        return header_timestamp_ms(self.header_line or b"")

    def _pread_keeping_first_block(self, fd: int, length: int, offset: int) -> bytes:
        block = os.pread(fd, length, offset)
        if offset == 0:
            self.first_block = block
        return block

    @cached_read
    def body_has_empty_compaction(self) -> bool:
        assert self._read_body is not None
        # None means the body could not be read as judged; the identity re-check names that.
        return bool(self._read_body(self))


Gate = Callable[[Observation], str | None]
#: Gate 12's one read of the transcript body: answers whether it holds an empty compaction summary
#: (``None``: the body could not be read as judged). ``resolve`` passes the reader that **writes the
#: staged copy** as it scans (``resolve._StagedCopy.run``): the gate's read is the copy. ``dry_run``
#: passes one that only scans.
BodyReader = Callable[[Observation], bool | None]


def key_is_not_a_directory(o: Observation) -> str | None:
    st = o.key_dir_stat
    return R.KEY_NOT_A_DIRECTORY if st is not None and not stat.S_ISDIR(st.st_mode) else None


def transcript_is_missing(o: Observation) -> str | None:
    return R.ABSENT if o.transcript_stat is None else None


def transcript_is_not_a_regular_file(o: Observation) -> str | None:
    return None if fsio.is_regular(o.transcript_stat) else R.NOT_A_REGULAR_FILE


def transcript_is_empty(o: Observation) -> str | None:
    return R.ABSENT if o.judged_identity.size == 0 else None


def population_has_widened(o: Observation) -> str | None:
    """Gate 3a, ours (docs/store-divergences.md): the job's Trigger may admit only people the conversation's
    builders' Trigger admitted; an unknown stamp admits nobody. A delivery without a population (no Trigger) is
    not judged here."""
    job = o.delivery.population
    if job is None:
        return None
    return None if within(job, o.population_stamp) else R.POPULATION_WIDENED


def transcript_is_too_large(o: Observation) -> str | None:
    cap = o.settings.max_bytes
    return R.TOO_LARGE if cap > 0 and o.judged_identity.size > cap else None


def transcript_has_expired(o: Observation) -> str | None:
    ttl = o.settings.ttl_days
    assert o.transcript_stat is not None
    idle = o.now_ms - fsio.mtime_ms(o.transcript_stat)
    return R.EXPIRED if ttl > 0 and idle > ttl * DAY_MS else None


def venue_has_changed(o: Observation) -> str | None:
    job = o.delivery.venue
    return R.VENUE_CHANGED if job is None or o.venue_stamp != job else None


def job_pi_version_is_unknown(o: Observation) -> str | None:
    version = o.delivery.pi_version
    return R.PI_VERSION_CHANGED if version is None or version in UNKNOWN_PI_VERSIONS else None


def pi_version_stamp_differs(o: Observation) -> str | None:
    stamp = o.pi_version_stamp
    return R.PI_VERSION_CHANGED if stamp is None or stamp != o.delivery.pi_version else None


def resume_chain_is_too_long(o: Observation) -> str | None:
    bound = o.settings.max_resume_chain
    return R.RESUME_CHAIN_TOO_LONG if bound > 0 and o.chain >= bound else None


def context_is_too_full(o: Observation) -> str | None:
    pct = o.settings.max_context_pct
    if pct is None or o.context is None:
        return None
    tokens, window, stamped_model = o.context
    job_model = o.delivery.model_id
    # A reading stamped for another model says nothing about this one, in either direction.
    if stamped_model is not None and job_model is not None and stamped_model != job_model.lower():
        return None
    return R.CONTEXT_TOO_FULL if tokens * 100 / window >= pct else None


def transcript_was_replaced(o: Observation) -> str | None:
    """The descriptor step (docs/store-contract.md#staging, step 1): open the judged transcript once, never through a
    link.

    What opens must be what gates 1–5 judged (same ``dev:ino:size:mtime``); every later gate reads
    through this descriptor, and so does the staged copy.
    """
    return None if o.open_transcript() else R.TRANSCRIPT_REPLACED


def header_is_unparseable(o: Observation) -> str | None:
    return None if o.header_is_session else R.UNPARSEABLE


def compaction_summary_is_empty(o: Observation) -> str | None:
    """Reads the whole body, once, through the observation's :data:`BodyReader`: in a resolve this is
    where the staged copy is written."""
    return R.COMPACTION_SUMMARY_EMPTY if o.body_has_empty_compaction else None


def conversation_is_too_old(o: Observation) -> str | None:
    max_days = o.settings.max_age_days
    if max_days <= 0:
        return None
    started = o.header_started_ms
    # Fails closed on an unreadable timestamp; a future one passes (clock skew is not an attack).
    if started is None or o.now_ms - started > max_days * DAY_MS:
        return R.CONVERSATION_TOO_OLD
    return None


LADDER: tuple[Gate, ...] = (
    key_is_not_a_directory,  # 0
    transcript_is_missing,  # 1
    transcript_is_not_a_regular_file,  # 2
    transcript_is_empty,  # 3
    population_has_widened,  # 3a before every lineage reason: a refusal for those stages the letter and ledger
    transcript_is_too_large,  # 4
    transcript_has_expired,  # 5
    venue_has_changed,  # 6  before the pi gates: another venue may run another image
    job_pi_version_is_unknown,  # 7
    pi_version_stamp_differs,  # 8
    resume_chain_is_too_long,  # 9  before the body: cheap, and about lineage, not content
    context_is_too_full,  # 10
    transcript_was_replaced,  # the descriptor step: the one descriptor the gates below and the copy read through
    header_is_unparseable,  # 11
    compaction_summary_is_empty,  # 12 reads the body once; in a resolve, that read writes the staged copy
    conversation_is_too_old,  # 13 after 11, so a damaged file is not reported as aged out
)
#: Gates 0–10: metadata only, nothing of the transcript opened (a slice of the ladder, not a second list).
METADATA_GATES: tuple[Gate, ...] = LADDER[:LADDER.index(transcript_was_replaced)]
#: Where a caller's seams may stop the ladder: after the named gate passed.
SEAM_AFTER: dict[Gate, str] = {context_is_too_full: "gates-judged", transcript_was_replaced: "transcript-opened"}


def judge(o: Observation, seams: Seams = NO_SEAMS, gates: Sequence[Gate] = LADDER) -> str | None:
    """Run ``gates`` (the ladder) over ``o`` in order; the first refusal names the reason, ``None`` when all pass."""
    for gate in gates:
        reason = gate(o)
        if reason is not None:
            return reason
        step = SEAM_AFTER.get(gate)
        if step is not None:
            seams.at(step)
    return None
