"""The one in-memory apiserver the unit tests drive the job flow with: ``MemoryApi`` implements
``pidispatch.kubeapi.KubeApi``, the calls the job flow makes of the real ``Api``.

It keeps objects by path, assigns names, uids and resourceVersions, honours a status patch's
resourceVersion precondition, answers 404 and 409 as the apiserver does, checks label values as the real
apiserver does, and can be told to refuse a create (``on_create``). ``writes`` and ``deletes`` record what
was written, in order.
"""

from __future__ import annotations

import copy
import itertools
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from pidispatch.api.crds import GROUP, VERSION
from pidispatch.kubeapi import ApiError

NS = "ns"
JOBS = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/jobs"
PODS = f"/api/v1/namespaces/{NS}/pods"
TRIGGERS = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/triggers"
LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-_.A-Za-z0-9]*[A-Za-z0-9])?)?")


class MemoryApi:
    """Just enough of the apiserver for the job flow (``KubeApi``): objects by path, merge patches, preconditions."""

    def _uid(self, n: int) -> str:
        return f"00000000-0000-4000-8000-{n:012d}" if self.kubernetes_uids else f"uid-{n}"

    def __init__(self, kubernetes_uids: bool = False) -> None:
        # kubernetes_uids: uids in the apiserver's RFC 4122 form (what the transfer server insists on),
        # else the short ``uid-<n>`` most tests read more easily.
        self.kubernetes_uids = kubernetes_uids
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []  # (verb, path) of every create and patch, in order
        self.deletes: list[str] = []  # the paths deleted, in order
        # Called with (path, body) before a create is stored; raise ApiError to refuse it.
        self.on_create: Callable[[str, dict[str, Any]], None] = lambda path, body: None
        self._uids = itertools.count(1)
        self._rv = itertools.count(1)
        self._lock = threading.Lock()

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self.objects.get(path)
            return copy.deepcopy(obj) if obj is not None else None

    def get(self, path: str) -> dict[str, Any]:
        obj = self.get_or_none(path)
        if obj is None:
            raise ApiError(404, "GET", path, "not found")
        return obj

    def list(self, path: str, **_: Any) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(o) for p, o in self.objects.items() if p.rsplit("/", 1)[0] == path]

    def pages(self, path: str, *, limit: int = 500, **params: Any) -> Iterator[list[dict[str, Any]]]:
        """The whole collection as one page (``CountingApi`` in the refresh tests pages for real)."""
        yield self.list(path, **params)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.on_create(path, body)
        md = body.setdefault("metadata", {})
        bad = {k: v for k, v in (md.get("labels") or {}).items() if len(v) > 63 or not LABEL_VALUE.fullmatch(v)}
        if bad:
            raise ApiError(422, "POST", path, f"metadata.labels: Invalid value: {bad}")
        with self._lock:
            name = md.get("name") or f"{md.get('generateName', 'x')}{next(self._uids)}"
            full = f"{path}/{name}"
            if full in self.objects:
                raise ApiError(409, "POST", path, "already exists")
            md.update(name=name, uid=self._uid(next(self._uids)), resourceVersion=str(next(self._rv)),
                      creationTimestamp=f"2030-01-01T00:00:{len(self.objects):02d}Z")
            self.objects[full] = copy.deepcopy(body)
            self.writes.append(("POST", full))
            return copy.deepcopy(body)

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        target = path.removesuffix("/status")
        with self._lock:
            obj = self.objects.get(target)
            if obj is None:
                raise ApiError(404, "PATCH", path, "not found")
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
                raise ApiError(409, "PATCH", path, "the object has been modified")
            _merge(obj, {k: v for k, v in body.items() if k != "metadata"})
            annotations = (body.get("metadata") or {}).get("annotations")
            if annotations is not None and not path.endswith("/status"):  # a status patch changes no metadata
                obj["metadata"]["annotations"] = obj["metadata"].get("annotations") or {}
                _merge(obj["metadata"]["annotations"], annotations)
            obj["metadata"]["resourceVersion"] = str(next(self._rv))
            self.writes.append(("PATCH", path))
            return copy.deepcopy(obj)

    def delete(self, path: str) -> None:
        with self._lock:
            if self.objects.pop(path, None) is None:
                raise ApiError(404, "DELETE", path, "not found")
            self.deletes.append(path)

    def job(self, name: str) -> dict[str, Any]:
        return self.get(f"{JOBS}/{name}")

    def pods(self) -> list[dict[str, Any]]:
        return self.list(PODS)


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386: ``null`` removes a key, also inside an object the patch adds (so it never stores a null)."""
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict):
            if not isinstance(into.get(key), dict):
                into[key] = {}
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
