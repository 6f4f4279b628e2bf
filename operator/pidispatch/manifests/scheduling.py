"""Where a job Pod may run: the cluster's rules (node pools, taints, a private registry, priority, groups)
merged with what the staging volume requires.

The deployment gives the rules (chart values ``job.nodeSelector``, ``job.tolerations``, ``job.affinity``,
``job.imagePullSecrets``, ``job.priorityClassName``, ``job.runtimeClassName``,
``job.topologySpreadConstraints``, ``job.podSecurityContext``); a Trigger may add a node
selector and tolerations of its own (``run.nodeSelector``, ``run.tolerations``: a Trigger may pick a node
pool), an affinity that only narrows the deployment's (``run.affinity``) and a priority class
(``run.priorityClassName``; docs/nodes.md#pod-overrides). On top, the staging mode's one requirement: a
job Pod that mounts a ReadWriteOnce staging claim
must run on the node that has it attached, the operator's. That is a required pod affinity to the
operator's Pod on ``kubernetes.io/hostname``, as Tekton's affinity assistant co-schedules the Pods of a
ReadWriteOnce workspace; without it the Pod lands elsewhere, the claim never attaches (Multi-Attach) and
the Job fails ``PodNeverStarted`` ten minutes later. Pure: the inputs are already parsed and checked.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from pidispatch.contract.overrides import REQUIRED
from pidispatch.settings.scheduling import Scheduling

HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"


def colocation_term(operator_labels: Mapping[str, str]) -> dict[str, Any]:
    """The required pod-affinity term that puts a Pod on the node of the operator's Pod."""
    return {"labelSelector": {"matchLabels": dict(operator_labels)}, "topologyKey": HOSTNAME_TOPOLOGY}


def scheduling_fields(rules: Scheduling, *, mounts_staging: bool,
                      trigger_node_selector: Mapping[str, str] | None = None,
                      trigger_tolerations: Sequence[Mapping[str, Any]] | None = None,
                      trigger_affinity: Mapping[str, Any] | None = None,
                      trigger_priority_class: str | None = None) -> dict[str, Any]:
    """The Pod ``spec`` fields for scheduling, to merge into the job Pod's spec (none when there is nothing).

    A Trigger's node selector is laid over the deployment's (its value wins for a key both name); its
    tolerations are added to the deployment's. The co-location term is added to the deployment's own
    required pod-affinity terms only for a Pod that mounts the staging claim: a job without a session
    runs wherever the rules allow. A Trigger's affinity is :func:`narrowed` into the deployment's; its priority
    class replaces the deployment's.
    """
    spec: dict[str, Any] = {}
    selector = {**rules.node_selector, **(trigger_node_selector or {})}
    if selector:
        spec["nodeSelector"] = selector
    tolerations = [dict(t) for t in rules.tolerations] + [dict(t) for t in trigger_tolerations or ()]
    if tolerations:
        spec["tolerations"] = tolerations
    affinity = narrowed(rules.affinity, trigger_affinity or {})
    if mounts_staging and rules.colocate_with is not None:
        pod_affinity = affinity.setdefault("podAffinity", {})
        required = pod_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
        required.append(colocation_term(rules.colocate_with))
    if affinity:
        spec["affinity"] = affinity
    if rules.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in rules.image_pull_secrets]
    if trigger_priority_class or rules.priority_class_name:
        spec["priorityClassName"] = trigger_priority_class or rules.priority_class_name
    if rules.runtime_class_name:
        spec["runtimeClassName"] = rules.runtime_class_name
    if rules.topology_spread_constraints:
        spec["topologySpreadConstraints"] = [dict(c) for c in rules.topology_spread_constraints]
    return spec


def narrowed(deployment: Mapping[str, Any], trigger: Mapping[str, Any]) -> dict[str, Any]:
    """The deployment's affinity with a Trigger's laid on it so that the Pod may run only where both allow.

    Required node selector terms are ORed by Kubernetes, so a Trigger's term appended to the deployment's would
    widen where the Pod may go: each of the Trigger's terms is joined to each of the deployment's instead (their
    match expressions and fields ANDed). Every other part (preferred terms, pod affinity and anti-affinity, all
    ANDed or only weighed) is appended.
    """
    merged = copy.deepcopy(dict(deployment))
    for kind, parts in trigger.items():
        target = merged.setdefault(kind, {})
        for part, value in parts.items():
            if kind == "nodeAffinity" and part == REQUIRED:
                ours = (target.get(REQUIRED) or {}).get("nodeSelectorTerms") or []
                theirs = value.get("nodeSelectorTerms") or []
                terms = [_joined(a, b) for a in ours for b in theirs] if ours else copy.deepcopy(list(theirs))
                target[REQUIRED] = {"nodeSelectorTerms": terms}
            else:
                target[part] = list(target.get(part) or []) + copy.deepcopy(list(value))
    return merged


def _joined(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """One node selector term that holds where both ``a`` and ``b`` do."""
    out: dict[str, Any] = {}
    for key in ("matchExpressions", "matchFields"):
        both = list(a.get(key) or []) + list(b.get(key) or [])
        if both:
            out[key] = copy.deepcopy(both)
    return out
