"""The job flow's pure decisions (docs/architecture.md#job-flow, docs/store-contract.md#key-parts and
docs/store-contract.md#refusals): refusals, keys, Pod env, Pod outcome, and the Trigger / SessionKey status
computed from them and from a real store."""

from __future__ import annotations

import json
from copy import deepcopy
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.crds import TRIGGER_RULES
from pidispatch.api.models import JobSession, JobSpec, Resolved, SessionKeyStatus, TriggerSpec, TriggerStatus, problem
from pidispatch.api.trigger import LOCAL_KIND, RESUME_NOT_BOOLEAN
from pidispatch.api.views import JobView, TriggerView
from pidispatch.jobflow import admit, summarize_trigger
from pidispatch.jobflow import key as key_step
from pidispatch.jobflow import pod as pod_step
from pidispatch.jobflow.key import KeyRef
from pidispatch.jobflow.sessionkey import last_job_facts
from pidispatch.jobflow.summarize_sessionkey import JudgedWith, LastJob, StoreReading, sessionkey_status
from pidispatch.manifests.pod import PodInputs, job_pod
from pidispatch.record import JobReason
from pidispatch.settings import Settings
from pidispatch.store.inspect import inspect_key
from pidispatch.store.keys import branch_key, issue_key
from pidispatch.store.lock import LOCK_STALE_MS
from pidispatch.store.staging import HostRecord
from testkit.store import DAY_MS, KEY, NOW_MS, PI, Store, set_mtime

STORE = Settings(sessions_dir="/var/lib/pi-dispatch/sessions", github_auth_source="app")
NO_STORE = Settings(sessions_dir=None, github_auth_source="app")
ISSUE_JOB: dict[str, Any] = {"trigger": "fix-it", "forge": "github", "repository": "octo/repo", "issue": 7}
PR_JOB: dict[str, Any] = {
    "trigger": "fix-it", "forge": "github", "repository": "octo/repo", "pullRequest": 12, "fork": False,
    "resolved": {"headRef": "feature/x", "headRepository": "octo/repo"},
}


# What a Trigger of each event needs to fire (api/trigger.py refuses a label or comment Trigger without it).
FIRES: dict[str, dict[str, str]] = {"issue_comment.created": {"phrase": "@pi"}, "issues.labeled": {"label": "pi"},
                                    "pull_request_review_comment.created": {"phrase": "@pi"},
                                    # a cron Trigger that can fire (api/trigger.py: schedule_refusal)
                                    "cron": {"schedule": "0 6 * * *", "repository": "octo/repo"}}


def trigger(run: dict[str, Any] | None = None, event: str = "issue_comment.created") -> dict[str, Any]:
    return {"metadata": {"name": "fix-it"},
            "spec": {"on": {"event": event, **FIRES.get(event, {}), "repositories": ["octo/*"]},
                     "run": {"model": "fake/fake-model", "piVersion": PI, **(run or {})}}}


ARMED = {"resume": True}


# The steps take the typed views; these read the raw objects as the dispatcher's edge does (api/views.py).
def refusal(name: str, spec: dict[str, Any], trigger_body: dict[str, Any] | None, settings: Settings) -> Any:
    job = JobView.of({"metadata": {"name": name}, "spec": spec})
    return admit.refusal(job, TriggerView.of(trigger_body) if trigger_body is not None else None, settings)


def job_key(spec: dict[str, Any], trigger_spec: dict[str, Any]) -> KeyRef | None:
    """The key step's decision on the facts as given, unvalidated (``model_construct``): what it makes of a spec
    the admission would refuse first (an unknown forge, issue 0) is still its own answer."""
    fields = {"repository": "", **spec}
    if isinstance(spec.get("resolved"), dict):
        fields["resolved"] = Resolved.model_construct(**spec["resolved"])
    return key_step.job_key(JobSpec.model_construct(**fields), TriggerView.of({"spec": trigger_spec}).requested)


def pod_env(name: str, spec: dict[str, Any], trigger_spec: dict[str, Any]) -> dict[str, str]:
    return pod_step.pod_env(name, JobSpec.model_validate(spec, strict=True), TriggerSpec.model_validate(trigger_spec))


def trigger_status(spec: dict[str, Any], settings: Settings, generation: int | None,
                   conditions: list[dict[str, Any]] | None) -> dict[str, Any]:
    view = TriggerView.of({"metadata": {"name": "fix-it"}, "spec": spec})
    return summarize_trigger.trigger_status(view, settings, generation, conditions).to_patch()


def pr(**changes: Any) -> dict[str, Any]:
    job = deepcopy(PR_JOB)
    resolved = changes.pop("resolved", None)
    job.update(changes)
    if resolved is not None:
        job["resolved"] = resolved
    return job


# ---- refusal: Trigger missing or not loadable ----------------------------------------------------------

