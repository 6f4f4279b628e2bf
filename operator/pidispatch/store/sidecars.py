"""The key directory's sidecars (docs/store-contract.md#sidecars): the common read rule and the replace procedure.

Reads ``lstat`` first and accept only a regular file of 1..4096 bytes; writes go to a fixed
``<name>.incoming`` temp renamed over the sidecar, so nothing is ever written through a link.
"""

from __future__ import annotations

import errno
import os
import re

from pidispatch.record import MAX_SAFE_INTEGER
from pidispatch.store import fsio

SIDECAR_MAX_BYTES = 4096
TRANSCRIPT = "current.jsonl"
PI_VERSION = "pi-version"
VENUE = "venue"
RESUME_CHAIN = "resume-chain"
CONTEXT = "context"
LOCK = "lock"
PENDING_VENUE = "(pending)"
MISSING_VENUE = "local"

_CANONICAL_INT = re.compile(r"0|[1-9][0-9]*")
MODEL_ID = re.compile(r"[a-z0-9][a-z0-9._:/-]{0,127}")


def read_sidecar(key_dir: str, name: str, st: os.stat_result | None = None) -> str | None:
    """The stripped text of a sidecar, or ``None`` for any shape the read rule does not accept.

    ``st``: the sidecar's ``lstat`` when the caller has just taken it (the open below re-checks).
    """
    return _read_rule(os.path.join(key_dir, name), st)


def _read_rule(path: str, st: os.stat_result | None) -> str | None:
    """The common read rule on ``path`` (its ``lstat`` is ``st`` when already taken)."""
    if st is None:
        st = fsio.lstat_or_none(path)
    if not fsio.is_regular(st) or not 0 < st.st_size <= SIDECAR_MAX_BYTES:  # type: ignore[union-attr]
        return None
    try:
        fd = os.open(path, fsio.READ_FLAGS)
    except OSError:
        return None
    try:
        if not fsio.is_regular(os.fstat(fd)):
            return None
        data = os.read(fd, SIDECAR_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not 0 < len(data) <= SIDECAR_MAX_BYTES:
        return None
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    return text or None


def read_venue(key_dir: str) -> str | None:
    """The venue stamp; a missing file (ENOENT, and only ENOENT) reads ``local``.

    Transcripts from before the sidecar existed all ran on ``local``. A dangling link is not
    "missing": it reads ``None`` and matches no venue.
    """
    path = os.path.join(key_dir, VENUE)
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError as exc:
        return MISSING_VENUE if exc.errno == errno.ENOENT else None
    return _read_rule(path, st)


def parse_chain(text: str | None) -> int:
    """The canonical base-10 form of an integer > 0, else 0 (a missing or corrupt counter reads 0)."""
    if text is None or not _CANONICAL_INT.fullmatch(text):
        return 0
    value = int(text)
    return value if 0 < value <= MAX_SAFE_INTEGER else 0


def read_chain(key_dir: str) -> int:
    return parse_chain(read_sidecar(key_dir, RESUME_CHAIN))


def parse_context(text: str | None) -> tuple[int, int, str | None] | None:
    """``tokens window [model]`` with canonical integers, tokens ≥ 0 and window > 0, else ``None``."""
    if text is None:
        return None
    fields = text.split()
    if len(fields) not in (2, 3):
        return None
    tokens_text, window_text = fields[0], fields[1]
    if not (_CANONICAL_INT.fullmatch(tokens_text) and _CANONICAL_INT.fullmatch(window_text)):
        return None
    tokens, window = int(tokens_text), int(window_text)
    if window <= 0 or tokens > MAX_SAFE_INTEGER or window > MAX_SAFE_INTEGER:
        return None
    return tokens, window, (fields[2].lower() if len(fields) == 3 else None)


def read_context(key_dir: str) -> tuple[int, int, str | None] | None:
    return parse_context(read_sidecar(key_dir, CONTEXT))


def normalise_model_id(model: str | None) -> str | None:
    """``provider/model`` lower-cased if it matches the store contract's pattern, else ``None``."""
    if not isinstance(model, str):
        return None
    lowered = model.lower()
    return lowered if MODEL_ID.fullmatch(lowered) else None


def replace_sidecar(dir_fd: int, name: str, content: str) -> None:
    """Write ``content`` to ``<name>.incoming`` and rename it over ``name`` (a planted link is replaced).

    Not fsynced: a sidecar whose bytes are lost in a power cut reads ``null`` (promote.py says why
    that is always safe); the caller fsyncs the directory where the order of renames matters.
    """
    temp = f"{name}.incoming"
    fd = fsio.create_exclusive(temp, dir_fd)
    try:
        fsio.write_all(fd, content.encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
