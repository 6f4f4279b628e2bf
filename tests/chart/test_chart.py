"""The Helm chart, rendered offline with the pinned helm: what it promises the operator and the cluster.

No cluster: ``helm lint`` and ``helm template``, parsed with pyyaml. The env names and defaults are
checked against ``pidispatch.settings`` (the operator's own parser), the CRD copies against the
repository's ``crds/``. ``e2e/test_chart_install.py``
installs the chart on a real apiserver.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from pidispatch.api.crds import AUTH_SOURCES
from pidispatch.settings import OperatorSettings, Settings
from testkit.chart import (
    ALL_ON,
    APP_VERSION,
    CHART,
    FULLNAME,
    GATEWAY,
    NAMESPACE,
    POD_NAME,
    RECEIVER,
    RECEIVER_ON,
    RELEASE,
    ROOT,
    SERVICE_MONITOR_API,
    STAGING_DIR,
    STORE_DIR,
    STORE_ON,
    doctor_pod,
    env_list,
    env_values,
    kinds,
    one,
    operator_container,
    render,
    set_args,
    template,
    without_gateway,
)


class _RecordingEnv(Mapping[str, str]):
    """An empty environment that remembers every name looked up in it."""

    def __init__(self) -> None:
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def names_the_operator_reads() -> set[str]:
    env = _RecordingEnv()
    OperatorSettings.from_env(env)
    return env.read




# -- lint and the CRD copies -------------------------------------------------------------------------------------
@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["defaults", "sessions and every option on"])
def test_helm_lint_passes(helm: Any, values: dict[str, Any]) -> None:
    result = helm("lint", "--strict", str(CHART), *set_args(values))
    assert result.returncode == 0, result.stdout + result.stderr


def test_chart_crds_are_byte_identical_copies_of_the_repository_crds() -> None:
    sources = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    assert len(sources) == 3, sources
    copies = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert copies == sources, \
        "the chart's crds/ must hold the repository's CRDs and nothing else: run charts/pi-dispatch/sync-crds.sh"
    for name in sources:
        assert (CHART / "crds" / name).read_bytes() == (ROOT / "crds" / name).read_bytes(), \
            f"charts/pi-dispatch/crds/{name} differs from crds/{name}: run charts/pi-dispatch/sync-crds.sh"


def test_the_replicas_elect_a_leader_on_a_lease_named_after_the_release(helm: Any) -> None:
    docs = render(helm)
    assert env_values(operator_container(docs))["PI_DISPATCH_LEASE"] == FULLNAME
    assert not [d for d in docs if d["kind"] == "KopfPeering"], "kopf runs standalone: the Lease says who acts"
    deployment = one(docs, "Deployment", FULLNAME)
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}, "one replica: never two Pods on the store"


@pytest.mark.parametrize(("store_modes", "colocated"), [(["ReadWriteOnce"], True), (["ReadWriteMany"], False)],
                         ids=["ReadWriteOnce store", "ReadWriteMany store"])
def test_a_standby_runs_beside_the_leader_when_the_store_attaches_to_one_node(helm: Any, store_modes: list[str],
                                                                             colocated: bool) -> None:
    docs = render(helm, {**STORE_ON, "replicas": 2, "sessions.store.accessModes": store_modes})
    spec = one(docs, "Deployment", FULLNAME)["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    affinity = spec["template"]["spec"].get("affinity")
    if colocated:
        [term] = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    else:
        assert affinity is None
    assert template(helm, {"replicas": 3}).returncode != 0, "more than a leader and one standby is refused"


# -- the env contract -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["defaults", "sessions and every option on"])
def test_every_env_name_is_one_the_operator_reads(helm: Any, values: dict[str, Any]) -> None:
    docs = render(helm, values)
    names = [v["name"] for v in env_list(operator_container(docs))]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    unknown = set(names) - names_the_operator_reads()
    assert not unknown, f"the Deployment sets variables OperatorSettings never reads: {sorted(unknown)}"


def test_job_limits_credentials_and_models_reach_the_operator_settings(helm: Any) -> None:
    settings = OperatorSettings.from_env(env_values(operator_container(render(helm, ALL_ON))))
    assert (settings.job_timeout_seconds, settings.job_start_timeout_seconds) == (900, 120)
    assert settings.job_resources == (("limits", (("memory", "2Gi"),)), ("requests", (("cpu", "1"),)))
    assert settings.job_credentials == (("OPENAI_API_KEY", "model-keys", "openai"),)
    assert settings.job_models_configmap == "pi-models"


def test_defaults_render_the_operators_defaults_and_no_store(helm: Any) -> None:
    docs = render(helm)
    container = operator_container(docs)
    env = env_values(container)
    assert "PI_SESSIONS_DIR" not in env and "PI_DISPATCH_STAGING_CLAIM" not in env
    assert not any(name.startswith("PI_SESSION") for name in env), "no store: no store settings either"
    assert kinds(docs, "PersistentVolumeClaim") == []
    volumes = one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["volumes"]
    assert volumes == [{"name": "tmp", "emptyDir": {}}, {"name": "gateway-key", "secret": {
        "secretName": GATEWAY, "defaultMode": 0o440, "items": [{"key": "key", "path": "key"}]}}], \
        "/tmp and the gateway key (to mint capabilities), nothing else"
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"},
                                         {"name": "gateway-key", "mountPath": "/etc/pi-dispatch/gateway-key",
                                          "readOnly": True}]
    settings = OperatorSettings.from_env(env)
    # The chosen differences: job Pods run the job image of this release, not :latest, and carry its name;
    # the Lease is the release's own (two releases in a namespace elect apart); jobs go out through the release's
    # gateway (the operator has none unless told where it is).
    job_image = f"ghcr.io/pi-dispatch/job:{APP_VERSION}"
    expected = OperatorSettings.from_env({"PI_DISPATCH_NAMESPACE": NAMESPACE, "PI_DISPATCH_JOB_IMAGE": job_image,
                                          "PI_DISPATCH_POD_NAME": POD_NAME, "PI_DISPATCH_RELEASE": RELEASE,
                                          "PI_DISPATCH_LEASE": FULLNAME,
                                          "PI_DISPATCH_GATEWAY_URL": f"https://{GATEWAY}.{NAMESPACE}.svc",
                                          "PI_DISPATCH_GATEWAY_PROXY": f"http://{GATEWAY}.{NAMESPACE}.svc:3128",
                                          "PI_DISPATCH_GATEWAY_CA_CONFIGMAP": f"{GATEWAY}-ca",
                                          "PI_DISPATCH_GATEWAY_KEY_FILE": "/etc/pi-dispatch/gateway-key/key"})
    assert settings == expected, "the chart's defaults are the operator's defaults"
    assert settings.store.sessions_dir is None
    assert settings.job_command == ("pidispatch", "runner") and settings.max_concurrent_jobs == 4
    assert (settings.metrics_port, settings.health_port, settings.lease) == (9090, 8080, FULLNAME)


NEVER_RESUMES = [
    ("the default auth source", {"sessions.enabled": True}),
    ("gh named", {"sessions.enabled": True, "github.authSource": "gh", "github.token.secretName": "gh-login"}),
]


@pytest.mark.parametrize("values", [r[1] for r in NEVER_RESUMES], ids=[r[0] for r in NEVER_RESUMES])
def test_a_store_that_could_never_resume_fails_the_install_naming_the_values(helm: Any,
                                                                              values: dict[str, Any]) -> None:
    result = template(helm, values)
    assert result.returncode != 0, "rendered a release whose every resumed job would be refused"
    assert "sessions.enabled=true with github.authSource gh" in result.stderr, result.stderr
    assert "github.authSource=app" in result.stderr and "sessions.allowGhSource=true" in result.stderr


@pytest.mark.parametrize("values", [
    {"sessions.enabled": True, "github.authSource": "pat", "github.token.secretName": "pat"},
    {"sessions.enabled": True, "github.authSource": "gh", "sessions.allowGhSource": True},
    {"sessions.enabled": False, "github.authSource": "gh"},
], ids=["pat", "gh with the escape hatch", "gh without a store"])
def test_a_store_that_can_resume_or_no_store_installs(helm: Any, values: dict[str, Any]) -> None:
    result = template(helm, values)
    assert result.returncode == 0, result.stderr


def test_sessions_enabled_mounts_both_claims_and_sets_the_bounds(helm: Any) -> None:
    docs = render(helm, {**STORE_ON})
    deployment = one(docs, "Deployment", FULLNAME)
    container = operator_container(docs)
    env = env_values(container)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in deployment["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v}
    assert claims == {"sessions": f"{FULLNAME}-sessions", "staging": f"{FULLNAME}-staging"}
    assert env["PI_SESSIONS_DIR"] == mounts["sessions"] == STORE_DIR
    assert env["PI_DISPATCH_STAGING_DIR"] == mounts["staging"] == STAGING_DIR
    assert env["PI_DISPATCH_STAGING_CLAIM"] == claims["staging"]
    assert mounts["tmp"] == "/tmp"
    store = one(docs, "PersistentVolumeClaim", f"{FULLNAME}-sessions")
    staging = one(docs, "PersistentVolumeClaim", f"{FULLNAME}-staging")
    assert store["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert "annotations" not in staging["metadata"], "staging is scratch space: it goes with the release"
    for pvc in (store, staging):
        assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
        assert "storageClassName" not in pvc["spec"], "null: the cluster's default StorageClass"
        assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"
    settings = OperatorSettings.from_env(env)
    defaults = Settings()
    assert settings.store == Settings(sessions_dir=STORE_DIR, github_auth_source="app"), \
        "the chart's bounds are the store contract's defaults"
    assert env["PI_SESSION_MAX_BYTES"] == str(defaults.max_bytes), "no float formatting of large numbers"
    assert "PI_SESSION_MAX_CONTEXT_PCT" not in env, "null leaves the bound unset (off)"
    assert "PI_SESSIONS_ALLOW_GH_SOURCE" not in env


def test_values_reach_the_operator_as_given(helm: Any) -> None:
    values = {
        "sessions.enabled": True, "sessions.ttlDays": 0, "sessions.maxBytes": 123456789,
        "sessions.maxAgeDays": 30, "sessions.maxResumeChain": 5, "sessions.maxContextPct": 80,
        "sessions.allowGhSource": True, "github.authSource": "pat", "maxConcurrentJobs": 7,
        "job.image": "registry.example/pi-job:1.2.3", "job.command": ["pidispatch", "runner", "--verbose"],
        "metrics.port": 9191, "health.port": 8181,
    }
    settings = OperatorSettings.from_env(env_values(operator_container(render(helm, values))))
    assert settings.store == Settings(sessions_dir=STORE_DIR, ttl_days=0, max_bytes=123456789, max_age_days=30,
                                      max_resume_chain=5, max_context_pct=80, allow_gh_source=True,
                                      github_auth_source="pat")
    assert settings.max_concurrent_jobs == 7
    assert settings.job_image == "registry.example/pi-job:1.2.3"
    assert settings.job_command == ("pidispatch", "runner", "--verbose")
    assert (settings.metrics_port, settings.health_port, settings.lease) == (9191, 8181, FULLNAME)
    assert settings.namespace == NAMESPACE and settings.staging_claim == f"{FULLNAME}-staging"


@pytest.mark.parametrize("bound", ["ttlDays", "maxBytes", "maxAgeDays", "maxResumeChain", "maxContextPct"])
def test_a_null_bound_leaves_its_variable_unset(helm: Any, bound: str) -> None:
    on = env_values(operator_container(render(helm, {**STORE_ON, "sessions.maxContextPct": 50})))
    off = env_values(operator_container(render(helm, {**STORE_ON, "sessions.maxContextPct": 50,
                                                      f"sessions.{bound}": None})))
    assert set(on) - set(off) == {
        "ttlDays": {"PI_SESSIONS_TTL_DAYS"}, "maxBytes": {"PI_SESSION_MAX_BYTES"},
        "maxAgeDays": {"PI_SESSION_MAX_AGE_DAYS"}, "maxResumeChain": {"PI_SESSION_MAX_RESUME_CHAIN"},
        "maxContextPct": {"PI_SESSION_MAX_CONTEXT_PCT"},
    }[bound]


def test_extra_env_is_appended_to_the_operator_and_the_test_pod(helm: Any) -> None:
    extra = [{"name": "PI_DISPATCH_SWEEP_INTERVAL_SECONDS", "value": "60"},
             {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    docs = render(helm, {"extraEnv": extra})
    assert env_list(operator_container(docs))[-2:] == extra
    assert env_list(doctor_pod(docs)["spec"]["containers"][0])[-2:] == extra


def test_auth_source_values_are_the_crds_auth_sources() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    allowed = schema["properties"]["github"]["properties"]["authSource"]["enum"]
    assert [a for a in allowed if a is not None] == list(AUTH_SOURCES)


# -- the schema ------------------------------------------------------------------------------------------------
REJECTED = [
    ("maxConcurrentJobs as a word", {"maxConcurrentJobs": "four"}, "/maxConcurrentJobs"),
    ("maxConcurrentJobs zero", {"maxConcurrentJobs": 0}, "/maxConcurrentJobs"),
    ("context percent above 100", {"sessions.maxContextPct": 150}, "/sessions/maxContextPct"),
    ("context percent zero", {"sessions.maxContextPct": 0}, "/sessions/maxContextPct"),
    ("negative ttl", {"sessions.ttlDays": -1}, "/sessions/ttlDays"),
    ("fractional max bytes", {"sessions.maxBytes": 1.5}, "/sessions/maxBytes"),
    ("sessions.enabled as a string", {"sessions.enabled": "true"}, "/sessions/enabled"),
    ("allowGhSource as the string 1", {"sessions.allowGhSource": "1"}, "/sessions/allowGhSource"),
    ("unknown top-level key", {"maxConcurentJobs": 4}, "maxConcurentJobs"),
    ("unknown sessions key", {"sessions.ttl": 3}, "ttl"),
    ("three operators", {"replicas": 3}, "/replicas"),
    ("job command as a string", {"job.command": "pidispatch runner"}, "/job/command"),
    ("empty job command", {"job.command": []}, "/job/command"),
    ("unknown auth source", {"github.authSource": "token"}, "/github/authSource"),
    ("api url without a scheme", {"github.apiUrl": "api.github.com"}, "/github/apiUrl"),
    ("api timeout zero", {"github.timeoutSeconds": 0}, "/github/timeoutSeconds"),
    ("app id as a string", {"github.app.id": "my-app"}, "/github/app/id"),
    ("installation id zero", {"github.app.installationId": 0}, "/github/app/installationId"),
    ("unknown github.app key", {"github.app.privateKey": "-----BEGIN"}, "privateKey"),
    ("token secret key with a slash", {"github.token.key": "a/b"}, "/github/token/key"),
    ("metrics port out of range", {"metrics.port": 70000}, "/metrics/port"),
    ("root user", {"securityContext.runAsUser": 0}, "/securityContext/runAsUser"),
    ("a plain token in the job env", {"job.env": {"GH_TOKEN": "ghp_x"}}, "GH_TOKEN"),
    ("a store setting in the job env", {"job.env": {"PI_SESSION_FILE": "/x"}}, "PI_SESSION_FILE"),
    ("a plain model key in the job env", {"job.env": {"OPENAI_API_KEY": "sk-x"}}, "OPENAI_API_KEY"),
    ("a model credential named as the forge token", {"job.credentials": {"GH_TOKEN": {"secretName": "s", "key": "k"}}},
     "GH_TOKEN"),
    ("a model credential without its key", {"job.credentials": {"OPENAI_API_KEY": {"secretName": "s"}}},
     "/job/credentials/OPENAI_API_KEY"),
    ("a negative run timeout", {"job.timeoutSeconds": -1}, "/job/timeoutSeconds"),
    ("a start timeout below 10 s", {"job.startTimeoutSeconds": 5}, "/job/startTimeoutSeconds"),
    ("extraEnv overriding the store", {"extraEnv": [{"name": "PI_SESSIONS_DIR", "value": "/x"}]}, "/extraEnv/0/name"),
    ("extraEnv overriding the auth source", {"extraEnv": [{"name": "GITHUB_AUTH_SOURCE", "value": "app"}]},
     "/extraEnv/0/name"),
    ("unknown access mode", {"sessions.staging.accessModes": ["RWX"]}, "/sessions/staging/accessModes"),
    ("size without a unit grammar", {"sessions.store.size": "ten gigs"}, "/sessions/store/size"),
]


@pytest.mark.parametrize(("values", "field"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_schema_rejects_bad_values_naming_the_field(helm: Any, values: dict[str, Any], field: str) -> None:
    result = template(helm, values)
    assert result.returncode != 0, f"accepted {values}"
    assert "schema" in result.stderr and field in result.stderr, result.stderr


# -- RBAC ------------------------------------------------------------------------------------------------------
def _rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def _expand(groups: list[str], resources: list[str], verbs: list[str]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for g in groups for r in resources for v in verbs}


NAMESPACED_GRANTS = (
    _expand(["pi-dispatch.dev"], ["triggers", "jobs", "sessionkeys"], ["get", "list", "watch"])
    | _expand(["pi-dispatch.dev"], ["sessionkeys"], ["create", "delete", "patch"])
    | _expand(["pi-dispatch.dev"], ["jobs"], ["create", "delete"])  # create: a cron Trigger's slots
    | _expand(["pi-dispatch.dev"], ["triggers/status", "jobs/status", "sessionkeys/status"], ["patch"])
    | _expand([""], ["pods"], ["get", "list", "watch", "create", "delete"])
    | _expand([""], ["secrets"], ["create", "delete"])
    | _expand([""], ["events"], ["create"])
    | _expand([""], ["persistentvolumeclaims"], ["get"])
    | _expand(["coordination.k8s.io"], ["leases"], ["get", "create", "update"])
)
CLUSTER_GRANTS = (_expand(["apiextensions.k8s.io"], ["customresourcedefinitions"], ["get", "list", "watch"])
                  | _expand([""], ["namespaces"], ["list", "watch"]))
# Co-location (ReadWriteOnce staging): the operator reads its own Node by name (labels, taints) to refuse a
# Trigger whose resumed jobs could never be placed there (api/placement.py); never list or watch.
NODE_GRANT = _expand([""], ["nodes"], ["get"])
# With the gateway (on by default): the operator reads a Job's ledger when it ends (tests/chart/test_chart_gateway.py).
LEDGER_GRANT = _expand([""], ["configmaps"], ["get"])


@pytest.mark.parametrize(("values", "cluster_grants"), [
    (ALL_ON, CLUSTER_GRANTS | NODE_GRANT),
    ({**ALL_ON, "sessions.staging.accessModes": ["ReadWriteMany"]}, CLUSTER_GRANTS),
    ({**ALL_ON, "sessions.staging.mode": "transfer"}, CLUSTER_GRANTS),
    ({}, CLUSTER_GRANTS),
], ids=["readwriteonce staging reads its node", "readwritemany staging reads no node",
        "transfer staging reads no node", "no store reads no node"])
def test_rbac_is_least_privilege(helm: Any, values: dict[str, Any], cluster_grants: set[Any]) -> None:
    docs = render(helm, values)
    role, cluster_role = one(docs, "Role", FULLNAME), one(docs, "ClusterRole")
    for r in (role, cluster_role):
        for rule in r["rules"]:
            assert set(rule) == {"apiGroups", "resources", "verbs"}, f"no resourceNames/nonResourceURLs: {rule}"
            assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"], f"wildcard in {rule}"
    granted = _rules(role)
    assert not {g for g in granted if g[1] in ("pods/log", "pods/exec", "deployments")}
    # per-job token Secrets are created (and deleted after the retention), never read: no get, list or watch
    assert {g for g in granted if g[1] == "secrets"} == {("", "secrets", "create"), ("", "secrets", "delete")}
    assert granted == NAMESPACED_GRANTS | LEDGER_GRANT
    assert _rules(cluster_role) == cluster_grants, "cluster-wide: CRDs (kopf, doctor), namespaces (kopf), the node"
    assert role["metadata"]["name"] == FULLNAME and cluster_role["metadata"]["name"] == f"{FULLNAME}-{NAMESPACE}"
    sa = one(docs, "ServiceAccount", FULLNAME)["metadata"]["name"]
    subject = [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    for binding, ref in ((one(docs, "RoleBinding", FULLNAME), role), (one(docs, "ClusterRoleBinding"), cluster_role)):
        assert binding["subjects"] == subject
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": ref["kind"],
                                      "name": ref["metadata"]["name"]}
    assert one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["serviceAccountName"] == sa
    assert doctor_pod(docs)["spec"]["serviceAccountName"] == sa


# -- Pods: security, strategy, probes, the test hook -------------------------------------------------------------
@pytest.mark.parametrize("which", ["operator", "helm test"])
def test_pods_are_restricted(helm: Any, which: str) -> None:
    docs = render(helm, {**STORE_ON, "securityContext.runAsUser": 4242})
    pod_spec = (one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"] if which == "operator"
                else doctor_pod(docs)["spec"])
    psc = pod_spec["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 4242
    assert psc["fsGroup"] == 65532, "fsGroup makes the PVCs writable"
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod_spec.get("hostNetwork") is not True and pod_spec.get("hostPID") is not True
    for container in pod_spec["containers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
        assert sc.get("privileged") is not True
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"], "a writable /tmp"
    assert {"name": "tmp", "emptyDir": {}} in pod_spec["volumes"]


def test_deployment_is_one_recreated_operator_with_a_liveness_probe(helm: Any) -> None:
    docs = render(helm)
    deployment = one(docs, "Deployment", FULLNAME)
    assert deployment["metadata"]["name"] == FULLNAME
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment["spec"]["replicas"] == 1
    container = operator_container(docs)
    assert container["command"] == ["pidispatch", "operator"]
    assert container["image"] == f"ghcr.io/pi-dispatch/operator:{APP_VERSION}"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9090, "health": 8080}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert not selector.items() <= doctor_pod(docs)["metadata"]["labels"].items(), "the test Pod is not an operator"
    assert one(render(helm, {"replicas": 0}), "Deployment", FULLNAME)["spec"]["replicas"] == 0
    no_probe = operator_container(render(helm, {"health.port": 0}))
    assert "livenessProbe" not in no_probe and [p["name"] for p in no_probe["ports"]] == ["metrics"]


def test_helm_test_hook_runs_doctor_like_the_operator(helm: Any) -> None:
    for values in ({}, ALL_ON):
        docs = render(helm, values)
        pod = doctor_pod(docs)
        operator = operator_container(docs)
        [doctor] = pod["spec"]["containers"]
        assert doctor["command"] == ["pidispatch", "doctor"]
        assert doctor["image"] == operator["image"]
        assert doctor["env"] == operator["env"]
        assert doctor["volumeMounts"] == operator["volumeMounts"]
        assert pod["spec"]["restartPolicy"] == "Never"
    assert kinds(render(helm, {"tests.enabled": False}), "Pod") == []


def test_test_pod_follows_the_operator_onto_its_node_when_claims_are_mounted(helm: Any) -> None:
    docs = render(helm, {**STORE_ON})
    term = doctor_pod(docs)["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == one(docs, "Deployment", FULLNAME)["spec"]["selector"]["matchLabels"]
    assert "affinity" not in doctor_pod(render(helm))["spec"], "nothing to share without claims"


# -- storage options ------------------------------------------------------------------------------------------
def test_store_claim_options(helm: Any) -> None:
    docs = render(helm, {**STORE_ON, "sessions.store.resourcePolicy": "",
                         "sessions.store.storageClassName": "fast", "sessions.staging.accessModes": ["ReadWriteMany"],
                         "sessions.staging.storageClassName": "", "sessions.staging.size": "2Gi"})
    store = one(docs, "PersistentVolumeClaim", f"{FULLNAME}-sessions")
    staging = one(docs, "PersistentVolumeClaim", f"{FULLNAME}-staging")
    assert "annotations" not in store["metadata"], "resourcePolicy '' lets helm uninstall delete the store"
    assert store["spec"]["storageClassName"] == "fast"
    assert staging["spec"]["storageClassName"] == "", "'' (no dynamic provisioning) is not the same as null"
    assert staging["spec"]["accessModes"] == ["ReadWriteMany"]
    assert staging["spec"]["resources"]["requests"]["storage"] == "2Gi"
    existing = render(helm, {**STORE_ON, "sessions.store.existingClaim": "old-store"})
    assert [p["metadata"]["name"] for p in kinds(existing, "PersistentVolumeClaim")] == [f"{FULLNAME}-staging"]
    volumes = one(existing, "Deployment", FULLNAME)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "sessions", "persistentVolumeClaim": {"claimName": "old-store"}} in volumes


# -- metrics ---------------------------------------------------------------------------------------------------
def test_metrics_service_and_optional_service_monitor(helm: Any) -> None:
    docs = render(helm)
    service = one(docs, "Service", f"{FULLNAME}-metrics")
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [("metrics", 9090, "metrics")]
    assert service["spec"]["selector"] == one(docs, "Deployment", FULLNAME)["spec"]["selector"]["matchLabels"]
    assert kinds(docs, "ServiceMonitor") == []
    assert kinds(without_gateway(render(helm, {"metrics.port": 0})), "Service") == []

    missing_api = template(helm, {"metrics.serviceMonitor.enabled": True})
    assert missing_api.returncode != 0 and "monitoring.coreos.com/v1" in missing_api.stderr, \
        "enabled without the API is an error, not a silently missing ServiceMonitor"
    docs = render(helm, {"metrics.serviceMonitor.enabled": True, "metrics.serviceMonitor.labels": {"release": "prom"}},
                  "--api-versions", SERVICE_MONITOR_API)
    monitor = one(docs, "ServiceMonitor", FULLNAME)
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= one(docs, "Service", f"{FULLNAME}-metrics")[
        "metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_values_file_names_every_variable_it_sets(helm: Any) -> None:
    """A reader of values.yaml finds each operator variable next to the value that sets it."""
    text = (CHART / "values.yaml").read_text()
    names = {v["name"] for v in env_list(operator_container(render(helm, ALL_ON))) if "value" in v}
    assert len(names) > 10
    assert [name for name in sorted(names) if name not in text] == []


# -- the images the chart runs ---------------------------------------------------------------------------------
def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """``{stage: [(INSTRUCTION, arguments)]}``; ``""`` holds the global ARGs before the first FROM."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stages: dict[str, list[tuple[str, str]]] = {"": []}
    current = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, args = line.partition(" ")
        if instruction.upper() == "FROM":
            current = args.split()[-1] if " AS " in args.upper() else args
            stages[current] = []
        stages[current].append((instruction.upper(), args.strip()))
    return stages