NOT_READY = [
    ("resume with command", {"resume": True, "command": "/pi fix"}, "issue_comment.created",
     TRIGGER_RULES[0]["message"]),
    ("resume on a local-kind trigger", {"resume": True, "kind": "local"}, "issue_comment.created",
     TRIGGER_RULES[1]["message"]),
    ("resume with replicas", {"resume": True, "replicas": 2}, "issue_comment.created", TRIGGER_RULES[2]["message"]),
    ("resume with secrets", {"resume": True, "secrets": ["TOKEN"]}, "issue_comment.created",
     TRIGGER_RULES[3]["message"]),
    ("resume a string", {"resume": "true"}, "issue_comment.created", RESUME_NOT_BOOLEAN),
    ("resume a number", {"resume": 1}, "issue_comment.created", RESUME_NOT_BOOLEAN),
    ("a local job", {"kind": "local"}, "issue_comment.created", LOCAL_KIND),
]


def test_missing_trigger_fails_the_job() -> None:
    refused = refusal("delivery-1", ISSUE_JOB, None, STORE)
    assert refused is not None
    assert (refused.phase, refused.reason, refused.condition_reason) == ("Failed", None, "TriggerNotFound")
    assert "fix-it" in refused.message and "delivery-1" in refused.message


@pytest.mark.parametrize(("run", "event", "message"), [c[1:] for c in NOT_READY], ids=[c[0] for c in NOT_READY])
def test_unloadable_trigger_refuses_the_job_with_the_cel_message(run: dict, event: str, message: str) -> None:
    """Refused before any spend, as every refusal is: the phase is ``Refused`` and ``status.reason`` says why (it
    was ``Failed`` with no reason, the why only in a condition)."""
    # No store and the gh source on purpose: an unloadable Trigger is reported before either refusal.
    settings = Settings(sessions_dir=None, github_auth_source="gh")
    refused = refusal("delivery-1", ISSUE_JOB, trigger(run, event), settings)
    assert refused is not None
    assert (refused.phase, refused.reason, refused.condition_reason) == (
        "Refused", JobReason.TRIGGER_NOT_READY, "TriggerNotReady")
    assert refused.message.endswith(message) and "fix-it" in refused.message


@pytest.mark.parametrize("on", [{"event": "issues.labeled"}, {"event": "issue_comment.created", "phrase": "@pi",
                                                                  "label": "pi"}],
                         ids=["a label Trigger without a label", "a comment Trigger with a label"])
def test_a_job_of_a_trigger_whose_on_is_refused_is_refused_naming_the_field(on: dict) -> None:
    body = trigger()
    body["spec"]["on"] = {**on, "repositories": ["octo/*"]}
    refused = refusal("delivery-1", ISSUE_JOB, body, STORE)
    assert refused is not None and (refused.phase, refused.reason) == ("Refused", JobReason.TRIGGER_NOT_READY)
    assert "on.label" in refused.message, refused.message


INVALID_JOBS = [
    ("no repository", {"trigger": "fix-it", "forge": "github"}, "repository: Field required"),
    ("an unknown forge", {**ISSUE_JOB, "forge": "gitlab"}, "forge: Input should be 'github'"),
    ("issue 0", {**ISSUE_JOB, "issue": 0}, "issue: Input should be greater than or equal to 1"),
    ("a string for a number", {**ISSUE_JOB, "issue": "7"}, "issue: Input should be a valid integer"),
    ("fork as a string", {**ISSUE_JOB, "fork": "false"}, "fork: Input should be a valid boolean"),
]


@pytest.mark.parametrize(("job", "named"), [c[1:] for c in INVALID_JOBS], ids=[c[0] for c in INVALID_JOBS])
def test_a_job_spec_its_crd_would_refuse_fails_before_anything_else(job: dict, named: str) -> None:
    """The Job CRD's schema is generated from ``models.JobSpec``; a Job stored without it (a CRD applied by
    hand, an older schema) is refused by the same model, first, naming the field."""
    refused = refusal("delivery-1", job, trigger(ARMED), NO_STORE)
    assert refused is not None
    assert (refused.phase, refused.reason, refused.condition_reason) == ("Failed", None, "InvalidSpec")
    assert named in refused.message, refused.message


# ---- refusal: sessions-dir-unset (docs/store-contract.md#store-unset) --------------------------------------

MANUAL_RUN = {"trigger": "fix-it", "forge": "github", "repository": "octo/repo"}


@pytest.mark.parametrize("job", [ISSUE_JOB, PR_JOB, MANUAL_RUN],
                         ids=["issue job", "pull-request job", "manual run"])
