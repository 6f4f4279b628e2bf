"""Step 4, pod: the job's forge token and its Pod (docs/architecture.md#pod).

The Pod's name is deterministic (``pij-<job>``), so a second create after a restart is a 409 and finds
the Pod, never a second one. The token reaches the Pod only by ``secretKeyRef``: an App installation
token minted into a per-job Secret owned by the Job, or the deployment's pat/gh Secret by reference.

An App installation token lives an hour and is not refreshed inside the Pod (git and gh read
``GH_TOKEN`` once, from the environment). So the run of an App-token job is capped below the token's
life (:func:`token_capped_deadline`): the kubelet stops it before git or gh would meet a 401, and an
Event on the Job says the timeout was cut and why.
"""

from __future__ import annotations

import calendar
import json
import os
import time
from typing import Any

from pidispatch.api.models import JobSpec, TriggerRun, TriggerSpec
from pidispatch.api.views import JobView
from pidispatch.contract import CONTAINER, ENV_COMMAND, ENV_FLOW
from pidispatch.contract.digests import digest_of
from pidispatch.events import emit
from pidispatch.forge.authsource import trigger_auth_source
from pidispatch.forge.checkout import Checkout, Moved, clone_url
from pidispatch.forge.credentials import JobToken, Mint, SecretRef, job_credential
from pidispatch.forge.github import Forge, GitHubError
from pidispatch.jobflow.cluster import Cluster
from pidispatch.kubeapi import ApiError
from pidispatch.manifests.pod import (
    TOKEN_SECRET_KEY,
    GatewayInputs,
    PodInputs,
    TransferInputs,
    WorkspaceInputs,
    gh_host,
    job_pod,
    job_token_secret,
    job_transfer_secret,
    token_secret_name,
    transfer_secret_name,
)
from pidispatch.settings import ConfigError, OperatorSettings, parse_bytes
from pidispatch.store.staging import HostRecord, session_subpath
from pidispatch.transfer import protocol as transfer_protocol
from pidispatch.transfer import token as transfer_token

EPHEMERAL_STORAGE = "ephemeral-storage"


class PodOfEarlierJob(RuntimeError):
    """The Pod's name is taken by the Pod of an earlier Job of the same name (the collector removes it)."""

    def __init__(self, pod: str) -> None:
        super().__init__(f"Pod {pod} belongs to an earlier Job of that name; waiting for the garbage collector "
                         "to remove it")


TOKEN_MARGIN_SECONDS = 300  # the run ends this long before its App token expires (a push in flight, clock skew)


