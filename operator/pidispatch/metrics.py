"""Prometheus metrics of the operator. Labels are closed sets (reasons, phases): never a key, a
repository or a branch, so a scrape cannot leak what the store holds."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)

RESOLUTIONS = Counter("pidispatch_session_resolutions", "Gate ladder verdicts, by reason.", ["reason"],
                      registry=REGISTRY)
PROMOTIONS = Counter("pidispatch_session_promotions", "Promotion results, by reason.", ["reason"],
                     registry=REGISTRY)
JOBS = Gauge("pidispatch_jobs", "Jobs this operator knows, by phase.", ["phase"], registry=REGISTRY)
JOB_TRANSITIONS = Counter("pidispatch_job_transitions", "Jobs entering a phase.", ["phase"], registry=REGISTRY)
QUEUE_DEPTH = Gauge("pidispatch_queue_depth", "Jobs waiting for a budget slot.", registry=REGISTRY)
SLOTS_IN_USE = Gauge("pidispatch_slots_in_use", "Budget slots held by running jobs.", registry=REGISTRY)
STORE_KEYS = Gauge("pidispatch_store_keys", "Keys in the session store at the last sweep.", registry=REGISTRY)
STORE_BYTES = Gauge("pidispatch_store_bytes", "Transcript bytes in the store at the last sweep.", registry=REGISTRY)
RETHREADS = Counter("pidispatch_rethreads", "Jobs that started a new session from a stored letter and ledger "
                    "instead of a cold start, by the gate's refusal.", ["reason"], registry=REGISTRY)
# The job-usage metrics share the label `session`: how the job started (jobflow/cost.py): resumed,
# rethreaded, cold, or none (no session). Divide tokens by jobs of the same label for tokens per job.
TOKENS = Counter("pidispatch_job_tokens", "Tokens of finished jobs' own replies (pi's totalTokens), by how the job "
                 "started.", ["session"], registry=REGISTRY)
TOKEN_PARTS = Counter("pidispatch_job_token_parts", "Tokens of finished jobs' own replies by part (input, output, "
                      "cacheRead, cacheWrite) and by how the job started.", ["session", "part"], registry=REGISTRY)
JOBS_ENDED = Counter("pidispatch_jobs_ended", "Finished jobs, by how they started (with or without a token report).",
                     ["session"], registry=REGISTRY)
JOBS_MEASURED = Counter("pidispatch_jobs_measured", "Finished jobs whose runner reported tokens, by how they "
                        "started: the denominator of tokens per job.", ["session"], registry=REGISTRY)
COST = Counter("pidispatch_job_cost_dollars", "What finished jobs' replies cost, as pi priced them, by how the job "
               "started (jobs with an unpriced reply are left out).", ["session"], registry=REGISTRY)
GATE_SECONDS = Histogram("pidispatch_gate_seconds", "Time to judge and stage one delivery.", registry=REGISTRY,
                         buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))
PROMOTION_SECONDS = Histogram("pidispatch_promotion_seconds", "Time to promote one transcript.", registry=REGISTRY,
                              buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))

# Cron Triggers (jobflow/cron.py): no Trigger label (a closed set only); per Trigger, see its status.schedule.
CRON_FIRES = Counter("pidispatch_cron_fires", "Jobs created by cron Triggers, one per fired slot.", registry=REGISTRY)
CRON_MISSED = Counter("pidispatch_cron_missed", "Slots of cron Triggers skipped while the operator was down or not "
                      "leading: only the latest slot due fires.", registry=REGISTRY)

# The operator's workqueue (reconcile/workqueue.py) and the pump's starts (jobflow/queue.py), by kind: Job, Pod,
# SessionKey, Trigger, JobStart (a closed set, never a name).
WORKQUEUE_RETRIES = Counter("pidispatch_workqueue_retries", "Reconciles that failed and were queued again after a "
                            "back-off, by kind.", ["kind"], registry=REGISTRY)
WORKQUEUE_DROPPED = Counter("pidispatch_workqueue_dropped", "Keys dropped after failing as many times in a row as "
                            "the cap allows (back at their next event or resync), by kind.", ["kind"],
                            registry=REGISTRY)


TOKEN_PART_NAMES = ("input", "output", "cacheRead", "cacheWrite")


def observe_job_usage(session: str, tokens: dict[str, float]) -> None:
    """Count one finished job that started as ``session`` and the tokens its runner reported (maybe none)."""
    JOBS_ENDED.labels(session).inc()
    if "total" not in tokens:
        return
    JOBS_MEASURED.labels(session).inc()
    TOKENS.labels(session).inc(tokens["total"])
    for part in TOKEN_PART_NAMES:
        if part in tokens:
            TOKEN_PARTS.labels(session, part).inc(tokens[part])
    if "cost" in tokens:
        COST.labels(session).inc(tokens["cost"])


def serve(port: int) -> None:
    """Expose ``/metrics`` on ``port`` (0 leaves metrics off)."""
    if port:
        start_http_server(port, registry=REGISTRY)
