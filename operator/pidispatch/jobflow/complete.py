"""Step 5, complete: the Pod ended; promote (at most once), then merge the record (docs/architecture.md#complete).

Pod ``Succeeded`` with a session → the store promotes the staged copy (``store/journal.py``: at most
once per Job, even across crashes); Pod ``Failed`` → nothing is promoted and the store is untouched.
Then the three witnesses (the host's verdict, the runner's report, the promotion) merge into
``status.session`` by the precedence of docs/store-contract.md#verdict-merge
(``record.merge_session``).

The dispatcher ends a Job in three calls, each answering a value: :func:`ending` (is there a Job to
end: ``Ending | Over | None``), :func:`finished` (the Pod ended) or :func:`abandon` (the Pod never
started: it is deleted), each ``Finished | None``, then :func:`record_end`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from pidispatch import failpoints, metrics
from pidispatch.api.models import JobGateway, JobHandoff, JobOutputs, JobSession, JobWorkspace
from pidispatch.api.views import JobView
from pidispatch.election import fence
from pidispatch.events import emit
from pidispatch.forge.github import Forge
from pidispatch.gateway.ledger import Figures
from pidispatch.jobflow import cost, quarantine, sessionkey, usage
from pidispatch.jobflow.checkout import checkout_of
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.outputs import read_outputs
from pidispatch.jobflow.podview import PodView, pod_phase
from pidispatch.jobflow.summarize import TERMINAL_PHASES, Ended
from pidispatch.jobflow.summarize_sessionkey import KeyOutcome, Promoted, Rethreaded
from pidispatch.kubeapi import ApiError
from pidispatch.record import PromotionResult, merge_session
from pidispatch.report import CHECKOUT_FAILURES, RunnerReport, parse_report
from pidispatch.settings import OperatorSettings
from pidispatch.store.journal import promote_once
from pidispatch.store.staging import HostRecord, JobDir
from pidispatch.transfer.protocol import MARKER as TRANSFER_MARKER

log = logging.getLogger("pidispatch.operator")


@dataclass(frozen=True)
class Completion:
    """What a finished Job's end decided: the status change, and what the SessionKey and metrics need."""

    ended: Ended
    promotion: PromotionResult | None
    report: RunnerReport
    forgotten: bool  # the key was forgotten while the job ran: its SessionKey is not touched


@dataclass(frozen=True)
class Ending:
    """The Job a Pod belongs to, not ended yet: ``job`` as read, ``jd`` its staging."""

    job: JobView
    jd: JobDir


@dataclass(frozen=True)
class Over:
    """The Job has ended already: only its slot and staging (``jd``) are left to free."""

    jd: JobDir


@dataclass(frozen=True)
class Finished:
    """The Job's end, decided: what :func:`record_end` writes."""

    host: HostRecord | None
    done: Completion


def ending(settings: OperatorSettings, cluster: Cluster, name: str, pod: PodView | None) -> Ending | Over | None:
    """The Job ``pod`` belongs to (read afresh), if it has not ended; ``None`` when it is gone or ``pod`` is a
    Pod of an earlier Job with the same name."""
    job = cluster.job(name)
    if job is None:
        return None
    uid = job.uid
    jd = JobDir(settings.staging_dir, uid)
    if job.phase in TERMINAL_PHASES:
        return Over(jd)
    if pod is not None and pod.owner_uid != uid:
        return None
    return Ending(job, jd)


def finished(settings: OperatorSettings, end: Ending, pod: PodView | None,
             ledger: Callable[[], Figures | None] | None = None, forge: Forge | None = None) -> Finished | None:
    """The end of the Job whose Pod is ``pod`` (``None``: it vanished), or ``None`` while the Pod runs.
    ``ledger`` reads the gateway's figures of the Job (behind the gateway only); ``forge`` (the operator's own
    client, ``None`` without credentials) confirms what the job pushed (``status.outputs``)."""
    host = end.jd.read_host()
    done = complete(settings, end.jd, host, pod, end.job.name, ledger)
    if done is None:
        return None
    return Finished(host, with_outputs(done, forge, end.job, pod))


def with_outputs(done: Completion, forge: Forge | None, job: JobView, pod: PodView | None) -> Completion:
    """``done`` with the outputs the forge confirms (docs/workspace.md#what-a-job-records): looked up only for a
    push the runner reported, on the branch the operator handed the Pod (its ``PI_CHECKOUT``, else as recorded)."""
    pushed = done.report.workspace.pushed if done.report.workspace is not None else None
    if forge is None or pushed is None or job.spec is None:
        return done
    checkout = checkout_of(pod) or job.status.checkout
    try:
        found = read_outputs(forge, job.spec.repository, checkout.branch if checkout is not None else None, pushed)
    except Exception as exc:  # the Job's end is never held up by its outputs: it is recorded without them
        log.warning("Job %s: its outputs were not read: %s: %s", job.name, type(exc).__name__, exc)
        found = JobOutputs(unconfirmed=f"The forge's answer could not be read ({type(exc).__name__}).")
    return done if found is None else replace(done, ended=replace(done.ended, outputs=found))


