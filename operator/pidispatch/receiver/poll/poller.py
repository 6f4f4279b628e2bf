"""One pass of the poller: each served repository's listings read, each new event taken in through the webhook's
own path (``receiver/intake.py``), the cursor moved past what is done.

Three listings per repository (docs/triggers.md#polling-instead-of-a-webhook says why these):

* ``GET /repos/{owner}/{repo}/issues/comments?sort=updated&direction=asc&since=…``: issue and pull-request
  conversation comments (``issue_comment.created``);
* ``GET /repos/{owner}/{repo}/pulls/comments?sort=updated&direction=asc&since=…``: review comments
  (``pull_request_review_comment.created``), each with its pull request read (``GET …/pulls/{n}``);
* ``GET /repos/{owner}/{repo}/issues/events``: newest first; labels added (``issues.labeled``), issues and pull
  requests closed (``issues.closed``, ``pull_request.closed``).

Each first page is asked with the ``ETag`` of the last answer to the same URL; ``304`` (no rate limit spent)
means nothing new. A comment is new when it was created at or after the stream's ``since`` and its id is not among
those taken in; ``since`` follows the newest ``updated_at`` read, :data:`LAG` behind it (the forge may show a
comment a moment after its timestamp), so an edited old comment (a new ``updated_at``, an old ``created_at``)
starts nothing, as its ``edited`` webhook would not. An issue event is new when its id is above the highest taken
in. A stream read for the first time starts at now: nothing from before the poller's first pass is taken in.

Events are taken in oldest first; an event the API server could not be asked about stops its stream there (the
cursor stays before it, the next pass tries it again), and the cursor is written after each stream's events, so a
crash between a Job's creation and the write reads the event again, and its Job's name (:attr:`Polled.digest`)
makes the second create a 409, a duplicate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pidispatch.api.views import TriggerView
from pidispatch.events import emit
from pidispatch.receiver.cluster import Cluster, ClusterUnavailable
from pidispatch.receiver.intake import Outcome, intake
from pidispatch.receiver.metrics import ReceiverMetrics
from pidispatch.receiver.poll import ratelimit, translate
from pidispatch.receiver.poll.cursor import (
    COMMENTS,
    ISSUE_EVENTS,
    REVIEW_COMMENTS,
    CursorMoved,
    Cursors,
    CursorStore,
    CursorUnavailable,
    Stream,
    as_json,
)
from pidispatch.receiver.poll.forge import Answer, ForgeReader

LAG = timedelta(seconds=60)
PER_PAGE = 100
MAX_PAGES = 10  # per listing per pass: a backlog larger than this is read over the next passes
_GLOB = set("*?[]!")
EVERY = "*/* (a Trigger that names no repository)"
_ISO = "%Y-%m-%dT%H:%M:%SZ"


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(_ISO)


def _parse(stamp: Any) -> datetime | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.strptime(stamp, _ISO).replace(tzinfo=UTC)
    except ValueError:
        return None


def pollable(triggers: list[TriggerView]) -> tuple[list[str], list[str]]:
    """The repositories the Triggers name exactly (polled), and their patterns (which name no repository to read:
    a pattern's repositories need the webhook, or an exact entry beside the pattern; a Trigger that names none is
    :data:`EVERY`). A Trigger being deleted, one whose spec does not parse, and a cron Trigger read nothing."""
    exact: dict[str, str] = {}
    patterns: list[str] = []
    for trigger in triggers:
        if trigger.meta.deletion or trigger.spec is None or trigger.spec.on.event == "cron":
            continue
        if not trigger.named:
            patterns.append(EVERY)  # serves every repository, and names none to read
        for entry in trigger.named:
            if _GLOB & set(entry):
                patterns.append(entry)
            else:
                exact.setdefault(entry.casefold(), entry)
    return sorted(exact.values(), key=str.casefold), sorted(set(patterns))


@dataclass
class PassResult:
    """What one pass did: the wait before the next, the Jobs created, the events taken in by outcome."""

    wait: ratelimit.Wait
    created: list[str] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    not_modified: int = 0


class _Stop(Exception):
    """The pass ends here (a refusal, a fault, a cursor written by another poller)."""

    def __init__(self, wait: ratelimit.Wait) -> None:
        self.wait = wait


class Poller:
    """Reads the forge with ``reader``, keeps its place in ``store``, creates Jobs in ``cluster``."""

    def __init__(self, reader: ForgeReader, cluster: Cluster, store: CursorStore, *, interval: float,
                 auth_source: str | None = None, ignore_logins: Collection[str] = (),
                 clock: Callable[[], float] = time.time, metrics: ReceiverMetrics | None = None) -> None:
        self.reader = reader
        self.cluster = cluster
        self.store = store
        self.interval = interval
        self.auth_source = auth_source
        self.ignore_logins = frozenset(login.casefold() for login in ignore_logins)
        self.clock = clock
        self.metrics = metrics or ReceiverMetrics()
        self.failures = 0
        self._answers: list[Answer] = []
        self._result = PassResult(ratelimit.Wait(interval, "the poll interval"))

    # -- the pass ----------------------------------------------------------------------------------------------
    async def pass_once(self) -> PassResult:
        """One pass over every repository the Triggers name; the result says how long to wait before the next."""
        self._answers = []
        self._result = result = PassResult(ratelimit.Wait(self.interval, "the poll interval"))
        try:
            try:
                triggers = await self.cluster.triggers()
            except ClusterUnavailable as exc:
                raise _Stop(ratelimit.after(0, {}, now=self.clock(), interval=self.interval,
                                            failures=self.failures)) from exc
            repositories, patterns = pollable([TriggerView.of(body) for body in triggers])  # read once, here
            try:
                cursors = await asyncio.to_thread(self.store.load)
            except CursorUnavailable as exc:
                emit("receiver_poll_cursor", result="unavailable", why=str(exc))
                raise _Stop(ratelimit.Wait(ratelimit.FAULT_MIN, str(exc))) from None
            saved = as_json(cursors)
            for repository in repositories:
                for read in (self._comments, self._review_comments, self._issue_events):
                    await read(repository, cursors)
                    if as_json(cursors) == saved:
                        continue  # nothing moved (a 304): no write to the apiserver
                    try:
                        await asyncio.to_thread(self.store.save, cursors)
                    except CursorMoved as exc:
                        emit("receiver_poll_cursor", result="moved", why=str(exc))
                        raise _Stop(ratelimit.Wait(1.0, str(exc))) from None
                    except CursorUnavailable as exc:
                        emit("receiver_poll_cursor", result="unavailable", why=str(exc))
                        raise _Stop(ratelimit.Wait(ratelimit.FAULT_MIN, str(exc))) from None
                    saved = as_json(cursors)
            result.wait = self._paced(len(repositories))
            self.failures = 0
            if patterns:
                emit("receiver_poll_patterns", patterns=patterns[:8],
                     why="a pattern names no repository to read; name them in on.repository or on.repositories")
        except _Stop as stop:
            result.wait = stop.wait
            self.failures += 1
        self.metrics.poll_wait.set(result.wait.seconds)
        emit("receiver_poll_pass", jobs=result.created, outcomes=result.outcomes, requests=result.requests,
             notModified=result.not_modified, waitSeconds=round(result.wait.seconds, 1), why=result.wait.why)
        return result

    def _paced(self, repositories: int) -> ratelimit.Wait:
        """The longest wait any answer of the pass asks for (the interval at least)."""
        wait = ratelimit.Wait(self.interval, "the poll interval")
        for answer in self._answers:
            each = ratelimit.after(answer.status, answer.headers, now=self.clock(), interval=self.interval,
                                   requests_per_pass=max(3 * repositories, 1))
            if each.seconds > wait.seconds:
                wait = each
        return wait

    async def _get(self, endpoint: str, path_or_url: str, repository: str, *, params: dict[str, Any] | None = None,
                   etag: str | None = None, missing: bool = False) -> Answer:
        """A GET; a refusal, a fault or a spent budget ends the pass with the wait it asks for (``missing``: a 404
        is an answer, not a refusal)."""
        answer = await asyncio.to_thread(self.reader.get, endpoint, path_or_url, repository, params=params, etag=etag)
        self._result.requests += 1
        if answer.status == 304:
            self._result.not_modified += 1
        self._answers.append(answer)
        wait = ratelimit.after(answer.status, answer.headers, now=self.clock(), interval=self.interval,
                               failures=self.failures)
        refused = answer.status == 0 or answer.status >= 400 or wait.limited
        self.metrics.poll_requests.labels(
            result="not_modified" if answer.status == 304 else "limited" if wait.limited else
            "failed" if refused and not (missing and answer.status == 404) else "ok").inc()
        if missing and answer.status == 404:
            return answer
        if refused:
            emit("receiver_poll_forge", status=answer.status, endpoint=endpoint, why=answer.why or wait.why)
            raise _Stop(wait)
        return answer

    async def _pages(self, endpoint: str, path: str, repository: str, params: dict[str, Any], stream: Stream,
                     *, until: Callable[[list[dict[str, Any]]], bool] | None = None
                     ) -> tuple[list[dict[str, Any]] | None, bool]:
        """The listing's items (``None``: 304, nothing new), whether it was read whole; the first page is asked
        with the ETag remembered for this URL, and a whole one-page answer's ETag remembered."""
        url = self.reader.url(path, params)
        first = await self._get(endpoint, url, repository,
                                etag=stream.etag if stream.etag_for == url else None)
        if first.status == 304:
            return None, True
        items = [i for i in first.body if isinstance(i, dict)] if isinstance(first.body, list) else []
        next_url, pages = first.next_url, 1
        while next_url is not None and pages < MAX_PAGES and not (until and until(items)):
            more = await self._get(endpoint, next_url, repository)
            items += [i for i in more.body if isinstance(i, dict)] if isinstance(more.body, list) else []
            next_url, pages = more.next_url, pages + 1
        if first.etag and first.next_url is None:
            stream.etag, stream.etag_for = first.etag, url
        else:
            stream.etag, stream.etag_for = None, None
        return items, next_url is None

    async def _take(self, polled: translate.Polled) -> Outcome:
        outcome = await intake(self.cluster, polled.event, polled.payload, polled.delivery, polled.digest,
                               auth_source=self.auth_source, ignore_logins=self.ignore_logins)
        self._result.outcomes[outcome.kind.value] = self._result.outcomes.get(outcome.kind.value, 0) + 1
        self._result.created += outcome.jobs
        self.metrics.poll_events.labels(result=outcome.kind.value).inc()
        self.metrics.jobs_created.inc(len(outcome.jobs))
        emit("receiver_poll_event", delivery=polled.delivery, githubEvent=polled.event, result=outcome.kind.value,
             why=outcome.why or None, jobs=outcome.jobs, duplicates=outcome.duplicates, key=outcome.key)
        return outcome

    # -- the listings ------------------------------------------------------------------------------------------
    async def _comments(self, repository: str, cursors: Cursors) -> None:
        await self._comment_stream(repository, cursors, COMMENTS, "/repos/{owner}/{repo}/issues/comments",
                                   f"/repos/{repository}/issues/comments")

    async def _review_comments(self, repository: str, cursors: Cursors) -> None:
        await self._comment_stream(repository, cursors, REVIEW_COMMENTS, "/repos/{owner}/{repo}/pulls/comments",
                                   f"/repos/{repository}/pulls/comments")

    async def _comment_stream(self, repository: str, cursors: Cursors, name: str, endpoint: str, path: str) -> None:
        stream = cursors.stream(repository, name)
        if stream is None or _parse(stream.since) is None:
            stream = Stream(since=iso(datetime.fromtimestamp(self.clock(), UTC)))
        cursors.put(repository, name, stream)
        since = _parse(stream.since)
        assert since is not None
        params = {"sort": "updated", "direction": "asc", "since": stream.since, "per_page": PER_PAGE}
        items, _ = await self._pages(endpoint, path, repository, params, stream)
        if items is None:
            return
        seen = set(stream.seen)
        newest = since
        stopped = False
        pulls: dict[int, dict[str, Any] | None] = {}
        for item in items:
            created, updated, ident = _parse(item.get("created_at")), _parse(item.get("updated_at")), item.get("id")
            if created is None or updated is None or not isinstance(ident, int):
                continue
            if created >= since and ident not in seen:
                polled = await self._polled_comment(name, item, repository, pulls)
                if polled is not None and not (await self._take(polled)).done:
                    # ``since`` stays where it is (this comment's created_at may be older than the newest
                    # updated_at read): the next pass reads it again; those taken in are in ``seen``.
                    stopped = True
                    break
                stream.seen.append(ident)
                seen.add(ident)
            newest = max(newest, updated)
        moved = max(since, newest - LAG)
        if stopped:
            stream.etag = stream.etag_for = None
        elif moved > since:
            stream.since = iso(moved)
            stream.etag = stream.etag_for = None
        cursors.put(repository, name, stream)

    async def _polled_comment(self, name: str, item: dict[str, Any], repository: str,
                              pulls: dict[int, dict[str, Any] | None]) -> translate.Polled | None:
        if name == COMMENTS:
            return translate.comment(item)
        number = translate.number_of(item.get("pull_request_url"))
        if number is None:
            return None
        pull = await self._pull(repository, number, pulls)
        return translate.review_comment(item, pull) if pull is not None else None

    async def _pull(self, repository: str, number: int, pulls: dict[int, dict[str, Any] | None]
                    ) -> dict[str, Any] | None:
        """The pull request as the forge says it now (once per pass per number); a 404 (deleted) is ``None``."""
        if number not in pulls:
            answer = await self._get("/repos/{owner}/{repo}/pulls/{n}", f"/repos/{repository}/pulls/{number}",
                                     repository, missing=True)
            pulls[number] = answer.body if answer.status == 200 and isinstance(answer.body, dict) else None
        return pulls[number]

    async def _issue_events(self, repository: str, cursors: Cursors) -> None:
        stream = cursors.stream(repository, ISSUE_EVENTS) or Stream()
        cursors.put(repository, ISSUE_EVENTS, stream)
        after = stream.after

        def reached(items: list[dict[str, Any]]) -> bool:
            return after is None or any(isinstance(i.get("id"), int) and i["id"] <= after for i in items)

        items, _ = await self._pages("/repos/{owner}/{repo}/issues/events", f"/repos/{repository}/issues/events",
                                     repository, {"per_page": PER_PAGE}, stream, until=reached)
        if items is None:
            return
        ids = [i["id"] for i in items if isinstance(i.get("id"), int) and not isinstance(i.get("id"), bool)]
        if after is None:  # the first read: start from the newest, take nothing from before
            stream.after = max(ids, default=0)
            return
        pulls: dict[int, dict[str, Any] | None] = {}
        for event in sorted((i for i in items if isinstance(i.get("id"), int) and i["id"] > after),
                            key=lambda i: i["id"]):
            number = translate.pull_number(event)
            pull = None
            if number is not None and event.get("event") == "closed":
                pull = await self._pull(repository, number, pulls)
            polled = translate.issue_event(event, pull)
            if polled is not None and not (await self._take(polled)).done:
                # The next pass reads this event again: not a 304 on the ETag of a page not wholly taken in.
                stream.etag = stream.etag_for = None
                break
            stream.after = event["id"]
