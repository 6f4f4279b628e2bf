"""Promotion at most once per Job, even across crashes: the journal ``promotion.json`` in the Job's directory.

docs/store-contract.md#journal asks the operator for what upstream never needed (it promotes in-process): a Job whose
promotion was interrupted by a kill must, after the restart, neither promote twice nor lose its
transcript, leave no lock behind, and never let its older transcript replace a newer one. The journal
has three states:

``started``  written durably *before* the store is touched. It holds what recovery needs to judge the
             attempt afterwards: the canonical transcript's identity before it (``before``), the staged
             bytes' size and digest, and the two names the attempt will create in the key directory,
             its transcript temp and its lock candidate (``promote.Names``), chosen now so that they
             are on disk before either exists.
``done``     the result, written once promotion returned; returned as is from then on.
(missing)    no attempt yet.

Recovery from ``started`` (a kill during the attempt) proves each thing instead of guessing:

* the lock is released only when it is the attempt's own (the same inode as its journaled candidate,
  see ``lock.py``); its candidate and its temp are removed (both names are the attempt's);
* the swap landed when the canonical file has changed since ``before`` and holds the staged bytes
  (compared through the key directory's no-follow descriptor, as every read of the store is):
  then it is not promoted again (no second chain increment; a kill before the stamps leaves the key
  ``(pending)``, so the next delivery starts cold once, as the store contract says of an interrupted promotion);
* the canonical file has changed since ``before`` and holds *other* bytes: another promotion on the key
  came after this attempt began, so this Job's transcript is the older one and is discarded as spec
  promotion step 5 (docs/store-contract.md#promotion-steps) discards the loser of two promotions (``locked``);
* otherwise (unchanged, or no transcript at all) nothing landed, and the promotion runs again under
  the same names.

Promotion and recovery hold the key's guard shared (``keyguard.py``), so a forget never runs in the
middle of one. Another promotion on the key may run meanwhile, and every recovery order is safe: a
rival that swapped first makes this attempt ``locked`` (superseded), one that holds the on-disk lock
makes its re-run ``locked``, and one that comes later replaces this transcript as any later promotion would.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from pidispatch.contract.digests import SecretDigest
from pidispatch.events import emit
from pidispatch.record import PromotionResult
from pidispatch.record import SessionReason as R
from pidispatch.settings import Settings
from pidispatch.store import fsio, handoff, handoffdir, keyguard, lock, sidecars
from pidispatch.store.fsio import now_ms
from pidispatch.store.promote import HandoffOf, Names, promote, staged_refusal, write_handoff
from pidispatch.store.scanned import Refused, Scan, make_scanned_copy, scanned_dir
from pidispatch.store.seams import NO_SEAMS, Seams
from pidispatch.store.staging import PROMOTION, HostRecord, JobDir, file_digest, staged_uids


def promote_once(
    settings: Settings,
    jd: JobDir,
    host: HostRecord,
    context: tuple[int, int] | None,
    *,
    job: str | None = None,
    secrets: Iterable[SecretDigest] = (),
    clock: Callable[[], float] = now_ms,
    seams: Seams = NO_SEAMS,
) -> PromotionResult:
    """Promote the Job's staged copy for ``host.key`` at most once, whatever was interrupted before.

    ``job``: the Job's name; with it the Job's handoff goes with its transcript (``store/handoff.py``), and
    a recovery that finds the swap landed finishes the handoff too, so the files beside the transcript are
    always this Job's.

    What is promoted is never the staged copy itself but its scanned copy (``store/scanned.py``): every
    credential of a common format, and each of the job's own ``secrets`` (known by digest only), redacted.
    The copy is durable before the journal names it, so no path promotes an unscanned transcript, and the
    count of hits is journaled with it (``PromotionResult.redacted``).

    Seams (for the kill tests, and the fence of ``pidispatch/election/fence.py``): ``begin`` before anything is
    written (a recovery, the scan, the journal), ``scanned`` once the scanned copy is durable, ``journaled``
    once the intent is durable, the store's own promotion steps, then ``promoted`` before the result is
    journaled. Never raises for a store fault (those are ``promote-failed``); a journal that cannot be
    written raises, and the caller retries later.
    """
    done = jd.read(PROMOTION)
    if done and done.get("state") == "done":
        return _result(done)
    seams.at("begin")  # before anything is written (the fence of a replica that may have lost the Lease)
    with keyguard.shared(host.key):
        if jd.forgotten():
            # The key was forgotten while the Job ran (kubectl delete sessionkey): promoting now would
            # bring the deleted conversation back. Nothing is promoted; the next delivery finds no transcript.
            return _finish(jd, PromotionResult(False, R.ABSENT, forgotten=True))
        started = done if done and done.get("state") == "started" else None
        source = scanned_dir(jd.path)
        if started is not None:
            recovered = _recover(settings, host.key, started, source if _scanned(started) else jd.session, job,
                                 clock)
            if recovered is not None:
                return _finish(jd, replace(recovered, redacted=_redacted(started)))
            if not _scanned(started):
                started = None  # an operator before the scan journaled this attempt: nothing landed, scan now
        if started is None:
            try:
                scan = make_scanned_copy(jd.path, jd.session, secrets, max_bytes=settings.max_bytes,
                                         refusal=lambda st: staged_refusal(settings, st))
            except Refused as refused:
                emit("session_promote_skipped", key=host.key, reason=refused.reason)
                return _finish(jd, PromotionResult(False, refused.reason))
            except OSError as exc:  # as any store fault: the job does not fail, nothing is promoted
                emit("session_store_failed", phase="scan", reason=f"{type(exc).__name__}: {exc}")
                return _finish(jd, PromotionResult(False, R.PROMOTE_FAILED))
            seams.at("scanned")
            if scan.redacted:
                emit("session_redacted", key=host.key, hits=scan.redacted, kinds=scan.kinds)  # counts, never values
            started = _intent(settings, jd, host.key, scan)
            jd.write(PROMOTION, started)
        seams.at("journaled")
        result = promote(settings, host.key, source, host_resume=host.resume, venue=host.venue,
                         pi_version=host.pi_version, model=host.model, population=host.admits(), context=context,
                         clock=clock, seams=seams,
                         names=_names(started) or Names.fresh(), handoff_of=_handoff_of(job, started))
        seams.at("promoted")
        return _finish(jd, replace(result, redacted=_redacted(started)))


def _intent(settings: Settings, jd: JobDir, key: str, scan: Scan) -> dict[str, Any]:
    # Capped: an oversized file is refused by ``promote`` without being read, so it is not hashed.
    digest = file_digest(os.path.join(scan.directory, sidecars.TRANSCRIPT), settings.max_bytes)
    names = Names.fresh()
    return {"state": "started", "size": digest[0] if digest else None, "sha256": digest[1] if digest else None,
            "before": _canonical_identity(settings, key), "temp": names.temp, "lock": names.lock,
            "scanned": True, "redacted": scan.redacted, "kinds": scan.kinds}


def _scanned(started: dict[str, Any]) -> bool:
    """The attempt promotes the scanned copy (an operator before the scan journaled none)."""
    return started.get("scanned") is True


def _redacted(started: dict[str, Any] | None) -> int | None:
    count = (started or {}).get("redacted")
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None


def _canonical_identity(settings: Settings, key: str) -> list[int] | None:
    with _key_dir(settings, key) as dir_fd:
        st = fsio.lstat_or_none(sidecars.TRANSCRIPT, dir_fd) if dir_fd is not None else None
    return list(fsio.Identity.of(st)) if st is not None else None


@contextmanager
def _key_dir(settings: Settings, key: str) -> Iterator[int | None]:
    """The key directory's descriptor, opened without following a link; ``None`` when there is none."""
    try:
        dir_fd = os.open(os.path.join(settings.sessions_dir or "", key), fsio.DIR_FLAGS)
    except OSError:
        yield None  # never made, removed, or a link planted at the key's name: nothing of ours is there
        return
    try:
        yield dir_fd
    finally:
        os.close(dir_fd)