def test_resume_without_a_store_is_refused_naming_both_ways_out(job: dict) -> None:
    refused = refusal("delivery-1", job, trigger(ARMED), NO_STORE)
    assert refused is not None
    assert (refused.phase, refused.reason, refused.condition_reason) == (
        "Refused", JobReason.SESSIONS_DIR_UNSET, "SessionsDirUnset")
    assert refused.reason == "sessions-dir-unset"
    assert "sessions.enabled=true" in refused.message, "way out 1: enable the store"
    assert "remove run.resume" in refused.message, "way out 2: drop resume from the Trigger"
    assert "fix-it" in refused.message


def test_missing_store_is_reported_before_the_gh_source() -> None:
    settings = Settings(sessions_dir=None, github_auth_source="gh")
    refused = refusal("delivery-1", ISSUE_JOB, trigger(ARMED), settings)
    assert refused is not None and refused.reason == JobReason.SESSIONS_DIR_UNSET


# ---- refusal: gh auth source with resume (docs/store-contract.md#gh-auth-source) ---------------------------

CONFIG, BEYOND = JobReason.CONFIG_REFUSED, JobReason.BEYOND_TRIGGER
AUTH = [
    ("default source is gh", None, None, "gh", CONFIG),
    ("trigger auth gh beats settings app", None, "gh", "app", CONFIG),
    # A Job cannot choose its own source (issue 31, item 9): one that names another than its Trigger's is
    # refused beyond-trigger, whichever way it points; one that names the Trigger's (the receiver's) is judged
    # as if it named none.
    ("job authSource gh on a trigger saying app", "gh", "app", "app", BEYOND),
    ("job authSource app on a trigger saying gh", "app", "gh", "gh", BEYOND),
    ("job authSource pat on a trigger saying app", "pat", "app", "gh", BEYOND),
    ("job authSource pat on a pat deployment without run.auth", "pat", None, "pat", None),
    ("job authSource gh as its trigger says", "gh", "gh", "app", CONFIG),
    ("job authSource app as the deployment says", "app", None, "app", None),
    ("job authSource gh on an app deployment without run.auth", "gh", None, "app", BEYOND),
    # pat reads the same Secret as gh: on a gh deployment it holds the gh login, so it is refused too.
    ("trigger auth pat on a gh deployment still gets the gh login", None, "pat", "gh", CONFIG),
    ("job authSource pat as its trigger says on a gh deployment", "pat", "pat", "gh", CONFIG),
    ("trigger auth app on a gh deployment", None, "app", "gh", None),
    ("trigger auth gh on a pat deployment", None, "gh", "pat", CONFIG),
    ("settings app", None, None, "app", None),
    ("settings pat", None, None, "pat", None),
]


@pytest.mark.parametrize(("job_source", "trigger_source", "settings_source", "reason"), [a[1:] for a in AUTH],
                         ids=[a[0] for a in AUTH])
def test_gh_source_with_resume_is_config_refused(job_source: str | None, trigger_source: str | None,
                                                  settings_source: str, reason: JobReason | None) -> None:
    job = {**ISSUE_JOB, **({"authSource": job_source} if job_source else {})}
    run = {**ARMED, **({"auth": trigger_source} if trigger_source else {})}
    settings = Settings(sessions_dir="/s", github_auth_source=settings_source)
    result = refusal("delivery-1", job, trigger(run), settings)
    if reason is None:
        assert result is None
        return
    assert result is not None
    if reason == BEYOND:
        assert (result.phase, result.reason, result.condition_reason) == ("Refused", BEYOND, "BeyondTrigger")
        assert f"asks for the {job_source} token" in result.message and "cannot ask for more" in result.message
        return
    assert (result.phase, result.reason, result.condition_reason) == (
        "Refused", JobReason.CONFIG_REFUSED, "ConfigRefused")
    assert result.reason == "config-refused"
    assert "pidispatch doctor" in result.message
    assert "PI_SESSIONS_ALLOW_GH_SOURCE=1" in result.message


@pytest.mark.parametrize(("hatch", "refused"), [
    ("1", False), ("true", True), ("yes", True), (" 1", True), ("1 ", True), ("0", True), (None, True),
], ids=["exactly 1 opens", "true", "yes", "leading space", "trailing space", "0", "unset"])
def test_only_exactly_1_opens_the_gh_hatch(hatch: str | None, refused: bool) -> None:
    env = {"PI_SESSIONS_DIR": "/s", "GITHUB_AUTH_SOURCE": "gh"}
    if hatch is not None:
        env["PI_SESSIONS_ALLOW_GH_SOURCE"] = hatch
    result = refusal("delivery-1", ISSUE_JOB, trigger(ARMED), Settings.from_env(env))
    assert (result is not None and result.reason == JobReason.CONFIG_REFUSED) is refused


RESUME_OFF = [
    ("resume false", {"resume": False}, "issue_comment.created"),
    ("resume absent", {}, "issue_comment.created"),
    ("resume null", {"resume": None}, "issue_comment.created"),
    ("resume false with secrets on cron", {"resume": False, "secrets": ["s"]}, "cron"),
]


