"""The repository tests and builds from a clone alone: no tracked file points at the workshop folder it was
written beside (its design notes, reference texts and pi samples), whose facts now live in the repository
itself (``docs/``, ``tests/data/transcripts``).

Every tracked text file is read, and every tracked symlink's target; nothing is excluded. The patterns are
assembled from pieces, so this file does not name what it looks for.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORKSHOP = "sha" + "red"
PATTERNS = [f"../{WORKSHOP}", *(f"{WORKSHOP}/{part}" for part in ("samples", "design", "reference"))]
FOUND = re.compile("|".join(re.escape(pattern) for pattern in PATTERNS).encode())


def offending_lines(data: bytes) -> list[tuple[int, str]]:
    """``(line number, pattern)`` for each line of ``data`` that names the workshop folder."""
    return [(number, match.group().decode()) for number, line in enumerate(data.split(b"\n"), start=1)
            for match in [FOUND.search(line)] if match]


def tracked_files() -> list[str]:
    done = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [name for name in done.stdout.decode().split("\0") if name]


def is_text(data: bytes) -> bool:
    return b"\0" not in data[:8192]


def test_no_tracked_file_names_the_workshop_folder() -> None:
    names = tracked_files()
    assert "tests/docs/test_standalone.py" in names and len(names) > 100, "git ls-files saw the repository"
    offenders: list[str] = []
    texts = 0
    for name in names:
        path = REPO / name
        if path.is_symlink():
            data = os.readlink(path).encode()
        elif path.is_file():
            data = path.read_bytes()
            if not is_text(data):
                continue
            texts += 1
        else:
            continue  # deleted in the working tree: nothing left to read
        offenders += [f"{name}:{number}: {pattern}" for number, pattern in offending_lines(data)]
    assert texts > 100
    assert offenders == [], "tracked files that point at the workshop folder:\n" + "\n".join(offenders)


def test_the_search_finds_each_pattern() -> None:
    for pattern in PATTERNS:
        text = f"see {pattern}/x.md\n".encode()
        assert offending_lines(b"first line\n" + text) == [(2, pattern)]
    assert offending_lines(f"../../{WORKSHOP}".encode()) == [(1, f"../{WORKSHOP}")]
    assert offending_lines(f"{WORKSHOP}/ and {WORKSHOP}-samples and ./{WORKSHOP}".encode()) == []
