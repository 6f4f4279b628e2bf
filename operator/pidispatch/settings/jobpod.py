"""What every job Pod is built with, as the deployment sets it: the image and command, extra
environment, resources and disk, model credentials, and the git identity of the agent's commits.

Each JSON setting's shape is checked here, beside the setting; the readers of
:mod:`pidispatch.settings.readers` parse the JSON itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pidispatch.settings.errors import ConfigError
from pidispatch.settings.readers import DNS_SUBDOMAIN, SECRET_KEY, json_setting, quantity

DEFAULT_JOB_IMAGE = "ghcr.io/pi-dispatch/job:latest"
DEFAULT_JOB_COMMAND = ("pidispatch", "runner")
DEFAULT_GIT_NAME = "pi-dispatch[bot]"
DEFAULT_GIT_EMAIL = "pi-dispatch[bot]@users.noreply.github.com"

# The job Pod's disk (issue 31): the workspace emptyDir's sizeLimit, and the container's ephemeral-storage.
# The workspace holds the checkout and its .git: 10Gi takes any repository a coding agent can sensibly work
# in, and a fork cannot fill a node's disk through it. The kubelet counts every emptyDir and the container's
# own writes (logs, pi's ~/.pi, tool caches, /tmp) against the Pod's ephemeral-storage limit, so the limit
# is the workspace plus 2Gi for those; the request is what a typical job uses (the scheduler reserves it).
DEFAULT_WORKSPACE_SIZE_LIMIT = "10Gi"
DEFAULT_EPHEMERAL_STORAGE_REQUEST = "2Gi"
DEFAULT_EPHEMERAL_STORAGE_LIMIT = "12Gi"

Resources = tuple[tuple[str, tuple[tuple[str, str], ...]], ...]  # ((part, ((resource, quantity), ...)), ...)
Credentials = tuple[tuple[str, str, str], ...]  # ((env name, Secret name, key), ...)


def job_command(env: Mapping[str, str]) -> tuple[str, ...]:
    """``PI_DISPATCH_JOB_COMMAND``: the job container's command, a JSON array of non-empty strings."""
    name = "PI_DISPATCH_JOB_COMMAND"
    accepted = 'a JSON array of non-empty strings, e.g. ["pidispatch","runner"]'
    value = json_setting(env, name, accepted)
    if value is None:
        return DEFAULT_JOB_COMMAND
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(name, env[name], accepted)
    return tuple(value)


def job_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``PI_DISPATCH_JOB_ENV``: extra environment of the job container, a JSON object of string values.

    No ``PI_SESSION*`` name: the operator sets those, and a deployment's value must not override them.
    """
    name = "PI_DISPATCH_JOB_ENV"
    accepted = 'a JSON object of string values, e.g. {"PI_OFFLINE":"1"}'
    value = json_setting(env, name, accepted)
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(name, env[name], accepted)
    if any(k.startswith("PI_SESSION") for k in value):
        raise ConfigError(name, env[name], f"{accepted}, without PI_SESSION* names (the operator sets those)")
    return tuple(sorted(value.items()))


def _is_quantity(q: object) -> bool:
    """``500m``, ``2Gi``, or a whole number (Helm renders ``cpu: 1`` as 1); the apiserver judges the rest."""
    return (isinstance(q, str) and q != "") or (isinstance(q, int) and not isinstance(q, bool) and q >= 0)


def job_resources(env: Mapping[str, str]) -> Resources:
    """``PI_DISPATCH_JOB_RESOURCES``: the job container's requests and limits, unless its Trigger sets them."""
    name = "PI_DISPATCH_JOB_RESOURCES"
    accepted = ('a JSON object {"requests": {...}, "limits": {...}} of quantity strings, '
                'e.g. {"limits":{"memory":"2Gi"}}')
    value = json_setting(env, name, accepted)
    if value is None:
        return ()
    if not isinstance(value, dict) or not set(value) <= {"requests", "limits"} or not all(
        isinstance(v, dict) and all(isinstance(k, str) and k and _is_quantity(q) for k, q in v.items())
        for v in value.values()
    ):
        raise ConfigError(name, env[name], accepted)
    return tuple(sorted((part, tuple(sorted((k, str(q)) for k, q in v.items()))) for part, v in value.items()))