@pytest.mark.parametrize(("run", "event"), [r[1:] for r in RESUME_OFF], ids=[r[0] for r in RESUME_OFF])
@pytest.mark.parametrize("job", [ISSUE_JOB, {**PR_JOB, "authSource": "gh"}], ids=["issue", "pr with gh"])
def test_a_job_without_resume_is_never_refused_for_the_store_or_gh(run: dict, event: str, job: dict) -> None:
    worst = Settings(sessions_dir=None, github_auth_source="gh", allow_gh_source=False)
    assert refusal("delivery-1", job, trigger(run, event), worst) is None


def test_resume_with_store_and_app_source_runs() -> None:
    assert refusal("delivery-1", ISSUE_JOB, trigger(ARMED), STORE) is None


# ---- job_key (docs/store-contract.md#key-parts) ------------------------------------------------------------

KEYS = [
    ("issue", ISSUE_JOB, ARMED, issue_key("github", "octo/repo", 7), "pi/issue-7"),
    ("pr in the same repo", PR_JOB, ARMED, branch_key("github", "octo/repo", "feature/x"), "feature/x"),
    ("pr from branch pi/issue-7 converges on the issue key",
     pr(resolved={"headRef": "pi/issue-7", "headRepository": "octo/repo"}), ARMED,
     issue_key("github", "octo/repo", 7), "pi/issue-7"),
    ("gitlab issue", {**ISSUE_JOB, "forge": "gitlab"}, ARMED, issue_key("gitlab", "octo/repo", 7), "pi/issue-7"),
]


@pytest.mark.parametrize(("job", "run", "key", "branch"), [k[1:] for k in KEYS], ids=[k[0] for k in KEYS])
def test_job_key(job: dict, run: dict, key: str, branch: str) -> None:
    ref = job_key(job, trigger(run)["spec"])
    assert ref == KeyRef(key=key, forge=job["forge"], repository="octo/repo", branch=branch)
    assert len(ref.key) == 32


def test_issue_key_is_the_spec_vector() -> None:
    ref = job_key(ISSUE_JOB, trigger(ARMED)["spec"])
    assert ref is not None and ref.key == KEY == "7a5b816df58a1c8345ced1323e654287"


NO_KEY = [
    ("resume off", ISSUE_JOB, {"resume": False}),
    ("resume absent", ISSUE_JOB, {}),
    ("resume a string", ISSUE_JOB, {"resume": "true"}),
    ("pr from a fork", pr(fork=True), ARMED),
    ("pr flagged fork even if the lookup says same repo", pr(fork=True, resolved=PR_JOB["resolved"]), ARMED),
    ("pr head repo differs only by case", pr(resolved={"headRef": "feature/x", "headRepository": "Octo/repo"}),
     ARMED),
    ("pr head repo is another repo", pr(resolved={"headRef": "feature/x", "headRepository": "fork/repo"}), ARMED),
    ("pr with a deleted fork (no head repository)", pr(resolved={"headRef": "feature/x"}), ARMED),
    ("pr with a missing head ref", pr(resolved={"headRepository": "octo/repo"}), ARMED),
    ("pr with an empty head ref", pr(resolved={"headRef": "", "headRepository": "octo/repo"}), ARMED),
    ("pr whose head lookup failed", {k: v for k, v in PR_JOB.items() if k != "resolved"}, ARMED),
    ("manual run (no issue, no pr)", {"trigger": "fix-it", "forge": "github", "repository": "octo/repo"}, ARMED),
    ("issue 0", {**ISSUE_JOB, "issue": 0}, ARMED),
    ("issue as a string", {**ISSUE_JOB, "issue": "7"}, ARMED),
    ("unknown forge", {**ISSUE_JOB, "forge": "bitbucket"}, ARMED),
    ("no repository", {k: v for k, v in ISSUE_JOB.items() if k != "repository"}, ARMED),
]


@pytest.mark.parametrize(("job", "run"), [k[1:] for k in NO_KEY], ids=[k[0] for k in NO_KEY])
def test_no_key(job: dict, run: dict) -> None:
    assert job_key(job, trigger(run)["spec"]) is None


# ---- pod_env and the Pod ------------------------------------------------------------------------------

@pytest.mark.parametrize("job", [ISSUE_JOB, PR_JOB], ids=["issue", "pr"])
def test_pod_env_is_the_same_with_and_without_a_session_key(job: dict) -> None:
    armed, off = trigger(ARMED)["spec"], trigger({"resume": False})["spec"]
    ref = job_key(job, armed)
    assert ref is not None and job_key(job, off) is None
    env = pod_env("delivery-1", job, armed)
    assert env == pod_env("delivery-1", job, off)
    assert not any(ref.key in value for value in env.values()), "nothing derived from the key reaches the Pod"