def abandon(settings: OperatorSettings, cluster: Cluster, end: Ending, pod: PodView,
            wall: float) -> Finished | None:
    """A Pod not started within the start timeout: delete it, and the Job ends ``Failed`` (``PodNeverStarted``).

    Judged again on a fresh read (the caller holds the Job's lock): ``None`` when the Pod has started
    since, is gone (its end is the completion's) or is another Job's. Raises when the delete fails for
    another reason than gone: the Pod might still start, so the Job stays Running and the resync tries again.
    """
    name = end.job.name
    found = cluster.api.get_or_none(cluster.pods(pod.name))
    fresh = PodView.of(found) if found else None
    why = fresh.never_started(wall, settings.job_start_timeout_seconds) if fresh is not None else None
    if why is None or fresh is None or fresh.owner_uid != end.job.uid:
        return None
    try:
        cluster.api.delete(cluster.pods(fresh.name))
    except ApiError as exc:
        if exc.status != 404:
            raise
    emit("job_pod_never_started", job=name, reason=why.split(":", 1)[0])
    host = end.jd.read_host()
    return Finished(host, unstarted(end.jd, host, why, settings.job_start_timeout_seconds))


def complete(settings: OperatorSettings, jd: JobDir, host: HostRecord | None, pod: PodView | None,
             job: str, ledger: Callable[[], Figures | None] | None = None) -> Completion | None:
    """The end of the Job whose Pod is ``pod`` (``None``: it vanished), or ``None`` while the Pod runs."""
    outcome = pod_phase(pod)
    if outcome is None:
        return None
    # Behind the gateway its ledger is the job's count (the report is the agent's claim), and a job it refused
    # for its budget failed: what it wrote after the refusal is never promoted.
    figures = ledger() if ledger is not None else None
    budget_spent = usage.over_budget(figures)
    if budget_spent:
        outcome = "Failed"
    # A process killed for memory (pi, or a build pi ran) disturbed the run even when pi carried on and
    # the container exited 0: the job failed, and what it wrote is not promoted.
    limit = pod.oom_limit if pod is not None else None
    if limit is not None:
        outcome = "Failed"
    # Transfer mode: the operator's staging holds the job's result only once an upload committed (the marker).
    # A Pod that says it succeeded without one (killed mid-upload, refused over the cap, an agent that exited
    # 0 on its own) failed: half a result, or the staged input, is never promoted.
    incomplete = outcome == "Succeeded" and transfer_incomplete(settings, jd, host)
    if incomplete:
        outcome = "Failed"
    report = parse_report(pod.message if pod is not None else None) or RunnerReport()
    if figures is not None:
        counted = usage.as_tokens(figures)
        seen_by_gateway = JobGateway(requests=figures.requests, refusals=usage.shown_refusals(figures) or None,
                                     claimedTokens=report.tokens or None)
        report = replace(report, tokens=counted)
    else:
        seen_by_gateway = None
    verdict = host.verdict() if host is not None else None
    promotion = None
    if host is not None and verdict is not None and outcome == "Succeeded":
        began = time.perf_counter()
        # The Job's own secrets by digest: the App token the operator minted (host record) and what the runner
        # reported (the agent controls the Pod, so a report may leave some out; the formats are scanned anyway).
        # Fenced: a replica woken from a pause past its lease stops before the promotion's next write.
        promotion = promote_once(settings.store, jd, host, report.context, job=job,
                                 secrets=host.secrets + report.secrets,
                                 seams=fence.Fenced(failpoints.FailpointSeams(job)))
        metrics.PROMOTION_SECONDS.observe(time.perf_counter() - began)
        metrics.PROMOTIONS.labels(result_label(promotion)).inc()
    forgotten = (promotion is not None and promotion.forgotten) or (host is not None and jd.forgotten())
    merged = merge_session(verdict, report.session, promotion)
    if merged is not None and rethreaded(host, report):
        merged["rethreaded"] = True
    session = JobSession.model_validate(merged) if merged is not None else None
    succeeded = outcome == "Succeeded"
    if budget_spent:
        return Completion(Ended("Failed", session, report.tokens or None, "TokenBudget",
                                "The job used its token budget (run.maxTokens, or the deployment's "
                                "gateway.defaultMaxTokens; a resumed job's replayed conversation counts) and the "
                                "gateway refused its next model request; nothing was promoted, the stored "
                                "conversation is unchanged. Raise the budget or split the work, then re-create the "
                                "Job.", gateway=seen_by_gateway), None, report, forgotten)
    if pod is not None and pod.deadline_exceeded:
        deadline = pod.active_deadline_seconds
        return Completion(Ended(outcome, session, report.tokens or None, "DeadlineExceeded",
                                f"The job ran past its timeout ({deadline} s: run.timeoutSeconds, or the deployment's "
                                "job.timeoutSeconds, capped below a GitHub App token's life) and was stopped; "
                                "nothing was promoted, the stored conversation is unchanged.", gateway=seen_by_gateway),
                          None, report, forgotten)
    seen = report.workspace.status() if report.workspace is not None else None
    workspace = JobWorkspace.model_validate(seen) if seen is not None else None
    if not succeeded and report.workspace is not None and report.workspace.failure is not None:
        return Completion(Ended(outcome, session, report.tokens or None, CHECKOUT_FAILURES[report.workspace.failure],
                                checkout_message(report.workspace.failure, report.workspace.detail), workspace,
                                gateway=seen_by_gateway),
                          None, report, forgotten)
    if limit is not None:
        return Completion(Ended(outcome, session, report.tokens or None, "OOMKilled",
                                f"The job ran out of memory (its limit: {limit}, run.resources or the deployment's "
                                "job.resources) and the kernel killed it; nothing was promoted, the stored "
                                "conversation is unchanged. Raise the memory limit, then re-create the Job.",
                                workspace, gateway=seen_by_gateway), None, report, forgotten)
    if incomplete:
        return Completion(Ended(outcome, session, report.tokens or None, "TransferIncomplete",
                                "The job Pod succeeded but its result never reached the operator (no committed "
                                "upload: the runner was stopped while handing it back, or the operator refused it, "
                                "e.g. over sessions.staging.transfer.maxBytes; the job's log says which). Nothing "
                                "was promoted, the stored conversation is unchanged. Re-create the Job once the "
                                "cause is fixed.", workspace, gateway=seen_by_gateway), None, report, forgotten)
    reason = "KeyForgotten" if forgotten and succeeded else ("PodSucceeded" if succeeded else "PodFailed")
    return Completion(Ended(outcome, session, report.tokens or None, reason, end_message(outcome, pod, promotion,
                                                                                         forgotten), workspace,
                            handoff_view(promotion), gateway=seen_by_gateway),
                      promotion, report, forgotten)