def job_credentials(env: Mapping[str, str]) -> Credentials:
    """``PI_DISPATCH_JOB_CREDENTIALS``: the model credentials of every job Pod, by ``secretKeyRef``.

    A JSON object of environment variable -> ``{"secretName": ..., "key": ...}``. A name the forge token
    or the operator uses is refused (:func:`pidispatch.contract.credential_name_problem` says why).
    """
    from pidispatch.contract import credential_name_problem

    name = "PI_DISPATCH_JOB_CREDENTIALS"
    accepted = ('a JSON object of environment variable -> {"secretName": ..., "key": ...}, '
                'e.g. {"OPENAI_API_KEY":{"secretName":"model-keys","key":"openai"}}')
    value = json_setting(env, name, accepted)
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ConfigError(name, env[name], accepted)
    out = []
    for variable, ref in value.items():
        why = credential_name_problem(variable) if isinstance(variable, str) else "not a name"
        if why is not None:
            raise ConfigError(name, env[name], f"{accepted}; {why}")
        if not isinstance(ref, dict) or set(ref) != {"secretName", "key"}:
            raise ConfigError(name, env[name], accepted)
        secret_name, key = str(ref["secretName"]), str(ref["key"])
        if not DNS_SUBDOMAIN.fullmatch(secret_name) or not SECRET_KEY.fullmatch(key):
            raise ConfigError(name, env[name], accepted)
        out.append((variable, ref["secretName"], ref["key"]))
    return tuple(sorted(out))


def job_disk(env: Mapping[str, str]) -> tuple[tuple[str, int], str, str]:
    """The workspace's sizeLimit (as given, and in bytes) and the ephemeral-storage request and limit.

    The kubelet evicts a Pod whose emptyDirs and containers together pass the sum of its containers'
    limits: a limit below the workspace's size would evict a job the runner's size check let through,
    so it is refused here, as is a request above the limit (the apiserver would refuse every Pod).
    """
    workspace = quantity(env, "PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT", DEFAULT_WORKSPACE_SIZE_LIMIT)
    request = quantity(env, "PI_DISPATCH_JOB_EPHEMERAL_STORAGE_REQUEST", DEFAULT_EPHEMERAL_STORAGE_REQUEST)
    limit = quantity(env, "PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT", DEFAULT_EPHEMERAL_STORAGE_LIMIT)
    if limit[1] < workspace[1]:
        raise ConfigError("PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT", limit[0],
                          f"a quantity at least PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT ({workspace[0]}): the "
                          "workspace counts against it, with the container's logs and pi's own files")
    if request[1] > limit[1]:
        raise ConfigError("PI_DISPATCH_JOB_EPHEMERAL_STORAGE_REQUEST", request[0],
                          f"a quantity at most PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT ({limit[0]})")
    return workspace, request[0], limit[0]


@dataclass(frozen=True)
class TriggerPolicy:
    """What the job Pod policy lets a Trigger's Pod overrides ask for (chart ``jobPodPolicy``;
    docs/nodes.md#pod-overrides). By default nothing: a Trigger's env, ConfigMaps and priority class must be
    listed."""

    env: frozenset[str] = frozenset()
    config_maps: frozenset[str] = frozenset()
    priority_classes: frozenset[str] = frozenset()
    # resource -> the most a Trigger's run.resources may request or limit, as written.
    max_resources: tuple[tuple[str, str], ...] = ()


def trigger_policy(env: Mapping[str, str]) -> TriggerPolicy | None:
    """``PI_DISPATCH_JOB_TRIGGER_POLICY``: the chart's ``jobPodPolicy`` lists for Triggers' overrides, a JSON object
    ``{"env": [names], "configMaps": [names], "priorityClasses": [names], "maxResources": {resource: quantity}}``;
    unset: nothing is allowed; ``off`` (the chart's ``jobPodPolicy.enabled: false``): nothing is held."""
    from pidispatch.contract.overrides import quantity_value

    name = "PI_DISPATCH_JOB_TRIGGER_POLICY"
    accepted = ('a JSON object {"env": [...], "configMaps": [...], "priorityClasses": [...], "maxResources": '
                '{"cpu": "4", "memory": "8Gi"}}')
    if (env.get(name) or "").strip() == "off":
        return None
    value = json_setting(env, name, accepted)
    if value is None:
        return TriggerPolicy()
    lists = ("env", "configMaps", "priorityClasses")
    if not isinstance(value, dict) or not set(value) <= {*lists, "maxResources"} or not all(
            isinstance(value.get(k, []), list) and all(isinstance(v, str) and v for v in value.get(k, []))
            for k in lists):
        raise ConfigError(name, env[name], accepted)
    ceiling = value.get("maxResources") or {}
    if not isinstance(ceiling, dict) or not all(isinstance(k, str) and k and quantity_value(q) is not None
                                                for k, q in ceiling.items()):
        raise ConfigError(name, env[name], accepted)
    return TriggerPolicy(env=frozenset(value.get("env", [])), config_maps=frozenset(value.get("configMaps", [])),
                         priority_classes=frozenset(value.get("priorityClasses", [])),
                         max_resources=tuple(sorted((k, str(q)) for k, q in ceiling.items())))