def test_pod_env_job_spec_excludes_the_resolved_head() -> None:
    env = pod_env("delivery-1", PR_JOB, trigger(ARMED)["spec"])
    assert json.loads(env["PI_JOB_SPEC"]) == {k: v for k, v in PR_JOB.items() if k != "resolved"}
    assert "resolved" not in env["PI_JOB_SPEC"] and "headRepository" not in env["PI_JOB_SPEC"]


@pytest.mark.parametrize(("job", "present", "absent"), [
    (ISSUE_JOB, {"PI_ISSUE": "7"}, "PI_PULL_REQUEST"),
    (PR_JOB, {"PI_PULL_REQUEST": "12"}, "PI_ISSUE"),
], ids=["issue job", "pr job"])
def test_pod_env_carries_the_event_and_run_facts(job: dict, present: dict, absent: str) -> None:
    env = pod_env("delivery-1", job, trigger(ARMED)["spec"])
    assert env.items() >= {"PI_JOB_NAME": "delivery-1", "PI_TRIGGER": "fix-it", "PI_FORGE": "github",
                           "PI_REPOSITORY": "octo/repo", "PI_MODEL": "fake/fake-model", "PI_VERSION": PI,
                           **present}.items()
    assert absent not in env and "PI_FLOW" not in env


def test_the_pod_of_a_keyed_job_never_names_the_key() -> None:
    """The Pod built from ``pod_env`` with a mounted session differs from the keyless one by the mount only."""
    spec = trigger(ARMED)["spec"]
    ref = job_key(PR_JOB, spec)
    assert ref is not None
    base = PodInputs(job_name="delivery-1", job_uid="uid-1", namespace="ns", image="pi-job", command=["runner"],
                     env=pod_env("delivery-1", PR_JOB, spec))
    mounted = job_pod(PodInputs(**{**base.__dict__, "staging_claim": "staging", "session_subpath": "uid-1/session"}))
    plain = job_pod(base)
    text = json.dumps(mounted)
    assert ref.key not in text and "feature/x" not in text
    env = {e["name"]: e["value"] for e in mounted["spec"]["containers"][0]["env"]}
    plain_env = {e["name"]: e["value"] for e in plain["spec"]["containers"][0]["env"]}
    assert env == {**plain_env, "PI_SESSION_FILE": "/session/current.jsonl", "PI_SESSION_HOST_RESUME": "false",
                   "PI_SESSION_RETHREAD_PCT": "70"}


# ---- trigger_status -----------------------------------------------------------------------------------

def by_type(conditions: list[dict]) -> dict[str, dict]:
    return {c["type"]: c for c in conditions}


TRIGGER_STATUS = [
    ("resume off, no store", {}, NO_STORE,
     {"Ready": ("True", "Loaded"), "ResumeArmed": ("False", "NotRequested"),
      "SessionStore": ("False", "NotConfigured")}),
    ("resume off, store", {"resume": False}, STORE,
     {"Ready": ("True", "Loaded"), "ResumeArmed": ("False", "NotRequested"),
      "SessionStore": ("True", "Configured")}),
    ("resume on, store", ARMED, STORE,
     {"Ready": ("True", "Loaded"), "ResumeArmed": ("True", "Armed"), "SessionStore": ("True", "Configured")}),
    ("resume on, no store", ARMED, NO_STORE,
     {"Ready": ("True", "Loaded"), "ResumeArmed": ("True", "Armed"),
      "SessionStore": ("False", "SessionsDirUnset")}),
    ("resume with secrets, store", {"resume": True, "secrets": ["s"]}, STORE,
     {"Ready": ("False", "ResumeConflict"), "SessionStore": ("True", "Configured")}),
    ("resume a string, no store", {"resume": "yes"}, NO_STORE,
     {"Ready": ("False", "ResumeConflict"), "ResumeArmed": ("False", "NotRequested"),
      "SessionStore": ("False", "NotConfigured")}),
]


@pytest.mark.parametrize(("run", "settings", "expected"), [t[1:] for t in TRIGGER_STATUS],
                         ids=[t[0] for t in TRIGGER_STATUS])
def test_trigger_conditions(run: dict, settings: Settings, expected: dict) -> None:
    status = trigger_status(trigger(run)["spec"], settings, 3, None)
    conditions = by_type(status["conditions"])
    assert [c["type"] for c in status["conditions"]] == ["Ready", "ResumeArmed", "SessionStore"]
    assert {t: (conditions[t]["status"], conditions[t]["reason"]) for t in expected} == expected
    assert status["observedGeneration"] == 3
    assert all(c["observedGeneration"] == 3 for c in status["conditions"])


