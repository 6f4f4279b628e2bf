"""Step 4's gateway part: the Job's capability, minted into its own Secret (docs/gateway.md#the-capability).

Behind the gateway the Pod gets no forge token and no model key. The operator signs what the Job may
reach instead: its repository on the forge, whether it serves a fork (read-only but for its comment), its
token budget, the hosts its proxy may reach, and where the gateway finds the job's forge token (the
per-job or deployment Secret ``job_token`` chose) and its model keys (the deployment's and the Trigger's
credentials). A second attempt replaces the Secret (deleted and created again: it is immutable): the
capability's expiry follows the run timeout from the attempt that creates the Pod.
"""

from __future__ import annotations

from pidispatch.api.models import TriggerSpec
from pidispatch.api.views import JobView
from pidispatch.contract.digests import SecretDigest, digest_of
from pidispatch.forge.credentials import JobToken
from pidispatch.gateway import capability as gateway_capability
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.jobtoken import token_capped_deadline
from pidispatch.jobflow.pod import job_credentials
from pidispatch.kubeapi import ApiError
from pidispatch.manifests.pod import GatewayInputs, gateway_secret_name, job_gateway_secret
from pidispatch.settings import OperatorSettings
from pidispatch.settings.gateway import EXPIRY_MARGIN_SECONDS, NO_TIMEOUT_SECONDS


def job_claims(settings: OperatorSettings, namespace: str, job: JobView, trigger: TriggerSpec,
               token: JobToken | None, credentials: dict[str, tuple[str, str]], deadline: int | None, now: float
               ) -> gateway_capability.Claims:
    """What ``job`` may reach through the gateway; ``deadline`` is its Pod's activeDeadlineSeconds."""
    spec = job.spec
    if spec is None:
        raise ValueError(f"Job {job.name}'s spec is not valid: {job.invalid}")
    gateway = settings.gateway
    if gateway is None:
        raise ValueError("no gateway is configured")
    run = trigger.run
    life = (deadline or NO_TIMEOUT_SECONDS) + settings.job_start_timeout_seconds + EXPIRY_MARGIN_SECONDS
    return gateway_capability.Claims(
        uid=job.uid, namespace=namespace, job=job.name,
        repository=spec.repository, forge=settings.github.web_url.rstrip("/"),
        api=settings.github.api_url.rstrip("/"), exp=int(now) + life, fork=spec.fork is True,
        subject=spec.pullRequest if spec.pullRequest is not None else spec.issue,
        max_tokens=run.maxTokens if run.maxTokens is not None else gateway.default_max_tokens,
        egress=tuple(dict.fromkeys(host.lower() for host in run.egress or ())),
        token=gateway_capability.SecretRef(token.secret, token.key) if token is not None else None,
        credentials={name: gateway_capability.SecretRef(secret, key)
                     for name, (secret, key) in sorted(credentials.items())},
    )


def mint_capability(settings: OperatorSettings, cluster: Cluster, job: JobView, trigger: TriggerSpec,
                    token: JobToken | None, now: float) -> tuple[GatewayInputs, SecretDigest | None]:
    """The Job's capability in its own Secret, how its Pod reaches the gateway, and the capability's digest:
    the operator's own knowledge of the one secret the job holds, for the scan before a promotion
    (``store/redact.py``), whatever the runner reports. Raises ``ApiError``."""
    deadline, _ = token_capped_deadline(trigger.run.timeoutSeconds or settings.job_timeout_seconds or None,
                                        token.expires_at if token is not None else None, now,
                                        settings.job_start_timeout_seconds)
    claims = job_claims(settings, cluster.ns, job, trigger, token, job_credentials(settings, trigger.run),
                        deadline, now)
    return gateway_inputs(settings, cluster, claims)


def gateway_inputs(settings: OperatorSettings, cluster: Cluster, claims: gateway_capability.Claims
                   ) -> tuple[GatewayInputs, SecretDigest | None]:
    """Mint ``claims`` into the Job's own Secret (replacing an earlier attempt's); how its Pod reaches the
    gateway, and the capability's digest. Raises ``ApiError``."""
    gateway = settings.gateway
    if gateway is None:
        raise ValueError("no gateway is configured")
    value = gateway_capability.mint(gateway_capability.load_key(gateway.key_file), claims)
    secret = job_gateway_secret(claims.job, claims.uid, cluster.ns, value)
    name = gateway_secret_name(claims.job, claims.uid)
    try:
        cluster.api.create(cluster.secrets(), secret)
    except ApiError as exc:
        if exc.status != 409:
            raise
        cluster.api.delete(f"{cluster.secrets()}/{name}")
        cluster.api.create(cluster.secrets(), secret)
    return (GatewayInputs(url=gateway.url, proxy=gateway.proxy, ca_configmap=gateway.ca_configmap, secret=name),
            digest_of(value))
