"""``MemoryApi`` that counts every request by verb and pages its LISTs, for tests that hold the operator to a
number of API calls (the SessionKey refresh, the lifecycle's writes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pidispatch.api.crds import GROUP, VERSION
from pidispatch.jobflow.status_patch import without_nulls
from testkit.memoryapi import NS, MemoryApi

SESSIONKEYS = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/sessionkeys"


class CountingApi(MemoryApi):
    """``MemoryApi`` with pages (``limit`` items each), a count of every request by verb, and merge patches
    that drop nested nulls as the apiserver does."""

    def __init__(self, limit: int = 3) -> None:
        super().__init__()
        self.limit = limit
        self.calls: dict[str, int] = {}
        self.before_patch: Any = None

    def _count(self, verb: str) -> None:
        self.calls[verb] = self.calls.get(verb, 0) + 1

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        self._count("GET")
        return super().get_or_none(path)

    def pages(self, path: str, **_: Any) -> Iterator[list[dict[str, Any]]]:
        items = super().list(path)
        for start in range(0, len(items), self.limit):
            self._count("LIST")
            yield items[start:start + self.limit]

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.before_patch is not None:
            hook, self.before_patch = self.before_patch, None
            hook(path)
        self._count("PATCH")
        result = super().patch(path, body)
        # RFC 7386 as the apiserver applies it: a null inside a newly added object is not stored either.
        stored = self.objects[path.removesuffix("/status")]
        stored["status"] = without_nulls(stored.get("status") or {})
        return result