def test_images_run_what_the_chart_expects(helm: Any) -> None:
    from pidispatch.manifests.pod import WORKSPACE

    stages = dockerfile_stages()
    base_args = dict(a.split("=", 1) for kind, a in stages[""] if kind == "ARG")
    assert base_args["PYTHON_IMAGE"].startswith("python:3.11-"), "Python 3.11, pinned by tag"
    assert all(":" in image and not image.endswith(":latest") for image in base_args.values())

    def last(stage: str, instruction: str) -> str:
        found = [a for kind, a in stages[stage] if kind == instruction]
        assert found, f"stage {stage} has no {instruction}"
        return found[-1]

    docs = render(helm)
    uid = doctor_pod(docs)["spec"]["securityContext"]["runAsUser"]
    operator = json.loads(last("operator", "ENTRYPOINT")) + json.loads(last("operator", "CMD"))
    assert operator == operator_container(docs)["command"] == ["pidispatch", "operator"]
    assert json.loads(last("job", "ENTRYPOINT")) == yaml.safe_load((CHART / "values.yaml").read_text())["job"][
        "command"]
    assert last("job", "WORKDIR") == WORKSPACE, "pi needs the session header's cwd: always /workspace"
    pi_version = dict(a.split("=", 1) for kind, a in stages["job"] if kind == "ARG" and "=" in a)["PI_VERSION"]
    pinned = json.loads((ROOT / "e2e" / "pi" / "package.json").read_text())["dependencies"]
    assert pinned == {"@mariozechner/pi-coding-agent": pi_version}, "the image and the tests pin the same pi"
    assert any(kind == "COPY" and "e2e/pi/package-lock.json" in a for kind, a in stages["job"]), \
        "the image installs pi from the tests' lock file"
    for stage in ("operator", "job"):
        assert last(stage, "USER") == f"{uid}:{uid}", f"the {stage} image runs as the chart's non-root uid"


