"""``pidispatch doctor``: the session checks (docs/store-contract.md#doctor), and the whole report (:func:`diagnose`).

The checks are pure functions over plain data (settings, what the filesystem says about the store,
Trigger/CRD/PVC objects as dicts, access-review answers); ``edge.main`` gathers that data
and prints one short line per check, each failure followed by a fix that is a literal command. A
failure makes the exit code 1; a malformed setting is a configuration error (exit 2, as for every
command). ``helm test`` runs this inside the cluster with the operator's ServiceAccount and env.

The Kubernetes checks are in ``cluster``, a report line and its printing in ``check``.

The session checks are shown only when at least one Trigger arms resume; when the Triggers
cannot be listed (``--offline``, no access) they are shown with the count unknown, and the missing
store is then a warning rather than a failure, because nobody may be relying on it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pidispatch.api.views import TriggerView
from pidispatch.doctor.check import Check, Status, helm_fix, plural
from pidispatch.doctor.cluster import (
    ClusterFacts,
    colocation_check,
    crd_checks,
    rbac_checks,
    staging_check,
    terminating_claims,
    trigger_checks,
)
from pidispatch.doctor.gateway import gateway_checks
from pidispatch.forge.authsource import is_gh_login, source_of
from pidispatch.providers import key_variables
from pidispatch.settings import OperatorSettings, Settings

# What enables the store on a gh deployment (the chart refuses sessions.enabled=true beside the gh source).
STORE_WITH_APP = ("sessions.enabled=true,github.authSource=app,github.app.id=<app-id>,"
                  "github.app.installationId=<installation-id>,github.app.privateKeySecret.name=<secret>")
PRIVATE_MODE_BITS = 0o077

#: The four bounds of the doctor's bounds line (docs/store-contract.md#doctor), in its order. 0 (or unset, for
#: the percentage) means off.
BOUND_VARIABLES = ("PI_SESSIONS_TTL_DAYS", "PI_SESSION_MAX_AGE_DAYS", "PI_SESSION_MAX_RESUME_CHAIN",
                   "PI_SESSION_MAX_CONTEXT_PCT")


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


# -- the session checks (docs/store-contract.md#doctor) -----------------------------------------------
def store_check(store: StoreFacts) -> Check:
    """Check 2: the store directory exists, is a directory the operator can write, and is private."""
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
    """Check 4: each bound's value or "off", and "(default)" when it was not set, so a deliberate
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


def resuming(triggers: Sequence[Mapping[str, Any]]) -> int:
    """How many of ``triggers`` have jobs that would use the store: ``TriggerView.resumes``, the operator's answer."""
    return sum(TriggerView.of(t).resumes for t in triggers)


def session_checks(settings: Settings, armed: int | None, store: StoreFacts | None,
                   explicit: frozenset[str], namespace: str | None = None) -> list[Check]:
    """Checks 1-5 of docs/store-contract.md#doctor. ``armed`` is the number of Triggers arming resume, ``None`` when
    unknown."""
    if armed == 0:
        return []
    if settings.sessions_dir is None or store is None:
        # On the gh source the chart refuses sessions.enabled=true alone (resume could never work there), so
        # the fix that helm would accept changes the auth source too.
        gh = settings.github_auth_source == "gh" and not settings.allow_gh_source
        fix = helm_fix(namespace, STORE_WITH_APP if gh else "sessions.enabled=true")
        also = ("; enabling the store also needs an auth source it can resume under (the chart refuses "
                "sessions.enabled=true with GITHUB_AUTH_SOURCE=gh): a GitHub App or a pat") if gh else ""
        if armed is None:
            return [Check("store", Status.WARN, "PI_SESSIONS_DIR is unset: the jobs of a Trigger that arms resume are "
                                                f"refused (sessions-dir-unset); Triggers not checked{also}", fix)]
        return [Check("store", Status.FAIL, f"{plural(armed, 'Trigger', 'arm')} resume but PI_SESSIONS_DIR is "
                                            f"unset: their jobs are refused (sessions-dir-unset) rather than lose the "
                                            f"conversation and look successful{also}", fix)]
    keep = "Triggers that arm resume keep" if armed is None else plural(armed, "Trigger", "keep")
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
    """Check 6 (not resume-specific) and docs/store-contract.md#gh-auth-source: the gh source hands every job the whole
    gh login, and Triggers that arm resume with it are refused per delivery unless the hatch is open."""
    default = settings.github_auth_source

    def source(t: Mapping[str, Any]) -> str | None:
        return source_of(((t.get("spec") or {}).get("run") or {}).get("auth"), default)

    # pat and gh read the same Secret; on a gh deployment it holds the gh login whatever run.auth says.
    gh_triggers = [t for t in triggers or () if is_gh_login(source(t), default)]
    if default != "gh" and not gh_triggers:
        return [Check("auth", Status.OK, f"GITHUB_AUTH_SOURCE={default}")]
    who = "GITHUB_AUTH_SOURCE=gh" if default == "gh" else f"run.auth gh on {plural(len(gh_triggers), 'Trigger')}"
    hatch = "; PI_SESSIONS_ALLOW_GH_SOURCE=1 lets resume use it" if settings.allow_gh_source else ""
    fix = helm_fix(namespace, "github.authSource=app")
    checks = [Check("auth", Status.WARN, f"{who}: every job Pod given a token gets the whole gh login with all its "
                                         f"scopes{hatch}", fix)]
    armed_gh = resuming(gh_triggers)
    if armed_gh and not settings.allow_gh_source:
        checks.append(Check("auth", Status.FAIL, f"{plural(armed_gh, 'Trigger', 'arm')} resume with auth source gh: "
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
    fix = helm_fix(namespace, "job.credentials.<VARIABLE>.secretName=<secret>,job.credentials.<VARIABLE>.key=<key>")
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
    armed = None if triggers is None else resuming(triggers)
    checks += session_checks(settings.store, armed, store, explicit, namespace)
    if cluster is not None:
        checks += staging_check(settings, cluster) + terminating_claims(cluster.claims, cluster.claim_pods,
                                                                        cluster.namespace)
    checks += colocation_check(settings)
    checks += auth_checks(settings.store, triggers, namespace)
    checks += gateway_checks(settings.gateway, cluster.gateway if cluster is not None else None, namespace)
    if triggers is not None:
        checks += model_checks(settings, triggers, namespace)
    return checks


