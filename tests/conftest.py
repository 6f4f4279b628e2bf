from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testkit.chart import helm_runner
from testkit.contract_fixture import github_contracts_kept  # noqa: F401 - autouse: docs/github-contracts.md
from testkit.jobflow import Clock, api_with_trigger
from testkit.memoryapi import MemoryApi
from testkit.store import Store


@pytest.fixture(scope="module")
def app_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A test GitHub App's key: (its private key PEM file for the operator, its public key for the fake API)."""
    from testkit.fakegithub_api import generate_app_key

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


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., subprocess.CompletedProcess[str]]:
    """The pinned helm (``testkit.chart``), with its own empty home; a missing helm fails the test."""
    try:
        return helm_runner(tmp_path_factory.mktemp("helm-home"))
    except FileNotFoundError as e:
        pytest.fail(str(e))


@pytest.fixture
def api() -> MemoryApi:
    """The in-memory apiserver the job flow runs against, with the Trigger ``fix`` (``testkit.jobflow``)."""
    return api_with_trigger()


@pytest.fixture
def clock() -> Clock:
    """The slots' clock, moved by the test."""
    return Clock()
