"""A Job's staging directory and journal on a real filesystem, and the crash points that test restarts."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pidispatch.store.staging import HOST, MAX_RECORD, PROMOTION, SESSION, JobDir, file_digest, staged_uids

UID = "0b6a2c3e-5f7d-4e8a-9c1b-2d3e4f5a6b7c"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "jobs"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory an attacker would like the operator to write into."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "victim").write_text("untouched")
    return path


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.parametrize("uid", ["", "a/b", "/etc", ".", "..", "../x"],
                         ids=["empty", "slash", "absolute", "dot", "dot-dot", "traversal"])
def test_invalid_uid_is_rejected(root: Path, uid: str) -> None:
    with pytest.raises(ValueError):
        JobDir(str(root), uid)


# ---- prepare ------------------------------------------------------------------------------------------

def test_prepare_creates_private_directories(root: Path) -> None:
    old = os.umask(0)  # the modes come from the code, not from a friendly umask
    try:
        jd = JobDir(str(root), UID)
        assert not jd.exists()
        jd.prepare()
    finally:
        os.umask(old)
    assert jd.path == str(root / UID) and jd.session == str(root / UID / SESSION)
    assert (mode(root / UID), mode(root / UID / SESSION)) == (0o700, 0o700)
    assert jd.exists()


def test_prepare_is_idempotent_and_keeps_what_is_there(root: Path) -> None:
    jd = JobDir(str(root), UID)
    assert jd.prepare() is True, "the first call made the Job's directory: nothing in it to clear"
    (Path(jd.session) / "current.jsonl").write_bytes(b"staged")
    assert jd.prepare() is False, "a re-stage finds what an earlier stage left"
    assert (Path(jd.session) / "current.jsonl").read_bytes() == b"staged"


PLANTS = {
    "symlink to a directory at the job dir": (UID, lambda p, o: p.symlink_to(o, target_is_directory=True)),
    "dangling symlink at the job dir": (UID, lambda p, o: p.symlink_to(o / "missing")),
    "regular file at the job dir": (UID, lambda p, o: p.write_text("x")),
    "symlink to a directory at the session dir": (f"{UID}/{SESSION}",
                                                  lambda p, o: p.symlink_to(o, target_is_directory=True)),
    "dangling symlink at the session dir": (f"{UID}/{SESSION}", lambda p, o: p.symlink_to(o / "missing")),
    "regular file at the session dir": (f"{UID}/{SESSION}", lambda p, o: p.write_text("x")),
}


@pytest.mark.parametrize("plant", list(PLANTS))
def test_prepare_refuses_a_planted_path(root: Path, outside: Path, plant: str) -> None:
    where, make = PLANTS[plant]
    if "/" in where:
        (root / UID).mkdir(mode=0o700)
    make(root / where, outside)
    with pytest.raises(NotADirectoryError):
        JobDir(str(root), UID).prepare()
    assert sorted(p.name for p in outside.iterdir()) == ["victim"], "nothing was created through the link"


# ---- journal write / read -----------------------------------------------------------------------------

@pytest.fixture
def jd(root: Path) -> JobDir:
    jd = JobDir(str(root), UID)
    jd.prepare()
    return jd


RECORD = {"key": "7a5b816df58a1c8345ced1323e654287", "mounted": True, "resume": False, "reason": "absent",
          "bytes": None, "note": "ünïcode ✓", "nested": {"list": [1, 2.5, None]}}


def test_write_read_round_trip(jd: JobDir) -> None:
    jd.write(HOST, RECORD)
    assert jd.read(HOST) == RECORD
    path = Path(jd.path) / HOST
    assert stat.S_ISREG(os.lstat(path).st_mode) and mode(path) == 0o600
    assert sorted(os.listdir(jd.path)) == [HOST, SESSION], "no temp file is left behind"


def test_a_record_written_without_sync_is_read_by_another_process(jd: JobDir) -> None:
    # What a restarted operator relies on after a kill (not a power cut) before the sync: the page cache.
    jd.write(HOST, RECORD, durable=False)
    code = ("import json, sys; from pidispatch.store.staging import JobDir; "
            f"print(json.dumps(JobDir({str(Path(jd.path).parent)!r}, {UID!r}).read({HOST!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == RECORD
    assert sorted(os.listdir(jd.path)) == [HOST, SESSION], "no temp file is left behind"


def test_sync_keeps_the_record_and_needs_one(jd: JobDir) -> None:
    with pytest.raises(FileNotFoundError):
        jd.sync(HOST)  # nothing written: a sync must not invent a record
    jd.write(HOST, RECORD, durable=False)
    jd.sync(HOST)
    assert jd.read(HOST) == RECORD


def test_sync_does_not_follow_a_planted_symlink(jd: JobDir, outside: Path) -> None:
    (Path(jd.path) / HOST).symlink_to(outside / "victim")
    with pytest.raises(OSError):
        jd.sync(HOST)
    assert (outside / "victim").read_text() == "untouched"


def test_write_replaces_the_previous_record(jd: JobDir) -> None:
    jd.write(PROMOTION, {"state": "started", "size": 3})
    jd.write(PROMOTION, {"state": "done", "promoted": True})
    assert jd.read(PROMOTION) == {"state": "done", "promoted": True}


@pytest.mark.parametrize("name", [f".{HOST}.incoming", HOST], ids=["at the temp name", "at the record name"])
def test_write_replaces_a_planted_symlink_without_following_it(jd: JobDir, outside: Path, name: str) -> None:
    (Path(jd.path) / name).symlink_to(outside / "victim")
    jd.write(HOST, RECORD)
    assert (outside / "victim").read_text() == "untouched"
    assert stat.S_ISREG(os.lstat(Path(jd.path) / HOST).st_mode)
    assert jd.read(HOST) == RECORD
    assert not os.path.lexists(Path(jd.path) / f".{HOST}.incoming")


def test_write_clears_a_directory_planted_at_the_temp_name(jd: JobDir) -> None:
    planted = Path(jd.path) / f".{HOST}.incoming"
    planted.mkdir()
    (planted / "inner").write_text("x")
    jd.write(HOST, RECORD)
    assert jd.read(HOST) == RECORD and not os.path.lexists(planted)


def test_write_refuses_a_job_dir_that_is_a_symlink(root: Path, outside: Path) -> None:
    (root / UID).symlink_to(outside, target_is_directory=True)
    with pytest.raises(OSError):
        JobDir(str(root), UID).write(HOST, RECORD)
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]


def write_raw(jd: JobDir, name: str, data: bytes) -> None:
    (Path(jd.path) / name).write_bytes(data)


@pytest.mark.parametrize(("data", "expected"), [
    (b'{"state": "done"}', {"state": "done"}),
    (b"[]", None), (b'"done"', None), (b"1", None), (b"null", None), (b"", None), (b"{not json", None),
    (b"\xff\xfe", None),
], ids=["object", "array", "string", "number", "null", "empty", "not json", "not utf-8"])
def test_read_accepts_only_a_json_object(jd: JobDir, data: bytes, expected: dict | None) -> None:
    write_raw(jd, HOST, data)
    assert jd.read(HOST) == expected


def sized_object(size: int) -> bytes:
    base = b'{"pad":""}'
    data = b'{"pad":"' + b"x" * (size - len(base)) + b'"}'
    assert len(data) == size
    return data


@pytest.mark.parametrize(("size", "accepted"), [(MAX_RECORD, True), (MAX_RECORD + 1, False), (4 * MAX_RECORD, False)],
                         ids=["at the limit", "one byte over", "far over"])
def test_read_refuses_an_oversized_record(jd: JobDir, size: int, accepted: bool) -> None:
    write_raw(jd, HOST, sized_object(size))
    assert (jd.read(HOST) is not None) is accepted


def test_read_refuses_a_symlink(jd: JobDir, outside: Path) -> None:
    (outside / "record.json").write_text('{"state": "done", "promoted": true}')
    (Path(jd.path) / PROMOTION).symlink_to(outside / "record.json")
    assert jd.read(PROMOTION) is None


def test_read_of_a_missing_record_or_a_directory(jd: JobDir) -> None:
    assert jd.read(HOST) is None
    assert jd.read(SESSION) is None


# ---- remove, exists, staged_uids ----------------------------------------------------------------------

def test_remove_deletes_the_whole_job_dir(jd: JobDir) -> None:
    jd.write(HOST, RECORD)
    (Path(jd.session) / "current.jsonl").write_bytes(b"x")
    jd.remove()
    assert not jd.exists() and not os.path.lexists(jd.path)
    jd.remove()  # a second removal (a restart) is harmless


def test_remove_of_a_symlinked_job_dir_spares_the_target(root: Path, outside: Path) -> None:
    (root / UID).symlink_to(outside, target_is_directory=True)
    jd = JobDir(str(root), UID)
    assert not jd.exists()
    jd.remove()
    assert (outside / "victim").read_text() == "untouched"


def test_staged_uids_lists_real_directories_only(root: Path, outside: Path) -> None:
    for uid in ("uid-b", "uid-a"):
        JobDir(str(root), uid).prepare()
    (root / "a-file").write_text("x")
    (root / "link-to-dir").symlink_to(outside, target_is_directory=True)
    (root / "dangling").symlink_to(outside / "missing")
    assert sorted(staged_uids(str(root))) == ["uid-a", "uid-b"]


def test_staged_uids_of_a_missing_root(tmp_path: Path) -> None:
    assert staged_uids(str(tmp_path / "never-made")) == []


# ---- file_digest ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [b"", b"one line\n", os.urandom(3 << 20)], ids=["empty", "small", "3 MiB"])
def test_file_digest_of_a_regular_file(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "current.jsonl"
    path.write_bytes(data)
    assert file_digest(str(path)) == (len(data), hashlib.sha256(data).hexdigest())


def test_file_digest_refuses_links_directories_and_missing_files(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"data")
    (tmp_path / "link").symlink_to(target)
    assert file_digest(str(tmp_path / "link")) is None
    assert file_digest(str(tmp_path)) is None
    assert file_digest(str(tmp_path / "missing")) is None


CAP_CASES = [
    ("no cap", 0, 3000, True),
    ("under the cap", 4096, 3000, True),
    ("exactly the cap", 3000, 3000, True),
    ("one byte over the cap", 2999, 3000, False),
]


@pytest.mark.parametrize(("cap", "size", "digested"), [c[1:] for c in CAP_CASES], ids=[c[0] for c in CAP_CASES])
def test_file_digest_keeps_the_store_size_cap(tmp_path: Path, cap: int, size: int, digested: bool) -> None:
    data = os.urandom(size)
    path = tmp_path / "current.jsonl"
    path.write_bytes(data)
    expected = (size, hashlib.sha256(data).hexdigest()) if digested else None
    assert file_digest(str(path), cap) == expected


def test_file_digest_does_not_read_a_file_over_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The staged file is agent-written: a 64 GiB (sparse) file over the cap is refused before any byte is read."""
    path = tmp_path / "current.jsonl"
    with open(path, "wb") as f:
        f.truncate(64 << 30)
    read = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: read.append(n) or real_read(fd, n))
    assert file_digest(str(path), 1 << 20) is None
    assert read == [], "the oversized file was read"


