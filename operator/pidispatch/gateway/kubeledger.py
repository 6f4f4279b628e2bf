"""The ledger on the apiserver: one ConfigMap per Job, one data key per gateway replica (docs/gateway.md#the-ledger).

``pi-job-ledger-<uid>`` in the Job's namespace, owned by the Job CR (``claims.uid`` / ``claims.job``) so the
garbage collector removes it with the Job. Each replica writes only its own key (``replica``: the Pod's name)
with a JSON merge patch, so replicas never overwrite each other and need no resourceVersion; the ConfigMap is
created on the first write (a 404 on the patch), and a create that loses a race (409) is patched again.

Writes are batched: recording only changes this process's figures and marks the job dirty; a flusher
writes each dirty job's key at most once per ``flush_seconds`` (and at :meth:`KubeLedger.close`), so a
burst of replies costs one patch, never one per reply or per chunk. ``used()`` is this replica's figures,
current to the reply, plus the other replicas' keys as last read (re-read after ``read_seconds``). A
replica that restarts starts from its own key as it was last written, so its figures carry on.

The apiserver client is the synchronous ``kubeapi.Api``: each call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pidispatch.api.vocabulary import GROUP, VERSION
from pidispatch.contract.gateway_wire import LEDGER_LABEL, ledger_name
from pidispatch.gateway.capability import Claims
from pidispatch.gateway.ledger import Figures
from pidispatch.kubeapi import ApiError, KubeApi, name_segment

log = logging.getLogger("pidispatch.gateway.kubeledger")


@dataclass
class _Job:
    claims: Claims
    mine: Figures
    others: int = 0  # the other replicas' tokens, as last read
    read_at: float = 0.0
    loaded: bool = False  # this replica's own key has been read (a write before would lose what it held)
    dirty: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{name_segment(namespace)}/configmaps"
    return base if name is None else f"{base}/{name_segment(name)}"


class KubeLedger:
    """The :class:`~pidispatch.gateway.ledger.Ledger` every replica shares through the apiserver."""

    def __init__(self, api: KubeApi, replica: str, *, flush_seconds: float = 1.0, read_seconds: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.replica = replica
        self.flush_seconds = flush_seconds
        self.read_seconds = read_seconds
        self._clock = clock
        self._jobs: dict[str, _Job] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.writes = 0  # patches and creates sent, since the start

    # -- the Ledger interface ----------------------------------------------------------------------------
    async def used(self, claims: Claims) -> int:
        job = await self._job(claims)
        if self._clock() - job.read_at >= self.read_seconds:
            await self._read(job)
        return job.mine.tokens + job.others

    async def record_usage(self, claims: Claims, *, input: int, output: int, cache_read: int,
                           cache_write: int, cost: float | None) -> None:
        job = await self._job(claims)
        job.mine.add_reply(input=input, output=output, cache_read=cache_read, cache_write=cache_write, cost=cost)
        self._dirty(job)

    async def record_refusal(self, claims: Claims, reason: str) -> None:
        job = await self._job(claims)
        job.mine.refusals[reason] += 1
        self._dirty(job)

    # -- reading -----------------------------------------------------------------------------------------
    async def _job(self, claims: Claims) -> _Job:
        job = self._jobs.get(claims.uid)
        if job is None:
            job = self._jobs.setdefault(claims.uid, _Job(claims, Figures()))
        if not job.loaded:
            async with job.lock:
                if not job.loaded:
                    await self._read(job, first=True)
        return job

    async def _read(self, job: _Job, *, first: bool = False) -> None:
        path = _path(job.claims.namespace, ledger_name(job.claims.uid))
        try:
            found = await asyncio.to_thread(self.api.get_or_none, path)
        except ApiError as exc:
            log.warning("ledger %s unreadable: %s", path, exc.status)
            return  # the figures this replica holds stand; the next check reads again
        data = (found or {}).get("data") or {}
        others = 0
        for replica, text in data.items():
            figures = Figures.from_json(_loads(text))
            if replica == self.replica:
                if first and not job.loaded:  # this replica restarted: carry on from what it wrote
                    figures.add(job.mine)
                    job.mine = figures
            else:
                others += figures.tokens
        job.others = others
        job.read_at = self._clock()
        job.loaded = True

    # -- writing -----------------------------------------------------------------------------------------
    def _dirty(self, job: _Job) -> None:
        job.dirty = True
        self._wake.set()

    async def flush(self) -> None:
        """Write every dirty job's key now; forget the jobs whose capability has expired once written."""
        now = time.time()
        for job in list(self._jobs.values()):
            if not job.dirty and job.claims.exp < now:
                self._jobs.pop(job.claims.uid, None)
            elif job.dirty:
                if not job.loaded:
                    await self._read(job, first=True)
                    if not job.loaded:
                        self._wake.set()
                        continue  # the apiserver did not answer: tried again on the next round
                job.dirty = False
                try:
                    await self._write(job)
                except ApiError as exc:
                    job.dirty = True  # written on the next round
                    self._wake.set()
                    log.warning("ledger %s not written: %s %s", ledger_name(job.claims.uid), exc.status,
                                exc.message)

    async def _write(self, job: _Job) -> None:
        claims = job.claims
        value = json.dumps(job.mine.to_json(), separators=(",", ":"), sort_keys=True)
        path = _path(claims.namespace, ledger_name(claims.uid))
        self.writes += 1
        try:
            await asyncio.to_thread(self.api.patch, path, {"data": {self.replica: value}})
            return
        except ApiError as exc:
            if exc.status != 404:
                raise
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": ledger_name(claims.uid), "namespace": claims.namespace,
                             "labels": {LEDGER_LABEL: claims.uid},
                             "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job",
                                                  "name": claims.job, "uid": claims.uid}]},
                "data": {self.replica: value}}
        self.writes += 1
        try:
            await asyncio.to_thread(self.api.create, _path(claims.namespace), body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            self.writes += 1  # another replica created it first
            await asyncio.to_thread(self.api.patch, path, {"data": {self.replica: value}})

    async def run(self) -> None:
        """Flush whenever something was recorded, at most once per ``flush_seconds``, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()
            await asyncio.sleep(self.flush_seconds)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def close(self) -> None:
        """Stop the flusher and write what is left (graceful shutdown)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()


def _loads(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
