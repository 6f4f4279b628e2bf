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
TOKENS = Counter("pidispatch_job_tokens", "Tokens used by finished jobs, by whether they resumed.", ["session"],
                 registry=REGISTRY)
GATE_SECONDS = Histogram("pidispatch_gate_seconds", "Time to judge and stage one delivery.", registry=REGISTRY,
                         buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))
PROMOTION_SECONDS = Histogram("pidispatch_promotion_seconds", "Time to promote one transcript.", registry=REGISTRY,
                              buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))

# Cron Triggers (jobflow/cron.py): no Trigger label (a closed set only); per Trigger, see its status.schedule.
CRON_FIRES = Counter("pidispatch_cron_fires", "Jobs created by cron Triggers, one per fired slot.", registry=REGISTRY)
CRON_MISSED = Counter("pidispatch_cron_missed", "Slots of cron Triggers skipped while the operator was down or not "
                      "leading: only the latest slot due fires.", registry=REGISTRY)


def serve(port: int) -> None:
    """Expose ``/metrics`` on ``port`` (0 leaves metrics off)."""
    if port:
        start_http_server(port, registry=REGISTRY)
