"""The chart's Secret ValidatingAdmissionPolicy on the local apiserver (issue 40): the operator's ServiceAccount
writes and deletes only its own per-job Secrets, Opaque and named after the Job that owns them.

The operator's Role may create and delete Secrets (it mints a token per job; a Role cannot name Secrets
that do not exist yet), so without this policy its identity could create a
``kubernetes.io/service-account-token`` Secret for any ServiceAccount, which the token controller fills
with a token of that account, and mount it in a job Pod as "its own per-job Secret". Installed as in
``test_job_pod_policy.py`` (the operator not started); requests are made with the ServiceAccount's identity
by impersonation, server-side dry-run. The allowed Secrets are the operator's own manifests
(``manifests/pod.py``); each refused one is that Secret with one thing changed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.framework.chartinstall import FULLNAME, RELEASE, fresh_namespace, helm, install
from e2e.framework.cluster import Cluster
from e2e.framework.kube import ApiError, Kube
from pidispatch.api.crds import GROUP, VERSION
from pidispatch.manifests.pod import job_token_secret, job_transfer_secret, token_secret_name
from pidispatch.receiver.delivery import job_body
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
TOKEN_SECRET = "gh-token"  # github.token.secretName: the chart's, not the operator's to write or delete


@pytest.fixture(scope="module")
def namespace(cluster: Cluster, kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home: Path = tmp_path_factory.mktemp("helm-home")
    ns = fresh_namespace(kube, "secret-policy")
    try:
        install(cluster, home, ns, "--set", "github.authSource=pat", "--set", f"github.token.secretName={TOKEN_SECRET}")
        kube.create(f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": TOKEN_SECRET},
                                                         "stringData": {"token": "not-a-real-token"}})
        # The apiserver loads a new policy asynchronously: wait until it holds (if the chart has one at all).
        if kube.get_or_none(f"{POLICIES}/{FULLNAME}-{ns}-secrets"):
            wait_until("the policy in force", lambda: refuses(cluster, ns), timeout=30)
        yield ns
    finally:
        helm(cluster, home, "uninstall", RELEASE, "--namespace", ns, check=False)
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")


def operator_client(cluster: Cluster, namespace: str) -> Kube:
    """The admin's credentials acting as the operator's ServiceAccount (Impersonate-User)."""
    kube = cluster.kube()
    kube.session.headers["Impersonate-User"] = f"system:serviceaccount:{namespace}:{FULLNAME}"
    return kube


def token_secret(namespace: str, uid: str) -> dict[str, Any]:
    """The operator's own per-job token Secret (jobflow/jobtoken.py job_token)."""
    job = f"job-{uid[:8]}"
    return job_token_secret(job, uid, namespace, token_secret_name(job, uid), "ghs_" + "x" * 36, "2030-01-01T00:00:00Z")


def create(kube: Kube, secret: dict[str, Any]) -> Any:
    return kube.create(f"/api/v1/namespaces/{secret['metadata']['namespace']}/secrets", secret, dryRun="All")


def refuses(cluster: Cluster, namespace: str) -> bool:
    secret = token_secret(namespace, str(uuid.uuid4()))
    _other_name(secret)
    try:
        create(operator_client(cluster, namespace), secret)
    except ApiError as exc:
        if exc.status == 403:
            return True
        raise
    return False


def _service_account_token(secret: dict[str, Any]) -> None:
    """The finding: a token of the namespace's default ServiceAccount (or any other), under the per-job name."""
    secret.update(type="kubernetes.io/service-account-token")
    secret["metadata"]["annotations"] = {"kubernetes.io/service-account.name": "default"}
    del secret["immutable"]
    secret.pop("stringData")


def _docker_config(secret: dict[str, Any]) -> None:
    secret.update(type="kubernetes.io/dockerconfigjson", stringData={".dockerconfigjson": "{\"auths\":{}}"})


def _other_name(secret: dict[str, Any]) -> None:
    secret["metadata"]["name"] = "someone-elses"


def _chart_secret_name(secret: dict[str, Any]) -> None:
    secret["metadata"]["name"] = TOKEN_SECRET


def _another_jobs_name(secret: dict[str, Any]) -> None:
    secret["metadata"]["name"] = token_secret_name("other", str(uuid.uuid4()))


def _another_jobs_pod(secret: dict[str, Any]) -> None:  # its own Job's uid, another Job's Pod's name
    secret["metadata"]["name"] = token_secret_name("other", secret["metadata"]["ownerReferences"][0]["uid"])


def _made_up_uid(secret: dict[str, Any]) -> None:  # named consistently, but after no uid the apiserver makes
    secret["metadata"]["ownerReferences"][0]["uid"] = "made-up"
    secret["metadata"]["name"] = token_secret_name(secret["metadata"]["ownerReferences"][0]["name"], "made-up")


def _no_owner(secret: dict[str, Any]) -> None:
    del secret["metadata"]["ownerReferences"]


