"""A finished Job's token figures as the gateway counted them (docs/gateway.md#the-ledger).

Behind the gateway the operator takes a job's tokens from the ledger the gateway wrote (one ConfigMap per
Job, one key per gateway replica), never from the runner's report, which the agent can write: the report's
figures are kept as the agent's claim, and a disagreement is an Event. A job the gateway refused a model
request for its budget ends ``TokenBudget`` and nothing it wrote is promoted.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Mapping

from pidispatch.contract import gateway_wire as gateway_protocol
from pidispatch.gateway.ledger import Figures
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.podview import PodView

MAX_SHOWN_REFUSALS = 20  # on the Job: the most frequent, the rest summed under "other"
# How long after the Pod's last container finished the ledger is read: the gateway counts a reply before its last
# byte, but writes its figures in batches, at most PI_GATEWAY_LEDGER_FLUSH_SECONDS (1 s) later; finishedAt is
# truncated to the second; and the write itself takes a moment. Read sooner, the job's last reply (or the refusal
# that makes it TokenBudget) is missing (e2e/test_gateway_job.py saw it).
LEDGER_SETTLE_SECONDS = 3.0


def summed(data: Mapping[str, str] | None) -> Figures | None:
    """Every replica's figures of one job added up; ``None`` when the ledger holds none."""
    if not data:
        return None
    total = Figures()
    for raw in data.values():
        try:
            total.add(Figures.from_json(json.loads(raw)))
        except ValueError:
            continue
    return total


def read_ledger(cluster: Cluster, uid: str) -> Figures | None:
    """The gateway's figures of the Job ``uid`` (``None``: the gateway wrote none, e.g. it never called a model).
    Raises ``ApiError`` on anything but a missing ConfigMap."""
    found = cluster.api.get_or_none(f"/api/v1/namespaces/{cluster.ns}/configmaps/"
                                    f"{gateway_protocol.ledger_name(uid)}")
    return summed((found or {}).get("data"))


def settle_wait(ended: float, now: float, settle: float = LEDGER_SETTLE_SECONDS) -> float:
    """Seconds from ``now`` until the gateway has had time to write the figures of a job whose Pod finished at
    ``ended``: at least ``settle`` seconds after, but never more than ``settle`` from now (a node clock ahead)."""
    return max(0.0, min(ended + settle - now, settle))


def settled_ledger(cluster: Cluster, uid: str, pod: PodView | None, *,
                   settle: float = LEDGER_SETTLE_SECONDS, now: Callable[[], float] = time.time,
                   sleep: Callable[[float], None] = time.sleep) -> Figures | None:
    """:func:`read_ledger` once the gateway has had time to write the job's last figures (:func:`settle_wait`;
    at once when its end is not known, e.g. the Pod vanished), waiting in the caller. The operator's queue
    waits instead by bringing the Job's key back after that time (``dispatcher.py``); this is for a caller
    without one."""
    ended = pod.finished_at if pod is not None else None
    if ended is not None:
        wait = settle_wait(ended, now(), settle)
        if wait > 0:
            sleep(wait)
    return read_ledger(cluster, uid)


def as_tokens(figures: Figures) -> dict[str, float]:
    """``status.tokens`` from the gateway's figures, as the runner's report shapes them: ``cost`` only when every
    billed reply was priced (a partial sum would read as the job's whole cost), ``unpriced`` the replies whose
    model had no price."""
    tokens: dict[str, float] = {"input": figures.input, "output": figures.output, "cacheRead": figures.cache_read,
                                "cacheWrite": figures.cache_write, "total": figures.tokens}
    if figures.unpriced == 0:
        tokens["cost"] = round(figures.cost, 10)
    return {**tokens, "calls": figures.requests, "unpriced": figures.unpriced}


def over_budget(figures: Figures | None) -> bool:
    return figures is not None and figures.refusals.get(gateway_protocol.REFUSED_BUDGET, 0) > 0


def shown_refusals(figures: Figures) -> dict[str, int]:
    """The refusals to show on the Job, bounded (a job refused on many hosts cannot grow its status)."""
    common = Counter(figures.refusals).most_common()
    shown = dict(common[:MAX_SHOWN_REFUSALS])
    rest = sum(count for _, count in common[MAX_SHOWN_REFUSALS:])
    if rest:
        shown["other"] = rest
    return shown


def disagreement(gateway: dict[str, float], claimed: dict[str, float] | None) -> str | None:
    """What the agent's report claims differently from the gateway's count, in words; ``None`` when they agree."""
    if not claimed:
        return None
    differing = [f"{name} {int(claimed.get(name, 0))} (gateway {int(gateway[name])})"
                 for name in ("input", "output", "cacheRead", "cacheWrite")
                 if int(claimed.get(name, 0)) != int(gateway[name])]
    return ", ".join(differing) or None
