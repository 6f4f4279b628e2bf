"""Every webhook payload kept in ``tests/data/webhooks`` is one GitHub sends: its event's schema in
``@octokit/webhooks-schemas`` takes it (docs/github-contracts.md). The file name is ``<event>[.<action>].json``;
the action must be the payload's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.webhook_contract import check_payload

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "webhooks"
FILES = sorted(EXAMPLES.glob("*.json"))


def test_there_are_examples_to_check() -> None:
    assert len(FILES) >= 5, FILES


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_each_example_is_a_payload_github_sends(path: Path) -> None:
    event, _, action = path.name.removesuffix(".json").partition(".")
    payload = json.loads(path.read_text())
    assert payload.get("action") == (action or None), f"{path.name} names the action {action!r}"
    assert check_payload(event, payload) == (f"{event}${action}" if action else f"{event}$event")