def _mutable(secret: dict[str, Any]) -> None:
    del secret["immutable"]


def _transfer_without_transfer(secret: dict[str, Any]) -> None:  # sessions.staging.mode is mount here
    owner = secret["metadata"]["ownerReferences"][0]
    secret.update(job_transfer_secret(owner["name"], owner["uid"], secret["metadata"]["namespace"], "0" * 64))


REFUSED: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("a ServiceAccount token", _service_account_token, "only Opaque Secrets"),
    ("a registry credential", _docker_config, "only Opaque Secrets"),
    ("another name", _other_name, "named after the Job that owns it"),
    ("the chart's token Secret's name", _chart_secret_name, "named after the Job that owns it"),
    ("another Job's token name", _another_jobs_name, "named after the Job that owns it"),
    ("another Job's Pod's name", _another_jobs_pod, "named after the Job that owns it"),
    ("an owner uid of no apiserver's shape", _made_up_uid, "named after the Job that owns it"),
    ("no Job owning it", _no_owner, "named after the Job that owns it"),
    ("a transfer Secret in mount mode", _transfer_without_transfer, "named after the Job that owns it"),
    ("a mutable Secret", _mutable, "immutable"),
]


def test_the_policy_type_checks_clean(kube: Kube, namespace: str) -> None:
    path = f"{POLICIES}/{FULLNAME}-{namespace}-secrets"
    generation = kube.get(path)["metadata"]["generation"]
    status = wait_until("the policy type-checked", lambda: (
        s if (s := kube.get(path).get("status") or {}).get("observedGeneration") == generation else None), timeout=30)
    assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status


def test_the_operators_token_secret_is_allowed(cluster: Cluster, namespace: str) -> None:
    secret = token_secret(namespace, str(uuid.uuid4()))
    created = create(operator_client(cluster, namespace), secret)
    assert created["type"] == "Opaque" and created["metadata"]["name"] == secret["metadata"]["name"]


def test_the_token_secret_of_a_long_job_name_is_allowed(cluster: Cluster, namespace: str) -> None:
    """Named after the cut and hashed Pod name (manifests/pod.py pod_name), which CEL cannot redo: held by its
    ``pij-`` prefix and its ``-token-<uid>`` suffix."""
    uid, name = str(uuid.uuid4()), "long-" + "x" * 90
    create(operator_client(cluster, namespace), job_token_secret(
        name, uid, namespace, token_secret_name(name, uid), "ghs_" + "x" * 36, "2030-01-01T00:00:00Z"))


@pytest.mark.parametrize(("change", "message"), [(c, m) for _, c, m in REFUSED], ids=[i for i, _, _ in REFUSED])
def test_a_secret_outside_the_per_job_shape_is_refused_with_the_policys_message(
        cluster: Cluster, namespace: str, change: Callable[[dict[str, Any]], None], message: str) -> None:
    secret = token_secret(namespace, str(uuid.uuid4()))
    change(secret)
    with pytest.raises(ApiError) as refused:
        create(operator_client(cluster, namespace), secret)
    assert refused.value.status == 403, refused.value.body
    text = refused.value.message
    assert f"ValidatingAdmissionPolicy '{FULLNAME}-{namespace}-secrets'" in text and message in text, text


def test_the_operator_deletes_its_own_per_job_secret_and_no_other(cluster: Cluster, kube: Kube, namespace: str) -> None:
    """Retention deletes a per-job Secret by name (jobflow/retention.py); the chart's Secrets are not the
    operator's to delete (it would be the first step of replacing one). The Secret is owned by a Job that exists:
    the garbage collector deletes one whose owner does not, sometimes before the test could ask."""
    name = f"job-{uuid.uuid4().hex[:8]}"
    job = kube.create(f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/jobs",
                      job_body(name, {"trigger": "t", "forge": "github", "repository": "acme/widgets"}))
    uid = job["metadata"]["uid"]
    own = job_token_secret(name, uid, namespace, token_secret_name(name, uid), "ghs_" + "x" * 36,
                           "2030-01-01T00:00:00Z")
    kube.create(f"/api/v1/namespaces/{namespace}/secrets", own)
    operator = operator_client(cluster, namespace)
    operator.delete(f"/api/v1/namespaces/{namespace}/secrets/{own['metadata']['name']}", dryRun="All")
    with pytest.raises(ApiError) as refused:
        operator.delete(f"/api/v1/namespaces/{namespace}/secrets/{TOKEN_SECRET}", dryRun="All")
    assert refused.value.status == 403 and "named after the Job that owns it" in refused.value.message, (
        refused.value.message)
    assert kube.get(f"/api/v1/namespaces/{namespace}/secrets/{TOKEN_SECRET}")


def test_the_policy_binds_the_operator_only(kube: Kube, namespace: str) -> None:
    secret = token_secret(namespace, str(uuid.uuid4()))
    _service_account_token(secret)
    create(kube, secret)  # the admin (not the operator) is not held to the per-job shape
