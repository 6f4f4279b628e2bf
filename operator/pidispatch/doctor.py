"""``pidispatch doctor``: the session checks of the spec (§8) and the Kubernetes ones, for this deployment.

The checks are pure functions over plain data (settings, what the filesystem says about the store,
Trigger/CRD/PVC objects as dicts, access-review answers); ``doctor_edge.main`` gathers that data
and prints one short line per check, each failure followed by a fix that is a literal command. A
failure makes the exit code 1; a malformed setting is a configuration error (exit 2, as for every
command). ``helm test`` runs this inside the cluster with the operator's ServiceAccount and env.

The session checks are shown only when at least one Trigger arms resume (spec §8); when the Triggers
cannot be listed (``--offline``, no access) they are shown with the count unknown, and the missing
store is then a warning rather than a failure, because nobody may be relying on it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pidispatch.api import serves
from pidispatch.api.crds import ALL as CRD_PLURALS
from pidispatch.api.crds import GROUP
from pidispatch.api.placement import PLACEMENT_CONFLICT
from pidispatch.api.trigger import first_refusal, resume_armed
from pidispatch.providers import key_variables
from pidispatch.settings import OperatorSettings, Settings


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One line of the report. ``fix`` is a literal shell command, or ``None`` when none would do."""

    name: str
    status: Status
    message: str
    fix: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"check": self.name, "status": self.status.value, "message": self.message, "fix": self.fix}


CRD_NAMES = tuple(f"{plural}.{GROUP}" for plural in CRD_PLURALS)
CRD_FIX = "kubectl apply -f crds/"
# What enables the store on a gh deployment (the chart refuses sessions.enabled=true beside the gh source).
STORE_WITH_APP = ("sessions.enabled=true,github.authSource=app,github.app.id=<app-id>,"
                  "github.app.installationId=<installation-id>,github.app.privateKeySecret.name=<secret>")
HELM_FIX = "helm upgrade <release> pi-dispatch{ns} --reuse-values --set {value}"
PRIVATE_MODE_BITS = 0o077

#: The four bounds of spec §8.4, in the spec's order. 0 (or unset, for the percentage) means off.
BOUND_VARIABLES = ("PI_SESSIONS_TTL_DAYS", "PI_SESSION_MAX_AGE_DAYS", "PI_SESSION_MAX_RESUME_CHAIN",
                   "PI_SESSION_MAX_CONTEXT_PCT")


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
class StoreFacts:
    """What the filesystem says about ``PI_SESSIONS_DIR`` (followed if it is a link: the root may be one)."""

    path: str
    exists: bool
    is_dir: bool = False
    mode: int | None = None
    writable: bool = False
    uid: int | None = None  # of this process, to name in the fix when it cannot write
    error: str | None = None


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


def _plural(n: int, word: str, verb: str | None = None) -> str:
    """``1 Trigger arms`` / ``2 Triggers arm``: a count, its noun and (optionally) a verb that agrees."""
    if n == 1:
        return f"1 {word}" + (f" {verb}s" if verb else "")
    return f"{n} {word}s" + (f" {verb}" if verb else "")


def _helm_fix(namespace: str | None, value: str = "sessions.enabled=true") -> str:
    """The chart value that fixes it (the release name is not knowable from inside its Pods)."""
    return HELM_FIX.format(ns=f" -n {namespace}" if namespace else "", value=value)


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
    armed = len(armed_triggers(facts.triggers))
    checks = [Check("triggers", Status.OK, f"{_plural(len(facts.triggers), 'Trigger')} in {ns}, "
                                           f"{armed} arm{'s' if armed == 1 else ''} resume")]
    for t in facts.triggers:
        refusal = first_refusal(t.get("spec") or {})
        name = (t.get("metadata") or {}).get("name", "?")
        if refusal is not None:
            checks.append(Check("triggers", Status.FAIL, f"Trigger {name} is refused: {_short(refusal)}",
                                f"kubectl edit pitrigger {name} -n {ns}"))
            continue
        checks.append(serving_check(t, ns))
        # The operator's own verdict (api/placement.py): it read the Node, doctor need not.
        ready = _condition(t, "Ready")
        if ready is not None and ready.get("status") == "False" and ready.get("reason") == PLACEMENT_CONFLICT:
            checks.append(Check("triggers", Status.FAIL, f"Trigger {name} is not Ready ({PLACEMENT_CONFLICT}): "
                                                         f"{ready.get('message')}",
                                f"kubectl edit pitrigger {name} -n {ns}"))
    return checks