# -- the webhook receiver (receiver.enabled) -------------------------------------------------------------------
def receiver_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "receiver"]


def receiver_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(docs, "Deployment", RECEIVER)["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["receiver"]
    return containers[0]


def receiver_settings(container: dict[str, Any], tmp_path: Path) -> Any:
    """What ``pidispatch receiver`` would run with, the mounted secret file standing in at a temporary path."""
    from pidispatch.receiver.settings import ReceiverSettings

    env = env_values(container)
    secret = tmp_path / "secret"
    secret.write_text("from-the-secret\n")
    assert env["GITHUB_WEBHOOK_SECRET_FILE"].startswith(container["volumeMounts"][0]["mountPath"] + "/")
    return ReceiverSettings.from_env({**env, "GITHUB_WEBHOOK_SECRET_FILE": str(secret)})


@pytest.mark.parametrize("values", [RECEIVER_ON, {"receiver.enabled": True, "receiver.webhookSecret.create": True,
                                                  "receiver.webhookSecret.value": "s3cret", **ALL_ON}],
                         ids=["existing secret", "created secret and every option on"])
def test_helm_lint_passes_with_the_receiver(helm: Any, values: dict[str, Any]) -> None:
    result = helm("lint", "--strict", str(CHART), *set_args(values))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_receiver_is_off_by_default(helm: Any) -> None:
    docs = render(helm)
    assert receiver_objects(docs) == []
    assert not [d for d in docs if d["metadata"]["name"].startswith(RECEIVER)]
    assert yaml.safe_load((CHART / "values.yaml").read_text())["receiver"]["enabled"] is False


def test_receiver_objects_and_the_operator_are_unchanged_by_it(helm: Any) -> None:
    off, on = render(helm, ALL_ON), render(helm, {**ALL_ON, **RECEIVER_ON})
    assert [(d["kind"], d["metadata"]["name"]) for d in receiver_objects(on)] == [
        ("PodDisruptionBudget", RECEIVER), ("ServiceAccount", RECEIVER), ("Role", RECEIVER), ("RoleBinding", RECEIVER),
        ("Service", RECEIVER), ("Deployment", RECEIVER)], \
        "the receiver's own objects (no Secret: it names an existing one)"
    webhook_test = one(on, "Pod", f"{FULLNAME}-webhook")  # helm test's check of the receiver (below)
    # (the gateway's Secret is random in every render: without_gateway)
    assert [d for d in without_gateway(on) if d not in receiver_objects(on) and d is not webhook_test] == \
        without_gateway(off), "nothing of the operator changes"


def test_receiver_env_is_what_the_receiver_reads_with_its_defaults(helm: Any, tmp_path: Path) -> None:
    from pidispatch.receiver.settings import (
        DEFAULT_HEALTH_PORT,
        DEFAULT_MAX_BODY,
        DEFAULT_MAX_CONNECTIONS,
        DEFAULT_PORT,
        ENV_NAMES,
    )

    container = receiver_container(render(helm, RECEIVER_ON))
    names = [v["name"] for v in env_list(container)]
    assert len(names) == len(set(names)) and set(names) <= set(ENV_NAMES), names
    assert "GITHUB_WEBHOOK_SECRET" not in names, "the secret arrives as a mounted file, never as an env value"
    settings = receiver_settings(container, tmp_path)
    assert (settings.namespace, settings.port, settings.max_body, settings.auth_source, settings.health_port,
            settings.max_connections) == (NAMESPACE, DEFAULT_PORT, DEFAULT_MAX_BODY, None, DEFAULT_HEALTH_PORT,
                                          DEFAULT_MAX_CONNECTIONS), "the chart's defaults are the receiver's defaults"
    assert settings.secret == b"from-the-secret"
    assert container["command"] == ["pidispatch", "receiver"]
    assert container["image"] == operator_container(render(helm))["image"], "the operator's image"
    assert container["ports"] == [{"name": "http", "containerPort": DEFAULT_PORT, "protocol": "TCP"},
                                  {"name": "health", "containerPort": DEFAULT_HEALTH_PORT, "protocol": "TCP"}]
    # The probes on the health port: the webhook port answers /webhook alone (tests/receiver/test_receiver_surface.py).
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_receiver_values_reach_it_as_given(helm: Any, tmp_path: Path) -> None:
    docs = render(helm, {**RECEIVER_ON, "receiver.port": 9443, "receiver.maxBodyBytes": 65536,
                         "github.authSource": "app", "receiver.replicas": 3, "receiver.service.port": 8080,
                         "receiver.healthPort": 9444, "receiver.maxConnections": 32})
    container = receiver_container(docs)
    settings = receiver_settings(container, tmp_path)
    assert (settings.port, settings.max_body, settings.auth_source, settings.health_port,
            settings.max_connections) == (9443, 65536, "app", 9444, 32)
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [("http", 9443), ("health", 9444)]
    assert one(docs, "Deployment", RECEIVER)["spec"]["replicas"] == 3
    assert [(p["port"], p["targetPort"]) for p in one(docs, "Service", RECEIVER)["spec"]["ports"]] == [(8080, "http")]


def test_receiver_values_file_names_every_variable_it_sets(helm: Any) -> None:
    text = (CHART / "values.yaml").read_text()
    names = {v["name"] for v in env_list(receiver_container(render(helm, {**RECEIVER_ON, **ALL_ON})))}
    assert [name for name in sorted(names - {"PI_DISPATCH_NAMESPACE"}) if name not in text] == []


def test_receiver_rbac_reads_triggers_creates_jobs_and_annotates_sessionkeys_only(helm: Any) -> None:
    docs = render(helm, {**ALL_ON, **RECEIVER_ON})
    role = one(docs, "Role", RECEIVER)
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"} and "*" not in str(rule), rule
    # patch on sessionkeys: a closed pull request or issue annotates its key for retirement (no get, no status).
    assert _rules(role) == (_expand(["pi-dispatch.dev"], ["triggers"], ["get", "list", "watch"])
                            | {("pi-dispatch.dev", "jobs", "create"), ("pi-dispatch.dev", "sessionkeys", "patch")})
    binding = one(docs, "RoleBinding", RECEIVER)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RECEIVER, "namespace": NAMESPACE}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RECEIVER}
    assert one(docs, "Deployment", RECEIVER)["spec"]["template"]["spec"]["serviceAccountName"] == RECEIVER
    assert one(docs, "ServiceAccount", RECEIVER)
    assert [b["metadata"]["name"] for b in kinds(docs, "ClusterRoleBinding")] == [f"{FULLNAME}-{NAMESPACE}"], \
        "nothing cluster-wide for the receiver"
    assert _rules(one(docs, "Role", FULLNAME)) == NAMESPACED_GRANTS | LEDGER_GRANT, \
        "the operator's grants are not widened"


