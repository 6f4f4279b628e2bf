"""The GitHub App asks for exactly the events the receiver acts on, with the permissions those events need.

The events come from the receiver's own dispatch table (``receiver/delivery.py`` ``HANDLED``: a Trigger's events
and the closing ones that retire a conversation, ``issues.closed`` and ``pull_request.closed``), not from a list
kept here: an event the receiver starts handling fails these tests until the App manifest
(``examples/github-app.json``), the quickstart's registration link (docs/quickstart.md) and the chart's NOTES
subscribe to it. An App that missed ``pull_request`` never delivered ``pull_request.closed``, and a merged pull
request's conversation was never retired.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from pidispatch.api.vocabulary import TRIGGER_EVENTS
from pidispatch.receiver.closed import CLOSING
from pidispatch.receiver.delivery import HANDLED, event_problem
from pidispatch.settings import DEFAULT_JOB_TOKEN_PERMISSIONS

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = json.loads((ROOT / "examples" / "github-app.json").read_text())

# GitHub's rules, not ours: the repository permission an App needs (read at least) to be sent each event
# (docs.github.com, "Webhook events and payloads", each event's "Availability"), and the event's name where a
# webhook's events are picked by hand (the repository's "Let me select individual events" list).
PERMISSION = {"issues": "issues", "issue_comment": "issues", "pull_request": "pull_requests",
              "pull_request_review": "pull_requests", "pull_request_review_comment": "pull_requests"}
PICKED_AS = {"issues": "Issues", "issue_comment": "Issue comments", "pull_request": "Pull requests",
             "pull_request_review": "Pull request reviews",
             "pull_request_review_comment": "Pull request review comments"}


def test_the_receiver_handles_every_triggers_event_and_the_closing_ones() -> None:
    """The table the tests below derive from is the one the receiver dispatches by: it accepts each event of it
    and ignores any other."""
    handled = {f"{event}.{action}" for event, actions in HANDLED.items() for action in actions}
    assert handled == {e for e in TRIGGER_EVENTS if e != "cron"} | {f"{e}.{a}" for e, a in CLOSING.items()}
    assert {"issues.closed", "pull_request.closed"} <= handled
    assert all(event_problem(event) is None for event in HANDLED)
    assert event_problem("push") is not None and event_problem("ping") is not None


def test_the_app_manifest_subscribes_to_every_event_the_receiver_handles() -> None:
    assert set(MANIFEST["default_events"]) == set(HANDLED), \
        "every event the receiver acts on is delivered, and no other (it would be ignored)"


def test_the_app_manifest_grants_what_its_events_and_the_job_tokens_need() -> None:
    assert set(PERMISSION) == set(HANDLED), "a permission is known for each handled event"
    granted = MANIFEST["default_permissions"]
    assert all(granted.get(PERMISSION[event]) in ("read", "write") for event in HANDLED), granted
    assert granted == dict(DEFAULT_JOB_TOKEN_PERMISSIONS), \
        "the App grants what a job token asks for, no more (the operator's own token asks for less)"
    assert MANIFEST["public"] is False and MANIFEST["hook_attributes"]["url"].endswith("/webhook")


def test_the_quickstart_link_registers_the_app_of_the_manifest() -> None:
    [link] = [line.strip() for line in (ROOT / "docs" / "quickstart.md").read_text().splitlines()
              if line.strip().startswith("https://github.com/settings/apps/new?")]
    query = parse_qs(urlsplit(link).query)
    assert sorted(query.pop("events[]")) == sorted(MANIFEST["default_events"])
    permissions = {name: query.pop(name)[0] for name in list(query) if name in MANIFEST["default_permissions"]}
    assert permissions == MANIFEST["default_permissions"]
    assert query.pop("webhook_url") == ["https://$WEBHOOK_HOST/webhook"]
    assert query == {"name": [MANIFEST["name"]], "url": [MANIFEST["url"]], "public": ["false"],
                     "webhook_active": ["true"]}


def test_the_charts_notes_name_every_event_to_pick_for_the_webhook() -> None:
    """With a plain webhook (not the App), the person picks the events by hand: NOTES names each."""
    assert set(PICKED_AS) == set(HANDLED), "a name to pick is known for each handled event"
    notes = " ".join((ROOT / "charts" / "pi-dispatch" / "templates" / "NOTES.txt").read_text().split())
    assert [event for event, shown in PICKED_AS.items() if f'"{shown}"' not in notes] == []
