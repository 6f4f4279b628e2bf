"""Job Pods pull the job image from a private registry with the chart's ``job.imagePullSecrets`` (issue 33, item 3).

On a real node (containerd + runc + a real kubelet, ``e2e/framework/realnode.py``) and a private registry on this
machine (distribution's, TLS from a CA of the run's own that containerd trusts for that host alone, htpasswd bcrypt auth
on every pull, ``e2e/framework/registry.py``), the job image ``make images`` built, with one layer more (a file holding
a word of this run), is committed to the registry by buildah with the registry's credentials; the chart is installed
with ``job.image`` naming it there and ``job.imagePullSecrets: [{name: registry-creds}]``. The node has the job
image's own layers (imported at start), not the new one. Through the real operator, each job's Pod then pulls
(or fails to pull) the image with what that Secret holds:

* a ``kubernetes.io/dockerconfigjson`` Secret with the registry's credentials: the image is pulled (the kubelet's
  ``Pulled`` Event, the Pod's image ID is the pushed digest, the registry logged the manifest and the new layer
  served to containerd as that user), pi runs in it (its bash reads the new layer's file), the Job succeeds;
* the Secret missing, or holding a wrong password: the registry answers 401, the Pod never starts, and the Job
  ends ``Failed`` (``PodNeverStarted``) naming ``ErrImagePull``/``ImagePullBackOff``.

Each case pulls its own tag (same image), so no case finds an image another one already pulled. Run with
``pytest -m realnode`` (root, the Debian packages of ``make node``, the registry of ``make controlplane``);
``make test`` runs it. Where a real node cannot run, the tests are skipped with the reason, unless
``PIDISPATCH_REQUIRE_REAL_NODE=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.realnode import RealNode, images_env, unavailable
from e2e.framework.registry import PrivateRegistry
from e2e.framework.release import NO_GATEWAY, Release, create_secret, fresh_namespace
from testkit.fakegithub_api import FakeGitHubAPI, generate_app_key
from testkit.gitforge import Repos, make_tls
from testkit.scripted_model import ScriptedModel, text_of, write_agent_dir
from testkit.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

REPO = "acme/widgets"
APP_ID, INSTALLATION = 6262, 77
PULL_SECRET = "registry-creds"
REPOSITORY = "pi-dispatch/job"
TAGS = ("with-the-secret", "without-the-secret", "with-a-wrong-password")
PROOF_FILE = "/etc/pidispatch-registry-proof"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = unavailable()
    if why:
        if os.environ.get("PIDISPATCH_REQUIRE_REAL_NODE") == "1":
            pytest.fail(f"PIDISPATCH_REQUIRE_REAL_NODE=1 but no real node can run here: {why}")
        pytest.skip(f"no real node on this machine: {why}")
    c = Cluster(state_dir=tmp_path_factory.mktemp("pullsecret-node"), backend=RealNode())
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def kube(node: Cluster) -> Kube:  # this module's cluster is its real node, not the session's
    return node.kube()


@pytest.fixture(scope="module")
def registry(node: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRegistry]:
    with PrivateRegistry(node.bin_dir / "registry", tmp_path_factory.mktemp("registry")) as reg:
        node.backend.trust_registry(reg.host, reg.ca)  # type: ignore[attr-defined]
        yield reg


@pytest.fixture(scope="module")
def proof() -> str:
    """A word only the pushed image holds (in ``PROOF_FILE``): pi reads it in the job Pod."""
    return f"pulled-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def pushed(registry: PrivateRegistry, proof: str) -> dict[str, str]:
    """The job image of ``make images`` with one layer more (``PROOF_FILE``), committed to the registry under each
    case's tag: ``{tag: manifest digest}``. The node has the job image's own layers (it imports them at start),
    not this one: a pull must fetch it from the registry, with the credentials."""
    env = images_env()
    containers = {k: v for k, v in env.items() if k.startswith("CONTAINERS_")}
    return {tag: registry.push_layered(env["JOB_IMAGE"], f"{REPOSITORY}:{tag}", {PROOF_FILE: proof.encode()},
                                       containers) for tag in TAGS}


@pytest.fixture(scope="module")
def forge(tmp_path_factory: pytest.TempPathFactory, node: Cluster) -> Iterator[FakeGitHubAPI]:
    root = tmp_path_factory.mktemp("forge")
    ca, cert, key = make_tls(root / "tls", ips=("127.0.0.1", node.backend.ip))  # type: ignore[attr-defined]
    repos = Repos(root / "repos")
    repos.create(REPO, {"README.md": "# widgets\n"})
    pem, public = generate_app_key()
    with FakeGitHubAPI(app_id=APP_ID, public_key=public, installation_id=INSTALLATION, installation_repos=(REPO,),
                       repos=repos, tls=(str(cert), str(key)), prefix="/api/v3",
                       bind=node.backend.ip) as api:  # type: ignore[attr-defined]
        api.app_pem = pem  # type: ignore[attr-defined]
        api.ca = ca  # type: ignore[attr-defined]
        yield api


@pytest.fixture(scope="module")
def model(node: Cluster) -> Iterator[ScriptedModel]:
    with ScriptedModel(host=node.backend.ip) as m:  # type: ignore[attr-defined]
        yield m


@pytest.fixture(scope="module")
def release(node: Cluster, kube: Kube, forge: FakeGitHubAPI, model: ScriptedModel, registry: PrivateRegistry,
            pushed: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    images = images_env()
    agent = write_agent_dir(tmp_path_factory.mktemp("pi") / "agent", model.base_url)
    ns = fresh_namespace(kube, "pullsecret")
    create_secret(kube, ns, "gh-app", {"private-key.pem": forge.app_pem})  # type: ignore[attr-defined]
    for name, key, text in (("forge-ca", "ca.crt", Path(forge.ca).read_text()),  # type: ignore[attr-defined]
                            ("pi-models", "models.json", (agent / "models.json").read_text())):
        kube.create(f"/api/v1/namespaces/{ns}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                            "metadata": {"name": name}, "data": {key: text}})
    repository, tag = images["OPERATOR_IMAGE"].rsplit(":", 1)
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "maxConcurrentJobs": 1,
        # the job image from the private registry, with the cluster's pull Secret: what this module proves
        "job": {"image": f"{registry.host}/{REPOSITORY}:{TAGS[0]}", "imagePullSecrets": [{"name": PULL_SECRET}],
                "modelsConfigMap": "pi-models", "startTimeoutSeconds": 20,
                "git": {"name": "pi-node[bot]", "email": "pi-node[bot]@users.noreply.github.com"}},
        # each case's Trigger names its own tag (run.image): the job Pod policy admits exactly these
        "jobPodPolicy": {"images": [f"{registry.host}/{REPOSITORY}:{tag}" for tag in TAGS[1:]]},
        **NO_GATEWAY,
        "github": {"authSource": "app", "apiUrl": forge.url, "webUrl": forge.web_url, "timeoutSeconds": 5,
                   "caBundle": {"configMap": "forge-ca"},
                   "app": {"id": APP_ID, "installationId": INSTALLATION, "privateKeySecret": {"name": "gh-app"}}},
    }
    r = Release(node, kube, ns, values).install()
    try:
        yield r
    finally:
        r.uninstall()
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")


def set_pull_secret(kube: Kube, ns: str, docker_config: bytes | None) -> None:
    """The release namespace's ``registry-creds``: a ``kubernetes.io/dockerconfigjson`` Secret, or none."""
    path = f"/api/v1/namespaces/{ns}/secrets"
    kube.delete_ignore_missing(f"{path}/{PULL_SECRET}")
    wait_until(f"Secret {PULL_SECRET} gone", lambda: kube.get_or_none(f"{path}/{PULL_SECRET}") is None, timeout=30)
    if docker_config is not None:
        kube.create(path, {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                           "metadata": {"name": PULL_SECRET},
                           "data": {".dockerconfigjson": base64.b64encode(docker_config).decode()}})