def test_receiver_pod_is_restricted_and_mounts_only_its_webhook_secret(helm: Any) -> None:
    docs = render(helm, {**RECEIVER_ON, **STORE_ON})
    pod_spec = one(docs, "Deployment", RECEIVER)["spec"]["template"]["spec"]
    psc = pod_spec["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod_spec.get("hostNetwork") is not True and pod_spec.get("hostPID") is not True
    [container] = pod_spec["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc.get("privileged") is not True
    assert pod_spec["volumes"] == [{"name": "webhook-secret", "secret": {
        "secretName": "gh-webhook", "items": [{"key": "token", "path": "secret"}], "defaultMode": 0o440}}]
    assert container["volumeMounts"] == [{"name": "webhook-secret", "mountPath": "/etc/pi-dispatch/webhook",
                                          "readOnly": True}], "no store, no staging: sessions on changes nothing"
    assert "persistentVolumeClaim" not in json.dumps(pod_spec)


def test_receiver_webhook_secret_created_by_the_chart(helm: Any, tmp_path: Path) -> None:
    docs = render(helm, {"receiver.enabled": True, "receiver.webhookSecret.create": True,
                         "receiver.webhookSecret.value": "s3cret"})
    secret = one(without_gateway(docs), "Secret")
    assert secret["metadata"]["name"] == f"{FULLNAME}-webhook"
    assert secret["data"] == {"secret": "czNjcmV0"}
    volume = one(docs, "Deployment", RECEIVER)["spec"]["template"]["spec"]["volumes"][0]
    assert volume["secret"]["secretName"] == f"{FULLNAME}-webhook"
    assert kinds(without_gateway(render(helm, RECEIVER_ON)), "Secret") == [], "an existing Secret is used, not copied"


@pytest.mark.parametrize(("values", "message"), [
    ({"receiver.enabled": True}, "needs the webhook secret"),
    ({"receiver.enabled": True, "receiver.webhookSecret.create": True}, "needs receiver.webhookSecret.value"),
    ({"receiver.enabled": True, "receiver.webhookSecret.create": True, "receiver.webhookSecret.value": "x",
      "receiver.webhookSecret.existingSecret": "y"}, "not both"),
], ids=["no secret at all", "create without a value", "both forms"])
def test_receiver_without_a_usable_secret_fails_to_render(helm: Any, values: dict[str, Any], message: str) -> None:
    result = template(helm, values)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_receiver_service_selects_receiver_pods_only(helm: Any) -> None:
    docs = render(helm, RECEIVER_ON)
    service = one(docs, "Service", RECEIVER)
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}], \
        "the webhook port alone: never the health port (probes, metrics)"
    assert [s["metadata"]["name"] for s in kinds(docs, "Service") if s in receiver_objects(docs)] == [RECEIVER], \
        "no other receiver Service without the ServiceMonitor"
    selector = service["spec"]["selector"].items()
    assert selector <= one(docs, "Deployment", RECEIVER)["spec"]["template"]["metadata"]["labels"].items()
    assert not selector <= one(docs, "Deployment", FULLNAME)["spec"]["template"]["metadata"]["labels"].items()
    operator_selector = one(docs, "Service", f"{FULLNAME}-metrics")["spec"]["selector"].items()
    assert not operator_selector <= one(docs, "Deployment", RECEIVER)["spec"]["template"]["metadata"][
        "labels"].items(), "the operator's metrics Service does not pick up receiver Pods"