def test_not_ready_trigger_says_why_and_is_not_armed() -> None:
    status = trigger_status(trigger({"resume": True, "command": "x"})["spec"], STORE, 1, None)
    ready = by_type(status["conditions"])["Ready"]
    assert ready["message"] == TRIGGER_RULES[0]["message"]
    assert by_type(status["conditions"])["ResumeArmed"]["status"] == "False"


def test_resume_armed_on_a_refused_trigger_does_not_read_as_armed() -> None:
    """A Trigger refused for a resume conflict does not resume: its ResumeArmed must not say it does."""
    effective = by_type(trigger_status(trigger(ARMED)["spec"], STORE, 1, None)["conditions"])["ResumeArmed"]
    refused = by_type(trigger_status(trigger({"resume": True, "secrets": ["s"]})["spec"], STORE, 1,
                                          None)["conditions"])["ResumeArmed"]
    assert refused["status"] == "False"
    assert (refused["reason"], refused["message"]) != (effective["reason"], effective["message"]), (
        f"status False but reason {refused['reason']!r}, message {refused['message']!r}")


def test_store_unset_condition_names_both_ways_out() -> None:
    store = by_type(trigger_status(trigger(ARMED)["spec"], NO_STORE, 1, None)["conditions"])["SessionStore"]
    assert "sessions.enabled=true" in store["message"] and "run.resume" in store["message"]
    assert "sessions-dir-unset" in store["message"]


OLD = "2001-01-01T00:00:00Z"


def aged(conditions: list[dict]) -> list[dict]:
    return [{**c, "lastTransitionTime": OLD} for c in conditions]


@pytest.mark.parametrize(("run", "settings"), [(ARMED, STORE), ({}, NO_STORE), ({"resume": True, "command": "x"},
                                                                               NO_STORE)],
                         ids=["armed with store", "off without store", "refused"])
def test_unchanged_trigger_keeps_its_transition_times_and_its_status(run: dict, settings: Settings) -> None:
    spec = trigger(run)["spec"]
    first = trigger_status(spec, settings, 1, None)
    first = {**first, "conditions": aged(first["conditions"])}
    again = trigger_status(spec, settings, 1, first["conditions"])
    assert again == first, "recomputing an unchanged Trigger must not produce a status patch"


def test_a_changed_condition_moves_only_its_own_transition_time() -> None:
    before = aged(trigger_status(trigger({})["spec"], STORE, 1, None)["conditions"])
    after = by_type(trigger_status(trigger(ARMED)["spec"], STORE, 2, before)["conditions"])
    assert after["ResumeArmed"]["status"] == "True" and after["ResumeArmed"]["lastTransitionTime"] != OLD
    assert after["Ready"]["lastTransitionTime"] == OLD and after["SessionStore"]["lastTransitionTime"] == OLD
    assert after["Ready"]["observedGeneration"] == 2


@pytest.mark.parametrize("settings", [
    Settings(sessions_dir="/s", ttl_days=3, max_bytes=1000, max_age_days=5, max_resume_chain=7, max_context_pct=80),
    Settings(),
], ids=["explicit bounds", "defaults"])
def test_trigger_bounds_mirror_the_settings(settings: Settings) -> None:
    bounds = trigger_status(trigger(ARMED)["spec"], settings, None, None)["bounds"]
    assert bounds == {"ttlDays": settings.ttl_days, "maxBytes": settings.max_bytes,
                      "maxAgeDays": settings.max_age_days, "maxResumeChain": settings.max_resume_chain,
                      "maxContextPct": settings.max_context_pct}


# ---- sessionkey_status (from the real store) ----------------------------------------------------------

def status_of(found: dict[str, Any], conditions: list[dict[str, Any]] | None, last: LastJob | None = None,
              generation: int | None = None) -> dict[str, Any]:
    """The SessionKey status ``inspect_key``'s answer ``found`` makes, as its patch carries it."""
    return sessionkey_status(StoreReading.of(found), conditions, last, generation).to_patch()


def lock(store: Store, age_ms: float) -> None:
    path = store.key_dir() / "lock"
    path.touch()
    set_mtime(path, NOW_MS - age_ms)


