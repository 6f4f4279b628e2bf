"""``pidispatch doctor``: the checks as pure functions over plain data, and the command as a person runs it
with ``--offline`` (the checks that need a cluster are in e2e/test_doctor.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pidispatch.api.crds import TRIGGER_RULES
from pidispatch.doctor.check import (
    Check,
    Status,
    exit_code,
    render_json,
    render_text,
)
from pidispatch.doctor.cluster import (
    CRD_NAMES,
    REQUIRED_ACCESS,
    Access,
    ClusterFacts,
)
from pidispatch.doctor.diagnose import (
    StoreFacts,
    diagnose,
)
from pidispatch.doctor.edge import explicit_bounds, inspect_store
from pidispatch.settings import OperatorSettings

NS = "pi"
SA = f"system:serviceaccount:{NS}:operator"
SESSION_CHECKS = {"store", "privacy", "bounds", "context"}


def settings(**env: str) -> OperatorSettings:
    return OperatorSettings.from_env({"PI_DISPATCH_NAMESPACE": NS, **env})


def trigger(name: str, run: dict[str, Any], event: str = "issue_comment.created") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"on": {"event": event, "phrase": "@pi", "repositories": ["acme/*"]},
                                                 "run": run}}


ARMED = trigger("resumer", {"resume": True})
PLAIN = trigger("plain", {"model": "openai/gpt-4o"})
RESUME_OFF = trigger("off", {"resume": False})
# stored without CEL (an old CRD): the operator refuses it, so it never uses the store
REFUSED = trigger("refused", {"resume": True, "command": "make fix"})


def crd(name: str, established: bool = True, names_accepted: bool = True) -> dict[str, Any]:
    conditions = [
        {"type": "NamesAccepted", "status": str(names_accepted), "reason": "NoConflicts" if names_accepted
         else "ListKindConflict", "message": "no conflicts found" if names_accepted else "TriggerList is taken"},
        {"type": "Established", "status": str(established), "reason": "InitialNamesAccepted" if established
         else "NotAccepted", "message": "the initial names have been accepted" if established else "not all names "
         "are accepted"},
    ]
    return {"metadata": {"name": name}, "status": {"conditions": conditions}}


def cluster(**kw: Any) -> ClusterFacts:
    base: dict[str, Any] = {
        "namespace": NS, "user": SA, "crds": {name: crd(name) for name in CRD_NAMES}, "triggers": [],
        "access": [(a, True) for a in REQUIRED_ACCESS],
    }
    return ClusterFacts(**{**base, **kw})


def private_store(path: str = "/var/lib/pi-dispatch/sessions") -> StoreFacts:
    return StoreFacts(path, exists=True, is_dir=True, mode=0o700, writable=True, uid=1000)


def run_checks(env: dict[str, str] | None = None, *, store: StoreFacts | None = None,
               facts: ClusterFacts | Check | None = None, offline: bool = False) -> list[Check]:
    env = {k: v for k, v in {"GITHUB_AUTH_SOURCE": "app", **(env or {})}.items() if v is not None}  # None: unset
    s = settings(**env)
    if store is None and s.store.sessions_dir:
        store = private_store(s.store.sessions_dir)
    return diagnose(s, store, None if offline else (facts or cluster()), explicit_bounds(env))


def named(checks: list[Check], name: str) -> list[Check]:
    return [c for c in checks if c.name == name]


# -- check 1 (docs/store-contract.md#doctor): the store unset ------------------------------------------------
STORE_UNSET = [
    ("a Trigger arms resume and no store is configured: fail", [ARMED, PLAIN], Status.FAIL, "1 Trigger arms"),
    ("two Triggers arm resume: the count is named", [ARMED, trigger("second", {"resume": True})], Status.FAIL,
     "2 Triggers arm"),
    ("Triggers unknown (offline or not listable): a warning, not a failure", None, Status.WARN,
     "PI_SESSIONS_DIR is unset"),
    ("no Trigger arms resume: no store line at all", [PLAIN, RESUME_OFF], None, ""),
    ("a refused Trigger never uses the store: no store line", [REFUSED], None, ""),
]


@pytest.mark.parametrize(("triggers", "expected", "start"), [c[1:] for c in STORE_UNSET],
                         ids=[c[0] for c in STORE_UNSET])
def test_store_unset(triggers: list[dict[str, Any]] | None, expected: Status | None, start: str) -> None:
    checks = run_checks(facts=cluster(triggers=triggers, triggers_error=None if triggers is not None else "forbidden"))
    store = named(checks, "store")
    if expected is None:
        assert store == []
        return
    [line] = store
    assert line.status is expected
    assert "PI_SESSIONS_DIR is unset" in line.message and "sessions-dir-unset" in line.message
    assert line.fix == f"helm upgrade <release> pi-dispatch -n {NS} --reuse-values --set sessions.enabled=true"
    assert line.message.startswith(start)
    if expected is Status.FAIL:
        assert "lose the conversation" in line.message, "the refusal is explained as deliberate"
    assert exit_code(checks) == (1 if expected is Status.FAIL else 0)


STORE_UNSET_BY_SOURCE = [
    ("an App: enabling the store is the whole fix", {"GITHUB_AUTH_SOURCE": "app"}, "sessions.enabled=true", False),
    ("a pat: enabling the store is the whole fix", {"GITHUB_AUTH_SOURCE": "pat"}, "sessions.enabled=true", False),
    ("gh (the default): the chart refuses the store alone, so the fix changes the source too",
     {"GITHUB_AUTH_SOURCE": None}, "sessions.enabled=true,github.authSource=app,github.app.id=<app-id>,"
     "github.app.installationId=<installation-id>,github.app.privateKeySecret.name=<secret>", True),
    ("gh with the hatch open: the store alone", {"GITHUB_AUTH_SOURCE": "gh", "PI_SESSIONS_ALLOW_GH_SOURCE": "1"},
     "sessions.enabled=true", False),
]


@pytest.mark.parametrize(("env", "value", "says_source"), [c[1:] for c in STORE_UNSET_BY_SOURCE],
                         ids=[c[0] for c in STORE_UNSET_BY_SOURCE])
def test_store_unset_fix_is_one_the_chart_accepts(env: dict[str, str | None], value: str, says_source: bool) -> None:
    for facts in (cluster(triggers=[ARMED]), cluster(triggers=None, triggers_error="forbidden")):
        [line] = named(run_checks(env, facts=facts), "store")  # type: ignore[arg-type]
        assert "PI_SESSIONS_DIR is unset" in line.message
        assert line.fix == f"helm upgrade <release> pi-dispatch -n {NS} --reuse-values --set {value}"
        assert ("the chart refuses sessions.enabled=true with GITHUB_AUTH_SOURCE=gh" in line.message) is says_source


# -- the co-location of resumed jobs (ReadWriteOnce staging, mount mode) ----------------------------------------
OPERATOR_LABELS = '{"app.kubernetes.io/name":"pi-dispatch","app.kubernetes.io/component":"operator"}'
COLOCATION = [
    ("readwriteonce staging: the consequence stated, with the node",
     {"PI_SESSIONS_DIR": "/srv/sessions", "PI_DISPATCH_STAGING_COLOCATE": OPERATOR_LABELS,
      "PI_DISPATCH_NODE_NAME": "node-a"}, True),
    ("readwritemany staging: nothing to state", {"PI_SESSIONS_DIR": "/srv/sessions"}, False),
    ("no store: nothing to state", {"PI_DISPATCH_STAGING_COLOCATE": OPERATOR_LABELS}, False),
]


@pytest.mark.parametrize(("env", "stated"), [c[1:] for c in COLOCATION], ids=[c[0] for c in COLOCATION])
def test_colocation_consequence(env: dict[str, str], stated: bool) -> None:
    for offline in (False, True):
        lines = named(run_checks(env, facts=cluster(triggers=[ARMED]), offline=offline), "placement")
        if not stated:
            assert lines == []
            continue
        [line] = lines
        assert line.status is Status.OK, "a consequence of the configuration, not a fault"
        assert "resumed jobs run on the operator's node (node-a)" in line.message
        assert "that node's capacity bounds how many run at once" in line.message
        assert "a lost node stops resumed jobs until the operator is rescheduled" in line.message
        assert "ReadWriteMany" in line.message and "sessions.staging.mode=transfer" in line.message


def test_a_trigger_the_operator_found_unplaceable_fails_with_its_message() -> None:
    message = ("Resumed jobs of this Trigger can never start: the staging claim is ReadWriteOnce (mount mode), so a "
               "job Pod that mounts it must run on the operator's node node-a, but run.nodeSelector asks for "
               "kubernetes.io/hostname=node-b ...")
    unplaceable = {**trigger("elsewhere", {"resume": True, "nodeSelector": {"kubernetes.io/hostname": "node-b"}}),
                   "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "PlacementConflict",
                                              "message": message}]}}
    loaded = {**ARMED, "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Loaded",
                                                  "message": "The Trigger can run jobs."}]}}
    checks = run_checks({"PI_SESSIONS_DIR": "/srv/sessions"}, facts=cluster(triggers=[unplaceable, loaded]))
    failed = [c for c in named(checks, "triggers") if c.status is Status.FAIL]
    assert [(c.message, c.fix) for c in failed] == [
        (f"Trigger elsewhere is not Ready (PlacementConflict): {message}", f"kubectl edit pitrigger elsewhere -n {NS}")]
    assert exit_code(checks) == 1


def test_no_armed_trigger_shows_no_session_lines_even_with_a_store() -> None:
    checks = run_checks({"PI_SESSIONS_DIR": "/srv/sessions", "PI_SESSION_MAX_CONTEXT_PCT": "80"},
                        facts=cluster(triggers=[PLAIN, RESUME_OFF, REFUSED]))
    assert not [c for c in checks if c.name in SESSION_CHECKS]
    assert named(checks, "triggers")[0].message == f"3 Triggers in {NS}, 0 arm resume"


def test_armed_trigger_with_a_store_shows_the_session_lines_in_the_spec_order() -> None:
    checks = run_checks({"PI_SESSIONS_DIR": "/srv/sessions", "PI_SESSION_MAX_CONTEXT_PCT": "80"},
                        facts=cluster(triggers=[ARMED, PLAIN]))
    session = [c.name for c in checks if c.name in SESSION_CHECKS]
    assert session == ["store", "privacy", "bounds", "bounds", "bounds", "bounds", "context"]
    privacy = named(checks, "privacy")[0]
    assert privacy.status is Status.OK
    assert privacy.message.startswith("1 Trigger keeps agent transcripts in /srv/sessions: personal data")
    assert "committed" in privacy.message


# -- check 2: the store directory, on a real filesystem --------------------------------------------
def test_store_directory_facts(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    a_file = tmp_path / "file"
    a_file.write_text("")
    link = tmp_path / "link"
    link.symlink_to(private)  # the store root may be a link (docs/store-contract.md#layout)

    def store(path: Path) -> Check:
        checks = run_checks({"PI_SESSIONS_DIR": str(path)}, store=inspect_store(str(path)),
                            facts=cluster(triggers=[ARMED]))
        return named(checks, "store")[0]

    assert store(private) == Check("store", Status.OK, f"{private} exists (0700)")
    assert store(link) == Check("store", Status.OK, f"{link} exists (0700)")
    assert store(shared) == Check("store", Status.WARN, f"{shared} exists (0755): others can list its keys; keep it "
                                                        f"0700", f"chmod 0700 {shared}")
    missing = tmp_path / "no such dir"
    assert store(missing) == Check("store", Status.FAIL, f"{missing} does not exist",
                                   f"install -d -m 0700 '{missing}'")
    assert store(a_file) == Check("store", Status.FAIL, f"{a_file} is not a directory")


def test_store_the_operator_cannot_write_names_its_uid() -> None:
    facts = StoreFacts("/srv/sessions", exists=True, is_dir=True, mode=0o700, writable=False, uid=1000)
    [line] = named(run_checks({"PI_SESSIONS_DIR": "/srv/sessions"}, store=facts, facts=cluster(triggers=[ARMED])),
                   "store")
    assert line.status is Status.FAIL and "uid 1000 cannot write" in line.message
    assert line.fix == "chown 1000 /srv/sessions && chmod 0700 /srv/sessions"


# -- checks 4 and 5: the bounds and the context warning -----------------------------------------------
BOUNDS = [
    ("defaults: TTL 14, the others off, each marked as the default", {}, [
        "PI_SESSIONS_TTL_DAYS=14 (default)", "PI_SESSION_MAX_AGE_DAYS=off (default)",
        "PI_SESSION_MAX_RESUME_CHAIN=off (default)", "PI_SESSION_MAX_CONTEXT_PCT=off (default)"]),
    ("a deliberate 0 reads off without the default mark", {"PI_SESSIONS_TTL_DAYS": "0",
                                                            "PI_SESSION_MAX_AGE_DAYS": "0"}, [
        "PI_SESSIONS_TTL_DAYS=off", "PI_SESSION_MAX_AGE_DAYS=off",
        "PI_SESSION_MAX_RESUME_CHAIN=off (default)", "PI_SESSION_MAX_CONTEXT_PCT=off (default)"]),
    ("every bound on", {"PI_SESSIONS_TTL_DAYS": "7", "PI_SESSION_MAX_AGE_DAYS": "30",
                        "PI_SESSION_MAX_RESUME_CHAIN": "5", "PI_SESSION_MAX_CONTEXT_PCT": "80"}, [
        "PI_SESSIONS_TTL_DAYS=7", "PI_SESSION_MAX_AGE_DAYS=30", "PI_SESSION_MAX_RESUME_CHAIN=5",
        "PI_SESSION_MAX_CONTEXT_PCT=80"]),
]


@pytest.mark.parametrize(("env", "lines"), [b[1:] for b in BOUNDS], ids=[b[0] for b in BOUNDS])
def test_bounds_show_value_or_off(env: dict[str, str], lines: list[str]) -> None:
    checks = run_checks({"PI_SESSIONS_DIR": "/srv/sessions", **env}, facts=cluster(triggers=[ARMED]))
    bounds = named(checks, "bounds")
    assert [c.message for c in bounds] == lines
    assert {c.status for c in bounds} == {Status.OK}


@pytest.mark.parametrize(("pct", "warned"), [("80", True), (None, False)],
                         ids=["context bound set: warning", "unset: no warning"])
def test_context_bound_warns_that_it_needs_a_measuring_runner(pct: str | None, warned: bool) -> None:
    env = {"PI_SESSIONS_DIR": "/srv/sessions"} | ({} if pct is None else {"PI_SESSION_MAX_CONTEXT_PCT": pct})
    context = named(run_checks(env, facts=cluster(triggers=[ARMED])), "context")
    if not warned:
        assert context == []
        return
    [line] = context
    assert line.status is Status.WARN
    assert "PI_SESSION_MAX_CONTEXT_PCT=80" in line.message and "reports context use" in line.message
    assert "status.session.reason" in line.message


# -- check 6: the gh auth source (docs/store-contract.md#gh-auth-source) -------------------------------
AUTH = [
    ("GITHUB_AUTH_SOURCE unset means gh: a warning", {"GITHUB_AUTH_SOURCE": None}, [PLAIN], [Status.WARN]),
    ("an App: ok", {"GITHUB_AUTH_SOURCE": "app"}, [PLAIN, ARMED], [Status.OK]),
    ("a Trigger's run.auth gh is warned about too", {"GITHUB_AUTH_SOURCE": "app"},
     [trigger("gh", {"auth": "gh"})], [Status.WARN]),
    ("gh with an armed Trigger and no hatch: its jobs are refused", {"GITHUB_AUTH_SOURCE": "gh"}, [ARMED],
     [Status.WARN, Status.FAIL]),
    ("the hatch open with exactly 1: the trade is accepted", {"GITHUB_AUTH_SOURCE": "gh",
                                                              "PI_SESSIONS_ALLOW_GH_SOURCE": "1"}, [ARMED],
     [Status.WARN]),
    ("'true' does not open the hatch", {"GITHUB_AUTH_SOURCE": "gh", "PI_SESSIONS_ALLOW_GH_SOURCE": "true"},
     [ARMED], [Status.WARN, Status.FAIL]),
    ("an armed Trigger on an App beside a gh default is not refused", {"GITHUB_AUTH_SOURCE": "gh"},
     [trigger("app", {"resume": True, "auth": "app"})], [Status.WARN]),
    ("an armed Trigger saying pat on a gh deployment gets the gh login: refused", {"GITHUB_AUTH_SOURCE": "gh"},
     [trigger("pat", {"resume": True, "auth": "pat"})], [Status.WARN, Status.FAIL]),
    ("offline the Triggers are unknown: only the warning", {"GITHUB_AUTH_SOURCE": "gh"}, None, [Status.WARN]),
]


@pytest.mark.parametrize(("env", "triggers", "statuses"), [a[1:] for a in AUTH], ids=[a[0] for a in AUTH])
def test_auth_source(env: dict[str, str], triggers: list[dict[str, Any]] | None, statuses: list[Status]) -> None:
    checks = run_checks({"PI_SESSIONS_DIR": "/srv/sessions", **env}, facts=cluster(triggers=triggers or []),
                        offline=triggers is None)
    auth = named(checks, "auth")
    assert [c.status for c in auth] == statuses
    for line in auth:
        if line.status is not Status.OK:
            assert line.fix == f"helm upgrade <release> pi-dispatch -n {NS} --reuse-values --set github.authSource=app"
        if line.status is Status.WARN:
            assert "whole gh login" in line.message
        if line.status is Status.FAIL:
            assert "config-refused" in line.message and "PI_SESSIONS_ALLOW_GH_SOURCE=1" in line.message
    if env.get("PI_SESSIONS_ALLOW_GH_SOURCE") == "1":
        assert "PI_SESSIONS_ALLOW_GH_SOURCE=1" in auth[0].message


# -- Kubernetes: CRDs, Triggers, RBAC, the staging PVC ------------------------------------------------------
TRIGGERS_CRD, JOBS_CRD, SESSIONKEYS_CRD = CRD_NAMES
CRDS = [
    ("all installed and established", {n: crd(n) for n in CRD_NAMES}, frozenset(), []),
    ("one missing", {TRIGGERS_CRD: crd(TRIGGERS_CRD), JOBS_CRD: None, SESSIONKEYS_CRD: crd(SESSIONKEYS_CRD)},
     frozenset(), [f"{JOBS_CRD} is not installed"]),
    ("one not established, the name clash named", {**{n: crd(n) for n in CRD_NAMES},
                                                   TRIGGERS_CRD: crd(TRIGGERS_CRD, False, False)}, frozenset(),
     [f"{TRIGGERS_CRD} is not established: ListKindConflict: TriggerList is taken"]),
    ("not established without a clash", {**{n: crd(n) for n in CRD_NAMES}, JOBS_CRD: crd(JOBS_CRD, False)},
     frozenset(), [f"{JOBS_CRD} is not established: NotAccepted: not all names are accepted"]),
    ("CRDs not readable: API discovery stands in", None, frozenset({"triggers", "triggers/status", "jobs"}),
     [f"{SESSIONKEYS_CRD} is not served"]),
]


@pytest.mark.parametrize(("crds", "served", "failures"), [c[1:] for c in CRDS], ids=[c[0] for c in CRDS])
def test_crds(crds: dict[str, Any] | None, served: frozenset[str], failures: list[str]) -> None:
    lines = named(run_checks(facts=cluster(crds=crds, served=served)), "crd")
    assert len(lines) == 3
    assert [c.message for c in lines if c.status is Status.FAIL] == failures
    assert {c.fix for c in lines if c.status is Status.FAIL} <= {"kubectl apply -f crds/"}
    assert all(c.message.endswith(("established", "(CRDs not readable here; per API discovery)"))
               for c in lines if c.status is Status.OK)


def test_rbac_all_allowed_is_one_line() -> None:
    assert named(run_checks(), "rbac") == [
        Check("rbac", Status.OK, f"{SA} may make all {len(REQUIRED_ACCESS)} requests the operator makes in {NS}")]


def test_rbac_each_missing_request_fails_with_the_command_that_asks_it() -> None:
    denied = {Access("patch", "jobs", "status"), Access("create", "pods", group="")}
    lines = named(run_checks(facts=cluster(access=[(a, a not in denied) for a in REQUIRED_ACCESS])), "rbac")
    assert [(c.status, c.message.split(":")[0], c.fix) for c in lines] == [
        (Status.FAIL, f"cannot patch jobs.pi-dispatch.dev/status in {NS}",
         f"kubectl auth can-i patch jobs.pi-dispatch.dev --subresource=status --as={SA} -n {NS}"),
        (Status.FAIL, f"cannot create pods in {NS}", f"kubectl auth can-i create pods --as={SA} -n {NS}"),
    ]
    assert all("re-install the chart" in c.message for c in lines)


def test_rbac_unanswerable_is_a_warning() -> None:
    [line] = named(run_checks(facts=cluster(access=[], access_error="forbidden")), "rbac")
    assert line.status is Status.WARN and "forbidden" in line.message


def test_refused_trigger_fails_with_the_first_conflict_and_is_not_counted_as_armed() -> None:
    checks = run_checks(facts=cluster(triggers=[REFUSED, PLAIN]))
    lines = named(checks, "triggers")
    assert lines[0] == Check("triggers", Status.OK, f"2 Triggers in {NS}, 0 arm resume")
    assert lines[1].status is Status.FAIL
    assert lines[1].message == "Trigger refused is refused: run.resume cannot be combined with run.command yet"
    assert TRIGGER_RULES[0]["message"].startswith(lines[1].message.removeprefix("Trigger refused is refused: "))
    assert lines[1].fix == f"kubectl edit pitrigger refused -n {NS}"


def test_triggers_not_listable_warns_and_shows_the_session_checks() -> None:
    checks = run_checks({"PI_SESSIONS_DIR": "/srv/sessions"}, facts=cluster(triggers=None,
                                                                           triggers_error="forbidden"))
    [line] = named(checks, "triggers")
    assert line.status is Status.WARN and "(forbidden)" in line.message
    assert line.fix == f"kubectl auth can-i list triggers.pi-dispatch.dev --as={SA} -n {NS}"
    assert named(checks, "privacy")[0].message.startswith("Triggers that arm resume keep agent transcripts")


STAGING = [
    ("no store: no staging line", {}, None, None, None),
    ("claim unset: job Pods could not mount their copy", {"PI_SESSIONS_DIR": "/s"}, None, None,
     (Status.FAIL, "PI_DISPATCH_STAGING_CLAIM is unset")),
    ("claim missing", {"PI_SESSIONS_DIR": "/s", "PI_DISPATCH_STAGING_CLAIM": "staging"}, None, None,
     (Status.FAIL, f"PVC staging does not exist in {NS}")),
    ("claim Pending", {"PI_SESSIONS_DIR": "/s", "PI_DISPATCH_STAGING_CLAIM": "staging"},
     {"status": {"phase": "Pending"}}, None, (Status.FAIL, "PVC staging is Pending, not Bound")),
    ("claim Bound", {"PI_SESSIONS_DIR": "/s", "PI_DISPATCH_STAGING_CLAIM": "staging"},
     {"status": {"phase": "Bound"}}, None, (Status.OK, "PVC staging Bound")),
    ("claim not readable", {"PI_SESSIONS_DIR": "/s", "PI_DISPATCH_STAGING_CLAIM": "staging"}, None, "forbidden",
     (Status.WARN, f"cannot read PVC staging in {NS} (forbidden)")),
]


@pytest.mark.parametrize(("env", "pvc", "error", "expected"), [s[1:] for s in STAGING], ids=[s[0] for s in STAGING])
def test_staging_pvc(env: dict[str, str], pvc: dict[str, Any] | None, error: str | None,
                     expected: tuple[Status, str] | None) -> None:
    lines = named(run_checks(env, facts=cluster(staging_pvc=pvc, staging_pvc_error=error)), "staging")
    if expected is None:
        assert lines == []
        return
    [line] = lines
    assert (line.status, line.message.split(":")[0]) == expected
    if line.status is not Status.OK:
        assert line.fix


def test_unreachable_cluster_is_one_line_and_the_rest_still_runs() -> None:
    down = Check("cluster", Status.FAIL, "cannot reach the apiserver at https://x: refused",
                 "kubectl get --raw /readyz")
    checks = run_checks({"PI_SESSIONS_DIR": "/srv/sessions"}, facts=down)
    assert checks[0] == down
    assert [c.name for c in checks if c.name in {"crd", "rbac", "triggers", "staging"}] == []
    assert named(checks, "store")[0].status is Status.OK, "the session checks run with the Triggers unknown"
    assert exit_code(checks) == 1


# -- output -------------------------------------------------------------------------------------------
def test_render_text_one_line_per_check_and_the_fix_below() -> None:
    checks = [Check("store", Status.OK, "/srv exists (0700)"),
              Check("store", Status.FAIL, "/srv does not exist", "install -d -m 0700 /srv"),
              Check("context", Status.WARN, "needs a runner")]
    assert render_text(checks) == (
        "ok    store      /srv exists (0700)\n"
        "FAIL  store      /srv does not exist\n"
        "                 fix: install -d -m 0700 /srv\n"
        "warn  context    needs a runner\n"
    )
    assert [json.loads(line) for line in render_json(checks).splitlines()] == [
        {"check": "store", "status": "ok", "message": "/srv exists (0700)", "fix": None},
        {"check": "store", "status": "fail", "message": "/srv does not exist", "fix": "install -d -m 0700 /srv"},
        {"check": "context", "status": "warn", "message": "needs a runner", "fix": None},
    ]


# -- the command, as a process ------------------------------------------------------------------------------
SCRUBBED = ("PI_", "GITHUB_AUTH_SOURCE", "KUBECONFIG", "KUBERNETES_SERVICE_")


def doctor(*args: str, env: dict[str, str] | None = None, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED)}
    if home is not None:
        base["HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "pidispatch", "doctor", *args], capture_output=True, text=True,
                          env={**base, **(env or {})}, stdin=subprocess.DEVNULL, timeout=60)


def test_offline_private_store_passes(tmp_path: Path) -> None:
    store = tmp_path / "sessions"
    store.mkdir(mode=0o700)
    store.chmod(0o700)
    result = doctor("--offline", env={"PI_SESSIONS_DIR": str(store), "GITHUB_AUTH_SOURCE": "app",
                                      "PI_SESSION_MAX_RESUME_CHAIN": "5"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"ok    store      {store} exists (0700)",
        f"ok    privacy    Triggers that arm resume keep agent transcripts in {store}: personal data (issue text, "
        f"files read, tool output) that must not leave the store or be committed",
        "ok    bounds     PI_SESSIONS_TTL_DAYS=14 (default)",
        "ok    bounds     PI_SESSION_MAX_AGE_DAYS=off (default)",
        "ok    bounds     PI_SESSION_MAX_RESUME_CHAIN=5",
        "ok    bounds     PI_SESSION_MAX_CONTEXT_PCT=off (default)",
        "ok    scan       gate 12 reads transcripts with the C search (pidispatch.transcript._needles)",
        "ok    auth       GITHUB_AUTH_SOURCE=app",
        "warn  gateway    jobs go out without a gateway: each job Pod holds the model keys and the forge token it "
        "uses, and reaches what the NetworkPolicy allows",
        "                 fix: helm upgrade <release> pi-dispatch --reuse-values --set gateway.enabled=true",
    ]


def test_a_missing_c_search_is_a_warning_with_the_fix() -> None:
    from pidispatch.doctor.check import Status
    from pidispatch.doctor.diagnose import search_check

    check = search_check(native=False)
    assert check.status is Status.WARN and "not built" in check.message and "gcc" in (check.fix or "")


def test_offline_missing_store_fails_with_the_command_that_creates_it(tmp_path: Path) -> None:
    store = tmp_path / "sessions"
    result = doctor("--offline", env={"PI_SESSIONS_DIR": str(store)})
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"FAIL  store      {store} does not exist",
                         f"                 fix: install -d -m 0700 {store}"]
    assert "warn  auth       GITHUB_AUTH_SOURCE=gh: every job Pod given a token gets the whole gh login with all " \
           "its scopes" in lines
    subprocess.run(lines[1].split("fix: ", 1)[1], shell=True, check=True)
    assert (store.stat().st_mode & 0o777) == 0o700, "the fix is a literal command that does what it says"
    assert doctor("--offline", env={"PI_SESSIONS_DIR": str(store)}).returncode == 0


def test_offline_json_is_one_object_per_check(tmp_path: Path) -> None:
    result = doctor("--offline", "--json", env={"PI_SESSIONS_DIR": str(tmp_path / "nope")})
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.returncode == 1
    assert all(set(o) == {"check", "status", "message", "fix"} for o in objects)
    assert objects[0] == {"check": "store", "status": "fail", "message": f"{tmp_path / 'nope'} does not exist",
                          "fix": f"install -d -m 0700 {tmp_path / 'nope'}"}


@pytest.mark.parametrize(("variable", "value"), [("PI_SESSION_MAX_CONTEXT_PCT", "101"),
                                                 ("PI_SESSIONS_TTL_DAYS", "07"),
                                                 ("PI_DISPATCH_MAX_CONCURRENT_JOBS", "0")],
                         ids=["percent out of range", "leading zero", "operator setting"])
def test_malformed_setting_is_a_configuration_error(variable: str, value: str) -> None:
    result = doctor("--offline", env={variable: value})
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and variable in result.stderr


def test_unreachable_cluster_is_one_fail_line_not_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "not-a-real-token-value"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
    }))
    result = doctor(env={"KUBECONFIG": str(kubeconfig), "GITHUB_AUTH_SOURCE": "app"})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stdout.splitlines()[:2] == [
        f"FAIL  cluster    cannot reach the apiserver at https://127.0.0.1:{port}: "
        f"{result.stdout.split(f'{port}: ', 1)[1].splitlines()[0]}",
        "                 fix: kubectl get --raw /readyz"]
    assert "not-a-real-token-value" not in result.stdout + result.stderr


def test_no_kubeconfig_at_all_points_at_offline(tmp_path: Path) -> None:
    result = doctor(env={"KUBECONFIG": str(tmp_path / "none")}, home=tmp_path)
    assert result.returncode == 1
    assert result.stdout.startswith("FAIL  cluster    no cluster to ask: not in a Pod, and no usable kubeconfig")
    assert "                 fix: pidispatch doctor --offline\n" in result.stdout


# -- model credentials (issue 14 item 4) ---------------------------------------------------------------------
KEYED = '{"OPENAI_API_KEY": {"secretName": "model-keys", "key": "openai"}}'
MODELS = [
    ("a known provider whose key is configured", trigger("t", {"model": "openai/gpt-4.1"}),
     {"PI_DISPATCH_JOB_CREDENTIALS": KEYED}, Status.OK, "every Trigger's model"),
    ("a known provider without its key", trigger("t", {"model": "anthropic/claude-sonnet-4"}),
     {"PI_DISPATCH_JOB_CREDENTIALS": KEYED}, Status.WARN, "ANTHROPIC_OAUTH_TOKEN or ANTHROPIC_API_KEY"),
    ("the Trigger's own credential counts", trigger("t", {"model": "groq/llama", "credentials": {
        "GROQ_API_KEY": {"secretName": "s", "key": "k"}}}), {}, Status.OK, "every Trigger's model"),
    ("a provider pi does not know, without models.json", trigger("t", {"model": "fake/fake-model"}), {},
     Status.WARN, "not a provider pi knows"),
    ("a provider pi does not know, with models.json", trigger("t", {"model": "fake/fake-model"}),
     {"PI_DISPATCH_JOB_MODELS_CONFIGMAP": "pi-models"}, Status.OK, "every Trigger's model"),
]


@pytest.mark.parametrize(("t", "env", "status", "says"), [m[1:] for m in MODELS], ids=[m[0] for m in MODELS])
def test_a_trigger_whose_model_has_no_credentials_is_named(t: dict, env: dict, status: Status, says: str) -> None:
    [check] = named(run_checks(env, facts=cluster(triggers=[t])), "models")
    assert check.status is status and says in check.message, check
    if status is Status.WARN:
        assert "Trigger t" in check.message and check.fix and "job.credentials" in check.fix


def test_offline_there_is_no_model_line() -> None:
    assert named(run_checks(offline=True), "models") == []


def on(t: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``t`` with its ``spec.on`` fields replaced (``None``: removed)."""
    changed = {**t["spec"]["on"], **fields}
    return {**t, "spec": {**t["spec"], "on": {k: v for k, v in changed.items() if v is not None}}}


