"""What the poller has already read, per repository and listing, kept in one ConfigMap of the namespace.

Why a ConfigMap and not the Triggers' status: a cursor belongs to a repository's listing, not to a Trigger (one
comment may start the Jobs of several Triggers, and a Trigger may serve many repositories); a Trigger's status has
one writer, the operator (``jobflow/trigger.py``), which the receiver must not contend with; and the receiver's
ServiceAccount then needs one more namespaced object it may read and write, named in its Role, instead of write
access to the Triggers. The ConfigMap lives in the cluster, so the cursor survives the receiver's restarts and a
move to another node, and every replica reads the same one.

Each write carries the ``resourceVersion`` the cursor was read at (a merge patch with the precondition): a second
poller that moved it meanwhile makes this write fail with 409 (:class:`CursorMoved`), and the poller reads it
again. Nothing is lost either way: the cursor is written after the Jobs it covers were created, so a crash in
between reads those events again, and their Jobs' names (``delivery.job_name`` over the event's identity) make the
API server answer 409, a duplicate, never a second Job (docs/triggers.md#polling-instead-of-a-webhook).
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from pidispatch.kubeapi import ApiError, KubeApi

# The listings read per repository (``poller.py``): issue and pull-request comments, pull-request review
# comments, issue events (labels added, issues and pull requests closed).
COMMENTS = "comments"
REVIEW_COMMENTS = "reviewComments"
ISSUE_EVENTS = "issueEvents"
STREAMS = (COMMENTS, REVIEW_COMMENTS, ISSUE_EVENTS)
SEEN_MAX = 2000  # ids kept per listing: more than a window of ``since`` ever holds


@dataclass
class Stream:
    """One listing of one repository. Comments: ``since`` (the ``updated_at`` to read from, kept a little behind
    the newest seen, for the forge's late writes) and ``seen`` (the ids taken in since then). Issue events:
    ``after`` (the highest event id taken in). Both: the last answer's ``ETag`` and the URL it answered."""

    since: str | None = None
    after: int | None = None
    seen: list[int] = field(default_factory=list)
    etag: str | None = None
    etag_for: str | None = None


@dataclass
class Cursors:
    """Every repository's streams (``OWNER/NAME`` → stream name → :class:`Stream`) and the version they were read at."""

    repositories: dict[str, dict[str, Stream]] = field(default_factory=dict)
    version: str | None = None  # the ConfigMap's resourceVersion; None: there is none yet

    def stream(self, repository: str, name: str) -> Stream | None:
        return self.repositories.get(repository.casefold(), {}).get(name)

    def put(self, repository: str, name: str, stream: Stream) -> None:
        stream.seen = stream.seen[-SEEN_MAX:]
        self.repositories.setdefault(repository.casefold(), {})[name] = stream


class CursorMoved(Exception):
    """Another poller wrote the cursor after this one read it (409 on the precondition): read it again."""


class CursorUnavailable(Exception):
    """The API server could not be asked: the pass stops, and the next one starts from the stored cursor."""


class CursorStore(Protocol):
    def load(self) -> Cursors: ...

    def save(self, cursors: Cursors) -> None:
        """Write ``cursors`` if nobody else did since they were read (then ``cursors.version`` is the new one);
        raise :class:`CursorMoved` otherwise."""
        ...


def _key(repository: str) -> str:
    """A ConfigMap data key for ``OWNER/NAME``: an owner has no ``.``, so ``owner.name`` reads back one way."""
    return repository.casefold().replace("/", ".", 1)


def _streams(text: str) -> dict[str, Stream]:
    """The streams of one data value; anything unreadable is dropped (the stream then starts afresh: from now)."""
    try:
        raw = json.loads(text)
    except ValueError:
        return {}
    out: dict[str, Stream] = {}
    for name, value in (raw if isinstance(raw, dict) else {}).items():
        if name not in STREAMS or not isinstance(value, dict):
            continue
        since, after, etag, etag_for = (value.get(k) for k in ("since", "after", "etag", "etag_for"))
        seen = value.get("seen")
        out[name] = Stream(since if isinstance(since, str) else None,
                           after if isinstance(after, int) and not isinstance(after, bool) else None,
                           [i for i in seen if isinstance(i, int)] if isinstance(seen, list) else [],
                           etag if isinstance(etag, str) else None, etag_for if isinstance(etag_for, str) else None)
    return out


class ConfigMapCursors:
    """:class:`CursorStore` on ConfigMap ``name`` of ``namespace`` (the chart's ``<release>-poll-cursor``)."""

    def __init__(self, api: KubeApi, namespace: str, name: str) -> None:
        self._api = api
        self._path = f"/api/v1/namespaces/{namespace}/configmaps"
        self.name = name

    def load(self) -> Cursors:
        try:
            found = self._api.get_or_none(f"{self._path}/{self.name}")
        except ApiError as exc:
            raise CursorUnavailable(f"cannot read ConfigMap {self.name}: {exc.status} {exc.message}") from None
        if found is None:
            return Cursors()
        data = found.get("data") or {}
        repositories: dict[str, dict[str, Stream]] = {}
        for key, text in data.items():
            if "." in key and isinstance(text, str):
                owner, _, name = key.partition(".")
                repositories[f"{owner}/{name}"] = _streams(text)
        return Cursors(repositories, found["metadata"]["resourceVersion"])

    def save(self, cursors: Cursors) -> None:
        data = {_key(repo): json.dumps({name: asdict(s) for name, s in streams.items()}, separators=(",", ":"),
                                       sort_keys=True)
                for repo, streams in cursors.repositories.items()}
        try:
            if cursors.version is None:
                made = self._api.create(self._path, {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": self.name, "labels": {"app.kubernetes.io/component": "receiver-poll"}},
                    "data": data})
            else:
                made = self._api.patch(f"{self._path}/{self.name}",
                                       {"metadata": {"resourceVersion": cursors.version}, "data": data})
        except ApiError as exc:
            if exc.status == 409:
                raise CursorMoved(f"ConfigMap {self.name} was written by another poller") from None
            raise CursorUnavailable(f"cannot write ConfigMap {self.name}: {exc.status} {exc.message}") from None
        cursors.version = made["metadata"]["resourceVersion"]


class MemoryCursors:
    """:class:`CursorStore` in memory, with the same precondition (the unit tests' stand-in)."""

    def __init__(self) -> None:
        self.stored: Cursors | None = None
        self.writes = 0

    def load(self) -> Cursors:
        return copy.deepcopy(self.stored) if self.stored is not None else Cursors()

    def save(self, cursors: Cursors) -> None:
        current = self.stored.version if self.stored is not None else None
        if cursors.version != current:
            raise CursorMoved("the cursor was written by another poller")
        self.writes += 1
        cursors.version = str(self.writes)
        self.stored = copy.deepcopy(cursors)


def as_json(cursors: Cursors) -> dict[str, Any]:
    """The cursors as plain data (a log line, a test's look)."""
    return {repo: {name: asdict(s) for name, s in streams.items()} for repo, streams in cursors.repositories.items()}
