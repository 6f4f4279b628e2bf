"""Step 6, sessionkey: the ``SessionKey`` resource that shows one key of the store
(docs/architecture.md#custom-resources).

Created with the first Pod on a key (its spec: forge, repository, branch); its status is written when
a job on it ends, and refreshed by a timer as time makes ``Resumable`` stale (TTL, age). Deleting it
forgets the conversation: the finalizer asks the store to forget the key (``store/forget.py``), which
also stops any job in flight on it from bringing the conversation back.
"""

from __future__ import annotations

from typing import Any

from pidispatch import failpoints
from pidispatch.api.conditions import reason_to_camel, set_condition
from pidispatch.api.crds import GROUP, VERSION
from pidispatch.api.models import JobSession
from pidispatch.api.views import SessionKeyView
from pidispatch.api.vocabulary import AUTHOR_ASSOCIATIONS
from pidispatch.contract import MANAGED_BY
from pidispatch.jobflow import cost, lifecycle
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.cost import JobUsage
from pidispatch.kubeapi import ApiError
from pidispatch.report import Workspace
from pidispatch.settings import OperatorSettings
from pidispatch.store.forget import forget_key
from pidispatch.store.inspect import inspect_key
from pidispatch.store.keys import is_key
from pidispatch.store.staging import HostRecord

FINALIZER = "pi-dispatch.dev/forget-transcript"
LAST_FACTS = ("lastJob", "lastReason", "lastPromotedAt", "lastCommit", "judgedWith", "rethreadedBy", "usage")


def ensure(cluster: Cluster, host: HostRecord) -> None:
    """Create the key's SessionKey if it is new. Its status is written once, when the job ends."""
    if not is_key(host.key) or cluster.sessionkey(host.key) is not None:
        return
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SessionKey",
            "metadata": {"name": host.key, "labels": MANAGED_BY, "finalizers": [FINALIZER]},
            "spec": {"forge": host.forge, "repository": host.repository, "branch": host.branch}}
    try:
        cluster.api.create(cluster.crd("sessionkeys"), body)
    except ApiError as exc:
        if exc.status != 409:
            raise


def last_job_facts(job: str, host: HostRecord, session: JobSession | None, promoted_at: str | None,
                   workspace: Workspace | None = None) -> dict[str, Any]:
    """What a job's end tells its SessionKey: which job, its reason, the pi and model it was judged with,
    and (for a promoted conversation) the commit its workspace ended on."""
    facts: dict[str, Any] = {"lastJob": job, "lastReason": session.reason if session is not None else None,
                             "judgedWith": {"piVersion": host.pi_version, "model": host.model,
                                            "population": None if host.population is None
                                            else sorted(host.population)}}
    if promoted_at is not None:
        facts["lastPromotedAt"] = promoted_at
        if workspace is not None and workspace.head is not None:
            facts["lastCommit"] = {"sha": workspace.head, "pushed": workspace.pushed == workspace.head}
    return facts


def update(settings: OperatorSettings, cluster: Cluster, key: str, last: dict[str, Any] | None,
           listed: SessionKeyView | None = None, ended: JobUsage | None = None) -> None:
    """Recompute a SessionKey's status from the store (and the last job's facts); write it if it changed.

    ``listed``: the SessionKey as a LIST just returned it (the refresh), read instead of a GET per key.
    It may be older than the object (a job that ended meanwhile wrote its facts), so the write then
    carries its ``resourceVersion``: a conflict means the object moved on, and it is read again and judged
    once more, never overwritten with the older facts.

    ``ended``: the job that ended on the key, counted in ``status.usage`` (once: ``jobflow/cost.py``); that
    write carries the ``resourceVersion`` it was read at too.
    """
    if settings.store.sessions_dir is None or not is_key(key):
        return
    current = listed if listed is not None else cluster.sessionkey(key)
    if current is None or current.meta.deletion:
        return
    old = current.stored_status  # compared as stored: a write only when the judgement changed it
    facts = {**{k: old[k] for k in LAST_FACTS if k in old}, **(last or {})}
    if ended is not None:
        facts["usage"] = cost.counted(old.get("usage"), ended.job, ended.start, ended.tokens)
    # Judge the next delivery as if it ran the last job's pi, model and population; unknown → the stamped ones.
    judged = facts.get("judgedWith") or {}
    admits = judged.get("population")
    view = inspect_key(settings.store, key, pi_version=judged.get("piVersion"), model=judged.get("model"),
                       population=frozenset(admits) if isinstance(admits, list) else None)
    status = sessionkey_status(view, old.get("conditions"), facts, current.meta.generation)
    # Retired or quarantined (as stored, or as the last job just ended it): say so.
    status = lifecycle.overlay(status, {**old, **(last or {})}, key, current.meta.generation)
    # A null inside an object is a deletion in a merge patch: the stored status never holds one.
    if {k: old.get(k) for k in status} == {k: without_nulls(v) for k, v in status.items()}:
        return
    if listed is None and ended is None:
        cluster.api.patch(cluster.crd("sessionkeys", key, "status"), {"status": status})
        return
    # Counters are read, added to and written back: two jobs ending at once on one key must not lose one.
    try:
        cluster.api.patch(cluster.crd("sessionkeys", key, "status"),
                          {"metadata": {"resourceVersion": current.meta.resource_version}, "status": status})
    except ApiError as exc:
        if exc.status != 409:
            raise
        update(settings, cluster, key, last, ended=ended)  # the object moved on since it was read: judge it anew


