"""A list+watch of one resource on :class:`~pidispatch.kubeapi.Api`, delivered to a callback: client-go's
reflector, for the one resource the operator watches itself (the Jobs, ``handlers/jobwatch.py``).

* **List**, then **watch from the list's resourceVersion**, with bookmarks (``allowWatchBookmarks``): an
  idle watch still moves its resourceVersion forward, so resuming it after a reconnect seldom finds the
  version compacted.
* A watch that ends (the server's ``timeoutSeconds``, a dropped connection, an apiserver restart) is
  **resumed from the last resourceVersion seen**: no event is lost and none is repeated.
* **410 Gone** (the version was compacted away, as an ERROR event or as the answer) → **relist**. Every
  listed object is delivered as a ``None`` event (as kopf delivers listed objects), and an object known
  before and missing from the new list is delivered as ``DELETED``: a deletion that happened while the
  watch could not see it is not missed.
* Any other failure: **back off** (doubling from ``backoff_seconds`` up to ``max_backoff_seconds``) and
  resume; the back-off resets once a watch delivers an event.

Delivery is synchronous, in the watch's thread: the callback decides whether to hand work on. A callback
that raises is logged and the watch goes on with the next event (a bug in one object's handling must not
leave the operator deaf to the others, nor make it list again and again).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pidispatch.kubeapi import Api, ApiError

log = logging.getLogger("pidispatch.watch")

Deliver = Callable[[str | None, dict[str, Any]], None]


class Gone(Exception):
    """The watch's resourceVersion is too old (410): only a new list can go on."""


class ListWatch:
    """Lists and watches ``path`` (a collection, e.g. ``/apis/g/v/namespaces/ns/jobs``) until :meth:`stop`.

    ``deliver(type, body)``: ``type`` is ``ADDED``/``MODIFIED``/``DELETED`` from the watch, ``None`` for a
    listed object. ``server_timeout``: the ``timeoutSeconds`` asked of the apiserver for each watch;
    ``client_timeout``: the longest silence tolerated between two chunks (bookmarks come about every
    minute), after which the connection is taken as dead and the watch resumed.
    """

    def __init__(self, api: Api, path: str, deliver: Deliver, *, server_timeout: int = 300,
                 client_timeout: float = 330.0, backoff_seconds: float = 0.5, max_backoff_seconds: float = 30.0,
                 name: str = "watch") -> None:
        self.api, self.path, self.deliver, self.name = api, path, deliver, name
        self.server_timeout, self.client_timeout = server_timeout, client_timeout
        self.backoff_seconds, self.max_backoff_seconds = backoff_seconds, max_backoff_seconds
        self.stopping = threading.Event()
        self.listed = threading.Event()  # set once the first list has been delivered
        self.resource_version = ""
        self._known: dict[str, dict[str, Any]] = {}  # key → the identity of each object seen alive
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Run in a daemon thread of its own."""
        self._thread = threading.Thread(target=self.run, name=f"pidispatch-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Deliver nothing more. An open watch ends at its next chunk (a bookmark, at worst about a minute)."""
        self.stopping.set()
        if timeout > 0 and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def run(self) -> None:
        """List, then watch, until stopped; each failure backs off, a 410 relists."""
        delay = self.backoff_seconds
        need_list = True
        while not self.stopping.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                if self.watch_once():
                    delay = self.backoff_seconds  # it delivered: the next failure starts the back-off anew
                    continue
                # Ended having delivered nothing, not even a bookmark: back off, or a server that closes
                # every watch at once would be asked again in a tight loop.
            except Gone:
                log.info("%s: resourceVersion %s is gone (410); listing again", self.name, self.resource_version)
                need_list = True
                continue
            except ApiError as exc:
                log.warning("%s: %s; retrying in %.1f s", self.name, exc, delay)
            except Exception:  # not an ApiError: a bug here must not end the thread, or the operator goes deaf
                log.exception("%s: the watch failed; retrying in %.1f s", self.name, delay)
            if self.stopping.wait(delay):
                return
            delay = min(delay * 2, self.max_backoff_seconds)

    def _deliver(self, kind: str | None, body: dict[str, Any]) -> None:
        try:
            self.deliver(kind, body)
        except Exception:
            log.exception("%s: handling a %s event of %s failed", self.name, kind or "listed", _key(body))

    def relist(self) -> None:
        """List every object (pages of 500), deliver each, and deliver ``DELETED`` for any known object not
        in the list. The watch then resumes from the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        version = ""
        query: dict[str, Any] = {"limit": 500}
        while True:
            page = self.api.request("GET", self.path, params=query)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            version = version or meta.get("resourceVersion", "")
            if not meta.get("continue"):
                break
            query["continue"] = meta["continue"]
        seen = {_key(item) for item in items}
        gone = [identity for key, identity in self._known.items() if key not in seen]
        self._known = {_key(item): _identity(item) for item in items}
        self.resource_version = version
        for identity in gone:
            if not self.stopping.is_set():
                self._deliver("DELETED", identity)
        for item in items:
            if not self.stopping.is_set():
                self._deliver(None, item)
        self.listed.set()

    def watch_once(self) -> bool:
        """One watch request from the current resourceVersion, delivered until it ends. True when it
        delivered at least one event or bookmark. Raises :class:`Gone` on 410."""
        params = {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": self.resource_version,
                  "timeoutSeconds": self.server_timeout}
        moved = False
        try:
            for event in self.api.stream(self.path, params=params, read_timeout=self.client_timeout):
                if self.stopping.is_set():
                    return moved
                kind, body = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if body.get("code") == 410:
                        raise Gone()
                    raise ApiError(int(body.get("code") or 0), "WATCH", self.path, str(body.get("message", "")))
                version = (body.get("metadata") or {}).get("resourceVersion")
                if version:
                    self.resource_version = version
                moved = True
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    self._known.pop(_key(body), None)
                else:
                    self._known[_key(body)] = _identity(body)
                self._deliver(kind, body)
        except ApiError as exc:
            if exc.status == 410:
                raise Gone() from None
            raise
        return moved


def _key(body: dict[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _identity(body: dict[str, Any]) -> dict[str, Any]:
    """What a ``DELETED`` found by a relist carries: the object's kind and identity, not its last body
    (a watch of many objects keeps a few fields each, not every body)."""
    meta = body.get("metadata") or {}
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels") if k in meta}}