_issues = iter(range(1, 100000))


def run_job(release: Release, forge: FakeGitHubAPI, tag: str, image: str, timeout: float = 300) -> dict:
    """A delivery through the operator on a Trigger whose job image is ``image`` (this case's own tag)."""
    issue = next(_issues)
    forge.set_issue(REPO, issue, f"Pull {tag}", "")
    release.trigger(tag, resume=False, image=image)
    return release.run(f"{tag}-{uuid.uuid4().hex[:5]}", trigger=tag, issue=issue, comment="@pi look",
                       timeout=timeout)


def said(requests: list[dict]) -> str:
    return "\n".join(text_of(m.get("content")) for body in requests for m in body.get("messages", []))


def pod_events(kube: Kube, ns: str, pod: str) -> str:
    events = kube.list(f"/api/v1/namespaces/{ns}/events", fieldSelector=f"involvedObject.name={pod}")
    return "\n".join(f"{e.get('reason')}: {e.get('message')}" for e in events)


def test_a_job_pod_pulls_the_job_image_from_the_private_registry_with_the_pull_secret(
        kube: Kube, release: Release, registry: PrivateRegistry, pushed: dict[str, str], forge: FakeGitHubAPI,
        model: ScriptedModel, proof: str) -> None:
    tag = "with-the-secret"
    image = f"{registry.host}/{REPOSITORY}:{tag}"
    set_pull_secret(kube, release.ns, registry.docker_config())
    before = len(model.requests)
    model.tool_call("bash", {"command": f"cat {PROOF_FILE}"}).reply("Pulled from the private registry, and ran.")
    job = run_job(release, forge, tag, image)
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    # pi ran in the pulled image: its bash read the file only that image's own layer has
    assert proof in said(model.requests[before:]), "pi's bash did not read the pushed layer's file"
    pod = kube.get(f"/api/v1/namespaces/{release.ns}/pods/{job['status']['podName']}")
    assert pod["spec"]["imagePullSecrets"] == [{"name": PULL_SECRET}]  # the chart value, on the operator's Pod
    events = pod_events(kube, release.ns, pod["metadata"]["name"])
    assert f'Successfully pulled image "{image}"' in events, events  # pulled now, not found on the node
    [status] = pod["status"]["containerStatuses"]
    assert status["image"] == image, status
    # the image the container ran is the one pushed, by digest
    assert status["imageID"] == f"{registry.host}/{REPOSITORY}@{pushed[tag]}", (status, pushed)
    # the registry served that manifest to containerd as the Secret's user
    served = registry.served("containerd/")
    assert f"200 {registry.username} GET /v2/{REPOSITORY}/manifests/{pushed[tag]}" in served, served
    # and the new layer's blob too (the node had every other one)
    assert any(line.startswith(f"200 {registry.username} GET /v2/{REPOSITORY}/blobs/sha256:") for line in served), \
        served


@pytest.mark.parametrize("tag", ["without-the-secret", "with-a-wrong-password"])
def test_a_job_pod_without_valid_registry_credentials_is_refused_the_image_and_its_job_fails(
        kube: Kube, release: Release, registry: PrivateRegistry, pushed: dict[str, str], forge: FakeGitHubAPI,
        tag: str) -> None:
    secret = None if tag == "without-the-secret" else registry.docker_config(password="not-the-password")
    set_pull_secret(kube, release.ns, secret)
    job = run_job(release, forge, tag, f"{registry.host}/{REPOSITORY}:{tag}")
    assert job["status"]["phase"] == "Failed", json.dumps(job["status"])
    done = release.condition(job, "Completed")
    assert done and done["reason"] == "PodNeverStarted", job["status"]
    assert "ErrImagePull" in done["message"] or "ImagePullBackOff" in done["message"], done["message"]
    events = pod_events(kube, release.ns, job["status"]["podName"])
    assert "401 Unauthorized" in events, events  # the registry refused the pull, not anything else
    if secret is None:  # the Pod named the chart's Secret, which the kubelet did not find
        missing = f"FailedToRetrieveImagePullSecret: Unable to retrieve some image pull secrets ({PULL_SECRET})"
        assert missing in events, events
