"""Step 5, complete: the Pod ended; promote (at most once), then merge the record (ARCHITECTURE §4.8).

Pod ``Succeeded`` with a session → the store promotes the staged copy (``store/journal.py``: at most
once per Job, even across crashes); Pod ``Failed`` → nothing is promoted and the store is untouched.
Then the three witnesses (the host's verdict, the runner's report, the promotion) merge into
``status.session`` by the spec's precedence (``record.merge_session``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pidispatch import failpoints, metrics
from pidispatch.jobflow.pod import pod_phase, termination_message
from pidispatch.jobflow.summarize import Ended
from pidispatch.record import PromotionResult, merge_session
from pidispatch.report import RunnerReport, parse_report
from pidispatch.settings import OperatorSettings
from pidispatch.store.journal import promote_once
from pidispatch.store.staging import HostRecord, JobDir


@dataclass(frozen=True)
class Completion:
    """What a finished Job's end decided: the status change, and what the SessionKey and metrics need."""

    ended: Ended
    promotion: PromotionResult | None
    report: RunnerReport
    forgotten: bool  # the key was forgotten while the job ran: its SessionKey is not touched


def complete(settings: OperatorSettings, jd: JobDir, host: HostRecord | None, pod: dict[str, Any] | None,
             job: str) -> Completion | None:
    """The end of the Job whose Pod is ``pod`` (``None``: it vanished), or ``None`` while the Pod runs."""
    outcome = pod_phase(pod)
    if outcome is None:
        return None
    report = parse_report(termination_message(pod)) or RunnerReport()
    verdict = host.verdict() if host is not None else None
    promotion = None
    if host is not None and verdict is not None and outcome == "Succeeded":
        began = time.perf_counter()
        promotion = promote_once(settings.store, jd, host, report.context,
                                 seams=failpoints.FailpointSeams(job))
        metrics.PROMOTION_SECONDS.observe(time.perf_counter() - began)
        metrics.PROMOTIONS.labels(result_label(promotion)).inc()
    forgotten = (promotion is not None and promotion.forgotten) or (host is not None and jd.forgotten())
    session = merge_session(verdict, report.session, promotion)
    succeeded = outcome == "Succeeded"
    reason = "KeyForgotten" if forgotten and succeeded else ("PodSucceeded" if succeeded else "PodFailed")
    return Completion(Ended(outcome, session, report.tokens or None, reason, end_message(outcome, pod, promotion,
                                                                                         forgotten)),
                      promotion, report, forgotten)


def result_label(promotion: PromotionResult) -> str:
    return "forgotten" if promotion.forgotten else promotion.reason


def end_message(outcome: str, pod: dict[str, Any] | None, promotion: PromotionResult | None,
                forgotten: bool = False) -> str:
    if pod is None:
        return "The job Pod disappeared before it finished; nothing was promoted."
    if outcome == "Failed":
        return "The job Pod failed; the stored conversation is unchanged."
    if forgotten:
        return ("The job Pod succeeded; its conversation was forgotten while it ran (its SessionKey was deleted), "
                "so nothing was promoted and the next delivery starts a fresh conversation.")
    if promotion is None:
        return "The job Pod succeeded."
    if promotion.promoted:
        return "The job Pod succeeded and its transcript was promoted."
    return f"The job Pod succeeded; its transcript was not promoted: {promotion.reason}."