def token_capped_deadline(requested: int | None, token_expires_at: float | None, now: float,
                          start_allowance: int = 0, margin: int = TOKEN_MARGIN_SECONDS
                          ) -> tuple[int | None, str | None]:
    """The Pod's ``activeDeadlineSeconds`` and, when the run timeout had to be cut, the reason in our words.

    ``requested``: ``run.timeoutSeconds`` or the deployment's ``job.timeoutSeconds`` (``None``: no
    timeout). A job with an App token (``token_expires_at``) gets at most the token's remaining life
    less ``margin`` and less ``start_allowance`` (``job.startTimeoutSeconds``: the kubelet counts the
    deadline from the Pod's start, which may come that long after its creation, or the Pod is failed as
    never started), in whole minutes, so the Pods of one deployment get the same deadline whatever the
    second they were created in. Any other job keeps ``requested``.
    """
    if token_expires_at is None:
        return requested, None
    life = max(60, int(token_expires_at - now - margin - start_allowance) // 60 * 60)
    if requested is not None and 0 < requested <= life:
        return requested, None
    asked = f"{requested} s" if requested else "no timeout"
    return life, (f"The run timeout was capped at {life} s (asked for: {asked}): the job's GitHub App installation "
                  f"token expires in {int(token_expires_at - now)} s and is not refreshed, so the run must end "
                  f"{margin} s before it, counting up to {start_allowance} s for the Pod to start "
                  "(job.startTimeoutSeconds). With the App source a run timeout above about 45 minutes (the "
                  "default startTimeoutSeconds) is cut like this; use a pat or gh token for longer runs.")


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


def pod_phase(pod: dict[str, Any] | None) -> str | None:
    """``Succeeded`` / ``Failed`` once the Pod has ended, else ``None``. A vanished Pod counts as failed."""
    if pod is None:
        return "Failed"
    phase = (pod.get("status") or {}).get("phase")
    return phase if phase in ("Succeeded", "Failed") else None


def termination_message(pod: dict[str, Any] | None) -> str | None:
    """The job container's termination message (the runner's report), if the Pod recorded one."""
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if status.get("name") == CONTAINER and terminated.get("message"):
            return str(terminated["message"])
    return None


def oom_killed(pod: dict[str, Any] | None) -> str | None:
    """The job container's memory limit when the kernel killed it for going past it (``OOMKilled``), else None.

    Any process of the container counts (pi, or a command pi ran): containerd marks the container
    ``OOMKilled`` once its cgroup hits the limit, whichever process the kernel chose, even if the
    container then exits 0.
    """
    spec = {c.get("name"): c for c in ((pod or {}).get("spec") or {}).get("containers") or []}
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if status.get("name") == CONTAINER and terminated.get("reason") == "OOMKilled":
            limits = ((spec.get(CONTAINER) or {}).get("resources") or {}).get("limits") or {}
            return str(limits.get("memory") or "the node's memory")
    return None


def deadline_exceeded(pod: dict[str, Any] | None) -> bool:
    """The kubelet stopped the Pod at its ``activeDeadlineSeconds`` (the job's run timeout)."""
    return ((pod or {}).get("status") or {}).get("reason") == "DeadlineExceeded"


def never_started(pod: dict[str, Any], now: float, timeout_seconds: int) -> str | None:
    """Why a Pod that is still not running ``timeout_seconds`` after its creation has not started, or ``None``.

    The Pod's own words: a container's waiting reason and message (``ImagePullBackOff``,
    ``CreateContainerConfigError`` for a missing Secret or ConfigMap, ...), else why it is not
    scheduled, else its phase. A Pod whose container ran, or that ended, has started.
    """
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    created = _epoch(pod["metadata"].get("creationTimestamp"))
    if created is None or now - created < timeout_seconds:
        return None
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting.get("reason") != "ContainerCreating":
            return f"{waiting['reason']}: {waiting.get('message') or 'no message'}"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason') or 'Unschedulable'}: {condition.get('message') or 'no message'}"
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting:
            return f"{waiting.get('reason')}: {waiting.get('message') or 'no message'}"
    return "Pending: the Pod was not scheduled or started"


def _epoch(stamp: Any) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def pod_create_refused_for_good(status: int) -> bool:
    """A Pod create the apiserver answered with a 4xx other than 409 (conflict) or 429 (throttled) is final.

    422 (invalid), 403 (forbidden: RBAC, a ResourceQuota, an admission policy), 400 and the like come
    back the same however often the create is repeated; retrying them would only hold a slot forever.
    """
    return 400 <= status < 500 and status not in (409, 429)


def owner_uid(pod: dict[str, Any]) -> str | None:
    return next((ref.get("uid") for ref in pod["metadata"].get("ownerReferences") or [] if ref.get("controller")),
                None)


def owner_name(pod: dict[str, Any]) -> str | None:
    return next((ref.get("name") for ref in pod["metadata"].get("ownerReferences") or []
                 if ref.get("controller") and ref.get("kind") == "Job"), None)


def job_token(settings: OperatorSettings, cluster: Cluster, forge: Forge | None, job: JobView,
              trigger: TriggerSpec, fork: bool = False) -> JobToken | None:
    """The Secret key the job Pod's ``GH_TOKEN`` comes from; mints and stores one for ``app`` (for a fork's
    pull request, ``fork``, read-only on contents: ``forge/credentials.fork_permissions``).

    The minted token goes only into the per-job Secret (owned by the Job). The operator may create and
    delete Secrets but not read them, so a Secret already there (a restart after creating it, before any
    Pod: ``start.launch`` looks for the Pod first) is replaced by the token just minted: its own token's
    age is unknown, and the run is capped by the expiry of the token the Pod will hold. Raises
    ``GitHubError`` when GitHub refuses or cannot be reached (the caller tells a 4xx, final, from an
    outage, retried).
    """
    source = trigger_auth_source(trigger, settings.store)
    credential = job_credential(source, job.spec.repository if job.spec is not None else "", settings.github, fork)
    if isinstance(credential, SecretRef):
        return JobToken(credential.name, credential.key)
    if not isinstance(credential, Mint):
        return None
    if forge is None:  # unreachable: a Mint needs the App, and the App makes a Forge
        raise GitHubError("POST", "/app/installations/{id}/access_tokens", 400, "no GitHub App client")
    token = forge.mint_job_token(credential.repository, credential.fork)
    name = token_secret_name(job.name, job.uid)
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(token.expires_at))
    secret = job_token_secret(job.name, job.uid, cluster.ns, name, token.value, expires)
    try:
        try:
            cluster.api.create(cluster.secrets(), secret)
        except ApiError as exc:
            if exc.status != 409:
                raise
            cluster.api.delete(f"{cluster.secrets()}/{name}")
            cluster.api.create(cluster.secrets(), secret)
    except ApiError:
        forge.revoke(token)  # not stored
        raise
    emit("job_token_minted", job=job.name, expiresAt=expires, fork=credential.fork)
    return JobToken(name, TOKEN_SECRET_KEY, token.expires_at, digest_of(token.value))


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