SERVING = [
    ("a resume Trigger naming owners: ok, and what it serves", on(ARMED, repositories=["acme/*", "acme-labs/api-*"]),
     Status.OK, "Trigger resumer serves acme/*, acme-labs/api-*; resume is armed for those only"),
    ("on.repository and on.repositories together", on(ARMED, repository="acme/api", repositories=["x/*"]),
     Status.OK, "Trigger resumer serves acme/api, x/*;"),
    ("a resume Trigger serving everything: flagged", on(ARMED, repositories=["*/*"]),
     Status.WARN, "it resumes conversations in every repository"),
    ("a resume Trigger naming none: resume off, flagged", on(ARMED, repositories=None),
     Status.WARN, "serves every repository (it names none), so its run.resume is off"),
    ("no resume, naming none: every repository, as before", on(PLAIN, repositories=None),
     Status.OK, "Trigger plain serves every repository (it names none)"),
]


@pytest.mark.parametrize(("t", "status", "says"), [s[1:] for s in SERVING], ids=[s[0] for s in SERVING])
def test_each_trigger_says_what_it_serves(t: dict[str, Any], status: Status, says: str) -> None:
    [line] = named(run_checks(facts=cluster(triggers=[t])), "serves")
    assert line.status is status and says in line.message, line
    assert (line.fix is not None) is (status is Status.WARN)


