"""Step 4, pod: the job's Pod, created (docs/architecture.md#pod).

The Pod's name is deterministic (``pij-<job>``), so a second create after a restart is a 409 and finds
the Pod, never a second one. The token reaches the Pod only by ``secretKeyRef`` (``jobtoken.py``: an App
installation token minted into a per-job Secret owned by the Job, or the deployment's pat/gh Secret by
reference), and an App-token job's run is capped below the token's life (``jobtoken.token_capped_deadline``).
The Pod is read back through ``podview.py``; its resources come from ``resources.py``.
"""

from __future__ import annotations

import json
import os
import time

from pidispatch.api.models import JobSpec, TriggerRun, TriggerSpec
from pidispatch.api.views import JobView
from pidispatch.contract import ENV_COMMAND, ENV_FLOW
from pidispatch.contract.overrides import mount_path
from pidispatch.events import emit
from pidispatch.forge.checkout import Checkout, Moved, clone_url
from pidispatch.forge.credentials import JobToken
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.jobtoken import token_capped_deadline
from pidispatch.jobflow.podview import PodView
from pidispatch.jobflow.resources import job_resources
from pidispatch.kubeapi import ApiError
from pidispatch.manifests.pod import (
    GatewayInputs,
    PodInputs,
    TransferInputs,
    WorkspaceInputs,
    gh_host,
    job_pod,
    job_transfer_secret,
    transfer_secret_name,
)
from pidispatch.settings import OperatorSettings
from pidispatch.store.staging import HostRecord, session_subpath
from pidispatch.transfer import protocol as transfer_protocol
from pidispatch.transfer import token as transfer_token


class PodOfEarlierJob(RuntimeError):
    """The Pod's name is taken by the Pod of an earlier Job of the same name (the collector removes it)."""

    def __init__(self, pod: str) -> None:
        super().__init__(f"Pod {pod} belongs to an earlier Job of that name; waiting for the garbage collector "
                         "to remove it")


def job_pod_uid() -> int:
    """The uid job Pods run as: the operator's own, so they can read and rewrite the staged copy it
    creates 0600 in a 0700 directory (the chart's ``securityContext.runAsUser``). An operator running
    as root (a development machine) keeps the restricted profile's non-root default instead."""
    uid = os.getuid()
    return uid if uid != 0 else PodInputs.run_as_user


def pod_env(job_name: str, job_spec: JobSpec, trigger_spec: TriggerSpec) -> dict[str, str]:
    """The event and run facts a runner needs; the same with or without a session (none derive from the key)."""
    run = trigger_spec.run
    env = {
        "PI_JOB_NAME": job_name,
        "PI_TRIGGER": job_spec.trigger,
        "PI_FORGE": job_spec.forge,
        "PI_REPOSITORY": job_spec.repository,
        # The spec as it was written (the fields it set, unknown ones included), so the runner reads what the
        # Job's maker said.
        "PI_JOB_SPEC": json.dumps(job_spec.model_dump(mode="json", exclude_unset=True, exclude={"resolved"}),
                                  sort_keys=True, separators=(",", ":")),
    }
    for name, value in (("PI_ISSUE", job_spec.issue), ("PI_PULL_REQUEST", job_spec.pullRequest),
                        ("PI_MODEL", run.model), ("PI_VERSION", run.piVersion), (ENV_FLOW, run.flow),
                        (ENV_COMMAND, run.command)):
        if value is not None:
            env[name] = str(value)
    return env


def pod_create_refused_for_good(status: int) -> bool:
    """A Pod create the apiserver answered with a 4xx other than 409 (conflict) or 429 (throttled) is final.

    422 (invalid), 403 (forbidden: RBAC, a ResourceQuota, an admission policy), 400 and the like come
    back the same however often the create is repeated; retrying them would only hold a slot forever.
    """
    return 400 <= status < 500 and status not in (409, 429)


def workspace_inputs(settings: OperatorSettings, repository: str, checkout: Checkout | None,
                     moved: Moved | None) -> WorkspaceInputs:
    """The checkout, git identity, forge host and CA bundle of a job Pod."""
    return WorkspaceInputs(
        checkout=checkout.env(clone_url(settings, repository)) if checkout is not None else None,
        subject=checkout.subject.as_json() if checkout is not None and checkout.subject is not None else None,
        previous=moved.as_json() if moved is not None else None,
        git_name=settings.job_git_name, git_email=settings.job_git_email,
        gh_host=gh_host(settings.github.web_url),
        ca_bundle_configmap=settings.github.ca_bundle_configmap)


def job_credentials(settings: OperatorSettings, run: TriggerRun) -> dict[str, tuple[str, str]]:
    """The deployment's model credentials with the Trigger's ``run.credentials`` merged over them."""
    merged = {name: (secret, key) for name, secret, key in settings.job_credentials}
    for name, ref in (run.credentials or {}).items():
        merged[name] = (ref.secretName, ref.key)
    return merged


