"""A Job's private directory on the staging volume: the staged copy, the host record, the journal.

``<staging>/<job-uid>/session/`` is what the job Pod mounts (subPath) at ``/session``; the records next
to it are out of the Pod's reach:

* ``host.json``: the :class:`HostRecord`, what the gates decided for this Job and what promotion will
  need. Written before the Pod exists (made durable right after the Pod's create, before the Job reads
  ``Running``), read back at completion. One typed record from :func:`stage` to the Pod and back.
* ``promotion.json``: the promotion journal (``store/journal.py``), which keeps promotion to at most
  once per Job across crashes.
* ``forgotten.json``: written by ``store/forget.py`` when the Job's key is forgotten while the Job runs;
  the Job then promotes nothing.

The operator names Jobs by uid here (uids never repeat; names do) and never builds a path inside.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from pidispatch.contract.digests import SecretDigest, as_json, parse_digests
from pidispatch.events import emit
from pidispatch.record import HostVerdict
from pidispatch.settings import Settings
from pidispatch.store import fsio, handoff, handoffdir, keyguard
from pidispatch.store.resolve import hold, resolve
from pidispatch.store.seams import NO_SEAMS, Seams

SESSION = "session"
HOST = "host.json"
PROMOTION = "promotion.json"
FORGOTTEN = "forgotten.json"
# O_NONBLOCK: the staged file is agent-writable, and opening a FIFO planted there must not hang.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
MAX_RECORD = 64 * 1024
STAGING_GRACE_SECONDS = 600  # an orphaned staging directory younger than this is left to its Job


@dataclass(frozen=True)
class HostRecord:
    """What the host decided for one Job's session key, and what promotion needs of it later.

    ``mounted`` is False when the store could not be read (a fault, or no staging claim): the Pod then
    runs without ``/session`` and nothing is promoted. ``resume``/``reason``/``bytes`` are the gate
    verdict, set only when mounted. Forge, repository and branch are kept for the SessionKey's spec;
    they never reach a Job's status or a log line.
    """

    key: str
    forge: str
    repository: str
    branch: str
    venue: str | None
    pi_version: str | None = None
    model: str | None = None
    mounted: bool = False
    resume: bool = False
    reason: str | None = None
    bytes: int | None = None
    # The gates refused for a lineage reason and a letter waited: it and the ledger are staged beside the
    # empty transcript, and the job starts a new session from them (``store/handoff.py``).
    rethread: bool = False
    # The author associations the job's Trigger admits (store/population.py): judged by gate 3a, stamped by the
    # promotion. ``None`` in a record an older operator wrote: its promotion leaves the population unknown.
    population: tuple[str, ...] | None = None
    # The job's own secrets the operator knows by digest (the App token it minted): the scan before the
    # promotion redacts them (``store/redact.py``). Never a value.
    secrets: tuple[SecretDigest, ...] = ()

    def admits(self) -> frozenset[str] | None:
        """The population as the gates and the stamps take it."""
        return None if self.population is None else frozenset(self.population)

    def verdict(self) -> HostVerdict | None:
        """The gate verdict for the record merge, or ``None`` when no session was staged."""
        return HostVerdict(self.resume, str(self.reason), self.bytes) if self.mounted else None

    def to_json(self) -> dict[str, Any]:
        # The names host.json has always used, so a Job staged by an older operator completes under a newer one.
        fields = asdict(self)
        fields["piVersion"] = fields.pop("pi_version")
        fields["secrets"] = as_json(self.secrets)
        fields["population"] = None if self.population is None else list(self.population)
        return fields

    @classmethod
    def from_json(cls, record: dict[str, Any] | None) -> HostRecord | None:
        """The record read back, or ``None`` when it is missing or not in the shape :meth:`to_json` writes."""
        if not record or not isinstance(record.get("key"), str):
            return None
        size = record.get("bytes")
        return cls(
            key=record["key"], forge=str(record.get("forge") or ""), repository=str(record.get("repository") or ""),
            branch=str(record.get("branch") or ""), venue=_text(record.get("venue")),
            pi_version=_text(record.get("piVersion")), model=_text(record.get("model")),
            mounted=record.get("mounted") is True, resume=record.get("resume") is True,
            reason=_text(record.get("reason")),
            bytes=size if isinstance(size, int) and not isinstance(size, bool) else None,
            rethread=record.get("rethread") is True,
            secrets=parse_digests(record.get("secrets")),
            population=_tokens(record.get("population")),
        )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _tokens(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


def session_subpath(uid: str) -> str:
    """Where a Job's ``session/`` sits inside the staging volume: the subPath its Pod mounts at ``/session``."""
    return f"{uid}/{SESSION}"


