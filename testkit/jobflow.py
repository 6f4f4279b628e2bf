"""The dispatcher driven by hand against ``MemoryApi``: no threads of its own, a clock the test moves.

The ``api`` and ``clock`` fixtures (``tests/conftest.py``) are ``api_with_trigger()`` and ``Clock()``;
``controller`` builds a ``Dispatcher`` whose slots read the test's clock, ``pump`` runs one pass of its pump
loop and fails instead of hanging, ``new_job`` creates a Job as the receiver would, ``phase`` and
``condition`` read a Job's status.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.crds import GROUP, VERSION
from pidispatch.jobflow.dispatcher import Dispatcher
from pidispatch.jobflow.slots import Slots
from pidispatch.settings import OperatorSettings, Settings
from testkit.memoryapi import JOBS, NS, TRIGGERS, MemoryApi

PUMP_DEADLINE = 10.0  # seconds the pump may take to return; before the fixes it never did


class Clock:
    """The slots' clock, moved by the test: back-offs end when the test says so, not after a sleep."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def api_with_trigger() -> MemoryApi:
    """A ``MemoryApi`` holding the Trigger ``fix`` (``@pi`` in an issue comment), as the ``api`` fixture gives."""
    api = MemoryApi()
    api.create(TRIGGERS, {"metadata": {"name": "fix"}, "spec": {
        "on": {"event": "issue_comment.created", "phrase": "@pi"},
        "run": {"model": "fake/fake-model", "piVersion": "0.73.1"}}})
    return api


def controller(api: MemoryApi, clock: Clock, tmp_path: Path, capacity: int = 1) -> Dispatcher:
    settings = OperatorSettings(store=Settings(), staging_dir=str(tmp_path), max_concurrent_jobs=capacity)
    c = Dispatcher(settings, api, NS)  # type: ignore[arg-type]
    c.slots = Slots(capacity, clock=clock)
    return c


def new_job(api: MemoryApi, name: str, issue: int = 1) -> dict[str, Any]:
    return api.create(JOBS, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job", "metadata": {"name": name},
                             "spec": {"trigger": "fix", "forge": "github", "repository": "acme/widgets",
                                      "comment": "@pi go", "issue": issue}})


def pump(c: Dispatcher) -> None:
    """One pump pass, as the pump thread runs it; fails (instead of hanging) if it never returns."""
    worker = threading.Thread(target=c._pump_once, daemon=True)
    worker.start()
    worker.join(PUMP_DEADLINE)
    if worker.is_alive():
        c._stop.set()
        worker.join(PUMP_DEADLINE)
        pytest.fail("the pump kept retrying one Job and never returned to the queue")


def phase(api: MemoryApi, name: str) -> str | None:
    return (api.job(name).get("status") or {}).get("phase")


def condition(api: MemoryApi, name: str, type_: str) -> dict[str, Any]:
    return next(c for c in api.job(name)["status"]["conditions"] if c["type"] == type_)


def job_names(api: MemoryApi) -> list[str]:
    """The names of the Jobs in ``api``, sorted (what a cron turn created)."""
    return sorted(o["metadata"]["name"] for p, o in api.objects.items() if p.startswith(JOBS + "/"))


def schedule_record(api: MemoryApi, trigger: str = "nightly") -> dict[str, Any]:
    """Trigger ``trigger``'s ``status.schedule``, as the cron turns wrote it."""
    return api.get(f"{TRIGGERS}/{trigger}")["status"]["schedule"]