def test_receiver_service_monitor(helm: Any) -> None:
    docs = render(helm, {**RECEIVER_ON, "metrics.serviceMonitor.enabled": True}, "--api-versions",
                  SERVICE_MONITOR_API)
    monitor = one(docs, "ServiceMonitor", RECEIVER)
    assert monitor["spec"]["endpoints"] == [{"port": "health", "path": "/metrics", "interval": "30s"}]
    # /metrics answers on the health port only, which the webhook Service does not expose: the monitor
    # scrapes a ClusterIP Service of its own, with that port alone.
    metrics = one(docs, "Service", f"{RECEIVER}-metrics")
    assert metrics["spec"]["type"] == "ClusterIP"
    assert metrics["spec"]["ports"] == [{"name": "health", "port": 8001, "targetPort": "health", "protocol": "TCP"}]
    selector = monitor["spec"]["selector"]["matchLabels"].items()
    assert selector <= metrics["metadata"]["labels"].items()
    assert not selector <= one(docs, "Service", RECEIVER)["metadata"]["labels"].items(), "not the webhook Service"
    assert one(docs, "Service", RECEIVER)["spec"]["ports"][0]["targetPort"] == "http"
    assert sorted(m["metadata"]["name"] for m in kinds(docs, "ServiceMonitor")) == [FULLNAME, GATEWAY, RECEIVER]


