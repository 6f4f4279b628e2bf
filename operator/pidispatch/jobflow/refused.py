"""What a refusal writes: the Job's status (``Refused`` or ``Failed``), the log events the store contract names, and a
Kubernetes Event. Its issue comment is ``comment.py``'s, posted after (and owed across a restart)."""

from __future__ import annotations

from pidispatch.api.views import JobView
from pidispatch.events import emit
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.summarize import Refused
from pidispatch.record import JobReason


def record_refusal(cluster: Cluster, job: JobView, refused: Refused) -> None:
    """Write ``refused`` to ``job``'s status and say so, in the log and as a Warning Event."""
    cluster.record(job, refused)
    emit("job_refused", job=job.name, reason=refused.reason or refused.condition_reason)
    # The refusal events of docs/store-contract.md#log-events, by the names pi-dispatch hosts log them under.
    kind = job.spec.forge if job.spec is not None else "local"  # the forge kind (docs/store-contract.md#key-parts)
    if refused.reason == JobReason.SESSIONS_DIR_UNSET:
        emit("refused_sessions_dir_unset", kind=kind)
    elif refused.reason == JobReason.CONFIG_REFUSED:
        emit("refused_config", kind=kind, refunded=False)  # refused before any budget was reserved
    cluster.event(job, "Warning", refused.condition_reason, refused.message)
