"""The read path (docs/store-contract.md#resolve): run the gates and stage a copy (or 0 bytes) for one job.

On resume the bytes come from the one descriptor the gates judged, bounded to the judged size,
then the identity re-checks decide whether that copy may be handed to the job.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pidispatch.contract import VENUE
from pidispatch.events import emit
from pidispatch.record import HostVerdict
from pidispatch.record import SessionReason as R
from pidispatch.settings import Settings
from pidispatch.store import fsio, scanmemo, sidecars
from pidispatch.store.fsio import now_ms
from pidispatch.store.gates import Delivery, Observation, judge, make_delivery
from pidispatch.store.population import Population
from pidispatch.store.seams import NO_SEAMS, Seams
from pidispatch.transcript import compaction
from pidispatch.transcript.compaction import EmptyCompactionScanner

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

# pi-dispatch reads in 64 KiB chunks (its stream size; docs/store-divergences.md); 1 MiB makes 16 times fewer reads,
# writes and scanner calls on a multi-MiB transcript (docs/benchmarks.md). Nothing else changes: the same descriptor,
# the same bound (never past the judged size), the same shrink and growth checks, and the staged file receives exactly
# the bytes the scan judged. No reader of the store can tell the difference.
CHUNK = 1024 * 1024
_NO_SENDFILE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV})


@dataclass(frozen=True)
class Resolution:
    """The host verdict plus what promotion needs later. Never recorded: it holds the key."""

    verdict: HostVerdict
    key: str
    stage_dir: str
    delivery: Delivery


def resolve(
    settings: Settings,
    key: str | None,
    stage_dir: str,
    *,
    venue: str | None = VENUE,
    pi_version: str | None = None,
    model: str | None = None,
    population: Population | None = None,
    clock: float | None = None,
    seams: Seams = NO_SEAMS,
) -> Resolution | None:
    """Judge ``key`` for one delivery and stage ``stage_dir/current.jsonl``.

    ``population``: the author associations the job's Trigger admits (gate 3a); ``None`` for a delivery that
    has no Trigger (the store commands), which that gate does not judge.

    Returns ``None`` when there is no store, no key, or a fault (logged as ``session_store_failed``;
    the staging directory is removed so no partial copy survives, and the job runs without a
    session). Never raises.
    """
    if settings.sessions_dir is None or key is None:
        return None
    delivery = make_delivery(venue, pi_version, model, population)
    try:
        verdict = _resolve(settings, key, stage_dir, delivery, now_ms() if clock is None else clock, seams)
    except Exception as exc:  # the store never fails a job
        emit("session_store_failed", phase="resolve", reason=f"{type(exc).__name__}: {exc}")
        _remove(stage_dir)
        return None
    emit("session_resolved", key=key, resume=verdict.resume, reason=verdict.reason)
    return Resolution(verdict, key, stage_dir, delivery)


def hold(settings: Settings, key: str | None, stage_dir: str, reason: str) -> Resolution | None:
    """Stage 0 bytes for ``key`` without judging it: the caller refused the resume already (``reason``: the
    key is retired or its transcript quarantined). The stored transcript is not read. ``None`` as
    :func:`resolve` (no store, no key, a fault)."""
    if settings.sessions_dir is None or key is None:
        return None
    try:
        os.close(_create_staged_file(stage_dir))
    except Exception as exc:  # the store never fails a job
        emit("session_store_failed", phase="resolve", reason=f"{type(exc).__name__}: {exc}")
        _remove(stage_dir)
        return None
    emit("session_resolved", key=key, resume=False, reason=reason)
    return Resolution(HostVerdict(False, reason, None), key, stage_dir, make_delivery(VENUE, None, None))


def _resolve(
    settings: Settings, key: str, stage_dir: str, delivery: Delivery, clock: float, seams: Seams
) -> HostVerdict:
    staged = _create_staged_file(stage_dir)
    assert settings.sessions_dir is not None
    copy = _StagedCopy(staged, seams)
    observation = Observation(settings.sessions_dir, key, settings, delivery, clock, copy.run)
    try:
        reason = _judge_and_copy(observation, copy, seams)
        if reason is not None:
            # A refused read still mounts a file: 0 bytes, so pi writes its own fresh header.
            if copy.started:
                os.ftruncate(staged, 0)
            return HostVerdict(False, reason, None)
        return HostVerdict(True, R.RESUMED, observation.judged_identity.size)
    finally:
        observation.close()
        os.close(staged)


def _create_staged_file(stage_dir: str) -> int:
    """Create ``stage_dir`` (0700) if needed and a fresh, empty ``current.jsonl`` in it; return its fd.

    A staging directory can be reused (a re-stage after an operator restart), and a job Pod may have
    written into it, so whatever is at the staged name is removed and the file is created
    exclusively without following links (``fsio.create_exclusive``): a FIFO planted there would
    otherwise block the open forever, a link would redirect the copy.
    """
    try:
        os.mkdir(stage_dir, 0o700)
    except FileExistsError:
        pass  # a re-stage, or JobDir.prepare made it: judged below, through a descriptor that refuses links
    except FileNotFoundError:
        os.makedirs(stage_dir, mode=0o700, exist_ok=True)
    try:
        dir_fd = os.open(stage_dir, fsio.DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotADirectoryError(f"staging path is not a real directory: {stage_dir}") from exc
        raise
    try:
        return fsio.create_exclusive(sidecars.TRANSCRIPT, dir_fd)
    finally:
        os.close(dir_fd)


def _judge_and_copy(o: Observation, copy: _StagedCopy, seams: Seams) -> str | None:
    """The ladder (gate 12's read is ``copy``: it stages the body as it scans it), then the re-checks."""
    reason = judge(o, seams)
    if reason is not None:
        copy.remember(o)
        return reason
    seams.at("copied")
    return _recheck(o, copy)


def _recheck(o: Observation, copy: _StagedCopy) -> str | None:
    """Re-checks after the copy, in the documented order (docs/store-contract.md#staging, step 3)."""
    assert o.pinned_dir is not None and o.fd is not None
    if not fsio.same_dir(fsio.lstat_or_none(o.key_dir), o.pinned_dir):
        copy.remember(o)
        return R.KEY_NOT_A_DIRECTORY
    if sidecars.read_venue(o.key_dir) != o.delivery.venue:
        copy.remember(o)
        return R.VENUE_CHANGED
    # The descriptor, not the path: a rename over the path after the open still staged the judged
    # bytes, while an in-place write during the copy changes size or mtime here.
    st = os.fstat(o.fd)
    copy.remember(o, st)
    if not copy.complete or not o.judged_identity.matches(st):
        return R.TRANSCRIPT_REPLACED
    return None


def read_judged(o: Observation, sink: Callable[[bytes | bytearray], None]) -> bool:
    """Feed exactly the judged bytes of the open transcript to ``sink``, in chunks of up to ``CHUNK``.

    ``False`` when the file shrank or grew under us: never more than the judged size is read. The
    chunks are read into one reused buffer (the only copy of the bytes in user space), so ``sink``
    must use a chunk before returning and keep no reference to it. A transcript the header gate
    already read whole (one block, 4 KiB at most: ``Observation.first_block``) is fed from those
    bytes, read through the same descriptor from offset 0, instead of being read a second time.
    """
    assert o.fd is not None
    size, offset = o.judged_identity.size, 0
    if o.first_block is not None and len(o.first_block) == size:
        sink(o.first_block)
        return not os.pread(o.fd, 1, size)
    buffer = bytearray(min(CHUNK, size))
    while offset < size:
        want = min(CHUNK, size - offset)
        if want < len(buffer):
            buffer = bytearray(want)  # the last, shorter chunk: at most once per file
        got = os.preadv(o.fd, [buffer], offset)
        if got == 0:
            return False
        sink(buffer if got == want else buffer[:got])
        offset += got
    return not os.pread(o.fd, 1, offset)


class _StagedCopy:
    """The single read of the transcript body: copies it to the staged file while scanning it."""

    def __init__(self, staged_fd: int, seams: Seams) -> None:
        self.staged_fd = staged_fd
        self.seams = seams
        self.complete = False
        self.started = False  # whether gate 12 read (and so may have copied) anything
        # Gate 12's answer for the version read, until ``remember`` records it (once the ladder and the
        # re-checks are done with the descriptor: the identity re-check's ``fstat`` then serves both).
        self._answer: tuple[scanmemo.Version, bool] | None = None

    def run(self, o: Observation) -> bool:
        assert o.fd_stat is not None
        self.started = True
        version = scanmemo.version_of(o.fd_stat)
        known = scanmemo.MEMO.get(version)
        if known is not None:
            # This very version was scanned before (scanmemo.py): copy it in the kernel, unread.
            self.complete = self._kernel_copy(o)
            return self.complete and known
        scanner = EmptyCompactionScanner()
        if o.judged_identity.size > CHUNK and compaction.NATIVE_SEARCH:
            self.complete = self._overlapped(o, scanner)
        else:

            def copy(chunk: bytes | bytearray) -> None:
                scanner.feed(chunk)
                self._write_chunk(chunk)

            self.complete = read_judged(o, copy)
        found = self.complete and scanner.finish()
        if self.complete:
            self._answer = (version, found)
        return found

    def remember(self, o: Observation, st: os.stat_result | None = None) -> None:
        """Record the answer of a whole read if the file is still the version that was read.

        ``st``: the descriptor's ``fstat``, when the caller has just taken one after the read.
        """
        if self._answer is not None:
            version, found = self._answer
            self._answer = None
            _remember(o, version, found, st)

    def _kernel_copy(self, o: Observation) -> bool:
        """Exactly the judged bytes from the judged descriptor to the staged file, by ``sendfile``.

        A filesystem that refuses ``sendfile`` to a file gets the user-space copy instead.
        """
        assert o.fd is not None
        size, offset = o.judged_identity.size, 0
        while offset < size:
            try:
                sent = os.sendfile(self.staged_fd, o.fd, offset, min(CHUNK, size - offset))
            except OSError as exc:
                if offset or exc.errno not in _NO_SENDFILE:
                    raise
                return read_judged(o, self._write_chunk)
            if sent == 0:
                return False
            offset += sent
            self.seams.at("copy-chunk")
        return not os.pread(o.fd, 1, offset)

    def _write_chunk(self, chunk: bytes | bytearray) -> None:
        fsio.write_all(self.staged_fd, chunk)
        self.seams.at("copy-chunk")

    def _overlapped(self, o: Observation, scanner: EmptyCompactionScanner) -> bool:
        """`read_judged` with the scan of chunk *n* running on a worker while chunk *n* is written.

        The scan's search is C code that releases the GIL, and so does the write, so on two cores
        the scan costs nothing the copy does not already take. Two buffers: chunk *n + 1* is read
        into the one chunk *n - 1* was scanned from, once that scan is done. The scanner still sees
        the chunks one at a time, in order, and the staged file receives exactly the scanned bytes.
        """
        assert o.fd is not None
        size, offset = o.judged_identity.size, 0
        buffers = (bytearray(CHUNK), bytearray(CHUNK))
        scanning: Future[None] | None = None
        try:
            while offset < size:
                want = min(CHUNK, size - offset)
                buffer = buffers[0] if len(buffers[0]) == want else bytearray(want)
                buffers = (buffers[1], buffers[0])
                got = os.preadv(o.fd, [buffer], offset)
                if got == 0:
                    return False
                chunk = buffer if got == want else buffer[:got]
                if scanning is not None:
                    scanning.result()
                scanning = _scan_worker().submit(scanner.feed, chunk)
                fsio.write_all(self.staged_fd, chunk)
                self.seams.at("copy-chunk")
                offset += got
        finally:
            if scanning is not None:
                scanning.result()
        return not os.pread(o.fd, 1, offset)


def _remember(o: Observation, version: scanmemo.Version, found: bool, st: os.stat_result | None = None) -> None:
    """Record gate 12's answer for ``version`` if nothing changed the file while it was read.

    ``st``: the descriptor's ``fstat`` taken after the read, if the caller has one.
    """
    assert o.fd is not None
    if scanmemo.version_of(os.fstat(o.fd) if st is None else st) == version:
        scanmemo.MEMO.put(version, found)


def _remove(stage_dir: str) -> None:
    import shutil

    shutil.rmtree(stage_dir, ignore_errors=True)


_SCAN_WORKER: ThreadPoolExecutor | None = None
_SCAN_WORKER_LOCK = threading.Lock()


def _scan_worker() -> ThreadPoolExecutor:
    global _SCAN_WORKER
    with _SCAN_WORKER_LOCK:
        if _SCAN_WORKER is None:
            # Imported here, as shutil in _remove: a big transcript's scan and a fault are not every start's
            # cost (docs/cli.md#start-up-cost); concurrent.futures also loads logging.
            from concurrent.futures import ThreadPoolExecutor

            _SCAN_WORKER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pidispatch-scan")
        return _SCAN_WORKER


def dry_run(
    settings: Settings,
    key: str,
    *,
    venue: str | None = VENUE,
    pi_version: str | None = None,
    model: str | None = None,
    population: Population | None = None,
    clock: float | None = None,
) -> tuple[str, Observation]:
    """Would the next delivery resume? The same ladder, reading instead of staging; stages nothing.

    Returns the reason (``resumed`` when every gate passes) and the observation, whose cached reads
    describe the key for ``store inspect`` and the ``Resumable`` condition.
    """
    assert settings.sessions_dir is not None
    delivery = make_delivery(venue, pi_version, model, population)

    def scan(o: Observation) -> bool:
        assert o.fd_stat is not None
        version = scanmemo.version_of(o.fd_stat)
        known = scanmemo.MEMO.get(version)
        if known is not None:
            return known
        scanner = EmptyCompactionScanner()
        complete = read_judged(o, scanner.feed)
        found = scanner.finish()
        if complete:
            _remember(o, version, found)
        return found

    o = Observation(
        settings.sessions_dir, key, settings, delivery, now_ms() if clock is None else clock, scan, scanmemo.HEADERS
    )
    try:
        reason = judge(o) or R.RESUMED
        _remember_header(o)
        return reason, o
    finally:
        o.close()


def _remember_header(o: Observation) -> None:
    """Record what gates 11 and 13 took from the header line this dry run read (not one it remembered),
    if the transcript is still the version it was read from (``fd_stat``, taken at the open before the read)."""
    if "header_line" not in o.__dict__ or o.fd is None or o.fd_stat is None:
        return  # the ladder stopped before gate 11, or the facts came from the memo
    version = scanmemo.version_of(o.fd_stat)
    if scanmemo.version_of(os.fstat(o.fd)) != version:
        return
    started = o.header_started_ms if o.header_is_session else None
    scanmemo.HEADERS.put(version, False if not o.header_is_session else True if started is None else started)
