"""``pidispatch doctor``'s gateway lines (docs/gateway.md#deploying): whether jobs go out through a gateway, and
whether the one they would use can be used (its key, the CA job Pods mount, an answer over verified TLS).

The check is pure over :class:`GatewayFacts`; ``edge.gather_gateway`` reads them: the key file the operator
signs capabilities with, the CA ConfigMap through the apiserver, and one HTTPS request to the gateway's URL
verified with that CA, from where doctor runs (``helm test`` runs it in a Pod of the release, beside the
operator). Any HTTP answer means the gateway is up and its certificate is the one job Pods will verify; nothing
is sent but a ``GET /`` with no credential.
"""

from __future__ import annotations

from dataclasses import dataclass

from pidispatch.doctor.check import Check, Status, helm_fix
from pidispatch.settings.gateway import Gateway


@dataclass(frozen=True)
class GatewayFacts:
    """What doctor found; each ``*_error`` is ``None`` when that part is fine, ``None`` facts were not looked at."""

    key_error: str | None = None
    ca_error: str | None = None  # the ConfigMap or its ca.crt missing or unreadable
    answered: int | None = None  # the HTTP status of the probe
    probe_error: str | None = None


def gateway_checks(gateway: Gateway | None, facts: GatewayFacts | None, namespace: str | None) -> list[Check]:
    """One line when all is well; a failure for each part a job would fail on. ``facts`` ``None``: offline."""
    if gateway is None:
        return [Check("gateway", Status.WARN, "jobs go out without a gateway: each job Pod holds the model keys and "
                                              "the forge token it uses, and reaches what the NetworkPolicy allows",
                      helm_fix(namespace, "gateway.enabled=true"))]
    checks = []
    if facts is not None and facts.key_error is not None:
        checks.append(Check("gateway", Status.FAIL, f"{facts.key_error}: the operator cannot sign capabilities, so "
                                                    "every job fails before its Pod starts"))
    if facts is None:
        return checks or [Check("gateway", Status.OK, f"jobs go out through {gateway.url} (not reached: offline)")]
    pods = f"kubectl get pods{f' -n {namespace}' if namespace else ''} -l app.kubernetes.io/component=gateway"
    if facts.ca_error is not None:
        checks.append(Check("gateway", Status.FAIL, f"{facts.ca_error}: job Pods mount it to verify the gateway, "
                                                    "so none can start",
                            helm_fix(namespace, "gateway.enabled=true")))
    elif facts.probe_error is not None:
        checks.append(Check("gateway", Status.FAIL, f"the gateway at {gateway.url} did not answer "
                                                    f"({facts.probe_error}): every job's model, forge and proxy "
                                                    "requests would fail", pods))
    if checks:
        return checks
    return [Check("gateway", Status.OK, f"jobs go out through {gateway.url}: it answered over TLS verified with "
                                        f"ConfigMap {gateway.ca_configmap}")]
