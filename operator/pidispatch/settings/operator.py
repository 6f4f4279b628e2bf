"""What the operator process runs with beyond the store's settings (the names of the Helm chart's
Deployment): the namespace it watches, the staging claim, the job Pods it builds, its ports and its Lease."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pidispatch.settings.gateway import GATEWAY_VARIABLES, Gateway, gateway_settings
from pidispatch.settings.github import AUTH_SOURCES, GITHUB_VARIABLES, GitHubSettings
from pidispatch.settings.jobpod import (
    DEFAULT_EPHEMERAL_STORAGE_LIMIT,
    DEFAULT_EPHEMERAL_STORAGE_REQUEST,
    DEFAULT_GIT_EMAIL,
    DEFAULT_GIT_NAME,
    DEFAULT_JOB_COMMAND,
    DEFAULT_JOB_IMAGE,
    DEFAULT_WORKSPACE_SIZE_LIMIT,
    Credentials,
    Resources,
    job_command,
    job_credentials,
    job_disk,
    job_env,
    job_resources,
)
from pidispatch.settings.readers import flag, integer, object_name, one_line, one_of, refuse_empty, text
from pidispatch.settings.scheduling import SCHEDULING_VARIABLES, Scheduling, job_scheduling
from pidispatch.settings.staging import STAGING_VARIABLES, Staging, staging_settings
from pidispatch.settings.store import STORE_VARIABLES, Settings

DEFAULT_STAGING_DIR = "/var/lib/pi-dispatch/jobs"
RETIRE_MODES = ("delete", "archive")  # store.retire.RetireMode's values (settings read no store module)
MAX_SECONDS = 2147483647  # an int32, as Kubernetes' own ttlSecondsAfterFinished

# Every variable the operator reads, named once: an empty value of any of them is refused
# (tests/settings/test_settings_strict.py holds the lists to the names the code reads).
OPERATOR_VARIABLES = (
    "PI_DISPATCH_NAMESPACE",
    "PI_DISPATCH_NODE_NAME",
    "PI_DISPATCH_STAGING_DIR",
    "PI_DISPATCH_STAGING_CLAIM",
    "PI_DISPATCH_MAX_CONCURRENT_JOBS",
    "PI_DISPATCH_JOB_IMAGE",
    "PI_DISPATCH_JOB_COMMAND",
    "PI_DISPATCH_JOB_ENV",
    "PI_DISPATCH_JOB_TIMEOUT_SECONDS",
    "PI_DISPATCH_JOB_START_TIMEOUT_SECONDS",
    "PI_DISPATCH_JOB_RESOURCES",
    "PI_DISPATCH_JOB_CREDENTIALS",
    "PI_DISPATCH_JOB_MODELS_CONFIGMAP",
    "PI_DISPATCH_JOB_POD_RETENTION_SECONDS",
    "PI_DISPATCH_JOB_TTL_SECONDS_AFTER_FINISHED",
    "PI_DISPATCH_JOB_GIT_NAME",
    "PI_DISPATCH_JOB_GIT_EMAIL",
    "PI_DISPATCH_JOB_CHECKOUT",
    "PI_DISPATCH_JOB_TOKEN_PERMISSIONS",
    "PI_DISPATCH_METRICS_PORT",
    "PI_DISPATCH_HEALTH_PORT",
    "PI_DISPATCH_LEASE",
    "PI_DISPATCH_POD_NAME",
    "PI_DISPATCH_RESUMABLE_REFRESH_SECONDS",
    "PI_DISPATCH_SWEEP_INTERVAL_SECONDS",
    "PI_DISPATCH_RELEASE",
    "PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT",
    "PI_DISPATCH_JOB_EPHEMERAL_STORAGE_REQUEST",
    "PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT",
    "PI_DISPATCH_RETIRE",
    "PI_DISPATCH_QUARANTINE_AFTER",
    *SCHEDULING_VARIABLES,
    *STAGING_VARIABLES,
    *GATEWAY_VARIABLES,
    *STORE_VARIABLES,
    *GITHUB_VARIABLES,
)


@dataclass(frozen=True)
class OperatorSettings:
    """What the operator process needs beyond the store's settings (names in the Helm chart's Deployment).

    ``PI_DISPATCH_NAMESPACE`` is the one namespace watched (the release namespace: the RBAC is a Role);
    the staging directory is the operator's mount of the staging PVC and ``PI_DISPATCH_STAGING_CLAIM``
    the name job Pods mount it by.
    """

    store: Settings
    namespace: str | None = None
    staging_dir: str = DEFAULT_STAGING_DIR
    staging_claim: str | None = None
    max_concurrent_jobs: int = 4
    job_image: str = DEFAULT_JOB_IMAGE
    job_command: tuple[str, ...] = DEFAULT_JOB_COMMAND
    job_env: tuple[tuple[str, str], ...] = ()
    # A job's run timeout (its Pod's activeDeadlineSeconds) unless its Trigger sets run.timeoutSeconds; 0: none.
    job_timeout_seconds: int = 3600
    # A job Pod that has not started its container this long after its creation fails its Job (and frees its slot).
    job_start_timeout_seconds: int = 600
    # The job container's resources (requests/limits), unless its Trigger sets run.resources.
    job_resources: Resources = ()
    # Model credentials of every job Pod: (env name, Secret name, key), by secretKeyRef; a Trigger's
    # run.credentials are merged over them.
    job_credentials: Credentials = ()
    # A ConfigMap whose key models.json becomes pi's models.json (read-only) in job Pods.
    job_models_configmap: str | None = None
    # Retention: a finished Job's Pod and per-job token Secret are deleted this long after its completedAt
    # (0: as soon as its outcome is recorded); the Job itself, when set, this long after (None: kept).
    job_pod_retention_seconds: int = 600
    job_ttl_seconds_after_finished: int | None = None
    # The git identity of the agent's commits (the App's bot identity, or the chart's job.git values).
    job_git_name: str = DEFAULT_GIT_NAME
    job_git_email: str = DEFAULT_GIT_EMAIL
    # Clone the job's repository into /workspace at the commit resolved from the forge API (needs the
    # operator's GitHub client; without one the workspace stays empty). Off: the head lookup alone.
    job_checkout: bool = True
    metrics_port: int = 9090
    health_port: int = 8080
    # The coordination.k8s.io Lease the replicas elect their leader on (election/leader.py): only its holder acts.
    lease: str = "pi-dispatch"
    # The Pod's name, the operator's identity on the Lease: a container restarted in the same Pod
    # recognises its own lease instead of waiting for it to expire.
    pod_name: str | None = None
    resumable_refresh_seconds: int = 300
    sweep_interval_seconds: int = 3600
    # The Helm release: job Pods carry it (RELEASE_LABEL), so the uninstall hook deletes only its own.
    release: str | None = None
    # The job Pod's disk: the workspace emptyDir's sizeLimit (a quantity, and in bytes for the runner's
    # size check before the checkout) and the container's ephemeral-storage request and limit.
    job_workspace_size_limit: str = DEFAULT_WORKSPACE_SIZE_LIMIT
    job_workspace_limit_bytes: int = 10 * 2**30
    job_ephemeral_storage_request: str = DEFAULT_EPHEMERAL_STORAGE_REQUEST
    job_ephemeral_storage_limit: str = DEFAULT_EPHEMERAL_STORAGE_LIMIT
    # Where job Pods run: the cluster's rules and the staging claim's co-location (settings/scheduling.py).
    job_scheduling: Scheduling = Scheduling()
    # How job Pods get their staged copy: the claim's subPath (mount) or over HTTPS (transfer).
    staging: Staging = Staging()
    # The gateway (docs/gateway.md): set, job Pods hold a capability and no model key or forge token.
    gateway: Gateway | None = None
    # The node the operator's Pod runs on (the downward API's spec.nodeName): under co-location, resumed job
    # Pods must land there, and a Trigger whose rules exclude it is refused ahead (api/placement.py).
    node_name: str | None = None
    github: GitHubSettings = GitHubSettings()
    # A retired key's directory (its pull request or issue closed): deleted, or archived beside the keys
    # (store/retire.py). The chart's sessions.retire.
    retire: str = "delete"
    # This many resumed jobs in a row that end Failed quarantine the key's transcript (jobflow/lifecycle.py);
    # 0: never. The chart's sessions.quarantineAfter.
    quarantine_after: int = 3

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorSettings:
        """Read and validate every setting; raise :class:`ConfigError` on the first unusable one.

        The checks run in a fixed order (the empty rule over every variable first, then the store's
        settings, the credential source, the job Pod's disk, and the rest as listed below), so the same
        environment always fails on the same variable.
        """
        env = os.environ if env is None else env
        refuse_empty(env, OPERATOR_VARIABLES)
        store = Settings.from_env(env)
        # Strict here (the operator acts on it), lenient in Settings (the store commands never use it).
        one_of(env, "GITHUB_AUTH_SOURCE", AUTH_SOURCES, "one of " + ", ".join(AUTH_SOURCES) + " (unset: gh)")
        workspace, request, limit = job_disk(env)
        return cls(
            store=store,
            namespace=text(env, "PI_DISPATCH_NAMESPACE"),
            release=object_name(env, "PI_DISPATCH_RELEASE"),
            job_workspace_size_limit=workspace[0],
            job_workspace_limit_bytes=workspace[1],
            job_ephemeral_storage_request=request,
            job_ephemeral_storage_limit=limit,
            staging_dir=text(env, "PI_DISPATCH_STAGING_DIR", DEFAULT_STAGING_DIR),
            staging_claim=text(env, "PI_DISPATCH_STAGING_CLAIM"),
            max_concurrent_jobs=integer(
                env, "PI_DISPATCH_MAX_CONCURRENT_JOBS", "a whole number from 1 to 10000",
                default=4, minimum=1, maximum=10000,
            ),
            job_image=text(env, "PI_DISPATCH_JOB_IMAGE", DEFAULT_JOB_IMAGE),
            job_command=job_command(env),
            job_env=job_env(env),
            job_timeout_seconds=integer(
                env, "PI_DISPATCH_JOB_TIMEOUT_SECONDS", "a whole number of seconds from 0 (no timeout) to 604800",
                default=3600, maximum=604800,
            ),
            job_start_timeout_seconds=integer(
                env, "PI_DISPATCH_JOB_START_TIMEOUT_SECONDS", "a whole number of seconds from 10 to 86400",
                default=600, minimum=10, maximum=86400,
            ),
            job_resources=job_resources(env),
            job_credentials=job_credentials(env),
            job_models_configmap=object_name(env, "PI_DISPATCH_JOB_MODELS_CONFIGMAP"),
            job_pod_retention_seconds=integer(
                env, "PI_DISPATCH_JOB_POD_RETENTION_SECONDS", f"a whole number of seconds from 0 to {MAX_SECONDS}",
                default=600, maximum=MAX_SECONDS,
            ),
            job_ttl_seconds_after_finished=integer(
                env, "PI_DISPATCH_JOB_TTL_SECONDS_AFTER_FINISHED",
                f"a whole number of seconds from 0 to {MAX_SECONDS}, or unset for never", maximum=MAX_SECONDS,
            ),
            job_git_name=one_line(env, "PI_DISPATCH_JOB_GIT_NAME", DEFAULT_GIT_NAME),
            job_git_email=one_line(env, "PI_DISPATCH_JOB_GIT_EMAIL", DEFAULT_GIT_EMAIL),
            job_checkout=flag(env, "PI_DISPATCH_JOB_CHECKOUT", True),
            job_scheduling=job_scheduling(env),
            staging=staging_settings(env),
            gateway=gateway_settings(env),
            node_name=text(env, "PI_DISPATCH_NODE_NAME"),
            metrics_port=integer(
                env, "PI_DISPATCH_METRICS_PORT", "a TCP port, 0 to turn metrics off", default=9090, maximum=65535
            ),
            health_port=integer(
                env, "PI_DISPATCH_HEALTH_PORT", "a TCP port, 0 to turn the probe off", default=8080, maximum=65535
            ),
            lease=object_name(env, "PI_DISPATCH_LEASE") or "pi-dispatch",
            pod_name=text(env, "PI_DISPATCH_POD_NAME"),
            resumable_refresh_seconds=integer(
                env, "PI_DISPATCH_RESUMABLE_REFRESH_SECONDS", "a whole number of seconds from 5 to 86400",
                default=300, minimum=5, maximum=86400,
            ),
            sweep_interval_seconds=integer(
                env, "PI_DISPATCH_SWEEP_INTERVAL_SECONDS", "a whole number of seconds from 10 to 604800",
                default=3600, minimum=10, maximum=604800,
            ),
            github=GitHubSettings.from_env(env, store.github_auth_source),
            retire=one_of(env, "PI_DISPATCH_RETIRE", RETIRE_MODES, "delete or archive (unset: delete)") or "delete",
            quarantine_after=integer(
                env, "PI_DISPATCH_QUARANTINE_AFTER", "a whole number of failed resumed jobs from 0 (never) to 100",
                default=3, maximum=100,
            ),
        )
