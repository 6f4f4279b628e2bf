"""``store inspect``: a read-only view that reads nothing through a link and says so when it cannot list."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pidispatch.store.inspect import inspect_key, inspect_store
from testkit.store import KEY, NOW_MS, PI, Store

OTHER = "b" * 32


def test_a_key_path_that_is_a_link_shows_nothing_from_the_link_target(store: Store, tmp_path: Path) -> None:
    """A link planted at a key would otherwise show another directory's sidecars as that key's."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name, text in (("pi-version", PI), ("resume-chain", "42"), ("venue", "kubernetes"),
                       ("context", "10 100"), ("lock", ""), ("current.jsonl", "{}\n")):
        (elsewhere / name).write_text(text)
    store.key_dir(OTHER).symlink_to(elsewhere)

    row = inspect_key(store.settings, OTHER, clock=NOW_MS)

    assert row["directory"] is False and row["next"] == "key-not-a-directory"
    assert {k: row[k] for k in ("bytes", "idleMs", "venue", "piVersion", "resumeChain", "context", "lock")} == {
        "bytes": None, "idleMs": None, "venue": None, "piVersion": None, "resumeChain": None,
        "context": None, "lock": None}


def test_every_row_has_the_same_fields_keys_and_strays_alike(store: Store) -> None:
    store.put(chain="2")
    (store.root / "stray.txt").write_text("x")
    (store.root / "lost+found").mkdir()
    rows = {row["key"]: row for row in inspect_store(store.settings, clock=NOW_MS)}
    assert set(rows) == {KEY, "stray.txt", "lost+found"}
    assert len({tuple(row) for row in rows.values()}) == 1, "one shape for every row"
    assert rows[KEY]["resumeChain"] == 2 and rows[KEY]["next"] == "resumed"
    assert (rows["stray.txt"]["directory"], rows["stray.txt"]["next"]) == (False, "key-not-a-directory")
    assert (rows["lost+found"]["directory"], rows["lost+found"]["next"]) == (True, "absent")


def test_a_store_that_cannot_be_listed_raises_before_any_row(store: Store, tmp_path: Path) -> None:
    store.configure(sessions_dir=str(tmp_path / "not-mounted"))
    with pytest.raises(FileNotFoundError):
        inspect_store(store.settings)


def test_the_command_says_so_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_SESSION")}
    env["PI_SESSIONS_DIR"] = str(tmp_path / "not-mounted")
    for args in (["store", "inspect"], ["store", "inspect", "--json"]):
        result = subprocess.run([sys.executable, "-m", "pidispatch", *args], capture_output=True, text=True,
                                env=env, stdin=subprocess.DEVNULL, timeout=60)
        assert (result.returncode, result.stdout) == (1, "")
        assert result.stderr == (f"pidispatch: cannot list the session store {tmp_path / 'not-mounted'}: "
                                 "No such file or directory\n")


def test_the_table_shows_a_dash_for_a_stray_chain(store: Store) -> None:
    (store.root / "stray.txt").write_text("x")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_SESSION")}
    env["PI_SESSIONS_DIR"] = str(store.root)
    result = subprocess.run([sys.executable, "-m", "pidispatch", "store", "inspect"], capture_output=True,
                            text=True, env=env, stdin=subprocess.DEVNULL, timeout=60)
    (line,) = [row for row in result.stdout.splitlines() if row.startswith("stray.txt")]
    assert line.split()[1:] == ["-"] * 9 + ["key-not-a-directory"]
    rows = [json.loads(r) for r in subprocess.run(
        [sys.executable, "-m", "pidispatch", "store", "inspect", "--json"], capture_output=True, text=True,
        env=env, stdin=subprocess.DEVNULL, timeout=60).stdout.splitlines()]
    assert rows[0]["resumeChain"] is None