def serving_check(trigger: Mapping[str, Any], namespace: str) -> Check:
    """What ``trigger`` serves (``api/serves.py``). A warning for a resume Trigger that serves every repository
    (``*/*``: conversations kept for whoever installs the App), or that names none (its resume is off)."""
    spec = trigger.get("spec") or {}
    name = (trigger.get("metadata") or {}).get("name", "?")
    named = serves.entries_of(spec.get("on"))
    fix = f"kubectl edit pitrigger {name} -n {namespace}"
    served = f"Trigger {name} serves {serves.described(named)}"
    if not resume_armed(spec):
        return Check("serves", Status.OK, served)
    if not serves.names_repositories(named):
        return Check("serves", Status.WARN, f"{served}, so its run.resume is off: name the repositories whose "
                                            "conversations are kept in on.repositories", fix)
    if serves.serves_everything(named):
        return Check("serves", Status.WARN, f"{served}: it resumes conversations in every repository that sends it "
                                            "a delivery; name the owners you trust (on.repositories: "
                                            "[\"your-org/*\"])", fix)
    return Check("serves", Status.OK, f"{served}; resume is armed for those only")


def armed_triggers(triggers: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The Triggers whose jobs would use the store: resume armed on named repositories, and not refused at load."""
    return [t for t in triggers if resume_armed(t.get("spec") or {}) and first_refusal(t.get("spec") or {}) is None
            and serves.names_repositories(serves.entries_of((t.get("spec") or {}).get("on")))]


def staging_check(settings: OperatorSettings, facts: ClusterFacts) -> list[Check]:
    """With the store on, the staging PVC the job Pods mount must exist and be Bound."""
    if settings.store.sessions_dir is None:
        return []
    ns, claim = facts.namespace, settings.staging_claim
    if claim is None:
        return [Check("staging", Status.FAIL, "PI_DISPATCH_STAGING_CLAIM is unset: job Pods cannot mount their "
                                              "session copy", _helm_fix(ns))]
    if facts.staging_pvc_error is not None:
        return [Check("staging", Status.WARN, f"cannot read PVC {claim} in {ns} ({facts.staging_pvc_error})",
                      Access("get", "persistentvolumeclaims", group="").can_i(ns, facts.user))]
    if facts.staging_pvc is None:
        return [Check("staging", Status.FAIL, f"PVC {claim} does not exist in {ns}", _helm_fix(ns))]
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
        waits = (f"it waits for {_plural(len(holders), 'Pod')} still using it ({', '.join(holders)})" if holders
                 else f"it waits for its finalizers ({', '.join(md.get('finalizers') or ['none'])})")
        wait = f"kubectl wait --for=delete pvc/{name} -n {namespace} --timeout=5m"
        fix = f"kubectl delete pod {' '.join(holders)} -n {namespace} && {wait}" if holders else wait
        checks.append(Check("claims", Status.FAIL, f"PVC {name} is being deleted (since {md['deletionTimestamp']}); "
                                                   f"{waits}. No job is staged into it: once it is gone, "
                                                   f"install (or upgrade) the release again for a new one", fix))
    return checks


# -- the session checks (spec §8) ----------------------------------------------------------------------
def store_check(store: StoreFacts) -> Check:
    """§8.2: the store directory exists, is a directory the operator can write, and is private."""
    path = shlex.quote(store.path)
    if store.error is not None:
        return Check("store", Status.FAIL, f"{store.path} cannot be read: {store.error}")
    if not store.exists:
        return Check("store", Status.FAIL, f"{store.path} does not exist", f"install -d -m 0700 {path}")
    if not store.is_dir:
        return Check("store", Status.FAIL, f"{store.path} is not a directory")
    mode = f"{store.mode or 0:04o}"
    if not store.writable:
        return Check("store", Status.FAIL, f"{store.path} exists ({mode}) but uid {store.uid} cannot write to it",
                     f"chown {store.uid} {path} && chmod 0700 {path}")
    if (store.mode or 0) & PRIVATE_MODE_BITS:
        # Key directories are 0700 whatever the root's mode; an open root still lists the keys.
        return Check("store", Status.WARN, f"{store.path} exists ({mode}): others can list its keys; keep it 0700",
                     f"chmod 0700 {path}")
    return Check("store", Status.OK, f"{store.path} exists ({mode})")


def bound_checks(settings: Settings, explicit: frozenset[str]) -> list[Check]:
    """§8.4: each bound's value or "off", and "(default)" when it was not set, so a deliberate
    "no bound" can be told from a forgotten one."""
    values = (settings.ttl_days, settings.max_age_days, settings.max_resume_chain, settings.max_context_pct)
    checks = []
    for variable, value in zip(BOUND_VARIABLES, values, strict=True):
        shown = str(value) if value else "off"
        checks.append(Check("bounds", Status.OK, f"{variable}={shown}" + ("" if variable in explicit
                                                                          else " (default)")))
    return checks


def search_check(native: bool | None = None) -> Check:
    """Whether gate 12 reads transcripts with the C search (built at install when a compiler is present)."""
    if native is None:
        from pidispatch.transcript.compaction import NATIVE_SEARCH as native
    if native:
        return Check("scan", Status.OK, "gate 12 reads transcripts with the C search (pidispatch.transcript._needles)")
    return Check("scan", Status.WARN, "the C search was not built at install (no C compiler): gate 12 falls back to "
                                      "Python and staging a large transcript takes about twice as long",
                 "install gcc, then pip install --force-reinstall --no-deps pidispatch")


def session_checks(settings: Settings, armed: int | None, store: StoreFacts | None,
                   explicit: frozenset[str], namespace: str | None = None) -> list[Check]:
    """§8 checks 1-5. ``armed`` is the number of Triggers arming resume, ``None`` when unknown."""
    if armed == 0:
        return []
    if settings.sessions_dir is None or store is None:
        # On the gh source the chart refuses sessions.enabled=true alone (resume could never work there), so
        # the fix that helm would accept changes the auth source too.
        gh = settings.github_auth_source == "gh" and not settings.allow_gh_source
        fix = _helm_fix(namespace, STORE_WITH_APP if gh else "sessions.enabled=true")
        also = ("; enabling the store also needs an auth source it can resume under (the chart refuses "
                "sessions.enabled=true with GITHUB_AUTH_SOURCE=gh): a GitHub App or a pat") if gh else ""
        if armed is None:
            return [Check("store", Status.WARN, "PI_SESSIONS_DIR is unset: the jobs of a Trigger that arms resume are "
                                                f"refused (sessions-dir-unset); Triggers not checked{also}", fix)]
        return [Check("store", Status.FAIL, f"{_plural(armed, 'Trigger', 'arm')} resume but PI_SESSIONS_DIR is "
                                            f"unset: their jobs are refused (sessions-dir-unset) rather than lose the "
                                            f"conversation and look successful{also}", fix)]
    keep = "Triggers that arm resume keep" if armed is None else _plural(armed, "Trigger", "keep")
    checks = [
        store_check(store),
        Check("privacy", Status.OK, f"{keep} agent transcripts in {settings.sessions_dir}: personal data "
                                    f"(issue text, files read, tool output) that must not leave the store or be "
                                    f"committed"),
        *bound_checks(settings, explicit),
        search_check(),
    ]
    if settings.max_context_pct is not None:
        checks.append(Check("context", Status.WARN, f"PI_SESSION_MAX_CONTEXT_PCT={settings.max_context_pct} needs "
                                                    f"a job image whose runner reports context use: without a report "
                                                    f"every delivery passes (see status.session.reason of each pijob)"))
    return checks


def auth_checks(settings: Settings, triggers: Sequence[Mapping[str, Any]] | None,
                namespace: str | None = None) -> list[Check]:
    """§8.6 (not resume-specific) and §10.2: the gh source hands every job the whole gh login, and
    Triggers that arm resume with it are refused per delivery unless the hatch is open."""
    default = settings.github_auth_source

    def source(t: Mapping[str, Any]) -> str:
        return ((t.get("spec") or {}).get("run") or {}).get("auth") or default

    # pat and gh read the same Secret; on a gh deployment it holds the gh login whatever run.auth says.
    gh_triggers = [t for t in triggers or () if source(t) == "gh" or (source(t) == "pat" and default == "gh")]
    if default != "gh" and not gh_triggers:
        return [Check("auth", Status.OK, f"GITHUB_AUTH_SOURCE={default}")]
    who = "GITHUB_AUTH_SOURCE=gh" if default == "gh" else f"run.auth gh on {_plural(len(gh_triggers), 'Trigger')}"
    hatch = "; PI_SESSIONS_ALLOW_GH_SOURCE=1 lets resume use it" if settings.allow_gh_source else ""
    fix = _helm_fix(namespace, "github.authSource=app")
    checks = [Check("auth", Status.WARN, f"{who}: every job Pod given a token gets the whole gh login with all its "
                                         f"scopes{hatch}", fix)]
    armed_gh = len(armed_triggers(gh_triggers))
    if armed_gh and not settings.allow_gh_source:
        checks.append(Check("auth", Status.FAIL, f"{_plural(armed_gh, 'Trigger', 'arm')} resume with auth source gh: "
                                                 f"their jobs are refused (config-refused), as a transcript could "
                                                 f"keep a printed auth header; use a GitHub App or a fine-grained "
                                                 f"token, drop resume, or set PI_SESSIONS_ALLOW_GH_SOURCE=1", fix))
    return checks


def model_checks(settings: OperatorSettings, triggers: Sequence[Mapping[str, Any]], namespace: str | None = None
                 ) -> list[Check]:
    """Each Trigger's model has its API key configured (job.credentials or its run.credentials), by the
    variable pi reads for that provider; a provider pi does not know needs a models.json."""
    deployment = {name for name, _, _ in settings.job_credentials}
    problems = []
    for t in triggers:
        run = (t.get("spec") or {}).get("run") or {}
        model, name = run.get("model"), (t.get("metadata") or {}).get("name")
        if not model:
            continue
        wanted = key_variables(str(model))
        configured = deployment | set(run.get("credentials") or {})
        if wanted is None and settings.job_models_configmap is None:
            problems.append(f"Trigger {name}: {model} is not a provider pi knows, and no models.json is configured "
                            "(job.modelsConfigMap)")
        elif wanted is not None and not configured & set(wanted):
            problems.append(f"Trigger {name}: {model} reads its key from {' or '.join(wanted)}, which no credential "
                            "sets (job.credentials, or the Trigger's run.credentials)")
    if not problems:
        return [Check("models", Status.OK, "every Trigger's model has its credentials configured")]
    fix = _helm_fix(namespace, "job.credentials.<VARIABLE>.secretName=<secret>,job.credentials.<VARIABLE>.key=<key>")
    return [Check("models", Status.WARN, problem, fix) for problem in problems]


def diagnose(settings: OperatorSettings, store: StoreFacts | None, cluster: ClusterFacts | Check | None,
             explicit: frozenset[str]) -> list[Check]:
    """Every check, in report order. ``cluster`` is ``None`` offline, or the failure that says why no
    cluster answered."""
    checks: list[Check] = []
    triggers: Sequence[Mapping[str, Any]] | None = None
    namespace = settings.namespace
    if isinstance(cluster, Check):
        checks.append(cluster)
        cluster = None
    if cluster is not None:
        namespace = cluster.namespace
        triggers = cluster.triggers
        checks += crd_checks(cluster) + rbac_checks(cluster) + trigger_checks(cluster)
    armed = None if triggers is None else len(armed_triggers(triggers))
    checks += session_checks(settings.store, armed, store, explicit, namespace)
    if cluster is not None:
        checks += staging_check(settings, cluster) + terminating_claims(cluster.claims, cluster.claim_pods,
                                                                        cluster.namespace)
    checks += colocation_check(settings)
    checks += auth_checks(settings.store, triggers, namespace)
    if triggers is not None:
        checks += model_checks(settings, triggers, namespace)
    return checks


def exit_code(checks: Sequence[Check]) -> int:
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


def render_text(checks: Sequence[Check]) -> str:
    """One line per check (``ok    store      ...``); a fix on the indented line below it."""
    lines = []
    for c in checks:
        label = "FAIL" if c.status is Status.FAIL else c.status.value
        lines.append(f"{label:<6}{c.name:<11}{c.message}")
        if c.fix:
            lines.append(f"{'':<17}fix: {c.fix}")
    return "".join(line + "\n" for line in lines)


def render_json(checks: Sequence[Check]) -> str:
    return "".join(json.dumps(c.as_json(), separators=(", ", ": ")) + "\n" for c in checks)