RECEIVER_REJECTED = [
    ("port zero", {"receiver.port": 0}, "/receiver/port"),
    ("health port zero", {"receiver.healthPort": 0}, "/receiver/healthPort"),
    ("no connections", {"receiver.maxConnections": 0}, "/receiver/maxConnections"),
    ("connections beyond the bound", {"receiver.maxConnections": 16385}, "/receiver/maxConnections"),
    ("cap below 1 KiB", {"receiver.maxBodyBytes": 10}, "/receiver/maxBodyBytes"),
    ("cap above GitHub's 25 MiB", {"receiver.maxBodyBytes": 26214401}, "/receiver/maxBodyBytes"),
    ("cap as a quantity", {"receiver.maxBodyBytes": "1Mi"}, "/receiver/maxBodyBytes"),
    ("enabled as a string", {"receiver.enabled": "true"}, "/receiver/enabled"),
    ("unknown receiver key", {"receiver.secret": "x"}, "secret"),
    ("unknown webhookSecret key", {"receiver.webhookSecret.name": "x"}, "name"),
    ("service type", {"receiver.service.type": "ExternalName"}, "/receiver/service/type"),
]


def test_the_health_port_must_differ_from_the_webhook_port(helm: Any) -> None:
    result = template(helm, {**RECEIVER_ON, "receiver.port": 9000, "receiver.healthPort": 9000})
    assert result.returncode != 0 and "receiver.healthPort must differ from receiver.port" in result.stderr


