from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from storekit import Store  # noqa: E402


@pytest.fixture(scope="module")
def app_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A test GitHub App's key: (its private key PEM file for the operator, its public key for the fake API)."""
    from e2e.fakegithub_api import generate_app_key

    pem, public = generate_app_key()
    path = tmp_path_factory.mktemp("app") / "private-key.pem"
    path.write_bytes(pem)
    return path, public


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
