"""The sidecar read rule (docs/store-contract.md#sidecars): lstat, regular file, 1..4096 bytes, canonical integers."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pidispatch.store import sidecars


def make(kind: str) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        target = path.parent / "target"
        target.write_text("kubernetes")
        {
            "regular": lambda: path.write_text("kubernetes\n"),
            "symlink to a regular file": lambda: path.symlink_to(target),
            "dangling symlink": lambda: path.symlink_to(path.parent / "missing"),
            "directory": lambda: path.mkdir(),
            "FIFO": lambda: os.mkfifo(path),
            "empty": lambda: path.write_bytes(b""),
            "4096 bytes": lambda: path.write_bytes(b"k" * 4096),
            "4097 bytes": lambda: path.write_bytes(b"k" * 4097),
            "invalid UTF-8": lambda: path.write_bytes(b"\xff\xfe"),
            "whitespace only": lambda: path.write_bytes(b" \n"),
        }[kind]()
    return build


READS = [
    ("regular", "kubernetes"),
    ("symlink to a regular file", None),
    ("dangling symlink", None),
    ("directory", None),
    ("FIFO", None),
    ("empty", None),
    ("4096 bytes", "k" * 4096),
    ("4097 bytes", None),
    ("invalid UTF-8", None),
    ("whitespace only", None),
]


@pytest.mark.parametrize(("kind", "expected"), READS, ids=[r[0] for r in READS])
def test_read_rule(tmp_path: Path, kind: str, expected: str | None) -> None:
    make(kind)(tmp_path / "pi-version")
    assert sidecars.read_sidecar(str(tmp_path), "pi-version") == expected


VENUES = [
    ("missing reads local", None, "local"),
    ("regular", "regular", "kubernetes"),
    ("dangling symlink is not missing", "dangling symlink", None),
    ("directory", "directory", None),
    ("empty", "empty", None),
    ("oversized", "4097 bytes", None),
]


@pytest.mark.parametrize(("kind", "expected"), [v[1:] for v in VENUES], ids=[v[0] for v in VENUES])
def test_venue_read(tmp_path: Path, kind: str | None, expected: str | None) -> None:
    if kind is not None:
        make(kind)(tmp_path / "venue")
    assert sidecars.read_venue(str(tmp_path)) == expected


def test_venue_behind_a_file_is_not_missing(tmp_path: Path) -> None:
    """ENOTDIR (the key "directory" is a file) is not ENOENT: it must not read as local."""
    (tmp_path / "key").write_text("x")
    assert sidecars.read_venue(str(tmp_path / "key")) is None


CHAINS = [("3", 3), ("1", 1), ("0", 0), ("-1", 0), ("07", 0), ("3.5", 0), ("1e3", 0), ("+3", 0), ("0x10", 0),
          ("garbage", 0), (None, 0), ("9007199254740991", 9007199254740991), ("9007199254740992", 0),
          (" 4 ", 4), ("٣", 0)]


@pytest.mark.parametrize(("text", "value"), CHAINS, ids=[repr(c[0]) for c in CHAINS])
def test_chain_round_trip(text: str | None, value: int) -> None:
    assert sidecars.parse_chain(text.strip() if text else text) == value


CONTEXTS = [
    ("160000 200000", (160000, 200000, None)),
    ("1 2 Fake/Model", (1, 2, "fake/model")),
    ("0 1", (0, 1, None)),
    ("5 0", None),
    ("-1 5", None),
    ("05 10", None),
    ("1.5 10", None),
    ("1", None),
    ("1 2 3 4", None),
    ("a b", None),
    (None, None),
]


@pytest.mark.parametrize(("text", "reading"), CONTEXTS, ids=[repr(c[0]) for c in CONTEXTS])
def test_context_parse(text: str | None, reading) -> None:
    assert sidecars.parse_context(text) == reading


@pytest.mark.parametrize(("model", "expected"), [
    ("Fake/Fake-Model", "fake/fake-model"), ("anthropic/claude-3.5:beta", "anthropic/claude-3.5:beta"),
    ("", None), ("-bad/start", None), ("has space/x", None), ("x" * 129, None), (None, None),
])
def test_model_id(model: str | None, expected: str | None) -> None:
    assert sidecars.normalise_model_id(model) == expected