SHAPES = {
    "absent key": lambda s: None,
    "stored and resumable": lambda s: s.put(chain="3", context="1000 200000 fake/fake-model"),
    "expired": lambda s: s.put(idle_ms=20 * DAY_MS),
    "venue changed": lambda s: s.put(venue="local"),
    "live lock": lambda s: (s.put(), lock(s, 1000)),
    "stale lock": lambda s: (s.put(), lock(s, LOCK_STALE_MS + 1000)),
    "empty transcript": lambda s: s.put(b""),
}
SESSIONKEY = [
    ("absent key", ("False", "NoTranscript"), ("False", "Absent"), ("False", "Unlocked"), "absent"),
    ("stored and resumable", ("True", "TranscriptStored"), ("True", "Resumable"), ("False", "Unlocked"), "resumed"),
    ("expired", ("True", "TranscriptStored"), ("False", "Expired"), ("False", "Unlocked"), "expired"),
    ("venue changed", ("True", "TranscriptStored"), ("False", "VenueChanged"), ("False", "Unlocked"),
     "venue-changed"),
    ("live lock", ("True", "TranscriptStored"), ("True", "Resumable"), ("True", "PromotionInProgress"), "resumed"),
    ("stale lock", ("True", "TranscriptStored"), ("True", "Resumable"), ("False", "StaleLock"), "resumed"),
    ("empty transcript", ("False", "NoTranscript"), ("False", "Absent"), ("False", "Unlocked"), "absent"),
]


@pytest.mark.parametrize(("shape", "stored", "resumable", "locked", "nxt"), SESSIONKEY, ids=[s[0] for s in SESSIONKEY])
def test_sessionkey_conditions_from_the_store(store: Store, shape: str, stored: tuple, resumable: tuple,
                                              locked: tuple, nxt: str) -> None:
    SHAPES[shape](store)
    view = inspect_key(store.settings, KEY, clock=NOW_MS)
    status = status_of(view, None)
    conditions = by_type(status["conditions"])
    got = tuple((conditions[t]["status"], conditions[t]["reason"]) for t in ("Stored", "Resumable", "Locked"))
    assert got == (stored, resumable, locked)
    assert status["next"] == nxt
    assert status["bytes"] == view["bytes"]
    last = last_job_facts("job-1", HostRecord(key=KEY, forge="github", repository="octo/repo", branch="pi/issue-7",
                                              venue="kubernetes", pi_version=PI), JobSession(reason=nxt), None)
    assert problem(SessionKeyStatus, status_of(view, None, last, 2)) is None, \
        "the operator writes a status its own CRD would refuse"


@pytest.mark.parametrize("run", [{}, ARMED, {"resume": True, "command": "x"}, {"resume": "true"}],
                         ids=["resume off", "armed", "refused", "not a boolean"])
@pytest.mark.parametrize("settings", [STORE, NO_STORE], ids=["store", "no store"])
def test_every_trigger_status_is_valid_for_its_model(run: dict, settings: Settings) -> None:
    assert problem(TriggerStatus, trigger_status(trigger(run)["spec"], settings, 4, None)) is None


def test_sessionkey_status_carries_the_store_readings(store: Store) -> None:
    transcript = store.put(chain="3", context="1000 200000 fake/fake-model")
    status = status_of(inspect_key(store.settings, KEY, clock=NOW_MS), None, generation=3)
    assert {k: v for k, v in status.items() if k != "conditions"} == {
        "observedGeneration": 3, "bytes": transcript.stat().st_size, "venue": "kubernetes", "piVersion": PI,
        "population": ["COLLABORATOR", "MEMBER", "OWNER"], "resumeChain": 3,
        "context": {"tokens": 1000, "window": 200000, "model": "fake/fake-model"}, "next": "resumed",
        "ledger": {"entries": 0, "letter": None}}
    assert by_type(status["conditions"])["Rethreaded"]["status"] == "False"
    resumable = by_type(status["conditions"])["Resumable"]
    assert "stamped" in resumable["message"], "inspect assumed the stamped pi version; the message says so"


def test_sessionkey_status_with_an_explicit_pi_version_does_not_claim_an_assumption(store: Store) -> None:
    store.put()
    view = inspect_key(store.settings, KEY, pi_version=PI, clock=NOW_MS)
    assert "stamped" not in by_type(status_of(view, None)["conditions"])["Resumable"]["message"]


def test_sessionkey_status_merges_the_last_job(store: Store) -> None:
    store.put()
    view = inspect_key(store.settings, KEY, clock=NOW_MS)
    last = {"lastJob": "delivery-9", "lastReason": "resumed", "lastPromotedAt": "2030-01-01T00:00:00Z"}
    status = status_of(view, None, LastJob("delivery-9", "resumed", JudgedWith(None, None, None),
                                           "2030-01-01T00:00:00Z"))
    assert status.items() >= last.items()
    assert "lastJob" not in status_of(view, None)


def test_unchanged_sessionkey_keeps_its_status(store: Store) -> None:
    store.put()
    view = inspect_key(store.settings, KEY, clock=NOW_MS)
    first = status_of(view, None)
    first = {**first, "conditions": aged(first["conditions"])}
    assert status_of(view, first["conditions"]) == first


