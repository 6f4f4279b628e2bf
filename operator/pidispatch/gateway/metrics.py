"""The gateway's Prometheus metrics. Labels are closed sets: never a job, a repository, a host or a key."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

TOKEN_KINDS = ("input", "output", "cacheRead", "cacheWrite")


class GatewayMetrics:
    """One registry per gateway app (tests build several in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("pidispatch_gateway_model_requests", "Model requests forwarded upstream, by wire "
                                "API and the upstream's status class.", ["api", "status"], registry=self.registry)
        self.refusals = Counter("pidispatch_gateway_refusals", "Requests refused (and replies without usage: "
                                "no-usage), by reason.", ["reason"], registry=self.registry)
        self.tokens = Counter("pidispatch_gateway_tokens", "Tokens the providers reported, by kind (pi's mapping).",
                              ["kind"], registry=self.registry)
        self.upstream_seconds = Histogram("pidispatch_gateway_upstream_seconds", "From forwarding a request to the "
                                          "upstream's response head (time to first byte).", ["api"],
                                          registry=self.registry,
                                          buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.upstream_errors = Counter("pidispatch_gateway_upstream_errors", "Model requests whose upstream could "
                                       "not be reached or broke off.", ["api"], registry=self.registry)
        self.connections = Gauge("pidispatch_gateway_connections", "Connections open on the TLS port.",
                                 registry=self.registry)
        for kind in TOKEN_KINDS:
            self.tokens.labels(kind=kind)
