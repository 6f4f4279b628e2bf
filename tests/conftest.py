from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from storekit import Store  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> Store:
    root = tmp_path / "store"
    root.mkdir(mode=0o700)
    return Store(root, tmp_path / "staging")


@pytest.fixture
def events(caplog: pytest.LogCaptureFixture):
    """A callable returning the structured events logged so far in the test, as dicts."""
    caplog.set_level(logging.INFO, logger="pidispatch.events")
    return lambda: [r.fields for r in caplog.records if hasattr(r, "fields")]
