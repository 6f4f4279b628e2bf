"""The scanned copy a promotion copies from: the Job's staged session with every credential redacted.

The staged ``/session`` is the agent's: whatever it printed (a token, a key) is in its transcript and its
handoff. Before a promotion the operator writes, beside the Job's ``session/`` directory, ``scanned/``:

``current.jsonl``  the staged transcript, scanned line block by line block through its decoded view
                   (``store/transcriptscan.py``); every line that was valid JSON still is, with the same
                   structure, so pi resumes it.
``handoff.json``   the staged handoff, each text field scanned after JSON decoding (so an escape such as
                   ``\\u0067hp_`` hides nothing, ``store/decoded.py``), written back as JSON; absent when
                   the staged one is.

The copy is durable (fsync of each file and of the directory) before the journal's ``started`` record
names it (``store/journal.py``), so a crash after that point promotes this copy and no other, and a
crash before it leaves no journal and the copy is made again from the untouched staged session (the
scan is deterministic, so the same bytes and the same count come out).
"""

from __future__ import annotations

import errno
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pidispatch.contract.digests import SecretDigest
from pidispatch.record import SessionReason as R
from pidispatch.store import agenttext, fsio, handoff, handoffdir, sidecars
from pidispatch.store.decoded import redact_text
from pidispatch.store.transcriptscan import redact_lines

SCANNED = "scanned"
# Lines are scanned in blocks of about this size (a hit never spans a newline: the transcript is JSON lines,
# and a raw newline cannot stand inside a JSON string), so memory is bounded by the longest line.
BLOCK = 8 << 20


@dataclass(frozen=True)
class Scan:
    """What the scan found: the count per kind (never the values) and the scanned copy's directory."""

    directory: str
    kinds: dict[str, int]

    @property
    def redacted(self) -> int:
        return sum(self.kinds.values())


class Refused(Exception):
    """The staged transcript is not one promotion takes (its ``reason`` is promotion's own refusal)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def scanned_dir(job_dir: str) -> str:
    return os.path.join(job_dir, SCANNED)


def make_scanned_copy(job_dir: str, stage_dir: str, secrets: Iterable[SecretDigest], *, max_bytes: int,
                      refusal: Callable[[os.stat_result], str | None]) -> Scan:
    """Write ``job_dir/scanned/`` from ``stage_dir`` and return the counts; :class:`Refused` when the staged
    transcript is not one promotion takes.

    ``refusal(stat)`` is promotion's own check of the staged file (its reason, or ``None``); it runs on the
    opened descriptor, and the open follows no link and never blocks on a FIFO planted at the name.
    """
    secrets = tuple(secrets)
    target = scanned_dir(job_dir)
    _fresh_dir(target)
    kinds: Counter[str] = Counter()
    dir_fd = os.open(target, fsio.DIR_FLAGS)
    try:
        try:
            src = os.open(os.path.join(stage_dir, sidecars.TRANSCRIPT), fsio.READ_FLAGS)
        except FileNotFoundError:
            raise Refused(R.ABSENT) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a link planted at the name
                raise Refused(R.NOT_A_REGULAR_FILE) from None
            raise
        try:
            reason = refusal(os.fstat(src))
            if reason is not None:
                raise Refused(reason)
            _scan_file(src, dir_fd, secrets, kinds, max_bytes)
        finally:
            os.close(src)
        _scan_handoff(stage_dir, dir_fd, secrets, kinds)
        fsio.fsync_dir(dir_fd)
    finally:
        os.close(dir_fd)
    return Scan(target, dict(sorted(kinds.items())))


def _fresh_dir(path: str) -> None:
    """An empty real directory at ``path`` (0700): what a crashed earlier attempt left there is removed."""
    st = fsio.lstat_or_none(path)
    if st is not None and not fsio.is_real_dir(st):
        os.unlink(path)
        st = None
    if st is None:
        os.mkdir(path, 0o700)
        return
    dir_fd = os.open(path, fsio.DIR_FLAGS)
    try:
        for name in os.listdir(dir_fd):
            fsio.clear_name(name, dir_fd)
    finally:
        os.close(dir_fd)


def _scan_file(src: int, dir_fd: int, secrets: tuple[SecretDigest, ...], kinds: Counter[str],
               max_bytes: int) -> None:
    dst = fsio.create_exclusive(sidecars.TRANSCRIPT, dir_fd)
    try:
        carry, total = b"", 0
        while True:
            chunk = os.read(src, BLOCK)
            total += len(chunk)
            if max_bytes > 0 and total > max_bytes:
                raise Refused(R.TOO_LARGE)  # grew since the check: never read past the cap
            if not chunk:
                break
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                carry = data  # one line longer than a block: read on to its end
                continue
            carry = data[cut:]
            _write_scanned(dst, data[:cut], secrets, kinds)
        if carry:
            _write_scanned(dst, carry, secrets, kinds)
        os.fsync(dst)
    finally:
        os.close(dst)


def _write_scanned(dst: int, data: bytes, secrets: tuple[SecretDigest, ...], kinds: Counter[str]) -> None:
    result = redact_lines(data, secrets)
    kinds.update(result.kinds)
    fsio.write_all(dst, result.data)


def _scan_handoff(stage_dir: str, dir_fd: int, secrets: tuple[SecretDigest, ...], kinds: Counter[str]) -> None:
    try:
        stage_fd = os.open(stage_dir, fsio.DIR_FLAGS)
    except OSError:
        return
    try:
        text = handoffdir.read_text(handoff.HANDOFF, stage_fd, handoff.HANDOFF_MAX_BYTES)
    finally:
        os.close(stage_fd)
    if text is None:
        return
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return  # not a handoff promotion renders: leaving it out has the same effect
    fd = fsio.create_exclusive(handoff.HANDOFF, dir_fd)
    try:
        fsio.write_all(fd, json.dumps(_scan_value(data, secrets, kinds), ensure_ascii=False).encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _scan_value(value: Any, secrets: tuple[SecretDigest, ...], kinds: Counter[str]) -> Any:
    if isinstance(value, str):
        # Scanned as it will be rendered: what the rendering removes (a control character, an escape sequence,
        # a lone surrogate) could otherwise split a token here and join it in the letter (agenttext.clean).
        value = agenttext.clean(value)
        result = redact_text(value.encode("utf-8", "surrogatepass"), secrets)
        kinds.update(result.kinds)
        return result.data.decode("utf-8") if result.hits else value
    if isinstance(value, dict):
        return {k: _scan_value(v, secrets, kinds) for k, v in value.items()}
    if isinstance(value, list):
        return [_scan_value(v, secrets, kinds) for v in value]
    return value