def _handoff_of(job: str | None, started: dict[str, Any]) -> HandoffOf | None:
    sha = started.get("sha256")
    return HandoffOf(job, sha) if job and isinstance(sha, str) else None


def _recover(settings: Settings, key: str, started: dict[str, Any], stage_dir: str, job: str | None,
             clock: Callable[[], float]) -> PromotionResult | None:
    """Judge an attempt a kill interrupted; ``None`` when nothing of it landed and it may run again."""
    released = landed = superseded = False
    written = None
    with _key_dir(settings, key) as dir_fd:
        if dir_fd is not None:
            released = _release_names(dir_fd, key, started)
            st = fsio.lstat_or_none(sidecars.TRANSCRIPT, dir_fd)
            if st is not None and list(fsio.Identity.of(st)) != started.get("before"):
                ours = [started.get("size"), started.get("sha256")]
                landed = started.get("size") is not None and list(
                    file_digest(sidecars.TRANSCRIPT, dir_fd=dir_fd) or ()) == ours
                superseded = not landed
            if landed:
                written = _finish_handoff(dir_fd, key, stage_dir, _handoff_of(job, started), started, clock)
    emit("session_promotion_recovered", key=key, landed=landed, superseded=superseded, lockReleased=released)
    if landed:
        return PromotionResult(True, "promoted", started.get("size"), handoff=written)
    if superseded:
        return PromotionResult(False, R.LOCKED)
    return None


