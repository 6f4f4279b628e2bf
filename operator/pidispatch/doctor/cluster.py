"""``pidispatch doctor``'s Kubernetes checks: the CRDs, the operator's access (RBAC), the Triggers, the staging
claim and its co-location, claims being deleted. Pure functions over what the apiserver said (:class:`ClusterFacts`,
gathered by ``edge``)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pidispatch.api import serves
from pidispatch.api.crds import ALL as CRD_PLURALS
from pidispatch.api.crds import GROUP
from pidispatch.api.placement import PLACEMENT_CONFLICT
from pidispatch.api.views import TriggerView
from pidispatch.doctor.check import Check, Status, helm_fix, plural
from pidispatch.doctor.gateway import GatewayFacts
from pidispatch.settings import OperatorSettings

CRD_NAMES = tuple(f"{plural}.{GROUP}" for plural in CRD_PLURALS)
CRD_FIX = "kubectl apply -f crds/"

@dataclass(frozen=True)
class Access:
    """One request the operator makes, asked of the apiserver as a SelfSubjectAccessReview."""

    verb: str
    resource: str
    subresource: str = ""
    group: str = GROUP

    @property
    def qualified(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def what(self) -> str:
        return f"{self.verb} {self.qualified}" + (f"/{self.subresource}" if self.subresource else "")

    def can_i(self, namespace: str, user: str | None) -> str:
        """The ``kubectl auth can-i`` command that asks the same question, as the same identity."""
        words = ["kubectl", "auth", "can-i", self.verb, self.qualified]
        if self.subresource:
            words.append(f"--subresource={self.subresource}")
        if user:
            words.append(f"--as={user}")
        words += ["-n", namespace]
        return shlex.join(words)


#: What the operator does in its namespace: kopf lists and watches the kinds it handles, the job
#: flow creates Pods (and deletes one that never started) and SessionKeys, writes status through the
#: status subresources (a commonly forgotten rule), deletes SessionKeys the reaper removed, and posts Events.
REQUIRED_ACCESS: tuple[Access, ...] = (
    Access("list", "triggers"), Access("watch", "triggers"),
    Access("list", "jobs"), Access("watch", "jobs"), Access("patch", "jobs", "status"),
    Access("list", "sessionkeys"), Access("watch", "sessionkeys"), Access("create", "sessionkeys"),
    Access("delete", "sessionkeys"), Access("patch", "sessionkeys", "status"),
    Access("patch", "sessionkeys"),  # the operator's own finalizer, removed when a SessionKey is deleted
    Access("patch", "triggers", "status"),
    Access("create", "pods", group=""), Access("get", "pods", group=""), Access("list", "pods", group=""),
    Access("watch", "pods", group=""),
    Access("delete", "pods", group=""),  # a job Pod that never started, at its start timeout
    Access("create", "events", group=""),
    # per-job GitHub App token Secrets (create, and delete after the retention: never read back)
    Access("create", "secrets", group=""), Access("delete", "secrets", group=""),
    Access("delete", "jobs"),  # a finished Job past job.ttlSecondsAfterFinished
    Access("get", "persistentvolumeclaims", group=""),  # no job is staged into a claim being deleted
)


@dataclass(frozen=True)
class ClusterFacts:
    """What the apiserver said. Where a read was refused, the field is ``None`` and ``*_error`` says why."""

    namespace: str
    user: str | None = None
    #: CRD name -> the CRD object, or ``None`` when absent; the whole mapping is ``None`` when CRDs
    #: cannot be listed, and ``served`` (API discovery, open to every identity) stands in.
    crds: Mapping[str, Mapping[str, Any] | None] | None = None
    served: frozenset[str] = frozenset()
    triggers: Sequence[Mapping[str, Any]] | None = ()
    triggers_error: str | None = None
    #: the staging PVC, ``None`` when absent or not looked up (no store, or no claim name)
    staging_pvc: Mapping[str, Any] | None = None
    staging_pvc_error: str | None = None
    access: Sequence[tuple[Access, bool]] = ()
    access_error: str | None = None
    #: the PVCs this deployment mounts (staging, and the store when its Pod says so), as read
    claims: Sequence[Mapping[str, Any]] = ()
    #: the namespace's Pods, read only when a claim is being deleted (to name the ones holding it)
    claim_pods: Sequence[Mapping[str, Any]] = ()
    #: the gateway's key, CA and answer, when the deployment has one
    gateway: GatewayFacts | None = None


# -- the Kubernetes checks ---------------------------------------------------------------------------
def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def crd_checks(facts: ClusterFacts) -> list[Check]:
    """Each of our CRDs installed and Established (or, when CRDs are not readable, served)."""
    checks = []
    for name in CRD_NAMES:
        if facts.crds is None:
            if name.split(".", 1)[0] in facts.served:
                checks.append(Check("crd", Status.OK, f"{name} served (CRDs not readable here; per API discovery)"))
            else:
                checks.append(Check("crd", Status.FAIL, f"{name} is not served", CRD_FIX))
            continue
        crd = facts.crds.get(name)
        if crd is None:
            checks.append(Check("crd", Status.FAIL, f"{name} is not installed", CRD_FIX))
            continue
        established = _condition(crd, "Established")
        if established is not None and established.get("status") == "True":
            checks.append(Check("crd", Status.OK, f"{name} established"))
            continue
        # NamesAccepted=False (a name clash) is the usual cause and says more than Established does.
        names = _condition(crd, "NamesAccepted")
        why = names if names is not None and names.get("status") == "False" else established
        detail = f": {why.get('reason')}: {why.get('message')}" if why is not None else ""
        checks.append(Check("crd", Status.FAIL, f"{name} is not established{detail}", CRD_FIX))
    return checks


def rbac_checks(facts: ClusterFacts) -> list[Check]:
    """One failure per request the operator would be refused; one ok line when it may make them all."""
    if facts.access_error is not None:
        return [Check("rbac", Status.WARN, f"could not ask the apiserver what is allowed ({facts.access_error})")]
    denied = [a for a, allowed in facts.access if not allowed]
    if not denied:
        who = facts.user or "this identity"
        return [Check("rbac", Status.OK, f"{who} may make all {len(facts.access)} requests the operator makes "
                                         f"in {facts.namespace}")]
    return [Check("rbac", Status.FAIL, f"cannot {a.what} in {facts.namespace}: re-install the chart to restore "
                                       f"the operator's Role", a.can_i(facts.namespace, facts.user))
            for a in denied]


def _short(message: str) -> str:
    """The first clause of a refusal message: the conflict, without the explanation."""
    for stop in (": ", ". "):
        if stop in message:
            return message.split(stop, 1)[0]
    return message.rstrip(".")


def trigger_checks(facts: ClusterFacts) -> list[Check]:
    """How many Triggers there are and arm resume; a failure for each one the operator refuses."""
    ns = facts.namespace
    if facts.triggers is None:
        fix = Access("list", "triggers").can_i(ns, facts.user)
        return [Check("triggers", Status.WARN, f"cannot list Triggers in {ns} ({facts.triggers_error}); the "
                                               f"session checks assume some arm resume", fix)]
    views = [TriggerView.of(t) for t in facts.triggers]  # the operator's reading of each: one answer for both
    armed = sum(view.resumes for view in views)
    checks = [Check("triggers", Status.OK, f"{plural(len(facts.triggers), 'Trigger')} in {ns}, "
                                           f"{armed} arm{'s' if armed == 1 else ''} resume")]
    for t, view in zip(facts.triggers, views, strict=True):
        name = (t.get("metadata") or {}).get("name", "?")
        if view.refusal is not None:
            checks.append(Check("triggers", Status.FAIL, f"Trigger {name} is refused: {_short(view.refusal.message)}",
                                f"kubectl edit pitrigger {name} -n {ns}"))
            continue
        checks.append(serving_check(view, ns))
        if view.resumes:
            checks.append(push_access_check(view))
        replicas = ((t.get("spec") or {}).get("run") or {}).get("replicas")
        if replicas:
            # pi-dispatch's doctor states the multiplier too: n attempts are n slots, n tokens, n bills.
            checks.append(Check("replicas", Status.OK, f"Trigger {name} starts {replicas} attempts per delivery "
                                                       f"(run.replicas): {replicas}× the jobs, slots and tokens"))
        # The operator's own verdict (api/placement.py): it read the Node, doctor need not.
        ready = _condition(t, "Ready")
        if ready is not None and ready.get("status") == "False" and ready.get("reason") == PLACEMENT_CONFLICT:
            checks.append(Check("triggers", Status.FAIL, f"Trigger {name} is not Ready ({PLACEMENT_CONFLICT}): "
                                                         f"{ready.get('message')}",
                                f"kubectl edit pitrigger {name} -n {ns}"))
    return checks


def serving_check(trigger: TriggerView, namespace: str) -> Check:
    """What ``trigger`` serves (``api/serves.py``). A warning for a resume Trigger that serves every repository
    (``*/*``: conversations kept for whoever installs the App), or that names none (its resume is off)."""
    name, named = trigger.name or "?", trigger.named
    fix = f"kubectl edit pitrigger {name} -n {namespace}"
    served = f"Trigger {name} serves {serves.described(named)}"
    if not trigger.requested:
        return Check("serves", Status.OK, served)
    if not trigger.armed:
        return Check("serves", Status.WARN, f"{served}, so its run.resume is off: name the repositories whose "
                                            "conversations are kept in on.repositories", fix)
    if serves.serves_everything(named):
        return Check("serves", Status.WARN, f"{served}: it resumes conversations in every repository that sends it "
                                            "a delivery; name the owners you trust (on.repositories: "
                                            "[\"your-org/*\"])", fix)
    return Check("serves", Status.OK, f"{served}; resume is armed for those only")


PUSH_ACCESS = ("Trigger {name} resumes conversations by branch in {served}: anyone with push access there can "
               "create or re-create a branch this Trigger resumes and be handed its stored transcript (the model's "
               "reasoning, what commands echoed). Arm resume only where you control push access")


def push_access_check(trigger: TriggerView) -> Check:
    """The disclosure for a Trigger with resume armed. A key is (forge, repository, branch), and a branch name is
    whoever-can-push's choice: nothing ties ``pi/issue-7`` to issue 7's work, so the people a stored transcript can
    reach are the repository's push-access population. No check can tell that apart from the intended case, so
    doctor says it for every armed Trigger (docs/sessions.md#who-can-read-a-stored-conversation)."""
    name, served = trigger.name or "?", serves.described(trigger.named)
    return Check("push-access", Status.OK, PUSH_ACCESS.format(name=name, served=served))



def staging_check(settings: OperatorSettings, facts: ClusterFacts) -> list[Check]:
    """With the store on, the staging PVC the job Pods mount must exist and be Bound."""
    if settings.store.sessions_dir is None:
        return []
    ns, claim = facts.namespace, settings.staging_claim
    if claim is None:
        return [Check("staging", Status.FAIL, "PI_DISPATCH_STAGING_CLAIM is unset: job Pods cannot mount their "
                                              "session copy", helm_fix(ns))]
    if facts.staging_pvc_error is not None:
        return [Check("staging", Status.WARN, f"cannot read PVC {claim} in {ns} ({facts.staging_pvc_error})",
                      Access("get", "persistentvolumeclaims", group="").can_i(ns, facts.user))]
    if facts.staging_pvc is None:
        return [Check("staging", Status.FAIL, f"PVC {claim} does not exist in {ns}", helm_fix(ns))]
    phase = (facts.staging_pvc.get("status") or {}).get("phase") or "without a phase"
    if phase != "Bound":
        return [Check("staging", Status.FAIL, f"PVC {claim} is {phase}, not Bound",
                      f"kubectl describe pvc {claim} -n {ns}")]
    return [Check("staging", Status.OK, f"PVC {claim} Bound")]


COLOCATION_MESSAGE = (
    "staging is ReadWriteOnce in mount mode, so resumed jobs run on the operator's node{node} (a required pod "
    "affinity): that node's capacity bounds how many run at once, and a lost node stops resumed jobs until the "
    "operator is rescheduled; jobs without a session run anywhere. ReadWriteMany staging "
    "(sessions.staging.accessModes) or sessions.staging.mode=transfer lets them run on any node"
)


def colocation_check(settings: OperatorSettings) -> list[Check]:
    """The co-location's consequence, stated (a fact, not a fault): with the store on and a ReadWriteOnce
    staging claim mounted by job Pods, every resumed job runs on the operator's one node."""
    if settings.store.sessions_dir is None or settings.job_scheduling.colocate_with is None:
        return []
    node = f" ({settings.node_name})" if settings.node_name else ""
    return [Check("placement", Status.OK, COLOCATION_MESSAGE.format(node=node))]


def claim_holders(claim: str, pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """The Pods whose volumes name ``claim`` (ended ones too: the pvc-protection finalizer waits for them)."""
    return sorted((p.get("metadata") or {}).get("name", "?") for p in pods
                  if any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim
                         for v in (p.get("spec") or {}).get("volumes") or []))


def terminating_claims(pvcs: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
                       namespace: str) -> list[Check]:
    """A failure for each claim that is being deleted: staging into it, or mounting it in a new Pod, would
    hand a job a volume about to vanish (and a real kubelet refuses to mount one). The operator refuses
    to start on one of these, and ``pidispatch doctor`` says the same."""
    checks = []
    for pvc in pvcs:
        md = pvc.get("metadata") or {}
        if not md.get("deletionTimestamp"):
            continue
        name, holders = md.get("name", "?"), claim_holders(str(md.get("name")), pods)
        waits = (f"it waits for {plural(len(holders), 'Pod')} still using it ({', '.join(holders)})" if holders
                 else f"it waits for its finalizers ({', '.join(md.get('finalizers') or ['none'])})")
        wait = f"kubectl wait --for=delete pvc/{name} -n {namespace} --timeout=5m"
        fix = f"kubectl delete pod {' '.join(holders)} -n {namespace} && {wait}" if holders else wait
        checks.append(Check("claims", Status.FAIL, f"PVC {name} is being deleted (since {md['deletionTimestamp']}); "
                                                   f"{waits}. No job is staged into it: once it is gone, "
                                                   f"install (or upgrade) the release again for a new one", fix))
    return checks