def transfer_inputs(settings: OperatorSettings, cluster: Cluster, job: JobView) -> TransferInputs | None:
    """In transfer mode, the Job's own transfer credential stored in its per-job Secret, and what its Pod is
    given to reach the operator; ``None`` in mount mode.

    The token is the HMAC of the Job's uid under the operator's key (``transfer/token.py``): the same on
    every attempt, so a Secret an earlier attempt created (409) already holds it. Raises ``ApiError``."""
    transfer = settings.staging.transfer
    if transfer is None:
        return None
    value = transfer_token.job_token(transfer_token.load_key(transfer.token_key_file), job.uid)
    try:
        cluster.api.create(cluster.secrets(), job_transfer_secret(job.name, job.uid, cluster.ns, value))
    except ApiError as exc:
        if exc.status != 409:
            raise
    return TransferInputs(url=transfer_protocol.session_url(transfer.base_url, job.uid),
                          secret=transfer_secret_name(job.name, job.uid), ca_configmap=transfer.ca_configmap,
                          max_bytes=transfer.max_bytes)


def create_pod(settings: OperatorSettings, cluster: Cluster, job: JobView, trigger: TriggerSpec,
               host: HostRecord | None, token: JobToken | None, checkout: Checkout | None = None,
               moved: Moved | None = None, gateway: GatewayInputs | None = None) -> PodView:
    """Create the job's Pod, or find the one an earlier attempt created (409), and read it as the API answered
    (:class:`PodView`, the edge). Raises ``ApiError`` otherwise.
    ``gateway``: the Job's capability was minted (``capability.py``) and the Pod holds no other credential.

    ``job``'s spec is valid (the admission refused it otherwise)."""
    spec = job.spec
    if spec is None:
        raise ValueError(f"Job {job.name}'s spec is not valid: {job.invalid}")
    run = trigger.run
    staged = host is not None and host.mounted
    transfer = transfer_inputs(settings, cluster, job) if staged else None
    mounted = staged and transfer is None
    deadline, capped = token_capped_deadline(run.timeoutSeconds or settings.job_timeout_seconds or None,
                                             token.expires_at if token is not None else None, time.time(),
                                             settings.job_start_timeout_seconds)
    credentials = job_credentials(settings, run)
    manifest = job_pod(PodInputs(
        job_name=job.name, job_uid=job.uid, namespace=cluster.ns,
        image=run.image or settings.job_image, command=list(settings.job_command),
        env={**dict(settings.job_env), **pod_env(job.name, spec, trigger)},
        staging_claim=settings.staging_claim if mounted else None,
        session_subpath=session_subpath(job.uid) if mounted else None,
        host_resume=bool(host is not None and host.resume),
        rethread=host.reason if host is not None and host.mounted and host.rethread else None,
        rethread_pct=settings.store.rethread_pct,
        run_as_user=job_pod_uid(),
        github_token=(token.secret, token.key) if token is not None and gateway is None else None,
        active_deadline_seconds=deadline,
        resources=job_resources(settings, run),
        credentials=credentials if gateway is None else {},
        run_secrets=tuple(run.secrets or ()),
        models_configmap=settings.job_models_configmap,
        workspace=workspace_inputs(settings, spec.repository, checkout, moved),
        workspace_size_limit=(settings.job_workspace_size_limit, settings.job_workspace_limit_bytes),
        release=settings.release,
        scheduling=settings.job_scheduling,
        trigger_node_selector=dict(run.nodeSelector or {}),
        trigger_tolerations=tuple(t.model_dump(exclude_none=True) for t in run.tolerations or ()),
        trigger_env=tuple((v.name, v.value) for v in run.env or ()),
        trigger_affinity=run.affinity.model_dump(exclude_none=True) if run.affinity is not None else {},
        trigger_priority_class=run.priorityClassName,
        trigger_volumes=tuple((v.name, v.configMap, mount_path(v.name, v.mountPath)) for v in run.volumes or ()),
        transfer=transfer,
        gateway=gateway,
    ))
    try:
        created = cluster.api.create(cluster.pods(), manifest)
    except ApiError as exc:
        if exc.status != 409:
            raise
        existing = cluster.api.get_or_none(cluster.pods(manifest["metadata"]["name"]))
        if existing is None:
            raise
        found = PodView.of(existing)
        if found.owner_uid != job.uid:
            raise PodOfEarlierJob(manifest["metadata"]["name"]) from None
        return found
    if capped is not None:
        emit("job_timeout_capped", job=job.name, activeDeadlineSeconds=deadline)
        cluster.event(job, "Normal", "TimeoutCapped", capped)
    return PodView.of(created)
