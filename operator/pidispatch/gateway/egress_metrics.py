"""The proxy's Prometheus figures (docs/gateway.md#egress). Labels are closed sets (a refusal reason, a
direction): never a host, a job or a capability, so a scrape tells no one where jobs went."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class EgressMetrics:
    """The counters of one proxy, in ``registry`` (the gateway's, which its metrics port serves)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.tunnels = Counter("pidispatch_gateway_egress_tunnels", "CONNECT tunnels opened to an allowed host.",
                               registry=self.registry)
        self.open = Gauge("pidispatch_gateway_egress_open_tunnels", "CONNECT tunnels open now.",
                          registry=self.registry)
        self.refusals = Counter("pidispatch_gateway_egress_refusals", "CONNECT requests refused, by reason.",
                                ["reason"], registry=self.registry)
        self.bytes = Counter("pidispatch_gateway_egress_bytes", "Bytes through CONNECT tunnels, by direction "
                             "(up: job to host; down: host to job).", ["direction"], registry=self.registry)

    def value(self, name: str, **labels: str) -> float:
        """One sample's value (0 when absent): for tests and the benchmark."""
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found