def test_file_digest_of_a_fifo_returns_without_blocking(tmp_path: Path) -> None:
    """The staged ``current.jsonl`` lives in the Pod's ``/session``: the agent can swap a FIFO in.

    Digesting it before promotion must not hang the operator's completion step waiting for a writer.
    """
    fifo = tmp_path / "current.jsonl"
    os.mkfifo(fifo)
    code = f"from pidispatch.store.staging import file_digest; print(file_digest({str(fifo)!r}))"
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=10,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail("file_digest on a FIFO still blocked after 10 s (it opened the FIFO waiting for a writer)")
    assert (result.returncode, result.stdout) == (0, "None\n"), result.stderr


# ---- failpoints -----------------------------------------------------------------------------------------

FAILPOINT_CODE = "from pidispatch import failpoints; failpoints.at('staged'); print('alive')"


def run_failpoint(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PIDISPATCH_FAILPOINT")}
    return subprocess.run([sys.executable, "-c", FAILPOINT_CODE], capture_output=True, text=True,
                          env={**base, **env}, timeout=60, stdin=subprocess.DEVNULL)


def test_failpoint_kills_once_then_lets_the_restart_run_on(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    env = {"PIDISPATCH_FAILPOINT": "staged", "PIDISPATCH_FAILPOINT_MARK": str(mark)}
    first = run_failpoint(env)
    assert (first.returncode, first.stdout) == (-signal.SIGKILL, ""), first.stderr
    assert mark.exists()
    second = run_failpoint(env)
    assert (second.returncode, second.stdout) == (0, "alive\n"), second.stderr


def test_failpoint_without_a_mark_kills_every_time() -> None:
    for _ in range(2):
        assert run_failpoint({"PIDISPATCH_FAILPOINT": "staged"}).returncode == -signal.SIGKILL


@pytest.mark.parametrize("setting", ["pod-created", "promote:staged", "Staged", "staged ", ""],
                         ids=["another step", "a store step", "wrong case", "trailing space", "empty"])
def test_failpoint_for_another_step_does_nothing(tmp_path: Path, setting: str) -> None:
    mark = tmp_path / "mark"
    result = run_failpoint({"PIDISPATCH_FAILPOINT": setting, "PIDISPATCH_FAILPOINT_MARK": str(mark)})
    assert (result.returncode, result.stdout) == (0, "alive\n"), result.stderr
    assert not mark.exists(), "the one-shot mark is spent only by the step it names"


def test_failpoint_unset_does_nothing() -> None:
    result = run_failpoint({})
    assert (result.returncode, result.stdout) == (0, "alive\n"), result.stderr