@pytest.mark.parametrize(("values", "field"), [r[1:] for r in RECEIVER_REJECTED], ids=[r[0] for r in RECEIVER_REJECTED])
def test_schema_rejects_bad_receiver_values(helm: Any, values: dict[str, Any], field: str) -> None:
    result = template(helm, {**RECEIVER_ON, **values})
    assert result.returncode != 0, f"accepted {values}"
    assert "schema" in result.stderr and field in result.stderr, result.stderr


# -- GitHub: the App, a pat/gh token Secret, the API -------------------------------------------------------------
APP_ON: dict[str, Any] = {"github.authSource": "app", "github.app.id": 1234, "github.app.installationId": 5678,
                          "github.app.privateKeySecret.name": "gh-app", "github.app.privateKeySecret.key": "key.pem"}
PAT_ON: dict[str, Any] = {"github.authSource": "pat", "github.token.secretName": "gh-token",
                          "github.token.key": "pat"}


def _pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]


def test_github_defaults_configure_no_client_and_mount_nothing(helm: Any) -> None:
    docs = render(helm)
    settings = OperatorSettings.from_env(env_values(operator_container(docs)))
    assert settings.github.api_url == "https://api.github.com" and settings.github.timeout_seconds == 10
    assert not settings.github.app_configured and settings.github.token_file is None
    assert not any(v["name"].startswith("github") for v in _pod_spec(docs)["volumes"])


def test_the_app_key_is_mounted_read_only_from_its_secret(helm: Any) -> None:
    docs = render(helm, {**APP_ON, "github.apiUrl": "https://ghe.example.com/api/v3", "github.timeoutSeconds": 4})
    container = operator_container(docs)
    settings = OperatorSettings.from_env(env_values(container))
    github = settings.github
    assert (github.app_id, github.app_installation_id, github.api_url, github.timeout_seconds) == (
        1234, 5678, "https://ghe.example.com/api/v3", 4)
    [volume] = [v for v in _pod_spec(docs)["volumes"] if v["name"] == "github-app"]
    assert volume["secret"]["secretName"] == "gh-app"
    assert volume["secret"]["items"] == [{"key": "key.pem", "path": "private-key.pem"}]
    assert volume["secret"]["defaultMode"] == 0o440
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "github-app"]
    assert mount["readOnly"] is True
    assert github.app_private_key_file == f"{mount['mountPath']}/private-key.pem"
    assert not any("secretKeyRef" in json.dumps(v) for v in env_list(container)), "the key is a file, not env"
    [doctor] = doctor_pod(docs)["spec"]["containers"]
    assert doctor["volumeMounts"] == container["volumeMounts"]


def test_a_pat_secret_is_mounted_for_the_operator_and_named_for_job_pods(helm: Any) -> None:
    docs = render(helm, PAT_ON)
    container = operator_container(docs)
    github = OperatorSettings.from_env(env_values(container)).github
    [volume] = [v for v in _pod_spec(docs)["volumes"] if v["name"] == "github-token"]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "github-token"]
    assert volume["secret"]["secretName"] == "gh-token" and mount["readOnly"] is True
    assert volume["secret"]["items"] == [{"key": "pat", "path": "token"}]
    assert github.token_file == f"{mount['mountPath']}/token"
    assert github.token_secret == ("gh-token", "pat")
    assert not github.app_configured


@pytest.mark.parametrize(("values", "words"), [
    ({"github.app.id": 1, "github.app.installationId": 2, "github.app.privateKeySecret.name": "k"},
     "github.authSource is gh"),
    ({**APP_ON, "github.app.installationId": None}, "github.app.installationId"),
    ({**APP_ON, "github.app.privateKeySecret.name": ""}, "github.app.privateKeySecret.name"),
    ({"github.authSource": "app", "github.token.secretName": "t"}, "github.token.secretName"),
], ids=["app without authSource app", "app without installation", "app without key Secret",
        "token Secret with authSource app"])
def test_github_combinations_the_operator_would_refuse_fail_the_install(helm: Any, values: dict[str, Any],
                                                                         words: str) -> None:
    result = template(helm, values)
    assert result.returncode != 0, "rendered"
    assert words in result.stderr, result.stderr


def test_github_values_name_their_variables() -> None:
    text = (CHART / "values.yaml").read_text()
    for name in ("GITHUB_API_URL", "GITHUB_API_TIMEOUT_SECONDS", "GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID",
                 "GITHUB_APP_PRIVATE_KEY_FILE", "GITHUB_TOKEN_FILE", "GITHUB_TOKEN_SECRET"):
        assert name in text, name


# -- the receiver from outside the cluster: an Ingress or a Gateway API HTTPRoute ---------------------------------
INGRESS_ON: dict[str, Any] = {**RECEIVER_ON, "receiver.ingress.enabled": True,
                              "receiver.ingress.host": "pi.example.com"}


