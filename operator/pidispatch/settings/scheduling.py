"""Where job Pods may run, as the deployment sets it: the cluster's rules (a node pool, taints, a private
registry, a priority, a sandboxed runtime, the groups) and the staging claim's co-location.

The values are the Kubernetes Pod spec's own shapes, checked here only as far as the operator must (a map
of strings, a list of objects, a Secret's name); the apiserver judges the rest when the Pod is created, and
a Pod it refuses fails its Job ``PodRefused`` with the apiserver's words. ``manifests/scheduling.py`` merges
them into each job Pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pidispatch.settings.errors import ConfigError
from pidispatch.settings.jobpod import TriggerPolicy, trigger_policy
from pidispatch.settings.readers import is_object_name, json_setting, object_name

SCHEDULING_VARIABLES = (
    "PI_DISPATCH_JOB_NODE_SELECTOR",
    "PI_DISPATCH_JOB_TOLERATIONS",
    "PI_DISPATCH_JOB_AFFINITY",
    "PI_DISPATCH_JOB_IMAGE_PULL_SECRETS",
    "PI_DISPATCH_JOB_PRIORITY_CLASS_NAME",
    "PI_DISPATCH_JOB_RUNTIME_CLASS_NAME",
    "PI_DISPATCH_JOB_TOPOLOGY_SPREAD_CONSTRAINTS",
    "PI_DISPATCH_JOB_POD_SECURITY_CONTEXT",
    "PI_DISPATCH_STAGING_COLOCATE",
    "PI_DISPATCH_JOB_TRIGGER_POLICY",
)
# The Pod security context's fields a deployment may set for job Pods: the groups. The user is the
# operator's (it owns the staged copy, created 0600), and the rest of the context is the restricted one.
POD_SECURITY_GROUP_FIELDS = frozenset({"runAsGroup", "fsGroup", "supplementalGroups", "fsGroupChangePolicy"})


@dataclass(frozen=True)
class Scheduling:
    """The deployment's scheduling rules for job Pods, as the Kubernetes API spells them."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)
    image_pull_secrets: Sequence[str] = ()
    priority_class_name: str | None = None
    # A sandboxed runtime for the agent's untrusted code (gVisor, Kata), as the cluster names its RuntimeClass.
    runtime_class_name: str | None = None
    topology_spread_constraints: Sequence[Mapping[str, Any]] = ()
    # The Pod security context's groups: runAsGroup, fsGroup, supplementalGroups, fsGroupChangePolicy.
    pod_security_context: Mapping[str, Any] = field(default_factory=dict)
    # The operator Pod's labels when the staging claim is ReadWriteOnce (job Pods that mount it are
    # co-scheduled with it); None: the claim is ReadWriteMany, or staging is not mounted.
    colocate_with: Mapping[str, str] | None = None
    # What the job Pod policy lets a Trigger's Pod overrides ask for (None: the policy is off): read with the
    # rules, as the Triggers' readiness is judged against both (api/overrides.py).
    trigger_policy: TriggerPolicy | None = field(default_factory=TriggerPolicy)


def _string_map(env: Mapping[str, str], name: str, example: str) -> dict[str, str] | None:
    accepted = f"a JSON object of string values, e.g. {example}"
    value = json_setting(env, name, accepted)
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(name, env[name], accepted)
    return value


def _object_list(env: Mapping[str, str], name: str, example: str) -> list[dict[str, Any]]:
    accepted = f"a JSON array of objects, e.g. {example}"
    value = json_setting(env, name, accepted)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) and v for v in value):
        raise ConfigError(name, env[name], accepted)
    return value


def _pull_secrets(env: Mapping[str, str]) -> tuple[str, ...]:
    name = "PI_DISPATCH_JOB_IMAGE_PULL_SECRETS"
    items = _object_list(env, name, '[{"name":"registry-creds"}]')
    if not all(set(i) == {"name"} and isinstance(i["name"], str) and is_object_name(i["name"]) for i in items):
        raise ConfigError(name, env[name], 'a JSON array of {"name": <a Secret in the namespace>}')
    return tuple(i["name"] for i in items)


def _pod_security_context(env: Mapping[str, str]) -> dict[str, Any]:
    name = "PI_DISPATCH_JOB_POD_SECURITY_CONTEXT"
    accepted = ("a JSON object of the job Pod's groups (" + ", ".join(sorted(POD_SECURITY_GROUP_FIELDS)) +
                '), e.g. {"fsGroup":2000}; never its user, which is the operator\'s')
    value = json_setting(env, name, accepted)
    if value is None:
        return {}
    if not isinstance(value, dict) or not set(value) <= POD_SECURITY_GROUP_FIELDS:
        raise ConfigError(name, env[name], accepted)
    return value


def job_scheduling(env: Mapping[str, str]) -> Scheduling:
    """The deployment's scheduling rules for job Pods (every variable optional: unset, no rule)."""
    affinity = json_setting(env, "PI_DISPATCH_JOB_AFFINITY", 'a JSON object, a Pod affinity: {"nodeAffinity":...}')
    if affinity is not None and not isinstance(affinity, dict):
        raise ConfigError("PI_DISPATCH_JOB_AFFINITY", env["PI_DISPATCH_JOB_AFFINITY"],
                          'a JSON object, a Pod affinity: {"nodeAffinity":...}')
    return Scheduling(
        node_selector=_string_map(env, "PI_DISPATCH_JOB_NODE_SELECTOR", '{"pool":"agents"}') or {},
        tolerations=tuple(_object_list(env, "PI_DISPATCH_JOB_TOLERATIONS",
                                       '[{"key":"agents","operator":"Exists","effect":"NoSchedule"}]')),
        affinity=affinity or {},
        image_pull_secrets=_pull_secrets(env),
        priority_class_name=object_name(env, "PI_DISPATCH_JOB_PRIORITY_CLASS_NAME"),
        runtime_class_name=object_name(env, "PI_DISPATCH_JOB_RUNTIME_CLASS_NAME"),
        topology_spread_constraints=tuple(_object_list(
            env, "PI_DISPATCH_JOB_TOPOLOGY_SPREAD_CONSTRAINTS",
            '[{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"ScheduleAnyway"}]')),
        pod_security_context=_pod_security_context(env),
        trigger_policy=trigger_policy(env),
        colocate_with=_string_map(env, "PI_DISPATCH_STAGING_COLOCATE",
                                  '{"app.kubernetes.io/name":"pi-dispatch","app.kubernetes.io/component":"operator"}'),
    )
