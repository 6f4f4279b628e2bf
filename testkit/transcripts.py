"""Locates the real pi session files the transcript and store tests run against.

They are committed in ``tests/data/transcripts/pi-<version>/``, written by ``make transcripts``
(``testkit/gen_transcripts.py``: the pinned real pi against the scripted model), one folder per pi version;
the tests read the one of the version ``e2e/pi/package.json`` pins. A missing file fails the test (never
skips it) and says how to write it.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from testkit.gen_transcripts import CONTEXT, samples_dir

SAMPLES = samples_dir()

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
    """Path of a sample; fails the test with a clear message when it is missing."""
    path = SAMPLES / name
    if not path.is_file():
        pytest.fail(f"pi sample {name!r} not found at {path}: run `make transcripts` (and commit the folder)",
                    pytrace=False)
    return path


def sample(name: str) -> bytes:
    """The bytes of a sample file."""
    return sample_path(name).read_bytes()


def sample_lines(name: str) -> list[dict[str, Any]]:
    """The entries of a sample whose every line is JSON (the valid ones), parsed."""
    return [json.loads(line) for line in sample(name).splitlines()]


def entry_ids(name: str) -> list[str]:
    """The ids of a valid sample's entries, in file order (the header's session id not among them); e.g.
    ``model_change, thinking_level_change, user, assistant, user, assistant`` for ``s1_after_turn2``."""
    return [entry["id"] for entry in sample_lines(name) if entry["type"] != "session"]


@cache
def pi_context(name: str) -> dict[str, Any] | None:
    """pi's own ``get_session_stats`` ``contextUsage`` for a sample, recorded when it was written."""
    return json.loads(sample_path(CONTEXT).read_text())["files"][name]


def all_sample_names() -> list[str]:
    """Every *.jsonl below the samples folder (fails when the folder is missing)."""
    if not SAMPLES.is_dir():
        sample_path("s1_after_turn1.jsonl")
    return sorted(str(p.relative_to(SAMPLES)) for p in SAMPLES.rglob("*.jsonl"))