def transfer_incomplete(settings: OperatorSettings, jd: JobDir, host: HostRecord | None) -> bool:
    """In transfer mode, a Job with a staged session whose upload never committed (no ``uploaded.json``)."""
    if settings.staging.transfer is None or host is None or not host.mounted:
        return False
    return jd.read(TRANSFER_MARKER) is None


def rethreaded(host: HostRecord | None, report: RunnerReport) -> bool:
    """The host staged a letter for this job and the runner says it started the new session from it."""
    return host is not None and host.rethread and report.rethread is not None and report.rethread.unpacked


def handoff_view(promotion: PromotionResult | None) -> JobHandoff | None:
    """``status.handoff``: the handoff this job packed, once promoted with its transcript."""
    written = promotion.handoff if promotion is not None and promotion.promoted else None
    if written is None or written.writer is None:
        return None
    return JobHandoff(writer=written.writer, status=written.status, entries=written.entries)


def checkout_message(failure: str, detail: str | None) -> str:
    """The condition message of a job whose workspace could not be checked out (pi never started)."""
    said = f" (git: {detail})" if detail else ""
    if failure == "commit-gone":
        return (f"The commit resolved for this job is no longer on the forge{said}: the branch was force-pushed "
                "between the resolution and the clone. Nothing ran and it is not retried; re-create the Job to "
                "check out the branch as it is now.")
    if failure == "forbidden-path":
        return (f"The checkout holds a path pi reads when it starts, where it may not ({detail or 'no detail'}). "
                "Nothing ran and it is not retried: pi would have run or read what the repository put there "
                "(a fork's .pi, .agents or AGENTS.md; a context file linked outside the workspace). Remove it "
                "from the branch, then re-create the Job.")
    if failure == "too-large":
        return (f"The repository's files do not fit the job's workspace ({detail or 'no detail'}). Nothing was "
                "written and it is not retried. Raise job.workspace.sizeLimit in the chart's values if the "
                "repository is meant to be this large, then re-create the Job.")
    if failure == "auth-failed":
        return (f"The forge refused the job's token for the clone{said}. Nothing ran; check the App's access to "
                "the repository (pidispatch doctor), then re-create the Job.")
    return (f"The workspace could not be cloned after retries{said}. Nothing ran; the stored conversation is "
            "unchanged. Re-create the Job once the forge is reachable.")


