"""The receiver's Prometheus metrics. Labels are closed sets: never a repository, a sender or a delivery id."""

from __future__ import annotations

from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Result(StrEnum):
    """What became of one delivery (the ``result`` label, and the ``result`` field of its log event)."""

    CREATED = "created"  # at least one Job created
    DUPLICATE = "duplicate"  # every matching Job already existed: a redelivery
    IGNORED = "ignored"  # verified, but no Trigger can or does match
    UNAUTHORIZED = "unauthorized"  # signature missing, malformed or wrong
    TOO_LARGE = "too_large"  # body over the cap
    MALFORMED = "malformed"  # verified, but not JSON or not the event's shape (or sent too slowly)
    FAILED = "failed"  # the API server could not be asked or refused (503; a redelivery completes it)
    REFUSED = "refused"  # a Job the API server refuses for good, or would (422; no redelivery creates it)
    BUSY = "busy"  # every body-read permit taken (503 with Retry-After; a redelivery completes it)
    RETIRED = "retired"  # a closed pull request or issue: its key's SessionKey annotated for retirement


class ReceiverMetrics:
    """One registry per receiver app (tests build several apps in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.deliveries = Counter("pidispatch_receiver_deliveries", "Webhook deliveries, by what became of them.",
                                  ["result"], registry=self.registry)
        self.jobs_created = Counter("pidispatch_receiver_jobs_created",
                                    "Job CRs created from deliveries or polled events.", registry=self.registry)
        self.seconds = Histogram("pidispatch_receiver_delivery_seconds", "Time to answer one delivery.",
                                 registry=self.registry,
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10))
        # The webhook listener's connection cap (app.ConnectionCap): what is open, and what was turned away.
        self.connections = Gauge("pidispatch_receiver_connections", "Connections open on the webhook port.",
                                 registry=self.registry)
        self.connections_refused = Counter("pidispatch_receiver_connections_refused",
                                           "Connections to the webhook port answered 503 and closed: the cap "
                                           "was reached.", registry=self.registry)
        # Poll mode (receiver/poll/): what each polled event became (intake.Kind's values), how the forge answered
        # (ok, not_modified: a 304, which spends no rate limit; limited: a refusal or a spent budget; failed), and
        # the wait before the next pass.
        self.poll_events = Counter("pidispatch_receiver_poll_events", "Polled events, by what became of them.",
                                   ["result"], registry=self.registry)
        self.poll_requests = Counter("pidispatch_receiver_poll_requests", "The poller's requests to the forge, by "
                                     "answer.", ["result"], registry=self.registry)
        self.poll_wait = Gauge("pidispatch_receiver_poll_wait_seconds", "The wait before the poller's next pass.",
                               registry=self.registry)
        for result in Result:  # every series exists from the start, at 0
            self.deliveries.labels(result=result.value)
        for answer in POLL_ANSWERS:
            self.poll_requests.labels(result=answer)


POLL_ANSWERS = ("ok", "not_modified", "limited", "failed")
