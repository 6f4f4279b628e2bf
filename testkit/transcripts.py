"""Locates the real pi 0.73.1 session files the transcript tests run against.

They live in the shared folder beside the repository clone (`<clone>/../shared`), not in the repo.
A missing folder is a broken checkout, so the tests fail (never skip) and say where they looked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / ".." / "shared" / "samples" / "pi-0.73.1"

VALID = [
    "s1_after_turn1.jsonl",
    "s1_after_turn2.jsonl",
    "s2_tool_call.jsonl",
    "s3_json_then_rpc_then_json.jsonl",
    "s4_cached_tokens.jsonl",
    "s5_auto_compaction_then_resume.jsonl",
    "s6_http400_error.jsonl",
    "s7_http500_retries_then_resume.jsonl",
    "s8_sigkill_midturn.jsonl",
    "edge/b_empty.before.jsonl",
    "edge/b_empty.after2runs.jsonl",
    "edge/c_garbage_first.after.jsonl",
    "edge/c2_no_header.after.jsonl",
    "edge/e_header_only.before.jsonl",
    "edge/e_header_only.after.jsonl",
]


def sample_path(name: str) -> Path:
    """Path of a sample; fails the test with a clear message when the shared folder is missing."""
    path = SAMPLES / name
    if not path.is_file():
        pytest.fail(
            f"pi sample {name!r} not found at {path.resolve()}: the transcript tests need the shared "
            "folder checked out beside the repository (<clone>/../shared/samples/pi-0.73.1)",
            pytrace=False,
        )
    return path


def sample(name: str) -> bytes:
    """The bytes of a sample file."""
    return sample_path(name).read_bytes()


def all_sample_names() -> list[str]:
    """Every *.jsonl below the samples folder (fails when the folder is missing)."""
    if not SAMPLES.is_dir():
        sample_path("s1_after_turn1.jsonl")
    return sorted(str(p.relative_to(SAMPLES)) for p in SAMPLES.rglob("*.jsonl"))
