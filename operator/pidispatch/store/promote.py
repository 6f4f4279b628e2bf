"""The write path (docs/store-contract.md#promotion): promote a completed job's staged copy into the store.

Temp file, ``(pending)`` sentinel, atomic rename, post-swap verification, then sidecars. Beyond the
spec, three fsyncs (the temp, and the directory before and after the rename; see ``_swap_in`` for
why these three and no others) make a power cut leave the old transcript or the new one, whole, and
never a new transcript under old stamps.
"""

from __future__ import annotations

import errno
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pidispatch.contract import VENUE
from pidispatch.events import emit
from pidispatch.record import NO_KEY, PROMOTED, PromotionResult
from pidispatch.record import SessionReason as R
from pidispatch.settings import Settings
from pidispatch.store import fsio, sidecars
from pidispatch.store.fsio import now_ms
from pidispatch.store.gates import Delivery, make_delivery
from pidispatch.store.lock import candidate_name, release_lock, take_lock
from pidispatch.store.population import POPULATION, Population, read_population, render, within
from pidispatch.store.seams import NO_SEAMS, Seams

if TYPE_CHECKING:
    from pidispatch.store import handoffdir

_sequence = itertools.count(1)
COPY_CHUNK = 1 << 20


@dataclass(frozen=True)
class Names:
    """The two names a promotion creates in the key directory, chosen before it starts.

    Chosen up front so that a caller can journal them first (``store/journal.py``): after a crash,
    the names prove which lock and which temp were this attempt's.
    """

    temp: str
    lock: str

    @classmethod
    def fresh(cls) -> Names:
        return cls(temp_name(), candidate_name())


@dataclass(frozen=True)
class HandoffOf:
    """The Job a promotion's handoff belongs to: its name and the staged transcript's sha256 (from the journal)."""

    job: str
    sha256: str


