"""Step 3, stage: the gates judge the key, and the Job's own copy is staged (docs/architecture.md#stage).

The store does the work (``store/staging.py``: the gate ladder, the descriptor-bounded copy, the host
record on disk); this step says what the Job brings to the gates (its venue, pi version and model) and
counts the verdict. Only before the Pod exists: nobody reads the staged copy yet, so judging and
staging again after a restart is safe.
"""

from __future__ import annotations

import logging
import time

from pidispatch import metrics
from pidispatch.api.models import JobSession, TriggerRun
from pidispatch.contract import VENUE
from pidispatch.contract.digests import SecretDigest
from pidispatch.jobflow.key import KeyRef
from pidispatch.settings import OperatorSettings
from pidispatch.store.staging import HostRecord, JobDir, stage

log = logging.getLogger("pidispatch.operator")


def stage_session(settings: OperatorSettings, jd: JobDir, ref: KeyRef, run: TriggerRun, job: str, *,
                  admits: frozenset[str], secrets: tuple[SecretDigest, ...] = (),
                  held: str | None = None) -> HostRecord:
    """Stage ``ref``'s session for the Job and return its host record (written, not yet synced).

    ``secrets``: digests of the job's own secrets the operator knows (the App token it minted), kept for
    the scan before the promotion. ``held``: the SessionKey refuses the resume before any gate (a retired
    key, a quarantined transcript: ``lifecycle.held_reason``), so 0 bytes are staged with that reason. ``admits``:
    the Trigger's population (``api/population.py``), judged by gate 3a and stamped by the promotion."""
    record = HostRecord(key=ref.key, forge=ref.forge, repository=ref.repository, branch=ref.branch, venue=VENUE,
                        pi_version=run.piVersion, model=run.model, secrets=secrets, population=tuple(sorted(admits)))
    # A job gets its copy by the claim's subPath, or over HTTPS in transfer mode (no claim in its Pod).
    reachable = bool(settings.staging_claim) or settings.staging.transfer is not None
    if not reachable:
        log.error("PI_DISPATCH_STAGING_CLAIM is unset: job %s runs without its session", job)
    began = time.perf_counter()
    record = stage(settings.store, jd, record, mount=reachable, held=held)
    if record.mounted:
        metrics.GATE_SECONDS.observe(time.perf_counter() - began)
        metrics.RESOLUTIONS.labels(record.reason).inc()
    return record


def session_view(host: HostRecord | None) -> JobSession | None:
    """The host verdict as a Job's ``status.session`` shows it while the Pod runs."""
    verdict = host.verdict() if host is not None else None
    return None if verdict is None else JobSession(resumed=verdict.resume, reason=verdict.reason, bytes=verdict.bytes)


def start_message(host: HostRecord | None) -> str:
    if host is None:
        return "Pod created; this job has no session key and runs as a fresh conversation."
    if not host.mounted:
        return "Pod created without a session: the store could not be read (see the operator log)."
    if host.resume:
        return f"Pod created; it continues the previous conversation ({host.bytes} bytes staged)."
    if host.rethread:
        return (f"Pod created; the resume was refused ({host.reason}), so it starts a new session from the stored "
                "letter and ledger.")
    return f"Pod created; it starts a fresh conversation: {host.reason}."