def _known(population: list[str] | None) -> list[str] | None:
    """The stamped population as the CRD takes it: a stamp with a token no Trigger can admit shows as unknown."""
    if population is None or not all(token in AUTHOR_ASSOCIATIONS for token in population):
        return None
    return population


def without_nulls(value: Any) -> Any:
    """``value`` as the apiserver keeps it after a merge patch: object members that are null are gone (a list
    is replaced whole, so it is kept as it is)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    return value


def delete(cluster: Cluster, key: str) -> None:
    try:
        cluster.api.delete(cluster.crd("sessionkeys", key))
    except ApiError as exc:
        if exc.status != 404:
            raise


def finalize(settings: OperatorSettings, cluster: Cluster, sk: SessionKeyView) -> None:
    """``kubectl delete sessionkey <key>``: the store forgets the key, then the object may go."""
    forget_key(settings.store, settings.staging_dir, sk.name)
    failpoints.at("key-forgotten", sk.name)  # a kill here: the finalizer runs again after the restart
    finalizers = [f for f in sk.meta.finalizers if f != FINALIZER]
    cluster.api.patch(cluster.crd("sessionkeys", sk.name),
                      {"metadata": {"finalizers": finalizers, "resourceVersion": sk.meta.resource_version}})


def sessionkey_status(view: dict[str, Any], conditions: list[dict[str, Any]] | None,
                      last: dict[str, Any] | None = None, generation: int | None = None) -> dict[str, Any]:
    """SessionKey status from ``store.inspect.inspect_key`` output plus the last job's facts."""
    stored = bool(view.get("directory")) and bool(view.get("bytes"))
    nxt = view.get("next") or "absent"
    conditions = set_condition(conditions, "Stored", stored, "TranscriptStored" if stored else "NoTranscript",
                               f"{view.get('bytes')} bytes stored." if stored else "No transcript is stored.",
                               generation)
    assumed = " (judged with the pi version stamped on the key)" if view.get("assumedPiVersion") else ""
    conditions = set_condition(
        conditions, "Resumable", nxt == "resumed", "Resumable" if nxt == "resumed" else reason_to_camel(nxt),
        ("The next delivery would resume" + assumed + ".") if nxt == "resumed" else
        f"The next delivery would start cold: {nxt}{assumed}.", generation)
    lock: dict[str, Any] = view.get("lock") or {}
    live = lock.get("state") == "live"
    conditions = set_condition(
        conditions, "Locked", live, "PromotionInProgress" if live else ("StaleLock" if lock else "Unlocked"),
        f"A promotion holds the lock ({lock.get('ageMs')} ms old)." if live else
        f"A stale lock ({lock.get('ageMs')} ms old) is left; the next promotion takes it over." if lock else
        "No promotion is running.", generation)
    by = (last or {}).get("rethreadedBy")
    conditions = set_condition(
        conditions, "Rethreaded", bool(by), reason_to_camel(by["reason"]) if by else "NotRethreaded",
        f"Job {by['job']} started this conversation from the stored letter and ledger after the resume was "
        f"refused ({by['reason']})." if by else "The stored conversation did not start from a handoff.",
        generation)
    ledger = view.get("ledger") or {}
    status: dict[str, Any] = {
        "observedGeneration": generation,  # the spec this status was judged for, as the Trigger's and the Job's say
        "conditions": conditions, "bytes": view.get("bytes"), "venue": view.get("venue"),
        "ledger": {"entries": ledger.get("entries") or 0, "letter": ledger.get("letter")},
        "piVersion": view.get("piVersion"), "population": _known(view.get("population")),
        "resumeChain": view.get("resumeChain") or 0,
        "context": view.get("context"), "next": nxt,
    }
    status.update(last or {})
    return status