class JobDir:
    """Paths and journal of one Job (by uid, which never repeats, unlike names)."""

    def __init__(self, staging_root: str, uid: str) -> None:
        if not uid or "/" in uid or uid in (".", ".."):
            raise ValueError(f"not a Job uid: {uid!r}")
        self.path = os.path.join(staging_root, uid)
        self.session = os.path.join(self.path, SESSION)

    def prepare(self) -> bool:
        """Create the directory and its ``session/`` (0700), refusing anything that is not a real directory.

        True when this call made the Job's directory: then both are new and empty, and nothing an earlier
        stage or a job Pod left needs clearing."""
        made = _make_dir(self.path)
        _make_dir(self.session)
        return made

    def exists(self) -> bool:
        return fsio.is_real_dir(fsio.lstat_or_none(self.path))

    def write(self, name: str, record: dict[str, Any], *, durable: bool = True) -> None:
        """Replace journal file ``name`` atomically (temp, rename) and, unless ``durable`` is false, durably
        (fsync of the temp before the rename, fsync of the directory after it).

        ``durable=False`` leaves the record in the page cache only: every process sees it at once and a
        killed operator keeps it, but a power cut may lose it (or leave a torn file, which :meth:`read`
        reports as missing). The caller then owes a :meth:`sync` before anything depends on the record
        surviving a power cut.
        """
        data = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
        dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            temp = f".{name}.incoming"
            fd = fsio.create_exclusive(temp, dir_fd)
            try:
                fsio.write_all(fd, data)
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            if durable:
                fsio.fsync_dir(dir_fd)
        finally:
            os.close(dir_fd)

    def sync(self, name: str) -> None:
        """Make an earlier ``write(name, ..., durable=False)`` durable: fsync the file, then the directory."""
        dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsio.fsync_dir(dir_fd)
        finally:
            os.close(dir_fd)

    def read(self, name: str) -> dict[str, Any] | None:
        """A journal record, or ``None`` when missing, not a regular file, oversized or not a JSON object."""
        try:
            fd = os.open(os.path.join(self.path, name), _READ)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_RECORD:
                return None
            data = os.read(fd, MAX_RECORD + 1)
        finally:
            os.close(fd)
        try:
            record = json.loads(data)
        except ValueError:
            return None
        return record if isinstance(record, dict) else None

    def read_host(self) -> HostRecord | None:
        return HostRecord.from_json(self.read(HOST)) if self.exists() else None

    def forgotten(self) -> bool:
        """True when this Job's key was forgotten while it ran (``store/forget.py``)."""
        return self.read(FORGOTTEN) is not None

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _make_dir(path: str) -> bool:
    """``mkdir`` (0700): True when made here (so a real directory); an existing path must be a real directory."""
    try:
        os.mkdir(path, 0o700)
        return True
    except FileExistsError:
        if not fsio.is_real_dir(fsio.lstat_or_none(path)):
            raise NotADirectoryError(f"staging path is not a real directory: {path}") from None
        return False


def stage(settings: Settings, jd: JobDir, record: HostRecord, *, mount: bool = True,
          clock: float | None = None, seams: Seams = NO_SEAMS, held: str | None = None) -> HostRecord:
    """Judge the record's key, stage the Job's copy and write its host record; return the record as written.

    With ``mount`` false (no staging claim to mount it from), nothing is judged and the record says
    so. Under the key's guard (shared; a forget holds it exclusive): a key is either forgotten before
    this stage (which then sees no transcript) or after it (and then finds this Job's record and marks it).
    The record goes to the page cache only: the caller syncs it once the Pod exists (``JobDir.sync``).
    ``held``: the caller refused the resume already (a retired or quarantined key): 0 bytes are staged with
    that reason, and neither the transcript nor the letter is read.
    """
    fresh = jd.prepare()
    with keyguard.shared(record.key):
        if mount:
            resolution = hold(settings, record.key, jd.session, held) if held is not None else resolve(
                settings, record.key, jd.session, venue=record.venue, pi_version=record.pi_version,
                model=record.model, population=record.admits(), clock=clock, seams=seams)
            if resolution is not None:
                verdict = resolution.verdict
                record = replace(record, mounted=True, resume=verdict.resume, reason=verdict.reason,
                                 bytes=verdict.bytes)
                record = _stage_letter(settings, jd, record, fresh)
        jd.write(HOST, record.to_json(), durable=False)
    return record


