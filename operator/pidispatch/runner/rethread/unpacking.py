"""Unpack: a job that starts from a staged letter (the gates refused the resume for a lineage reason).

The session file is given a header whose ``parentSession`` names the old session, and the first message carries
the letter, the ledger and the new event and asks for a three-line readback.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from pidispatch.runner.rethread.templates import fill
from pidispatch.store import fsio
from pidispatch.store.handoff import LEDGER, LETTER
from pidispatch.store.handoffdir import read_text


def _read_staged(session_dir: str, name: str, limit: int = 256 * 1024) -> str | None:
    """A file the operator staged beside the session file, read as the store reads (no link, regular, capped)."""
    try:
        dir_fd = os.open(session_dir, fsio.DIR_FLAGS)
    except OSError:
        return None
    try:
        return read_text(name, dir_fd, limit)
    finally:
        os.close(dir_fd)


def _without_metadata(text: str) -> str:
    """Our own metadata lines (HTML comments the operator wrote) are for machines, not for the model."""
    return "\n".join(line for line in text.split("\n") if not line.startswith("<!-- ")).strip()


def parent_of(letter_text: str) -> str | None:
    m = re.match(r"<!-- pi-dispatch letter v1 .*? session=(\S+) ", letter_text)
    return None if m is None or m.group(1) == "-" else m.group(1)


@dataclass(frozen=True)
class Unpack:
    """A staged handoff, read: the letter and ledger texts and the session they continue."""

    letter: str
    ledger: str
    parent: str | None


def read_unpack(session_file: str) -> Unpack | None:
    """The letter and ledger the operator staged beside the session file; ``None`` when there is no letter."""
    directory = os.path.dirname(session_file)
    letter = _read_staged(directory, LETTER)
    if not letter or not letter.strip():
        return None
    return Unpack(_without_metadata(letter), _without_metadata(_read_staged(directory, LEDGER) or "") or
                  "(the ledger is empty)", parent_of(letter))


def uuid7() -> str:
    """A UUIDv7 (time-ordered), as pi names its sessions."""
    ms = time.time_ns() // 1_000_000
    raw = bytearray(ms.to_bytes(6, "big") + secrets.token_bytes(10))
    raw[6] = (raw[6] & 0x0F) | 0x70
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_session_header(session_file: str, workspace: str, parent: str | None) -> bool:
    """Give the (empty) session file a v3 header whose ``parentSession`` names the old session.

    Only an empty file is written (the runner's own normalisation left it so on a cold start): pi then
    keeps this header, and the new conversation records where it came from. False when not written.
    """
    header: dict[str, Any] = {"type": "session", "version": 3, "id": uuid7(),
                              "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000Z",
                              "cwd": workspace}
    if parent:
        header["parentSession"] = parent
    directory, name = os.path.split(session_file)
    try:
        dir_fd = os.open(directory or "/", fsio.DIR_FLAGS)
    except OSError:
        return False
    try:
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        try:
            if os.fstat(fd).st_size != 0:
                return False
            fsio.write_all(fd, (json.dumps(header, separators=(",", ":")) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        return False
    finally:
        os.close(dir_fd)
    return True


def unpack_prompt(unpack: Unpack, *, target: str, reason: str, event_prompt: str, text: str) -> str:
    return fill(text, {"target": target, "reason": reason, "letter": unpack.letter, "ledger": unpack.ledger,
                       "event": event_prompt})