def unstarted(jd: JobDir, host: HostRecord | None, why: str, timeout_seconds: int) -> Completion:
    """The end of a Job whose Pod did not start within the start timeout (the Pod is deleted; nothing ran)."""
    verdict = host.verdict() if host is not None else None
    merged = merge_session(verdict, None, None)
    return Completion(Ended("Failed", JobSession.model_validate(merged) if merged is not None else None, None,
                            "PodNeverStarted",
                            f"The job Pod did not start within {timeout_seconds} s (job.startTimeoutSeconds): "
                            f"{why[:600]}. It was deleted and its slot freed; nothing ran and the stored "
                            "conversation is unchanged. Fix the cause, then re-create the Job."),
                      None, RunnerReport(), host is not None and jd.forgotten())


def record_end(settings: OperatorSettings, cluster: Cluster, job: JobView, host: HostRecord | None,
               done: Completion) -> None:
    """Write a Job's end: its SessionKey first, then its terminal status, the token metrics, and Events for what
    is out of the ordinary (a rethreaded start, a promotion that did not happen, a deadline, a Pod that never
    started, OOM)."""
    name = job.name
    start = cost.session_start(done.ended.session)
    if host is not None and not done.forgotten:
        # Before the Job's terminal status: a Job that reads terminal never comes back here, and
        # writing the same SessionKey facts twice after a kill is harmless.
        promoted_at = cluster.clock() if done.promotion is not None and done.promotion.promoted else None
        found: list[KeyOutcome] = [sessionkey.last_job_facts(name, host, done.ended.session, promoted_at,
                                                             done.report.workspace if promoted_at is not None
                                                             else None, done.ended.outputs)]
        if promoted_at is not None and not host.resume:  # a resumed job keeps the lineage it continued
            found.append(rethread_fact(name, host, done))
        if promoted_at is not None:
            found.append(Promoted())
        failed = quarantine.count(settings, name, resumed=host.resume, ended=done.ended, now=cluster.clock())
        found += [*([failed] if failed is not None else []), cost.JobUsage(name, start, done.report.tokens or None)]
        try:
            sessionkey.ensure(cluster, host)  # gone if a kill came between the Pod's create and the SessionKey's
            sessionkey.write(settings, cluster, host.key, found)
        except Exception as exc:  # the SessionKey is a view of the store: the refresh timer mends it
            log.warning("SessionKey %s not written: %s: %s", host.key, type(exc).__name__, exc)
    cluster.record(job, done.ended)
    failpoints.at("status-written", name)
    if done.ended.session is not None and done.ended.session.rethreaded and host is not None:
        metrics.RETHREADS.labels(str(host.reason)).inc()
        cluster.event(job, "Normal", "Rethreaded",
                      f"The resume was refused ({host.reason}); the job started a new session from the stored "
                      "letter and ledger instead of a cold start.")
    metrics.observe_job_usage(start, done.report.tokens)
    seen = done.ended.gateway
    differs = usage.disagreement(done.report.tokens, seen.claimedTokens.model_dump(exclude_none=True)
                                 if seen is not None and seen.claimedTokens is not None else None)
    if differs is not None:
        cluster.event(job, "Warning", "TokensDisagree",
                      f"The job's report claims other token figures than the gateway counted: {differs}. "
                      "status.tokens, the metrics and the cost report use the gateway's.")
    # A promotion is the routine end: the Job's Completed condition and the SessionKey's lastPromotedAt say so,
    # and an Event for it would be one more API write per job (issue 18: at most 6, a queued job included).
    # A promotion that did not happen is worth a person's attention, so it still gets its Warning.
    if done.promotion is not None and not done.promotion.promoted:
        cluster.event(job, "Warning", "NotPromoted",
                      "Transcript not promoted: the conversation was forgotten while the job ran."
                      if done.forgotten else f"Transcript not promoted: {done.promotion.reason}.")
    elif done.promotion is None and done.ended.condition_reason in ("DeadlineExceeded", "PodNeverStarted",
                                                                    "OOMKilled", "TransferIncomplete", "TokenBudget"):
        cluster.event(job, "Warning", done.ended.condition_reason, done.ended.message)


def rethread_fact(name: str, host: HostRecord, done: Completion) -> Rethreaded:
    """The SessionKey's ``rethreadedBy`` after a job that did not resume: the job and the refusal it carried the
    work across, or neither for a cold start without a letter (the stored conversation begins afresh)."""
    if done.ended.session is not None and done.ended.session.rethreaded:
        return Rethreaded(name, host.reason)
    return Rethreaded()


def result_label(promotion: PromotionResult) -> str:
    return "forgotten" if promotion.forgotten else promotion.reason


def end_message(outcome: str, pod: PodView | None, promotion: PromotionResult | None,
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