def _finish_handoff(dir_fd: int, key: str, stage_dir: str, handoff_of: HandoffOf | None, started: dict[str, Any],
                    clock: Callable[[], float]) -> handoffdir.Written | None:
    """The handoff step a kill cut off after the swap, run again under a lock of its own (idempotent).

    When another promotion holds the lock, it is replacing this transcript and writes its own handoff.
    """
    if handoff_of is None:
        return None
    candidate = lock.candidate_name()
    lock_fd = lock.take_lock(dir_fd, key, clock, candidate)
    if lock_fd is None:
        return None
    try:
        return write_handoff(dir_fd, key, stage_dir, handoff_of, int(started.get("size") or 0))
    finally:
        lock.release_lock(dir_fd, key, candidate, lock_fd)


def _names(started: dict[str, Any]) -> Names | None:
    """The attempt's journaled names; ``None`` for a journal an operator before them wrote (it named none)."""
    temp, candidate = started.get("temp"), started.get("lock")
    if isinstance(temp, str) and isinstance(candidate, str):
        return Names(temp, candidate)
    return None


def _release_names(dir_fd: int, key: str, started: dict[str, Any]) -> bool:
    """Remove what an interrupted attempt left under its journaled names; True when that included the lock.

    A journal without names (an older operator's) proves nothing of its own: its lock, if any, is left
    to the one-hour takeover rule, as it always was.
    """
    names = _names(started)
    if names is None:
        return False
    held = lock.holds_lock(dir_fd, names.lock)
    lock.release_lock(dir_fd, key, names.lock)
    fsio.clear_name(names.temp, dir_fd)
    return held


def release_interrupted(settings: Settings, staging_root: str) -> int:
    """Release the locks that promotions interrupted by a crash left behind; the number released.

    Run once when the operator starts, before any promotion: until each interrupted Job's completion
    runs again (and judges whether its swap landed), its lock would otherwise refuse every other
    promotion on the key as ``locked`` and lose those transcripts. Only a lock proven to be the
    attempt's own (the inode of its journaled candidate) is removed, with the attempt's temp. This
    relies on one operator process acting at a time (the Lease of ``election/leader.py``: it runs only when this
    replica has taken it): a journal that says ``started`` is then a dead or deposed process's. A deposed
    one that is only paused (a frozen node) and wakes mid-promotion does not go on without its lock: the
    fence (``pidispatch/election/fence.py``) stops it before its next step's write, since its lease deadline passed
    before this replica could take the Lease.
    """
    released = 0
    if settings.sessions_dir is None:
        return 0
    for uid in staged_uids(staging_root):
        jd = JobDir(staging_root, uid)
        started = jd.read(PROMOTION)
        host = jd.read_host() if started and started.get("state") == "started" else None
        if host is None or started is None:
            continue
        with keyguard.shared(host.key), _key_dir(settings, host.key) as dir_fd:
            if dir_fd is not None and _release_names(dir_fd, host.key, started):
                released += 1
                emit("session_lock_released", key=host.key, job=uid)
    return released


def _finish(jd: JobDir, result: PromotionResult) -> PromotionResult:
    written = result.handoff
    jd.write(PROMOTION, {"state": "done", "promoted": result.promoted, "reason": result.reason,
                         "bytes": result.bytes, "forgotten": result.forgotten, "redacted": result.redacted,
                         "handoff": None if written is None else {"writer": written.writer, "status": written.status,
                                                                  "entries": written.entries}})
    return result


def _result(done: dict[str, Any]) -> PromotionResult:
    size = done.get("bytes")
    h = done.get("handoff")
    written = None
    if isinstance(h, dict) and isinstance(h.get("entries"), int):
        written = handoffdir.Written(h.get("writer") if h.get("writer") in handoff.WRITERS else None,
                                  h.get("status") if h.get("status") in handoff.STATUSES else None, h["entries"])
    return PromotionResult(done.get("promoted") is True, str(done.get("reason")),
                           size if isinstance(size, int) else None, forgotten=done.get("forgotten") is True,
                           handoff=written, redacted=_redacted(done))