def test_no_ingress_or_route_unless_asked(helm: Any) -> None:
    docs = render(helm, RECEIVER_ON)
    assert kinds(docs, "Ingress") == [] and kinds(docs, "HTTPRoute") == []


def test_the_ingress_routes_the_webhook_path_alone_to_the_receiver(helm: Any) -> None:
    docs = render(helm, {**INGRESS_ON, "receiver.ingress.className": "nginx",
                         "receiver.ingress.tls.secretName": "pi-tls",
                         "receiver.ingress.annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"}})
    ingress = one(docs, "Ingress", RECEIVER)
    assert ingress["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": ["pi.example.com"], "secretName": "pi-tls"}]
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == "pi.example.com"
    assert rule["http"]["paths"] == [{"path": "/webhook", "pathType": "Exact", "backend": {
        "service": {"name": RECEIVER, "port": {"name": "http"}}}}], "only the webhook, never the health port"
    assert [p["name"] for p in one(docs, "Service", RECEIVER)["spec"]["ports"]] == ["http"]


def test_an_ingress_without_a_host_or_without_the_receiver(helm: Any) -> None:
    result = template(helm, {**RECEIVER_ON, "receiver.ingress.enabled": True})
    assert result.returncode != 0 and "receiver.ingress.host" in result.stderr, result.stderr
    plain = render(helm, {"receiver.ingress.enabled": True, "receiver.ingress.host": "pi.example.com"})
    assert kinds(plain, "Ingress") == [], "no receiver, nothing to route to"


HTTPROUTE_API = ("--api-versions", "gateway.networking.k8s.io/v1/HTTPRoute")
ROUTE_ON: dict[str, Any] = {**RECEIVER_ON, "receiver.httpRoute.enabled": True,
                            "receiver.httpRoute.parentRefs": [
                                {"name": "public", "namespace": "gw", "sectionName": "https"}],
                            "receiver.httpRoute.hostnames": ["pi.example.com"]}


def test_the_http_route_sends_post_webhook_to_the_receiver(helm: Any) -> None:
    route = one(render(helm, ROUTE_ON, *HTTPROUTE_API), "HTTPRoute", RECEIVER)
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"]["parentRefs"] == [{"name": "public", "namespace": "gw", "sectionName": "https"}]
    assert route["spec"]["hostnames"] == ["pi.example.com"]
    assert route["spec"]["rules"] == [{"matches": [{"path": {"type": "Exact", "value": "/webhook"}, "method": "POST"}],
                                       "backendRefs": [{"name": RECEIVER, "port": 80}]}]


@pytest.mark.parametrize(("values", "extra", "named"), [
    (ROUTE_ON, (), "does not serve gateway.networking.k8s.io/v1 HTTPRoute"),
    ({**ROUTE_ON, "receiver.httpRoute.parentRefs": []}, HTTPROUTE_API, "receiver.httpRoute.parentRefs"),
], ids=["a cluster without the Gateway API", "no Gateway named"])
def test_an_http_route_that_could_not_work_fails_the_install(helm: Any, values: dict[str, Any],
                                                             extra: tuple[str, ...], named: str) -> None:
    result = template(helm, values, *extra)
    assert result.returncode != 0 and named in result.stderr, result.stderr


def test_helm_test_checks_that_the_webhook_refuses_an_unsigned_delivery(helm: Any) -> None:
    assert not [d for d in render(helm) if d["metadata"]["name"] == f"{FULLNAME}-webhook"], "no receiver, no check"
    pod = one(render(helm, {**RECEIVER_ON, "receiver.service.port": 8080}), "Pod", f"{FULLNAME}-webhook")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    [container] = pod["spec"]["containers"]
    assert container["command"] == ["pidispatch", "receiver", "check", f"http://{RECEIVER}.{NAMESPACE}.svc:8080/webhook"]
    assert pod["spec"]["automountServiceAccountToken"] is False and "env" not in container, \
        "it needs no credential: it proves that none is needed to be refused"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}


# -- the quickstart (docs/quickstart.md): its files, as committed -------------------------------------------------
EXAMPLES = ROOT / "examples"
QUICKSTART_SET = {"github.app.id": 123456, "github.app.installationId": 7890123,
                  "receiver.ingress.host": "pi.example.com"}


def test_the_quickstart_values_install_the_app_the_store_and_the_webhook(helm: Any) -> None:
    docs = render(helm, QUICKSTART_SET, "-f", str(EXAMPLES / "quickstart-values.yaml"))
    [operator] = one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"]
    env = env_values(operator)
    assert env["GITHUB_AUTH_SOURCE"] == "app" and env["GITHUB_APP_ID"] == "123456"
    assert env["PI_SESSIONS_DIR"] == STORE_DIR, "the store is on: resume can work"
    assert json.loads(env["PI_DISPATCH_JOB_CREDENTIALS"]) == {
        "OPENAI_API_KEY": {"secretName": "model-keys", "key": "openai"}}
    ingress = one(docs, "Ingress", RECEIVER)
    assert ingress["spec"]["rules"][0]["host"] == "pi.example.com"
    assert ingress["spec"]["tls"] == [{"hosts": ["pi.example.com"], "secretName": "pi-webhook-tls"}]
    assert one(docs, "Pod", f"{FULLNAME}-webhook"), "helm test checks the webhook"


def test_the_quickstart_values_without_the_set_values_fail_naming_what_is_missing(helm: Any) -> None:
    result = template(helm, {}, "-f", str(EXAMPLES / "quickstart-values.yaml"))
    assert result.returncode != 0 and "receiver.ingress.host" in result.stderr, result.stderr


def test_the_quickstart_trigger_is_valid_and_arms_resume() -> None:
    from pidispatch.api.models import TriggerSpec, problem
    from pidispatch.api.views import TriggerView

    trigger = yaml.safe_load((EXAMPLES / "trigger.yaml").read_text())
    assert problem(TriggerSpec, trigger["spec"]) is None
    view = TriggerView.of(trigger)
    assert view.refusal is None and view.resumes


def test_two_receivers_by_default_spread_over_nodes_and_drained_one_at_a_time(helm: Any) -> None:
    docs = render(helm, RECEIVER_ON)
    deployment = one(docs, "Deployment", RECEIVER)
    assert deployment["spec"]["replicas"] == 2
    [spread] = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "ScheduleAnyway"
    pdb = one(docs, "PodDisruptionBudget", RECEIVER)
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == spread["labelSelector"]["matchLabels"] == \
        deployment["spec"]["selector"]["matchLabels"]
    single = render(helm, {**RECEIVER_ON, "receiver.replicas": 1})
    assert kinds(without_gateway(single), "PodDisruptionBudget") == [], "one replica: a budget would block every drain"