def test_a_resume_trigger_naming_no_repository_is_not_counted_as_armed() -> None:
    checks = run_checks(facts=cluster(triggers=[on(ARMED, repositories=None), ARMED]))
    assert named(checks, "triggers")[0].message == f"2 Triggers in {NS}, 1 arms resume"


def test_a_replicas_trigger_states_its_multiplier() -> None:
    """run.replicas: n attempts per delivery are n jobs, slots and token bills; doctor says so, and says
    nothing of the kind for a Trigger without it."""
    racing = {**PLAIN, "metadata": {"name": "race"}, "spec": {**PLAIN["spec"], "run": {**PLAIN["spec"]["run"],
                                                                                       "replicas": 3}}}
    [line] = named(run_checks(facts=cluster(triggers=[racing, PLAIN])), "replicas")
    assert line.status is Status.OK and "Trigger race starts 3 attempts per delivery" in line.message, line
    assert named(run_checks(facts=cluster(triggers=[PLAIN])), "replicas") == []


def test_each_armed_trigger_states_who_can_receive_its_transcripts() -> None:
    """The disclosure (README's resume section, the chart's NOTES, doctor): for a Trigger with resume armed, anyone
    with push access to what it serves can be handed a stored transcript. One line per armed Trigger, none for a
    Trigger whose resume is off (not armed, or naming no repository)."""
    armed = on(ARMED, repositories=["acme/*"])
    checks = run_checks(facts=cluster(triggers=[armed, PLAIN, on(ARMED, repositories=None)]))
    [line] = named(checks, "push-access")
    assert line.status is Status.OK and line.fix is None, line
    assert line.message.startswith("Trigger resumer resumes conversations by branch in acme/*: anyone with push "
                                   "access there"), line
    assert "Arm resume only where you control push access" in line.message
    assert named(run_checks(facts=cluster(triggers=[PLAIN])), "push-access") == []
