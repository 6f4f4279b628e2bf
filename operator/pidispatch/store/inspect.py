"""A person's view of the store: what each key holds and what the next delivery would get.

Read-only. Uses the same gate ladder as a real delivery (a dry run), so "next" here is exactly the
reason a job would be given, for the venue, pi version and model asked about.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from pidispatch.contract import VENUE
from pidispatch.settings import Settings
from pidispatch.store import fsio, handoffdir, sidecars
from pidispatch.store.fsio import now_ms
from pidispatch.store.keys import is_key
from pidispatch.store.lock import LOCK_STALE_MS
from pidispatch.store.population import Population, read_population
from pidispatch.store.resolve import dry_run


def inspect_key(
    settings: Settings,
    key: str,
    *,
    venue: str | None = VENUE,
    pi_version: str | None = None,
    model: str | None = None,
    population: Population | None = None,
    clock: float | None = None,
) -> dict[str, Any]:
    """Describe one key. Without ``pi_version`` the stamped version is assumed (and said so); without
    ``population`` the stamped one is (an unknown stamp admits no population, so gate 3a then refuses, as it
    would for every Trigger's job).

    Nothing is read from a key path that is not a real directory (a link planted at a key would
    otherwise show another directory's sidecars as this key's): every field is then ``None``.
    """
    assert settings.sessions_dir is not None
    now = now_ms() if clock is None else clock
    key_dir = os.path.join(settings.sessions_dir, key)
    real = fsio.is_real_dir(fsio.lstat_or_none(key_dir))
    stamp = sidecars.read_sidecar(key_dir, sidecars.PI_VERSION) if real else None
    assumed = pi_version is None
    stamped = read_population(key_dir) if real else None
    if population is None:
        population = stamped if stamped is not None else frozenset()
    next_reason, o = dry_run(
        settings, key, venue=venue, pi_version=stamp if assumed else pi_version, model=model, population=population,
        clock=now,
    )
    real = real and fsio.is_real_dir(o.key_dir_stat)
    transcript = o.transcript_stat if real and fsio.is_regular(o.transcript_stat) else None
    lock = fsio.lstat_or_none(os.path.join(key_dir, sidecars.LOCK)) if real else None
    # The sidecars the ladder read are the observation's cached reads (read now if a gate stopped before them).
    context = o.context if real else None
    lock_age = None if lock is None else round(now - fsio.mtime_ms(lock))
    return {
        "key": key,
        "directory": real,
        "bytes": transcript.st_size if transcript is not None else None,
        "idleMs": round(now - fsio.mtime_ms(transcript)) if transcript is not None else None,
        "venue": o.venue_stamp if real else None,
        "piVersion": stamp,
        "population": None if stamped is None else sorted(stamped),
        "resumeChain": o.chain if real else None,
        "context": None if context is None else {"tokens": context[0], "window": context[1], "model": context[2]},
        "lock": None if lock_age is None else {
            "ageMs": lock_age, "state": "live" if lock_age <= LOCK_STALE_MS else "stale"},
        "next": next_reason,
        "assumedPiVersion": assumed,
        "ledger": handoffdir.describe(key_dir) if real else None,
    }


def inspect_store(settings: Settings, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Describe every entry of the store root, keys and strays alike, in name order.

    The root is listed at the call, so a store that cannot be listed raises ``OSError`` here, before
    any row is produced; the caller says so. Every row has the same fields.
    """
    assert settings.sessions_dir is not None
    names = sorted(os.listdir(settings.sessions_dir))
    return (inspect_key(settings, name, **kwargs) for name in names)


def store_totals(settings: Settings) -> tuple[int, int]:
    """Keys and transcript bytes in the store, for the gauges (links and strays are not counted)."""
    keys = size = 0
    try:
        entries = os.scandir(settings.sessions_dir or "")
    except OSError:
        return 0, 0
    with entries:
        for entry in entries:
            if not is_key(entry.name) or not entry.is_dir(follow_symlinks=False):
                continue
            keys += 1
            st = fsio.lstat_or_none(os.path.join(entry.path, sidecars.TRANSCRIPT))
            if fsio.is_regular(st):
                size += st.st_size  # type: ignore[union-attr]
    return keys, size
