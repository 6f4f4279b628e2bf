"""The store on a filesystem that fills up or turns read-only (docs/store-contract.md#promotion-steps, steps
7–9, and docs/store-contract.md#resolve).

Each case runs in a child process inside a private mount namespace (``unshare --mount
--propagation private``) that mounts a small tmpfs as the store root, so nothing leaks to the host
(the staging directory stays on the test's own filesystem, as the staging PVC does). The child runs
the real ``promote``/``resolve`` and prints one JSON document: every promotion result, what the key
directory held after each step, and every store event. The parent asserts on it.

This file is also the child: ``python tests/store/test_reliability_store_faults.py <case> <workdir>``.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

STORE_SIZE = "256k"
PAGE = 4096


# --------------------------------------------------------------------------------------------------
# The child: runs inside the private mount namespace, as root.


def _child(case: str, workdir: Path) -> dict[str, Any]:
    from pidispatch.store.promote import promote
    from pidispatch.store.resolve import resolve
    from testkit.store import KEY, MODEL, NOW_MS, PI, Store, sample

    events: list[dict[str, Any]] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            fields = getattr(record, "fields", None)
            if fields:
                events.append(dict(fields))

    log = logging.getLogger("pidispatch.events")
    log.addHandler(Collect())
    log.setLevel(logging.INFO)

    root = workdir / "store"
    options = f"size={STORE_SIZE},mode=0700" + (",nr_inodes=16" if case == "inodes-exhausted" else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(root)], check=True)
    store = Store(root, workdir / "staging")
    filler = root / "filler"
    old = sample("s1_after_turn1.jsonl")
    # A real transcript grown to 64 KiB exactly (16 pages), bigger than what the full store has left.
    body = sample("s1_after_turn2.jsonl")
    new = (body * (64 * 1024 // len(body) + 1))[: 64 * 1024 - 1] + b"\n"
    out: dict[str, Any] = {"case": case, "old_bytes": len(old), "new_bytes": len(new), "steps": []}

    def avail() -> int:
        st = os.statvfs(root)
        return st.f_bavail * st.f_frsize

    def leave_free(nbytes: int) -> None:
        """Write a filler so exactly ``nbytes`` stay free (``0``: fill until ENOSPC)."""
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            want = avail() - nbytes
            while want > 0:
                want -= os.write(fd, b"\0" * min(want, 1 << 16))
            while nbytes == 0:
                os.write(fd, b"\0" * PAGE)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)
        assert avail() == nbytes, (avail(), nbytes)

    def free_all() -> None:
        filler.unlink(missing_ok=True)
        for extra in root.glob("inode-*"):
            extra.unlink()

    def state() -> dict[str, Any]:
        key_dir = store.key_dir()
        entries = {}
        if key_dir.is_dir():
            for entry in sorted(key_dir.iterdir()):
                entries[entry.name] = entry.lstat().st_size
        transcript = key_dir / "current.jsonl"
        content = transcript.read_bytes() if transcript.exists() else None
        return {
            "entries": entries,
            "transcript": "old" if content == old else "new" if content == new else repr(content)[:80],
            "venue": (key_dir / "venue").read_text() if (key_dir / "venue").exists() else None,
            "pi_version": (key_dir / "pi-version").read_text() if (key_dir / "pi-version").exists() else None,
            "resume_chain": (key_dir / "resume-chain").read_text() if (key_dir / "resume-chain").exists() else None,
            "free_bytes": avail(),
        }

    def do_promote(label: str, key: str = KEY, clock: float = NOW_MS, action: Any = None) -> None:
        events.clear()
        stage = store.staged_job(new)
        reached: list[str] = []

        class Trace:
            def at(self, step: str) -> None:
                reached.append(step)
                if action is not None:
                    action(step)

        result = promote(
            store.settings,
            key,
            str(stage),
            host_resume=True,
            pi_version=PI,
            model=MODEL,
            context=(1000, 200000),
            clock=lambda: clock,
            seams=Trace(),
        )
        out["steps"].append(
            {
                "step": label,
                "promoted": result.promoted,
                "reason": result.reason,
                "events": list(events),
                "reached": reached,
                **state(),
            }
        )

    def do_resolve(label: str, key: str = KEY) -> None:
        events.clear()
        stage = store.stage()
        res = resolve(store.settings, key, str(stage), pi_version=PI, model=MODEL, clock=NOW_MS)
        staged = stage / "current.jsonl"
        content = staged.read_bytes() if staged.exists() else None
        out["steps"].append(
            {
                "step": label,
                "resume": None if res is None else res.verdict.resume,
                "reason": None if res is None else res.verdict.reason,
                "staged": "old"
                if content == old
                else "new"
                if content == new
                else ("empty" if content == b"" else repr(content)[:80]),
                "events": list(events),
            }
        )

    store.configure(ttl_days=0)  # the new transcript's mtime is the real clock's, the gates run at NOW_MS
    # No population stamp: these promotions carry none (the store commands), and removing a stamp would free the
    # tmpfs block the full-disk cases need to stay taken.
    store.put(old, venue="kubernetes", pi_version=PI, chain="2", population=None)

    if case == "copy-fills":
        leave_free(16 * 1024)  # room for a quarter of the new transcript
        do_promote("promote-while-full")
        do_resolve("resolve-after-failure")
        free_all()
        do_promote("promote-after-space-freed")
        do_resolve("resolve-after-recovery")
    elif case == "sentinel-fills":
        leave_free(len(new))  # the temp copy fits to the page; the (pending) sentinel does not
        do_promote("promote-while-full")
        do_resolve("resolve-after-failure")
        free_all()
        do_promote("promote-after-space-freed")
        do_resolve("resolve-after-recovery")
    elif case == "short-copy-then-space-freed":
        # The copy hits ENOSPC part-way (a short write), then space comes back before the sentinel
        # (another promotion or the reaper removed a file): the copy must still count as failed.
        leave_free(16 * 1024)
        do_promote("promote-short-copy", action=lambda step: step == "temp-written" and free_all())
        do_resolve("resolve-after-failure")
    elif case == "sidecars-fill-after-swap":
        do_promote("promote-filling-after-swap", action=lambda step: step == "swapped" and leave_free(0))
        do_resolve("resolve-after-partial-stamps")
        free_all()
        do_promote("promote-after-space-freed")
        do_resolve("resolve-after-recovery")
    elif case == "inodes-exhausted":
        try:
            for i in range(64):
                (root / f"inode-{i}").touch()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        do_promote("promote-without-inodes")
        do_resolve("resolve-after-failure")
        free_all()
        do_promote("promote-after-inodes-freed")
        do_resolve("resolve-after-recovery")
    elif case == "read-only-before-promotion":
        subprocess.run(["mount", "-o", "remount,ro", str(root)], check=True)
        do_promote("promote-on-read-only-store")
        do_promote("promote-new-key-on-read-only-store", key="0" * 32)
        do_resolve("resolve-on-read-only-store")
        do_resolve("resolve-new-key-on-read-only-store", key="0" * 32)
        out["new_key_dir_exists"] = (root / ("0" * 32)).exists()
        subprocess.run(["mount", "-o", "remount,rw", str(root)], check=True)
        do_promote("promote-after-remount-rw")
        do_resolve("resolve-after-recovery")
    elif case == "read-only-while-locked":

        def remount_while_locked(step: str) -> None:
            if step == "locked":
                done = subprocess.run(["mount", "-o", "remount,ro", str(root)], capture_output=True, text=True)
                out["remount_rc"] = done.returncode
                out["remount_stderr"] = done.stderr.strip()

        do_promote("promote-remounted-while-locked", action=remount_while_locked)
        do_resolve("resolve-after")
    else:
        raise SystemExit(f"unknown case {case}")
    return out


# --------------------------------------------------------------------------------------------------
# The parent: pytest.


def _run_case(case: str, tmp_path: Path) -> dict[str, Any]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace with a tmpfs store")
    (tmp_path / "store").mkdir(mode=0o700)
    # A module run from the repository root, so the child imports ``testkit`` as the tests do.
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-m",
         "tests.store.test_reliability_store_faults",
         case, str(tmp_path)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"child for {case} failed:\n{done.stdout}\n{done.stderr}"
    assert not any((tmp_path / "store").iterdir()), "the tmpfs leaked out of the private mount namespace"
    return json.loads(done.stdout)


def _step(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(step for step in result["steps"] if step["step"] == name)


def _temps(entries: dict[str, int]) -> list[str]:
    return [name for name in entries if name.startswith("current.jsonl.") and name.endswith(".incoming")]


def _events(step: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [e for e in step["events"] if e["event"] == name]


@pytest.mark.parametrize(
    "case",
    ["copy-fills", "sentinel-fills", "inodes-exhausted"],
    ids=["store-fills-during-the-temp-copy", "store-fills-at-the-pending-sentinel", "store-runs-out-of-inodes"],
)
def test_a_full_store_fails_the_promotion_and_keeps_the_previous_transcript(case: str, tmp_path: Path) -> None:
    result = _run_case(case, tmp_path)
    failed, after, retried, recovered = result["steps"]
    assert (failed["promoted"], failed["reason"]) == (False, "promote-failed")
    assert "No space left on device" in _events(failed, "session_store_failed")[0]["reason"]
    # Nothing swapped: the old transcript, its stamps (no (pending) sentinel) and no lock or temp.
    assert failed["transcript"] == "old"
    assert (failed["venue"], failed["pi_version"], failed["resume_chain"]) == ("kubernetes", "0.73.1", "2")
    assert "lock" not in failed["entries"]
    assert _temps(failed["entries"]) == []
    # The previous transcript still resumes, whole.
    assert (after["resume"], after["reason"], after["staged"]) == (True, "resumed", "old")
    # Whatever the failure left (a 0-byte fixed-name sidecar temp at most) does not stop the next one.
    assert (retried["promoted"], retried["reason"], retried["transcript"]) == (True, "promoted", "new")
    assert retried["resume_chain"] == "3" and retried["venue"] == "kubernetes"
    assert [name for name in retried["entries"] if name.endswith(".incoming") or name == "lock"] == []
    assert (recovered["resume"], recovered["staged"]) == (True, "new")


def test_a_short_copy_is_a_failed_copy_even_when_space_comes_back_before_the_swap(tmp_path: Path) -> None:
    """Promotion step 6, the copy (docs/store-contract.md#promotion-steps): whatever goes wrong during the copy
    is ``promote-failed`` and nothing is swapped.

    ENOSPC part-way through a write is first a *short* write (the bytes that fit), then the error.
    If space is freed before the sentinel is written, a copier that ignores the short count renames a
    truncated temp over the previous transcript.
    """
    result = _run_case("short-copy-then-space-freed", tmp_path)
    failed, after = result["steps"]
    assert (failed["promoted"], failed["reason"]) == (False, "promote-failed"), failed
    assert failed["transcript"] == "old", f"the previous transcript was replaced by {failed['transcript']}"
    assert failed["venue"] == "kubernetes"
    assert "lock" not in failed["entries"] and _temps(failed["entries"]) == []
    assert (after["resume"], after["staged"]) == (True, "old")


def test_sidecar_writes_failing_after_the_swap_still_count_as_promoted(tmp_path: Path) -> None:
    result = _run_case("sidecars-fill-after-swap", tmp_path)
    landed, after, retried, recovered = result["steps"]
    # The transcript landed, so the promotion counts (docs/store-contract.md#promotion-steps); each failed stamp is
    # logged, not fatal.
    assert (landed["promoted"], landed["reason"], landed["transcript"]) == (True, "promoted", "new")
    failed_files = {e["file"] for e in _events(landed, "session_sidecar_failed")}
    assert {"pi-version", "resume-chain", "venue"} <= failed_files
    assert not _events(landed, "session_store_failed")
    # The venue stamp failed, so (pending) stays: nothing resumes the new transcript under old stamps.
    assert landed["venue"] == "(pending)"
    assert "lock" not in landed["entries"] and _temps(landed["entries"]) == []
    assert (after["resume"], after["reason"], after["staged"]) == (False, "venue-changed", "empty")
    assert (retried["promoted"], retried["venue"]) == (True, "kubernetes")
    assert [name for name in retried["entries"] if name.endswith(".incoming") or name == "lock"] == []
    assert (recovered["resume"], recovered["staged"]) == (True, "new")


def test_a_read_only_store_refuses_promotion_and_still_resumes(tmp_path: Path) -> None:
    result = _run_case("read-only-before-promotion", tmp_path)
    existing = _step(result, "promote-on-read-only-store")
    assert (existing["promoted"], existing["reason"], existing["transcript"]) == (False, "promote-failed", "old")
    assert "Read-only file system" in _events(existing, "session_store_failed")[0]["reason"]
    assert "lock" not in existing["entries"] and _temps(existing["entries"]) == []
    fresh = _step(result, "promote-new-key-on-read-only-store")
    assert (fresh["promoted"], fresh["reason"]) == (False, "promote-failed")
    assert result["new_key_dir_exists"] is False
    # The read path writes nothing to the store: resume works read-only; a new key is a cold start.
    read = _step(result, "resolve-on-read-only-store")
    assert (read["resume"], read["reason"], read["staged"]) == (True, "resumed", "old")
    assert not _events(read, "session_store_failed")
    cold = _step(result, "resolve-new-key-on-read-only-store")
    assert (cold["resume"], cold["reason"], cold["staged"]) == (False, "absent", "empty")
    again = _step(result, "promote-after-remount-rw")
    assert (again["promoted"], again["transcript"], again["resume_chain"]) == (True, "new", "3")
    assert _step(result, "resolve-after-recovery")["staged"] == "new"


def test_a_read_only_remount_cannot_happen_while_a_promotion_holds_the_lock(tmp_path: Path) -> None:
    """The lock descriptor is open for writing, so the kernel refuses ``remount,ro`` (EBUSY) until the
    promotion ends; the promotion completes normally. (A filesystem's own ``errors=remount-ro`` is
    the one way to lose writes mid-promotion; the cases above cover each write failing.)"""
    result = _run_case("read-only-while-locked", tmp_path)
    assert result["remount_rc"] != 0 and "busy" in result["remount_stderr"].lower(), result
    promoted, read = result["steps"]
    assert (promoted["promoted"], promoted["transcript"], promoted["venue"]) == (True, "new", "kubernetes")
    assert (read["resume"], read["staged"]) == (True, "new")


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], Path(sys.argv[2]))))
