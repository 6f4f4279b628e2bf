"""Can a resumed job's Pod land on the operator's node? Said when the Trigger loads, not ten minutes later.

With a ReadWriteOnce staging claim in mount mode, a job Pod that mounts staging carries a required pod affinity
to the operator's Pod (``manifests/scheduling.py``): it must run on the operator's node. A node selector,
a node affinity or a missing toleration that excludes that node can never be satisfied together with it:
the Pod stays ``Pending`` (``didn't match pod affinity rules``), or, without the affinity, lands elsewhere
and never attaches the claim (Multi-Attach), and the Job fails ``PodNeverStarted`` after the start timeout.
This module compares the Trigger's and the deployment's rules with the operator's Node (its labels and
taints, read once per resync through ``get nodes``) and names the conflict and every way out; the Trigger
is then not Ready (``PlacementConflict``) and its Jobs are refused at admission (``TriggerNotReady``).

Pure: the dispatcher reads the Node (``jobflow/trigger.py``). A Node the operator cannot read (no ``get nodes``
grant, no ``PI_DISPATCH_NODE_NAME``) is no conflict: the check is skipped, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pidispatch.api.views import TriggerView
from pidispatch.settings.scheduling import Scheduling

PLACEMENT_CONFLICT = "PlacementConflict"  # the Trigger's Ready reason when its resumed jobs cannot be placed
# Taints that keep a Pod off a node unless it tolerates them (PreferNoSchedule only discourages).
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
# Taints the cluster puts on and takes off a node by its state (not ready, unreachable, cordoned, under
# pressure, not yet initialised by its cloud): a moment of the node, not a rule of the Trigger, and no
# toleration the Trigger could add would be right. A Trigger is never refused for them (a loaded node
# flapping NotReady for a second refused every resumed job until the next resync).
STATE_TAINT_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")

WAYS_OUT = (
    "Ways out: give staging ReadWriteMany storage (Helm values sessions.staging.accessModes=[ReadWriteMany] and "
    "a sessions.staging.storageClassName that provides it), or sessions.staging.mode=transfer (job Pods then "
    "mount no claim and may run on any node); or {fix}; or turn resume off for this Trigger (remove "
    "run.resume: its jobs mount no staging and run wherever the rules allow)."
)
MESSAGE = (
    "Resumed jobs of this Trigger can never start: the staging claim is ReadWriteOnce (mount mode), so a job "
    "Pod that mounts it must run on the operator's node {node}, but {conflicts}. Such a Pod would stay Pending "
    "(or, off that node, never attach the claim: Multi-Attach) and fail PodNeverStarted. " + WAYS_OUT
)


@dataclass(frozen=True)
class OperatorNode:
    """The node the operator's Pod runs on: its name, labels and taints, as the Node object says."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, Any]] = ()

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> OperatorNode:
        md = body.get("metadata") or {}
        return cls(md.get("name") or "", dict(md.get("labels") or {}), tuple((body.get("spec") or {}).get("taints")
                                                                              or ()))


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' rule: same effect (or none named), same key (or none with Exists), and Exists or an equal value."""
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key, operator = toleration.get("key"), toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), list(expr.get("values") or ())
    present = key in labels
    value = labels.get(key or "")
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(value or ""), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def term_matches(term: Mapping[str, Any], node: OperatorNode) -> bool:
    """A node selector term: every matchExpressions entry on the labels, every matchFields entry on the name."""
    fields = {"metadata.name": node.name}
    return (all(_expression_matches(e, node.labels) for e in term.get("matchExpressions") or ())
            and all(_expression_matches(e, fields) for e in term.get("matchFields") or ()))


def _required_node_terms(affinity: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    required = ((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    return list(required.get("nodeSelectorTerms") or ())


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + value if value else ''}:{taint.get('effect')}"


def placement_conflict(trigger: TriggerView, rules: Scheduling, node: OperatorNode | None) -> str | None:
    """Why this Trigger's resumed jobs cannot run on the operator's node, or ``None`` (no co-location, resume
    off, the node unknown, or nothing in the way). Each conflict names where its rule comes from."""
    if node is None or rules.colocate_with is None or trigger.spec is None or not trigger.armed:
        return None
    run = trigger.spec.run
    conflicts: list[str] = []
    trigger_selector = dict(run.nodeSelector or {})
    for key, wanted in {**rules.node_selector, **trigger_selector}.items():
        have = node.labels.get(key)
        if have != wanted:
            where = "run.nodeSelector" if key in trigger_selector else "the deployment's job.nodeSelector"
            conflicts.append(f"{where} asks for {key}={wanted} and that node has "
                             + (f"{key}={have}" if have is not None else f"no label {key}")
                             + f" (drop it from {where})")
    terms = _required_node_terms(rules.affinity)
    if terms and not any(term_matches(t, node) for t in terms):
        conflicts.append("the deployment's job.affinity (its required node affinity) excludes that node "
                         "(change job.affinity)")
    tolerations = [dict(t) for t in rules.tolerations]
    tolerations += [t.model_dump(exclude_none=True) for t in run.tolerations or ()]
    for taint in node.taints:
        if str(taint.get("key") or "").startswith(STATE_TAINT_PREFIXES):
            continue
        if taint.get("effect") in BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            conflicts.append(f"that node has the taint {_taint_text(taint)} and the job Pods do not tolerate it "
                             "(add a toleration to run.tolerations or job.tolerations)")
    if not conflicts:
        return None
    return MESSAGE.format(node=node.name, conflicts="; ".join(conflicts),
                          fix="change the rule named above so it admits that node")