def _stage_letter(settings: Settings, jd: JobDir, record: HostRecord, fresh: bool) -> HostRecord:
    """After a lineage refusal, stage a waiting letter and the ledger for the unpack (else leave none;
    a ``fresh`` directory has none to clear)."""
    if not fresh:
        handoffdir.clear_staged(jd.session)
    if record.resume or record.reason not in handoff.LINEAGE_REASONS or settings.sessions_dir is None:
        return replace(record, rethread=False)
    try:
        staged = handoffdir.stage_handoff(os.path.join(settings.sessions_dir, record.key), jd.session)
    except OSError as exc:  # the handoff is a bonus: without it the job starts cold, as it always did
        emit("session_store_failed", phase="stage-handoff", reason=f"{type(exc).__name__}: {exc}")
        handoffdir.clear_staged(jd.session)
        staged = None
    if staged is None:
        return replace(record, rethread=False)
    emit("session_handoff_staged", key=record.key, reason=record.reason, writer=staged.letter.writer,
         entries=staged.entries)
    return replace(record, rethread=True)


def file_digest(path: str, max_bytes: int = 0, dir_fd: int | None = None) -> tuple[int, str] | None:
    """``(size, sha256)`` of a regular file read without following links, or ``None``.

    With ``max_bytes`` (0: no cap), a file larger than the cap is ``None`` too, and is not read: the
    staged file is agent-written and may be of any size, and the store's size cap rejects it anyway.
    The cap is checked before the first byte is read, and again while reading (the file may grow).
    """
    try:
        fd = os.open(path, _READ, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or _over_cap(st.st_size, max_bytes):
            return None
        digest = hashlib.sha256()
        size = 0
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
            size += len(chunk)
            if _over_cap(size, max_bytes):
                return None
        return size, digest.hexdigest()
    finally:
        os.close(fd)


def _over_cap(size: int, max_bytes: int) -> bool:
    return max_bytes > 0 and size > max_bytes


def staged_uids(staging_root: str) -> list[str]:
    """The Job uids that have a directory on the staging volume (links and files are not Jobs)."""
    try:
        names = os.listdir(staging_root)
    except FileNotFoundError:
        return []
    return [n for n in names if fsio.is_real_dir(fsio.lstat_or_none(os.path.join(staging_root, n)))]


def sweep_orphans(staging_root: str, live: set[str], now: Callable[[], float] = time.time,
                  grace_seconds: float = STAGING_GRACE_SECONDS) -> int:
    """Remove staging directories of Jobs that are gone (not in ``live``) and older than the grace.

    The grace spares a directory whose Job was created after ``live`` was listed. Each directory is
    logged as ``staging_swept``, or ``staging_sweep_failed`` (retried next sweep). Returns the number swept.
    """
    swept = 0
    for uid in staged_uids(staging_root):
        path = os.path.join(staging_root, uid)
        st = fsio.lstat_or_none(path)
        if uid in live or st is None or now() - st.st_mtime <= grace_seconds:
            continue
        failures = _remove_tree(path)
        if failures:
            emit("staging_sweep_failed", job=uid, errors=len(failures), first=failures[0])
        else:
            emit("staging_swept", job=uid)
            swept += 1
    return swept


def _remove_tree(path: str) -> list[str]:
    """Remove ``path`` recursively (never following a link inside it); the failures, as ``where: why``."""
    failures: list[str] = []
    shutil.rmtree(path, onerror=lambda _fn, where, info: failures.append(f"{where}: {info[1]}"))
    return failures