def test_stale_lock_message_differs_from_a_live_one(store: Store) -> None:
    """A stale lock is taken over by the next promotion; its message must not say a promotion holds it."""
    store.put()
    lock(store, 1000)
    live = by_type(status_of(inspect_key(store.settings, KEY, clock=NOW_MS), None)["conditions"])
    lock(store, LOCK_STALE_MS + 1000)
    stale = by_type(status_of(inspect_key(store.settings, KEY, clock=NOW_MS), None)["conditions"])
    live_words = live["Locked"]["message"].split("(")[0]
    assert live_words not in stale["Locked"]["message"], (
        f"Locked=False/StaleLock but the message reads {stale['Locked']['message']!r}")


def test_inspect_of_a_key_directory_path(tmp_path: Path) -> None:
    """A key path that is a file, not a directory: Stored is False and the next delivery is refused cold."""
    root = tmp_path / "store"
    root.mkdir(mode=0o700)
    (root / KEY).write_bytes(b"not a directory")
    view = inspect_key(Settings(sessions_dir=str(root)), KEY, clock=NOW_MS)
    conditions = by_type(status_of(view, None)["conditions"])
    assert (conditions["Stored"]["status"], conditions["Resumable"]["reason"]) == ("False", "KeyNotADirectory")


# ---- resume is armed only on a Trigger that names its repositories (api/serves.py) ---------------------------

def unnamed(run: dict[str, Any]) -> dict[str, Any]:
    """The module's Trigger without on.repositories: it serves every repository, as Triggers did before."""
    body = trigger(run)
    del body["spec"]["on"]["repositories"]
    return body


@pytest.mark.parametrize(("settings", "store"), [(STORE, ("True", "Configured")),
                                                 (NO_STORE, ("False", "NotConfigured"))], ids=["store", "no store"])
def test_resume_on_a_trigger_naming_no_repository_is_off_and_says_why(settings: Settings,
                                                                      store: tuple[str, str]) -> None:
    conditions = by_type(trigger_status(unnamed(ARMED)["spec"], settings, 2, None)["conditions"])
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("True", "Loaded"), "its jobs still run"
    armed = conditions["ResumeArmed"]
    assert (armed["status"], armed["reason"]) == ("False", "NoRepositories")
    assert "on.repositories" in armed["message"] and "remove run.resume" in armed["message"]
    assert (conditions["SessionStore"]["status"], conditions["SessionStore"]["reason"]) == store, (
        "a store it does not use is not asked for")


def test_jobs_of_a_resume_trigger_naming_no_repository_run_as_without_resume() -> None:
    view = TriggerView.of(unnamed(ARMED))
    assert view.requested and not view.armed
    # No store and the gh source: each would refuse a resume-armed Trigger's job; this one's runs, without a key.
    gh = Settings(sessions_dir=None, github_auth_source="gh")
    assert refusal("j", ISSUE_JOB, unnamed(ARMED), NO_STORE) is None
    assert refusal("j", ISSUE_JOB, unnamed(ARMED), gh) is None
    assert key_step.job_key(JobSpec.model_validate(ISSUE_JOB), view.armed) is None
    named = TriggerView.of(trigger(ARMED))
    assert named.armed and key_step.job_key(JobSpec.model_validate(ISSUE_JOB), named.armed) is not None
    assert refusal("j", ISSUE_JOB, trigger(ARMED), NO_STORE).reason == JobReason.SESSIONS_DIR_UNSET


NOT_SERVED = [
    ("an owner the Trigger does not name", {"repositories": ["acme/*"]}, "evil/repo", True),
    ("a repository of a named owner", {"repositories": ["octo/*"]}, "octo/repo", False),
    ("on.repository kept as one exact entry", {"repository": "octo/other"}, "octo/repo", True),
    ("a Trigger naming none serves every repository", {}, "anyone/repo", False),
]


@pytest.mark.parametrize(("on", "repository", "refused"), [b[1:] for b in NOT_SERVED],
                         ids=[b[0] for b in NOT_SERVED])
def test_admission_refuses_a_job_for_a_repository_its_trigger_does_not_serve(on: dict[str, Any], repository: str,
                                                                             refused: bool) -> None:
    body = unnamed({})
    body["spec"]["on"].update(on)
    answer = refusal("hand-made", {**ISSUE_JOB, "repository": repository}, body, STORE)
    if not refused:
        assert answer is None
        return
    assert answer is not None and answer.reason == JobReason.BEYOND_TRIGGER, answer
    assert f"repository {repository}" in answer.message and "serves only" in answer.message


def test_a_refused_trigger_naming_no_repository_says_refused_not_no_repositories() -> None:
    """The first thing to fix is the conflict Ready names; ResumeArmed points there, not at a missing field."""
    conflicted = unnamed({"resume": True, "secrets": ["s"]})
    view = TriggerView.of(conflicted)
    assert view.refusal is not None and view.requested and not view.armed
    armed = by_type(trigger_status(conflicted["spec"], STORE, 1, None)["conditions"])["ResumeArmed"]
    assert (armed["status"], armed["reason"]) == ("False", "Refused")