def job_resources(settings: OperatorSettings, run: TriggerRun) -> dict[str, dict[str, str]]:
    """The Trigger's ``run.resources``, else the deployment's; with the deployment's ephemeral-storage
    request and limit wherever they name none, so that no job Pod's disk is unbounded (issue 31)."""
    given = run.resources.model_dump(exclude_unset=True) if run.resources is not None else {}
    chosen = given or {part: dict(q) for part, q in settings.job_resources}
    resources = {part: dict(chosen.get(part) or {}) for part in ("requests", "limits")}
    resources["limits"].setdefault(EPHEMERAL_STORAGE, settings.job_ephemeral_storage_limit)
    # Not above a limit a Trigger set lower (the apiserver would refuse the Pod); without a request of its
    # own, the apiserver makes the limit the request.
    limit, request = _bytes(resources["limits"][EPHEMERAL_STORAGE]), settings.job_ephemeral_storage_request
    wanted = _bytes(request)
    if EPHEMERAL_STORAGE not in resources["requests"] and limit is not None and wanted is not None and wanted <= limit:
        resources["requests"][EPHEMERAL_STORAGE] = request
    return resources


def _bytes(quantity: object) -> int | None:
    """A quantity's bytes, or None for one in a form not parsed here (the apiserver judges it)."""
    try:
        return parse_bytes(EPHEMERAL_STORAGE, str(quantity), 0)
    except ConfigError:
        return None


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
               moved: Moved | None = None, gateway: GatewayInputs | None = None) -> dict[str, Any]:
    """Create the job's Pod, or find the one an earlier attempt created (409). Raises ``ApiError`` otherwise.
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
        if owner_uid(existing) != job.uid:
            raise PodOfEarlierJob(manifest["metadata"]["name"]) from None
        return existing
    if capped is not None:
        emit("job_timeout_capped", job=job.name, activeDeadlineSeconds=deadline)
        cluster.event(job, "Normal", "TimeoutCapped", capped)
    return created
