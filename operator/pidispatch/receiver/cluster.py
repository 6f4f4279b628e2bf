"""The receiver's two API calls: list the namespace's Triggers, create a Job. Nothing else.

The JSON client (:mod:`pidispatch.kubeapi`) is synchronous; calls run in a worker thread with a
deadline, so a slow API server costs a 503 (GitHub lets you redeliver) rather than a hung delivery.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from pidispatch.api.vocabulary import GROUP, VERSION
from pidispatch.kubeapi import Api, ApiError

# GitHub gives a delivery 10 s; leave room to answer.
CALL_DEADLINE = 8.0
# Triggers change rarely and deliveries come in bursts: a short cache spares the API server a list per
# delivery. A Trigger applied a moment ago may miss the deliveries of the next TRIGGER_CACHE_SECONDS.
TRIGGER_CACHE_SECONDS = 2.0


class ClusterUnavailable(Exception):
    """The API server could not be reached, timed out, or refused a call (the delivery answers 503)."""


class Cluster(Protocol):
    """What the receiver needs of Kubernetes (the seam the in-process tests fill with an in-memory fake)."""

    async def triggers(self) -> list[dict[str, Any]]:
        """The namespace's Trigger objects."""
        ...

    async def create_job(self, body: dict[str, Any]) -> bool:
        """Create the Job; ``False`` when one of that name already exists (a redelivery)."""
        ...


class ApiCluster:
    """:class:`Cluster` on the real API server, as the receiver's ServiceAccount."""

    def __init__(self, api: Api, namespace: str, cache_seconds: float = TRIGGER_CACHE_SECONDS) -> None:
        self._api = api
        self._base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}"
        self._cache_seconds = cache_seconds
        self._cached: list[dict[str, Any]] | None = None
        self._cached_at = 0.0
        self._lock = asyncio.Lock()

    async def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return await asyncio.wait_for(asyncio.to_thread(fn, *args), CALL_DEADLINE)
        except TimeoutError:
            raise ClusterUnavailable(f"the API server did not answer within {CALL_DEADLINE:.0f}s") from None

    async def triggers(self) -> list[dict[str, Any]]:
        # One list in flight at a time: a burst of deliveries shares it instead of stampeding the API server.
        async with self._lock:
            if self._cached is not None and time.monotonic() - self._cached_at < self._cache_seconds:
                return self._cached
            try:
                items = await self._call(self._api.list, f"{self._base}/triggers")
            except ApiError as exc:
                raise ClusterUnavailable(f"cannot list Triggers: {exc.status} {exc.message}") from None
            self._cached, self._cached_at = items, time.monotonic()
            return items

    async def create_job(self, body: dict[str, Any]) -> bool:
        try:
            await self._call(self._api.create, f"{self._base}/jobs", body)
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise ClusterUnavailable(f"cannot create Job {body['metadata']['name']}: {exc.status} "
                                     f"{exc.message}") from None
        return True
