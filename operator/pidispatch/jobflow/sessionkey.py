"""Step 6, sessionkey: the ``SessionKey`` resource that shows one key of the store
(docs/architecture.md#custom-resources).

Created with the first Pod on a key (its spec: forge, repository, branch); its status is written when
a job on it ends, and refreshed by a timer as time makes ``Resumable`` stale (TTL, age). Deleting it
forgets the conversation: the finalizer asks the store to forget the key (``store/forget.py``), which
also stops any job in flight on it from bringing the conversation back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pidispatch import failpoints
from pidispatch.api.crds import GROUP, VERSION
from pidispatch.api.models import JobOutputs, JobSession
from pidispatch.api.views import SessionKeyView
from pidispatch.contract import MANAGED_BY
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.status_patch import write_status
from pidispatch.jobflow.summarize_sessionkey import (
    FailedResume,
    JudgedWith,
    KeyOutcome,
    LastCommit,
    LastJob,
    Released,
    Retirement,
    StoreReading,
    judged_with,
    summarize_sessionkey,
)
from pidispatch.kubeapi import ApiError
from pidispatch.report import Workspace
from pidispatch.settings import OperatorSettings
from pidispatch.store.forget import forget_key
from pidispatch.store.inspect import inspect_key
from pidispatch.store.keys import is_key
from pidispatch.store.staging import HostRecord

log = logging.getLogger("pidispatch.operator")
FINALIZER = "pi-dispatch.dev/forget-transcript"
# The outcomes that need no store to be written (the lifecycle): a key without a store has only these.
LIFECYCLE = (FailedResume, Released, Retirement)


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
                   workspace: Workspace | None = None, outputs: JobOutputs | None = None) -> LastJob:
    """What a job's end tells its SessionKey: which job, its reason, the pi and model it was judged with,
    (for a promoted conversation) the commit its workspace ended on, and the pull request the forge confirmed
    on its branch (``outputs``)."""
    commit = None
    if promoted_at is not None and workspace is not None and workspace.head is not None:
        commit = LastCommit(workspace.head, workspace.pushed == workspace.head)
    return LastJob(job, session.reason if session is not None else None,
                   JudgedWith(host.pi_version, host.model,
                              None if host.population is None else tuple(sorted(host.population))),
                   promoted_at, commit, outputs.pullRequest if outputs is not None else None)


def write(settings: OperatorSettings, cluster: Cluster, key: str, outcomes: Sequence[KeyOutcome] = (),
          listed: SessionKeyView | None = None) -> None:
    """The one writer of a SessionKey's status: judge the key from the store (as if the next delivery ran the
    last job's pi, model and population), fold in what the steps found (``outcomes``:
    ``summarize_sessionkey``), and write what changed. No outcome: the refresh (time made ``Resumable`` stale).

    ``listed``: the SessionKey as a LIST just returned it (the refresh), read instead of a GET per key. Every
    write carries the ``resourceVersion`` the status was judged from (``status_patch``): a job that ended
    meanwhile, or two jobs ending on one key at once (a failure count, the usage counters), make it a
    conflict, and the key is read again and judged once more, never overwritten with the older facts.
    """
    store = settings.store.sessions_dir is not None and is_key(key)
    if not store and not any(isinstance(found, LIFECYCLE) for found in outcomes):
        return

    def read() -> SessionKeyView | None:
        found = cluster.sessionkey(key)
        return None if found is None or found.meta.deletion else found

    def judge(sk: SessionKeyView) -> dict[str, object]:
        if not store:
            return summarize_sessionkey(sk, None, outcomes).to_patch()
        judged = judged_with(sk.status, outcomes)
        inspected = inspect_key(settings.store, key, pi_version=judged.pi_version, model=judged.model,
                                population=None if judged.population is None else frozenset(judged.population))
        return summarize_sessionkey(sk, StoreReading.of(inspected), outcomes).to_patch()

    current = read() if listed is None else None if listed.meta.deletion else listed
    was = current.status.failedResumes if current is not None else None
    written = write_status(cluster.api, cluster.crd("sessionkeys", key, "status"), current, judge, reread=read)
    failed = written.patch.get("failedResumes") if written is not None else None
    if failed and failed.get("quarantinedAt") and (was is None or not was.quarantinedAt):
        log.warning("key %s quarantined after %s failed resumed jobs in a row", key, failed["count"])


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
