"""Builders for store tests: real key directories, sidecars, mtimes and a fixed clock."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pidispatch.settings import Settings
from testkit.gen_transcripts import samples_dir

SPAWN = multiprocessing.get_context("spawn")
DEADLINE_S = 60.0  # generous: a loaded CI machine; nothing here normally takes more than a second
DAY_MS = 86_400_000
NOW_MS = 1_800_000_000_000.0  # a fixed "now" for every time-based gate
PI = "0.73.1"
MODEL = "fake/fake-model"
KEY = "7a5b816df58a1c8345ced1323e654287"


def sample(name: str) -> bytes:
    """A committed real pi session file (``tests/data/transcripts``; ``testkit/transcripts.py``)."""
    path = samples_dir() / name
    if not path.is_file():
        raise RuntimeError(f"pi sample {name!r} not found at {path}: run `make transcripts`")
    return path.read_bytes()


def set_mtime(path: Path, ms: float) -> None:
    ns = int(ms * 1e6)
    os.utime(path, ns=(ns, ns), follow_symlinks=False)


def rewrite_in_place(path: Path | str, data: bytes) -> None:
    """Overwrite ``path`` with ``data`` of the same length on the same inode and restore its mtime, as a writer
    hiding its change would; only the ctime (which no call can set back) names the new version apart."""
    before = os.stat(path)
    assert len(data) == before.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns


def header(timestamp: str | None = "2026-11-29T12:52:56.280Z") -> bytes:
    fields = '{"type":"session","version":3,"id":"01a2275d-9d58-76a1-b784-bf9c7a4f66f0"'
    if timestamp is not None:
        fields += f',"timestamp":"{timestamp}"'
    return (fields + ',"cwd":"/workspace"}\n').encode()


class Store:
    """A store root on a real filesystem with helpers to shape one key directory."""

    def __init__(self, root: Path, stage_root: Path) -> None:
        self.root = root
        self.stage_root = stage_root
        self.settings = Settings(sessions_dir=str(root))
        self._stages = 0

    def configure(self, **changes: object) -> None:
        self.settings = replace(self.settings, **changes)  # type: ignore[arg-type]

    def key_dir(self, key: str = KEY) -> Path:
        return self.root / key

    def put(
        self,
        transcript: bytes | None = None,
        *,
        key: str = KEY,
        venue: str | None = "kubernetes",
        pi_version: str | None = PI,
        chain: str | None = None,
        context: str | None = None,
        population: str | None = "COLLABORATOR MEMBER OWNER",
        idle_ms: float = 0,
    ) -> Path:
        """A key as a completed promotion leaves it (transcript + stamps), ``idle_ms`` old. ``population``: the
        stamp a Trigger that leaves ``on.authorAssociations`` unset leaves (``None``: a store from before it)."""
        d = self.key_dir(key)
        d.mkdir(mode=0o700, exist_ok=True)
        if transcript is None:
            transcript = sample("s1_after_turn2.jsonl")
        path = d / "current.jsonl"
        path.write_bytes(transcript)
        for name, value in (("venue", venue), ("pi-version", pi_version), ("resume-chain", chain),
                            ("context", context), ("population", population)):
            if value is not None:
                (d / name).write_text(value)
        set_mtime(path, NOW_MS - idle_ms)
        return path

    def stage(self) -> Path:
        self._stages += 1
        return self.stage_root / f"job-{self._stages}" / "session"

    def staged_job(self, content: bytes) -> Path:
        """A staging dir whose ``current.jsonl`` holds what a finished job left."""
        stage = self.stage()
        stage.mkdir(parents=True, mode=0o700)
        (stage / "current.jsonl").write_bytes(content)
        return stage


class KillAt:
    """Store seams that SIGKILL this process at ``step`` (run it in a child: :func:`run_to_death`)."""

    def __init__(self, step: str) -> None:
        self.step = step

    def at(self, step: str) -> None:
        if step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def run_to_death(target: Callable[..., Any], *args: str, step: str | None = None) -> None:
    """Run ``target`` in a fresh process and require that it died of SIGKILL (its seam fired)."""
    child = SPAWN.Process(target=target, args=args)
    child.start()
    child.join(DEADLINE_S)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail(f"the child did not finish within {DEADLINE_S:.0f}s")
    assert child.exitcode == -signal.SIGKILL, (
        f"the child was to be killed at step {step or args[-1]!r} but exited with {child.exitcode}: "
        "the step was never reached"
    )
