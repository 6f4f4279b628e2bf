"""The poller's cursor in its ConfigMap (``receiver/poll/cursor.py``) on the in-memory apiserver: it survives a
new poller (a restart, a leader change: whoever reads it next), two pollers cannot both move it (the second write
fails on its resourceVersion), and poll mode's settings."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from pidispatch.receiver.poll.cursor import COMMENTS, ConfigMapCursors, CursorMoved, Cursors, Stream
from pidispatch.receiver.poll.forge import ForgeReader
from pidispatch.receiver.poll.poller import Poller
from pidispatch.receiver.settings import ReceiverSettings
from pidispatch.settings import ConfigError
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.memoryapi import NS, MemoryApi
from testkit.receiver import MemoryCluster, trigger

REPO = "acme/widgets"
PAT = "ghp_cursor"


@pytest.fixture
def forge() -> Iterator[FakeGitHubAPI]:
    with FakeGitHubAPI(pats={PAT}) as fake:
        yield fake


def test_the_cursor_round_trips_through_its_configmap() -> None:
    api = MemoryApi()
    store = ConfigMapCursors(api, NS, "pi-poll-cursor")
    cursors = store.load()
    assert cursors.version is None and cursors.repositories == {}
    cursors.put("Acme/Widgets.js", COMMENTS, Stream(since="2026-12-07T10:00:00Z", seen=[1, 2], etag='W/"x"',
                                                   etag_for="https://api/x"))
    store.save(cursors)
    again = store.load()
    assert again.stream("acme/widgets.js", COMMENTS) == Stream(since="2026-12-07T10:00:00Z", seen=[1, 2],
                                                                etag='W/"x"', etag_for="https://api/x")
    stored = api.get(f"/api/v1/namespaces/{NS}/configmaps/pi-poll-cursor")
    assert list(stored["data"]) == ["acme.widgets.js"]


def test_two_pollers_cannot_both_move_the_cursor() -> None:
    api = MemoryApi()
    store = ConfigMapCursors(api, NS, "pi-poll-cursor")
    store.save(Cursors())
    first, second = store.load(), store.load()
    first.put(REPO, COMMENTS, Stream(since="2026-12-07T10:00:00Z"))
    store.save(first)
    second.put(REPO, COMMENTS, Stream(since="2026-12-07T09:00:00Z"))
    with pytest.raises(CursorMoved):
        store.save(second)
    assert store.load().stream(REPO, COMMENTS) == Stream(since="2026-12-07T10:00:00Z")


def test_a_new_poller_on_the_configmap_takes_nothing_in_twice(forge: FakeGitHubAPI) -> None:
    """A restart or another replica taking over: whoever polls next reads the same ConfigMap."""
    api = MemoryApi()
    cluster = MemoryCluster([trigger("fix", "issue_comment.created", phrase="@pi", repository=REPO)])

    def poller() -> Poller:
        return Poller(ForgeReader(forge.url, lambda repository: f"token {PAT}"), cluster,
                      ConfigMapCursors(api, NS, "pi-poll-cursor"), interval=30)

    asyncio.run(poller().pass_once())
    forge.add_issue_comment(REPO, 1, "@pi once")
    assert len(asyncio.run(poller().pass_once()).created) == 1
    assert asyncio.run(poller().pass_once()).created == []
    assert len(cluster.jobs) == 1


def test_poll_mode_needs_no_webhook_secret_and_reads_the_forge_settings(tmp_path: object) -> None:
    settings = ReceiverSettings.from_env({"PI_DISPATCH_NAMESPACE": "pi", "PI_DISPATCH_RECEIVER_MODE": "poll",
                                          "GITHUB_AUTH_SOURCE": "pat", "GITHUB_TOKEN_FILE": "/etc/token/token",
                                          "PI_DISPATCH_RECEIVER_POLL_INTERVAL_SECONDS": "120",
                                          "PI_DISPATCH_RECEIVER_POLL_CURSOR": "pi-poll-cursor"})
    assert settings.polling and settings.poll_interval == 120 and settings.poll_cursor == "pi-poll-cursor"
    assert settings.github is not None and settings.github.token_file == "/etc/token/token"
    webhook = ReceiverSettings.from_env({"PI_DISPATCH_NAMESPACE": "pi", "GITHUB_WEBHOOK_SECRET": "s"})
    assert not webhook.polling and webhook.github is None
    with pytest.raises(ConfigError, match="PI_DISPATCH_RECEIVER_POLL_INTERVAL_SECONDS"):
        ReceiverSettings.from_env({"PI_DISPATCH_NAMESPACE": "pi", "PI_DISPATCH_RECEIVER_MODE": "poll",
                                   "PI_DISPATCH_RECEIVER_POLL_INTERVAL_SECONDS": "5"})
    with pytest.raises(ConfigError, match="GITHUB_WEBHOOK_SECRET"):
        ReceiverSettings.from_env({"PI_DISPATCH_NAMESPACE": "pi"})
