"""The receiver's three API calls: list the namespace's Triggers, create a Job, annotate a SessionKey for
retirement (a merge patch of one annotation: the receiver reads no SessionKey). Nothing else.

The JSON client (:mod:`pidispatch.kubeapi`) is synchronous; calls run in a worker thread with a
deadline, so a slow API server costs a 503 (GitHub lets you redeliver) rather than a hung delivery; a Job
the API server refuses for good is a :class:`JobRefused`, which no redelivery can change.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from pidispatch.api.vocabulary import GROUP, RETIRE_ANNOTATION, RETIRE_PULL_REQUEST_ANNOTATION, VERSION
from pidispatch.kubeapi import Api, ApiError

# GitHub gives a delivery 10 s; leave room to answer.
CALL_DEADLINE = 8.0
# Triggers change rarely and deliveries come in bursts: a short cache spares the API server a list per
# delivery. A Trigger applied a moment ago may miss the deliveries of the next TRIGGER_CACHE_SECONDS.
TRIGGER_CACHE_SECONDS = 2.0


# What the API server answers for good: the same body will never be taken (400 BadRequest, 403 Forbidden,
# 422 Invalid). 409 is a redelivery; 401, 404 (the CRD being installed), 429 and 5xx may pass.
PERMANENT_REFUSALS = frozenset({400, 403, 422})


class ClusterUnavailable(Exception):
    """The API server could not be reached, timed out, or refused a call for now (the delivery answers 503)."""


class JobRefused(Exception):
    """The API server refused a Job for good (:data:`PERMANENT_REFUSALS`): no redelivery will create it.

    Carries the status, the ``Status`` object's ``reason`` and the fields its causes name, never its
    message: an Invalid answer quotes the refused value, which came from the webhook's body.
    """

    def __init__(self, name: str, status: int, reason: str, fields: tuple[str, ...] = ()) -> None:
        self.name, self.status, self.reason, self.fields = name, status, reason, fields
        named = f" ({', '.join(fields)})" if fields else ""
        super().__init__(f"the API server refused Job {name} for good: {status} {reason}{named}")


def _refusal(name: str, status: int, answer: Any) -> JobRefused:
    """The :class:`JobRefused` of a ``metav1.Status`` answer (or of whatever else came back)."""
    answer = answer if isinstance(answer, dict) else {}
    reason = answer.get("reason")
    reason = reason[:64] if isinstance(reason, str) and reason.isascii() and reason.isalnum() else "refused"
    causes = (answer.get("details") or {}).get("causes") if isinstance(answer.get("details"), dict) else None
    fields = tuple(dict.fromkeys(
        cause["field"][:100] for cause in (causes if isinstance(causes, list) else [])
        if isinstance(cause, dict) and isinstance(cause.get("field"), str) and cause["field"].isprintable()))
    return JobRefused(name, status, reason, fields[:8])


class Cluster(Protocol):
    """What the receiver needs of Kubernetes (the seam the in-process tests fill with an in-memory fake)."""

    async def triggers(self) -> list[dict[str, Any]]:
        """The namespace's Trigger objects."""
        ...

    async def create_job(self, body: dict[str, Any]) -> bool:
        """Create the Job; ``False`` when one of that name already exists (a redelivery). Raises
        :class:`JobRefused` when the API server refuses it for good, :class:`ClusterUnavailable` otherwise."""
        ...

    async def retire(self, key: str, reason: str, pull_request: int | None = None) -> bool:
        """Annotate SessionKey ``key`` for the operator to retire (``pull_request``: the closed pull request, whose
        claim on the key the operator checks; ``None``: an issue's close); ``False`` when there is none."""
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
            if exc.status in PERMANENT_REFUSALS:
                raise _refusal(body["metadata"]["name"], exc.status, exc.body) from None
            raise ClusterUnavailable(f"cannot create Job {body['metadata']['name']}: {exc.status} "
                                     f"{exc.message}") from None
        return True

    async def retire(self, key: str, reason: str, pull_request: int | None = None) -> bool:
        # One merge patch: the reason and the pull request (or no pull request: a stale one goes) arrive together.
        number = str(pull_request) if pull_request is not None else None
        patch = {"metadata": {"annotations": {RETIRE_ANNOTATION: reason, RETIRE_PULL_REQUEST_ANNOTATION: number}}}
        try:
            await self._call(self._api.patch, f"{self._base}/sessionkeys/{key}", patch)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise ClusterUnavailable(f"cannot annotate SessionKey {key}: {exc.status} {exc.message}") from None
        return True