class _Skip(Exception):
    """A refusal with a reason: logged as ``session_promote_skipped``, never a fault."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def temp_name() -> str:
    """``current.jsonl.<pid>.<seq>.<12hex>.incoming``: random, because pids repeat across containers."""
    return f"{sidecars.TRANSCRIPT}.{os.getpid()}.{next(_sequence)}.{os.urandom(6).hex()}.incoming"


def promote(
    settings: Settings,
    key: str | None,
    stage_dir: str,
    *,
    host_resume: bool,
    venue: str | None = VENUE,
    pi_version: str | None = None,
    model: str | None = None,
    population: Population | None = None,
    context: tuple[int, int] | None = None,
    clock: Callable[[], float] = now_ms,
    seams: Seams = NO_SEAMS,
    names: Names | None = None,
    handoff_of: HandoffOf | None = None,
) -> PromotionResult:
    """Promote ``stage_dir/current.jsonl`` for ``key``. Never raises: faults are ``promote-failed``.

    ``names`` are the temp and lock-candidate names to use (fresh ones when not given). With
    ``handoff_of`` the Job's handoff (``store/handoff.py``) is written right after the swap, under the lock.
    ``population``: the author associations the job's Trigger admits, stamped beside the transcript (``None``:
    the stamp is removed, the population unknown).
    """
    if key is None:
        return PromotionResult(False, NO_KEY)
    try:
        if settings.sessions_dir is None:
            raise RuntimeError("no session store configured (PI_SESSIONS_DIR is unset)")
        return _promote(settings, settings.sessions_dir, key, stage_dir, host_resume,
                        make_delivery(venue, pi_version, model, population), context, clock, seams,
                        names or Names.fresh(), handoff_of)
    except _Skip as skip:
        emit("session_promote_skipped", key=key, reason=skip.reason)
        return PromotionResult(False, skip.reason)
    except Exception as exc:  # a job never fails because history could not be kept
        emit("session_store_failed", phase="promote", reason=f"{type(exc).__name__}: {exc}")
        return PromotionResult(False, R.PROMOTE_FAILED)


def staged_refusal(settings: Settings, st: os.stat_result | None) -> str | None:
    """Why promotion would refuse a staged file of this ``stat`` (``absent``, ``too-large``, ...), or ``None``."""
    try:
        _check_staged(settings, st)
    except _Skip as skip:
        return skip.reason
    return None


def _check_staged(settings: Settings, st: os.stat_result | None) -> None:
    if st is None:
        raise _Skip(R.ABSENT)
    if not fsio.is_regular(st):
        raise _Skip(R.NOT_A_REGULAR_FILE)
    if st.st_size == 0:
        raise _Skip(R.ABSENT)
    if settings.max_bytes > 0 and st.st_size > settings.max_bytes:
        raise _Skip(R.TOO_LARGE)


def _prepare_key_dir(key_dir: str) -> tuple[int, int]:
    """Steps 3–4: refuse anything but a real directory at the key path; create it 0700 if missing."""
    st = fsio.lstat_or_none(key_dir)
    if st is not None and not fsio.is_real_dir(st):
        raise _Skip(R.KEY_NOT_A_DIRECTORY)
    if st is None:
        try:
            os.mkdir(key_dir, 0o700)
        except FileExistsError:
            pass
    st = fsio.lstat_or_none(key_dir)  # again: a link may have been planted while mkdir ran
    if not fsio.is_real_dir(st):
        raise _Skip(R.KEY_NOT_A_DIRECTORY)
    assert st is not None
    return st.st_dev, st.st_ino


def _promote(
    settings: Settings,
    store_root: str,
    key: str,
    stage_dir: str,
    host_resume: bool,
    delivery: Delivery,
    context: tuple[int, int] | None,
    clock: Callable[[], float],
    seams: Seams,
    names: Names,
    handoff_of: HandoffOf | None = None,
) -> PromotionResult:
    staged_path = os.path.join(stage_dir, sidecars.TRANSCRIPT)
    _check_staged(settings, fsio.lstat_or_none(staged_path))
    key_dir = os.path.join(store_root, key)
    pinned = _prepare_key_dir(key_dir)
    seams.at("key-dir-ready")
    try:
        dir_fd = os.open(key_dir, fsio.DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):  # swapped for a link or removed
            raise _Skip(R.KEY_NOT_A_DIRECTORY) from exc
        raise
    try:
        if not fsio.same_dir(os.fstat(dir_fd), pinned):
            raise _Skip(R.KEY_NOT_A_DIRECTORY)
        lock_fd = take_lock(dir_fd, key, clock, names.lock)
        if lock_fd is None:
            raise _Skip(R.LOCKED)
        try:
            seams.at("locked")
            if not fsio.same_dir(fsio.lstat_or_none(key_dir), pinned):
                raise _Skip(R.KEY_NOT_A_DIRECTORY)
            # Read under the lock, before the swap: whether this job's Trigger admits someone the stored
            # conversation's did not (gate 3a's rule, as the store stands now, not as the job's stage found it).
            widened = delivery.population is not None and not within(delivery.population, read_population(key_dir))
            size = _swap_in(settings, staged_path, dir_fd, key_dir, pinned, seams, names.temp)
            if size is None:
                raise _Skip(R.TRANSCRIPT_DIVERTED)
            if widened:
                _drop_handoff(dir_fd, key)
            written = write_handoff(dir_fd, key, stage_dir, handoff_of, size, seams)
            _stamp(dir_fd, key_dir, key, delivery, host_resume, context, seams)
        finally:
            release_lock(dir_fd, key, names.lock, lock_fd)
    finally:
        os.close(dir_fd)
    seams.at("unlocked")
    emit("session_promoted", key=key, bytes=size)
    return PromotionResult(True, PROMOTED, size, handoff=written)


def _drop_handoff(dir_fd: int, key: str) -> None:
    """Remove the letter and the ledger a narrower population's jobs wrote, before this job's handoff starts a
    new ledger: a later lineage refusal stages both for the next job, which may be one of this wider population's
    (docs/sessions.md#who-may-resume-a-conversation). Never fatal: the transcript has landed; a failure is logged
    and the next narrower job's promotion tries again."""
    from pidispatch.store import handoff  # here, as in write_handoff: a promotion without a handoff never loads it

    for name in (handoff.LETTER, handoff.LEDGER):
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            emit("session_sidecar_failed", key=key, file=name, reason=f"{type(exc).__name__}: {exc}")


def write_handoff(dir_fd: int, key: str, stage_dir: str, handoff_of: HandoffOf | None, size: int,
                  seams: Seams = NO_SEAMS) -> handoffdir.Written | None:
    """The handoff step after the swap (``handoffdir.finish_handoff``). Never fatal: the transcript has landed."""
    if handoff_of is None:
        return None
    from pidispatch.store import handoff, handoffdir  # not every start's cost (docs/cli.md#start-up-cost)

    try:
        written = handoffdir.finish_handoff(dir_fd, stage_dir, job=handoff_of.job, sha256=handoff_of.sha256, size=size)
    except Exception as exc:
        emit("session_sidecar_failed", key=key, file=handoff.LETTER, reason=f"{type(exc).__name__}: {exc}")
        return None
    seams.at("handoff-written")
    if written.writer is not None:
        emit("session_handoff_written", key=key, writer=written.writer, status=written.status,
             entries=written.entries)
    elif written.removed_letter:
        emit("session_letter_retired", key=key)
    return written


def _swap_in(
    settings: Settings, staged_path: str, dir_fd: int, key_dir: str, pinned: tuple[int, int], seams: Seams,
    temp: str,
) -> int | None:
    """Steps a–f. Returns the promoted size, or ``None`` when the swap landed somewhere else.

    Durability. What a power cut must never leave: a torn transcript (a name whose bytes are not all
    on disk), or the new transcript readable under the old stamps (the old ``pi-version`` with a
    resumable ``venue``). The fsyncs, in order, and what each one is for:

    1. ``fsync(temp)``, before the rename (the issue requires it): the bytes are on disk before any
       name points at them, so the rename can only ever expose a whole file.
    2. ``fsync(dir)``, after the sentinel's rename and before the swap: the rename of ``(pending)``
       over ``venue`` is on disk before the swap can be. Without it nothing in POSIX stops a power
       cut from keeping the later rename (the swap) and losing the earlier one (the sentinel).
    3. ``fsync(dir)`` after the swap (the issue requires it), placed after the ``pi-version``,
       ``resume-chain`` and ``context`` stamps and before the ``venue`` stamp (in ``_stamp``): one
       fsync makes the swap durable and orders those stamps before the one that re-opens the key.

    Not fsynced, on purpose: the sentinel's *content* and every stamp's content. Each is a fresh
    inode renamed over its name, so after a crash it holds its new bytes or nothing (a 0-byte file:
    ext4 in its default data=ordered mode and xfs never expose stale blocks), and an empty sidecar
    reads ``null``: a ``venue`` of ``null`` matches no job (cold start), a ``pi-version`` of
    ``null`` refuses, a lost ``resume-chain`` reads 0 and a lost ``context`` passes, both as spec
    docs/store-contract.md#why-this-order accepts for a missing file. Losing the final ``venue`` stamp leaves
    ``(pending)``: the key cold-starts once; it never resumes wrongly.

    Order within 1–2: the sentinel is renamed in *before* the temp is fsynced. On ext4 and xfs an
    fsync commits the journal up to that point, so 1 also carries the sentinel's rename and 2 finds
    nothing left to commit (little more than a cache flush); on a filesystem without that ordering,
    2 does the work itself. The price: if fsync(temp) fails, the key is left ``(pending)`` and
    cold-starts once, instead of resuming the old transcript.
    """
    try:
        size, temp_fd = _copy_staged(settings, staged_path, temp, dir_fd, seams)
        try:
            temp_st = os.fstat(temp_fd)
            seams.at("temp-written")
            sidecars.replace_sidecar(dir_fd, sidecars.VENUE, sidecars.PENDING_VENUE)
            seams.at("sync-temp")
            os.fsync(temp_fd)  # 1
        finally:
            os.close(temp_fd)
        seams.at("sync-before-swap")
        fsio.fsync_dir(dir_fd)  # 2
        seams.at("sentinel-written")
        os.replace(temp, sidecars.TRANSCRIPT, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    seams.at("swapped")
    landed = fsio.lstat_or_none(os.path.join(key_dir, sidecars.TRANSCRIPT))
    expected = (temp_st.st_dev, temp_st.st_ino, size)
    if (
        not fsio.same_dir(fsio.lstat_or_none(key_dir), pinned)
        or not fsio.is_regular(landed)
        or (landed.st_dev, landed.st_ino, landed.st_size) != expected  # type: ignore[union-attr]
    ):
        return None
    return size


def _copy_staged(
    settings: Settings, staged_path: str, temp: str, dir_fd: int, seams: Seams
) -> tuple[int, int]:
    """Copy the staged file through a no-follow descriptor into a fresh 0600 temp; return size and temp fd.

    The temp is left open, not yet fsynced: ``_swap_in`` fsyncs it after the sentinel (see there).
    """
    src = os.open(staged_path, fsio.READ_FLAGS)
    try:
        st = os.fstat(src)
        _check_staged(settings, st)  # the agent may have swapped it since the lstat
        dst = fsio.create_exclusive(temp, dir_fd)  # a leftover of a crashed attempt with these names is removed
        try:
            seams.at("temp-created")
            _copy_bytes(src, dst, st.st_size, seams)
        except BaseException:
            os.close(dst)
            raise
    finally:
        os.close(src)
    return st.st_size, dst


def _copy_bytes(src: int, dst: int, size: int, seams: Seams = NO_SEAMS) -> None:
    """Copy exactly ``size`` bytes in the kernel when it can, through user space when it cannot.

    In chunks of ``COPY_CHUNK``, so a test can stop the copy part-way (the ``temp-chunk`` seam).
    """
    offset = 0
    try:
        while offset < size:
            copied = os.copy_file_range(src, dst, min(COPY_CHUNK, size - offset), offset, offset)
            if copied == 0:
                break
            offset += copied
            seams.at("temp-chunk")
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    while offset < size:
        chunk = os.pread(src, min(COPY_CHUNK, size - offset), offset)
        if not chunk:
            break
        view = memoryview(chunk)
        while view:
            # A full disk first takes what fits and says so only in the count: a short write must be
            # retried (and then fail with ENOSPC), never counted as the whole chunk.
            written = os.pwrite(dst, view, offset)
            view = view[written:]
            offset += written
        seams.at("temp-chunk")
    if offset != size:
        raise OSError(errno.EIO, f"staged file shrank during promotion ({offset} of {size} bytes)")


def _stamp(
    dir_fd: int,
    key_dir: str,
    key: str,
    delivery: Delivery,
    host_resume: bool,
    context: tuple[int, int] | None,
    seams: Seams,
) -> None:
    """Steps g–j: sidecars after the swap. Never fatal: the transcript has landed.

    The venue stamp is written *last*, not first as pi-dispatch orders it (docs/store-divergences.md): while
    ``(pending)`` stands no reader resumes, so a crash between two stamps can never expose the new transcript under the
    old ``pi-version`` (pi-dispatch's order re-opens the key between its venue and pi-version writes). The final state
    is the same, so pi-dispatch hosts read it unchanged. The directory fsync between the other stamps and the venue
    stamp carries that order through a power cut. Ours, first of all: the ``population`` stamp (store/population.py),
    whose failure leaves ``(pending)`` rather than the replaced conversation's population.
    """

    def write(name: str, action: Callable[[], None]) -> bool:
        done = True
        try:
            action()
        except Exception as exc:
            emit("session_sidecar_failed", key=key, file=name, reason=f"{type(exc).__name__}: {exc}")
            done = False
        seams.at(f"stamped-{name}")
        return done

    # The population first, and on failure the key stays (pending) (below): a stamp left from the conversation this
    # one replaced may be wider than this one's builders, and would let their conversation reach that population.
    stamped = write(POPULATION, lambda: _stamp_population(dir_fd, delivery.population))
    version = delivery.pi_version if delivery.pi_version not in (None, "<no value>") else ""
    write(sidecars.PI_VERSION, lambda: sidecars.replace_sidecar(dir_fd, sidecars.PI_VERSION, version or ""))
    chain = sidecars.read_chain(key_dir) + 1 if host_resume else 0
    write(sidecars.RESUME_CHAIN, lambda: sidecars.replace_sidecar(dir_fd, sidecars.RESUME_CHAIN, str(chain)))
    if not host_resume:
        write(sidecars.CONTEXT, lambda: _remove_context(dir_fd))
    elif context is not None:
        tokens, window = context
        reading = f"{tokens} {window}" + (f" {delivery.model_id}" if delivery.model_id else "")
        write(sidecars.CONTEXT, lambda: sidecars.replace_sidecar(dir_fd, sidecars.CONTEXT, reading))
    # fsync 3 of ``_swap_in``'s list: the swap is durable, and so are the stamps above, before the
    # venue stamp below can re-open the key. If it fails, the swap has still landed, so the
    # promotion counts (docs/store-contract.md#design-rules, rule 10: never promote-failed once it landed); but the
    # swap and the stamps may not survive a power cut, so the venue stamp is not written: the key
    # stays (pending) and cold-starts once rather than resume on stamps that may not last.
    try:
        seams.at("sync-after-swap")
        fsio.fsync_dir(dir_fd)
    except OSError as exc:
        emit("session_sidecar_failed", key=key, file=sidecars.VENUE,
             reason=f"left (pending): the key directory's fsync failed: {type(exc).__name__}: {exc}")
        return
    if not stamped:
        emit("session_sidecar_failed", key=key, file=sidecars.VENUE,
             reason=f"left (pending): the {POPULATION} stamp failed")
        return
    if delivery.venue is not None:  # no venue: leave (pending) on purpose, nothing resumes from it
        write(sidecars.VENUE, lambda: sidecars.replace_sidecar(dir_fd, sidecars.VENUE, delivery.venue or ""))


def _stamp_population(dir_fd: int, admits: Population | None) -> None:
    """Stamp who may resume the transcript just swapped in; ``None`` (no Trigger) removes the stamp: unknown."""
    if admits:
        sidecars.replace_sidecar(dir_fd, POPULATION, render(admits))
        return
    try:
        os.unlink(POPULATION, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _remove_context(dir_fd: int) -> None:
    try:
        os.unlink(sidecars.CONTEXT, dir_fd=dir_fd)
    except OSError:
        pass  # a cold start discards the reading; failing to find one is fine
