"""The committed pi session samples (``tests/data/transcripts``) are complete, belong to the pinned pi, and are
what the generator makes.

The first tests read the committed folder only (``make unit``): every file ``testkit/gen_transcripts.py``
writes is there and tracked by git, the folder is the one of the pi version ``e2e/pi/package.json`` pins (a
pi bump without ``make transcripts`` fails here), and each file has the shape its recipe produces. The last
test runs the generator with the real pi into a temporary folder and compares the fresh files with the
committed ones line by line (entry types in order, line counts): if the pinned pi writes its sessions
differently, or a recipe stops showing what its README line says, it fails.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from testkit.gen_transcripts import CONTEXT, FILES, README, ROOT, WRITTEN, generate, samples_dir, structure
from testkit.pitool import pi_binary, pinned_version

SAMPLES = samples_dir()
REPO = Path(__file__).resolve().parents[2]

# The shape of each file, line by line (gen_transcripts.structure): the facts about pi each sample records.
S, MC, TL = "session", "model_change", "thinking_level_change"
U, A, ERR, TOOL = "message:user", "message:assistant:stop", "message:assistant:error", "message:toolResult"
NEW = [S, MC, TL]
S1_TURN2 = [*NEW, U, A, U, A]
SHAPES: dict[str, list[str]] = {
    "s1_after_turn1.jsonl": [*NEW, U, A],
    "s1_after_turn2.jsonl": S1_TURN2,
    "s2_tool_call.jsonl": [*NEW, U, "message:assistant:toolUse", TOOL, A],
    "s3_json_then_rpc_then_json.jsonl": [*NEW, U, A, U, A, U, A],
    "s4_cached_tokens.jsonl": [*NEW, U, A],
    "s5_auto_compaction_then_resume.jsonl": [*S1_TURN2, U, A, "compaction", U, A],
    "s6_http400_error.jsonl": [*NEW, U, ERR],
    "s7_http500_retries_then_resume.jsonl": [*NEW, U, ERR, ERR, ERR, ERR, U, A],
    "s8_sigkill_midturn.jsonl": [*S1_TURN2, U],
    "edge/b_empty.before.jsonl": [],
    "edge/b_empty.after2runs.jsonl": [S, *NEW, U, A, U, A],
    "edge/c_garbage_first.before.jsonl": ["invalid", *S1_TURN2[1:]],
    "edge/c_garbage_first.after.jsonl": [S, *NEW, U, A],
    "edge/c2_no_header.before.jsonl": S1_TURN2[1:],
    "edge/c2_no_header.after.jsonl": [S, *NEW, U, A],
    "edge/d_torn_last.before.jsonl": [*S1_TURN2[:-1], "invalid"],
    "edge/d_torn_last.after1run.jsonl": [*S1_TURN2[:-1], "invalid", A],
    "edge/d_torn_last.after2runs.jsonl": [*S1_TURN2[:-1], "invalid", A, TL, U, A],
    "edge/d2_no_trailing_newline.before.jsonl": S1_TURN2,
    "edge/d2_no_trailing_newline.after.jsonl": [*S1_TURN2[:-1], "invalid", A],
    "edge/e_header_only.before.jsonl": [S],
    "edge/e_header_only.after.jsonl": [S, *NEW, U, A],
}
UNTERMINATED = {"edge/d_torn_last.before.jsonl", "edge/d2_no_trailing_newline.before.jsonl"}


def test_the_only_samples_folder_is_the_pinned_pis() -> None:
    folders = sorted(path.name for path in ROOT.iterdir() if path.is_dir())
    assert folders == [f"pi-{pinned_version()}"], (
        f"{ROOT} holds {folders}, but e2e/pi/package.json pins pi {pinned_version()}: run `make transcripts`")


def test_every_file_the_generator_writes_is_committed() -> None:
    on_disk = sorted(str(path.relative_to(SAMPLES)) for path in SAMPLES.rglob("*") if path.is_file())
    assert on_disk == sorted(WRITTEN)
    tracked = subprocess.run(["git", "ls-files", "-z", "--", str(SAMPLES.relative_to(REPO))], cwd=REPO,
                             capture_output=True, check=True).stdout.decode().split("\0")
    assert sorted(str(Path(name).relative_to(SAMPLES.relative_to(REPO))) for name in tracked if name) == sorted(
        WRITTEN), "generated but not committed"


def test_the_files_were_written_by_the_pinned_pi() -> None:
    context = json.loads((SAMPLES / CONTEXT).read_text())
    assert context["pi"] == pinned_version(), "the version of the pi that ran, recorded by the generator"
    assert sorted(context["files"]) == sorted(FILES)
    assert (SAMPLES / README).read_text().startswith(f"# pi {pinned_version()} session files")


@pytest.mark.parametrize("name", FILES)
def test_each_sample_has_the_shape_of_its_recipe(name: str) -> None:
    data = (SAMPLES / name).read_bytes()
    assert structure(data) == SHAPES[name]
    assert data.endswith(b"\n") == (bool(data) and name not in UNTERMINATED)
    header_lines = [line for line in data.split(b"\n") if line.startswith(b'{"type":"session"')]
    assert all(json.loads(line)["cwd"] == "/workspace" for line in header_lines)


def test_structure_tells_the_shapes_apart() -> None:
    """The comparison below is only as good as ``structure``: it must see what distinguishes the samples."""
    shapes = [tuple(structure((SAMPLES / name).read_bytes())) for name in FILES]
    different = {"s1_after_turn1.jsonl", "s2_tool_call.jsonl", "s6_http400_error.jsonl",
                 "edge/d_torn_last.before.jsonl", "edge/e_header_only.after.jsonl", "edge/b_empty.after2runs.jsonl"}
    assert len({shape for name, shape in zip(FILES, shapes, strict=True) if name in different}) == len(different)
    assert structure(b'{"type":"message","message":{"role":"user"}}\n{"type":"x"}{"type":"y"}\n[1]\n') == [
        U, "invalid", "invalid"]


@pytest.mark.pi  # runs the real pi (make pi): not in `make unit`
def test_a_fresh_run_of_the_generator_matches_the_committed_files(tmp_path: Path) -> None:
    try:
        pi_binary()
    except (FileNotFoundError, RuntimeError) as e:
        pytest.fail(str(e))
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    generate(fresh)
    assert sorted(str(p.relative_to(fresh)) for p in fresh.rglob("*") if p.is_file()) == sorted(WRITTEN)
    for name in FILES:
        new, old = (fresh / name).read_bytes(), (SAMPLES / name).read_bytes()
        assert structure(new) == structure(old), f"{name}: pi {pinned_version()} now writes it differently"
        assert (new.count(b"\n"), new.endswith(b"\n")) == (old.count(b"\n"), old.endswith(b"\n")), name
    new_context = json.loads((fresh / CONTEXT).read_text())
    old_context = json.loads((SAMPLES / CONTEXT).read_text())
    assert new_context["pi"] == old_context["pi"]
    for name in FILES:  # pi measures the same files, and reports an unknown context (null) for the same ones
        assert measured(new_context["files"][name]) == measured(old_context["files"][name]), name


def measured(usage: dict[str, object] | None) -> bool:
    return usage is not None and usage.get("tokens") is not None
