"""Step 7, timers: what time changes without an event (docs/architecture.md#timers).

* the ``Resumable`` refresh: TTL and age make a SessionKey's answer stale, so every key is judged again;
* the sweep: the store's TTL reaper (a reaped key's SessionKey goes too), orphaned staging directories,
  and the store gauges.

The resync of Jobs (a missed watch event) lives with the dispatcher, whose queue it feeds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pidispatch import metrics
from pidispatch.api.views import SessionKeyView
from pidispatch.jobflow import sessionkey
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.summarize import TERMINAL_PHASES
from pidispatch.settings import OperatorSettings
from pidispatch.store.inspect import store_totals
from pidispatch.store.keys import is_key
from pidispatch.store.reap import reap
from pidispatch.store.staging import sweep_orphans

log = logging.getLogger("pidispatch.operator")


def refresh_sessionkeys(settings: OperatorSettings, cluster: Cluster, busy: set[str]) -> None:
    """Recompute ``Resumable`` (and the rest of the status) of every SessionKey; write only what changed.

    Keys in ``busy`` (a job of this process in flight on them) are left alone: that job's end writes
    their status with fresher facts anyway, and a refresh in between would be one more write that it
    overwrites (for a new key, the SessionKey is created with the Pod and its first status is the job's end).

    The SessionKeys are read a page at a time and each is judged from its listed body (no GET per key),
    so the operator holds one page, not the whole list, however many keys there are; unchanged
    transcripts are not read again (store/scanmemo.py).
    """
    if settings.store.sessions_dir is None:
        return
    for page in _ahead(cluster.api.pages(cluster.crd("sessionkeys"))):
        for body in page:
            sk = SessionKeyView.of(body)
            name = sk.name
            if name in busy:
                continue
            try:
                sessionkey.write(settings, cluster, name, listed=sk)
            except Exception as exc:  # one key's failure must not stop the others; the next cycle retries
                log.warning("refreshing SessionKey %s failed: %s: %s", name, type(exc).__name__, exc)


def _ahead(pages: Iterator[list[dict[str, Any]]]) -> Iterator[list[dict[str, Any]]]:
    """``pages`` one page ahead: the next page is fetched while the keys of this one are judged.

    A page of 500 SessionKeys takes the apiserver a fifth of a second to answer (docs/benchmarks.md), about
    what judging it takes here; in turn, a cycle over 100 000 keys waited 40 s for pages. Two pages are held
    at most; an error fetching one is raised where that page would have been.
    """
    with ThreadPoolExecutor(1, thread_name_prefix="refresh-list") as pool:
        ahead = pool.submit(next, pages, None)
        while (page := ahead.result()) is not None:
            ahead = pool.submit(next, pages, None)
            yield page


def sweep(settings: OperatorSettings, cluster: Cluster) -> None:
    """The reaper (store TTL), orphaned staging directories, and the store gauges."""
    if settings.store.sessions_dir is not None:
        for event in reap(settings.store):  # each event is logged by the reaper itself
            if event["event"] == "reaped_session" and is_key(event.get("key", "")):
                # The conversation is gone; its SessionKey would only say so forever.
                try:
                    sessionkey.delete(cluster, event["key"])
                except Exception as exc:
                    log.warning("deleting SessionKey %s failed: %s: %s", event["key"], type(exc).__name__, exc)
        keys, size = store_totals(settings.store)
        metrics.STORE_KEYS.set(keys)
        metrics.STORE_BYTES.set(size)
    live = {job.uid for job in cluster.jobs() if job.phase not in TERMINAL_PHASES}
    sweep_orphans(settings.staging_dir, live)
