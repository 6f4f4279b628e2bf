"""On a cluster of several nodes, as a platform team runs (``e2e/framework/multinode.py``): three test kubelets, the
real kube-scheduler, ReadWriteOnce volumes that attach to one node at a time as cloud block volumes do, and a
ReadWriteMany class.

First the harness itself (what the operator's tests below rely on: the scheduler places Pods, a ReadWriteOnce
claim refuses a second node while a Pod uses it), then the operator installed by its chart: resumed jobs on the
default ReadWriteOnce staging run on the operator's node (and on another node they would never start), and on
ReadWriteMany staging jobs spread over the nodes and still resume.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.framework.cluster import Cluster, free_port
from e2e.framework.kube import Kube, wait_for
from e2e.framework.multinode import BLOCK_CLASS, NODE_NAMES, SHARED_CLASS, ZONE_LABEL
from e2e.framework.pods import container_status, pod_path, wait_pod_gone, wait_pod_phase
from e2e.framework.receiver_release import Receiver
from e2e.framework.release import (
    FAKEPI,
    NO_GATEWAY,
    RELEASE,
    ROOT,
    Release,
    base_values,
    create_secret,
    installed,
    issue_key_of,
    merge,
)
from testkit.fakegithub_api import FakeGitHubAPI, generate_app_key

pytestmark = pytest.mark.e2e

HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture(scope="module")
def mkube(multinode_cluster: Cluster) -> Kube:
    return multinode_cluster.kube()


@pytest.fixture
def ns(request: pytest.FixtureRequest, mkube: Kube) -> Iterator[str]:
    """A fresh namespace on the multi-node cluster, deleted after."""
    name = f"{re.sub(r'[^a-z0-9-]+', '-', request.node.name.lower()).strip('-')[:40].strip('-')}-{uuid.uuid4().hex[:6]}"
    mkube.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": {"pidispatch.dev/e2e": "true"}}})
    wait_for(f"ServiceAccount {name}/default",
             lambda: mkube.get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout=30)
    yield name
    mkube.delete_ignore_missing(f"/api/v1/namespaces/{name}")


def claim(kube: Kube, ns: str, name: str, mode: str, storage_class: str | None = None) -> None:
    spec: dict[str, Any] = {"accessModes": [mode], "resources": {"requests": {"storage": "1Mi"}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    kube.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
                {"metadata": {"name": name}, "spec": spec})


def pod_with_claim(kube: Kube, ns: str, name: str, claim_name: str, script: str, **placement: Any) -> None:
    """A Pod mounting ``claim_name`` at /data, running ``script``; ``placement``: nodeName or nodeSelector."""
    kube.create(pod_path(ns), {"metadata": {"name": name}, "spec": {
        "terminationGracePeriodSeconds": 1, "restartPolicy": "Never", **placement,
        "containers": [{"name": "c", "image": "local/none", "command": ["sh", "-c", script],
                        "volumeMounts": [{"name": "v", "mountPath": "/data"}]}],
        "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim_name}}]}})


def events(kube: Kube, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in kube.list(f"/api/v1/namespaces/{ns}/events", fieldSelector=f"involvedObject.name={name}")
            if e.get("reason") == reason]


def pv_of(kube: Kube, ns: str, claim_name: str) -> str:
    return wait_for(f"PVC {ns}/{claim_name} Bound", lambda: (kube.get(
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim_name}").get("spec") or {}).get("volumeName"),
        timeout=30)


# ---- the harness ------------------------------------------------------------------------------------------

def test_three_nodes_are_ready_with_the_usual_labels(multinode_cluster: Cluster, mkube: Kube) -> None:
    nodes = {n["metadata"]["name"]: n for n in mkube.list("/api/v1/nodes")}
    assert sorted(nodes) == sorted(NODE_NAMES)
    for name, node in nodes.items():
        labels = node["metadata"]["labels"]
        assert labels[HOSTNAME] == name
        assert labels["kubernetes.io/os"] == "linux" and labels.get("kubernetes.io/arch")
        assert labels[ZONE_LABEL].startswith("zone-")
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]), name
        assert not node["spec"].get("taints"), f"{name} is tainted: the scheduler would place nothing there"
    classes = {sc["metadata"]["name"]: sc for sc in mkube.list("/apis/storage.k8s.io/v1/storageclasses")}
    assert classes[BLOCK_CLASS]["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert SHARED_CLASS in classes


def test_the_real_scheduler_spreads_a_deployment_over_every_node(mkube: Kube, ns: str) -> None:
    labels = {"app": "spread"}
    mkube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", {"metadata": {"name": "spread"}, "spec": {
        "replicas": 6, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            "terminationGracePeriodSeconds": 1,
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": HOSTNAME,
                                           "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {
                                               "matchLabels": labels}}],
            "containers": [{"name": "c", "image": "local/none", "command": ["sleep", "600"]}]}}}})

    def running() -> list[dict[str, Any]] | None:
        pods = [p for p in mkube.list(pod_path(ns), labelSelector="app=spread")
                if (p.get("status") or {}).get("phase") == "Running"]
        return pods if len(pods) == 6 else None

    pods = wait_for("6 Pods of the Deployment Running", running, timeout=90)
    per_node = Counter(p["spec"]["nodeName"] for p in pods)
    assert per_node == {n: 2 for n in NODE_NAMES}, per_node
    # the scheduler bound them, not a kubelet
    for p in pods:
        scheduled = events(mkube, ns, p["metadata"]["name"], "Scheduled")
        assert scheduled and scheduled[0].get("reportingComponent") == "default-scheduler", scheduled


def test_a_readwriteonce_claim_attaches_to_one_node_at_a_time(mkube: Kube, ns: str) -> None:
    claim(mkube, ns, "disk", "ReadWriteOnce")  # the default class: block storage
    pod_with_claim(mkube, ns, "first", "disk", "echo first > /data/first; exec sleep 600", nodeName="node-a")
    wait_pod_phase(mkube, ns, "first", "Running")
    pod_with_claim(mkube, ns, "second", "disk", "cat /data/first > /data/second-saw; exec sleep 600",
                   nodeSelector={HOSTNAME: "node-b"})
    pv = pv_of(mkube, ns, "disk")

    failed = wait_for("a FailedAttachVolume Event on the second Pod",
                      lambda: events(mkube, ns, "second", "FailedAttachVolume"), timeout=60)
    assert failed[0]["type"] == "Warning"
    assert failed[0]["message"] == f'Multi-Attach error for volume "{pv}" Volume is already used by pod(s) first'
    second = mkube.get(pod_path(ns, "second"))
    assert second["spec"]["nodeName"] == "node-b"
    assert second["status"]["phase"] == "Pending"
    assert container_status(second, "c")["state"]["waiting"]["reason"] == "ContainerCreating"
    # it stays so: the Multi-Attach error is retried, never given up on, while the first Pod runs
    retried_until = time.monotonic() + 5
    while time.monotonic() < retried_until:
        assert mkube.get(pod_path(ns, "second"))["status"]["phase"] == "Pending"
        assert mkube.get(pod_path(ns, "first"))["status"]["phase"] == "Running"
        time.sleep(0.5)

    mkube.delete(pod_path(ns, "first"))
    wait_pod_gone(mkube, ns, "first")
    wait_pod_phase(mkube, ns, "second", "Running", timeout=60)
    wait_for("the second Pod read the first one's file from the same volume",
             lambda: _volume_file(mkube, ns, "disk", "second-saw") == "first\n",
             timeout=30)


def _volume_file(kube: Kube, ns: str, claim_name: str, name: str) -> str | None:
    """The file ``name`` in the volume bound to ``claim_name``, read on the host; ``None`` while it is absent."""
    pv = kube.get(f"/api/v1/persistentvolumes/{pv_of(kube, ns, claim_name)}")
    f = Path(pv["spec"]["hostPath"]["path"]) / name
    return f.read_text() if f.exists() else None


def test_a_readwritemany_claim_mounts_on_two_nodes_at_once(mkube: Kube, ns: str) -> None:
    claim(mkube, ns, "shared", "ReadWriteMany", SHARED_CLASS)
    pod_with_claim(mkube, ns, "on-a", "shared", "echo a > /data/a; exec sleep 600", nodeName="node-a")
    pod_with_claim(mkube, ns, "on-b", "shared",
                   "until [ -f /data/a ]; do sleep 0.2; done; cp /data/a /data/b-saw; exec sleep 600",
                   nodeSelector={HOSTNAME: "node-b"})
    wait_pod_phase(mkube, ns, "on-a", "Running")
    wait_pod_phase(mkube, ns, "on-b", "Running")
    wait_for("node-b's Pod read what node-a's wrote", lambda: _volume_file(mkube, ns, "shared", "b-saw") == "a\n",
             timeout=30)
    assert mkube.get(pod_path(ns, "on-a"))["status"]["phase"] == "Running"
    assert not events(mkube, ns, "on-b", "FailedAttachVolume")


def test_the_block_class_provisions_no_readwritemany_claim(mkube: Kube, ns: str) -> None:
    claim(mkube, ns, "want-shared", "ReadWriteMany")  # the default class: block storage
    refused = wait_for("a ProvisioningFailed Event", lambda: events(mkube, ns, "want-shared", "ProvisioningFailed"),
                       timeout=30)
    assert "ReadWriteMany not supported" in refused[0]["message"]
    assert mkube.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/want-shared")["status"]["phase"] == "Pending"


# ---- the operator on it -----------------------------------------------------------------------------------

_issues = iter(range(500, 100000))


def operator_node(r: Release) -> str:
    (pod,) = [p for p in r.operator_pods() if not p["metadata"].get("deletionTimestamp")]
    return pod["spec"]["nodeName"]


def received_digest(r: Release, pod: str) -> str | None:
    """What the job saw at /session (sha256 as fakepi logged it), ``None`` for an empty file."""
    m = re.search(r"received ([0-9a-f]{64}|empty)", r.pod_log(pod))
    assert m, f"fakepi did not log what it received:\n{r.pod_log(pod)}"
    return None if m.group(1) == "empty" else m.group(1)


def stored_digest(r: Release, key: str) -> str:
    f = r.key_dir(key) / "current.jsonl"
    return hashlib.sha256(f.read_bytes()).hexdigest()


SESSIONS = {"sessions": {"enabled": True}}


def test_readwriteonce_staging_resumed_jobs_run_on_the_operators_node(multinode_cluster: Cluster,
                                                                       mkube: Kube) -> None:
    """The chart's defaults (ReadWriteOnce staging on the default class): three keys, a cold job then a resumed
    one each; every job Pod carries the co-location and runs on the operator's node, every resume is correct. (Left
    to the scheduler, three resumed Pods would all land on the operator's node once in 27 times.)"""
    with installed(multinode_cluster, mkube, "mn-rwo", merge(base_values(), SESSIONS)) as r:
        here = operator_node(r)
        staging = mkube.get(f"/api/v1/namespaces/{r.ns}/persistentvolumeclaims/pi-dispatch-staging")
        assert staging["spec"]["accessModes"] == ["ReadWriteOnce"]
        assert staging["spec"]["storageClassName"] == BLOCK_CLASS
        issues = [next(_issues) for _ in range(3)]
        for issue in issues:
            cold = r.run(f"cold-{issue}", issue=issue)
            assert cold["status"]["phase"] == "Succeeded", cold["status"]
            stored = stored_digest(r, issue_key_of(issue))
            warm = r.run(f"warm-{issue}", issue=issue, comment="@pi and now the review")
            assert warm["status"]["phase"] == "Succeeded", warm["status"]
            assert warm["status"]["session"]["reason"] == "resumed", warm["status"]["session"]
            pod = r.only_pod(f"warm-{issue}")
            assert received_digest(r, pod["metadata"]["name"]) == stored
            terms = pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert [t["topologyKey"] for t in terms] == [HOSTNAME]
        nodes = {r.only_pod(f"{kind}-{i}")["spec"]["nodeName"] for i in issues for kind in ("cold", "warm")}
        assert nodes == {here}, f"job Pods on {nodes}, the operator on {here}"


def test_readwriteonce_staging_without_colocation_a_resumed_job_on_another_node_never_starts(
        multinode_cluster: Cluster, mkube: Kube) -> None:
    """What the co-location prevents, shown on this cluster: the same release with PI_DISPATCH_STAGING_COLOCATE
    taken out of the operator's Deployment, a resumed job whose Trigger sends it to another node than the
    operator's never attaches the staging claim (the operator's Pod holds it)."""
    with installed(multinode_cluster, mkube, "mn-nocoloc", merge(base_values(), SESSIONS), trigger=None) as r:
        before = {p["metadata"]["uid"] for p in r.operator_pods()}
        multinode_cluster.kubectl("-n", r.ns, "set", "env", "deployment/pi-dispatch", "PI_DISPATCH_STAGING_COLOCATE-")
        wait_for("the operator Pod without the co-location", lambda: any(
            p["metadata"]["uid"] not in before for p in r.operator_pods()) and not any(
            p["metadata"]["uid"] in before for p in r.operator_pods()), timeout=90)
        r.await_operator()
        (operator_pod,) = r.operator_pods()
        assert "PI_DISPATCH_STAGING_COLOCATE" not in str(operator_pod["spec"]["containers"])
        here = operator_pod["spec"]["nodeName"]
        there = next(n for n in NODE_NAMES if n != here)
        r.trigger("here", nodeSelector={HOSTNAME: here})
        r.trigger("there", nodeSelector={HOSTNAME: there})
        issue = next(_issues)
        cold = r.run(f"cold-{issue}", trigger="here", issue=issue)
        assert cold["status"]["phase"] == "Succeeded", cold["status"]
        r.job(f"warm-{issue}", trigger="there", issue=issue, comment="@pi and now the review")
        pod = wait_for("the resumed job's Pod", lambda: r.pods_of(f"warm-{issue}"), timeout=60)[0]
        name = pod["metadata"]["name"]
        assert "podAffinity" not in (pod["spec"].get("affinity") or {}), pod["spec"]["affinity"]
        failed = wait_for("a FailedAttachVolume Event on the resumed job's Pod",
                          lambda: events(mkube, r.ns, name, "FailedAttachVolume"), timeout=60)
        assert "Multi-Attach error for volume" in failed[0]["message"]
        assert operator_pod["metadata"]["name"] in failed[0]["message"]
        pod = mkube.get(pod_path(r.ns, name))
        assert pod["spec"]["nodeName"] == there
        assert pod["status"]["phase"] == "Pending"
        assert container_status(pod, "pi")["state"]["waiting"]["reason"] == "ContainerCreating"
        assert r.get("jobs", f"warm-{issue}")["status"].get("phase") not in ("Succeeded", "Failed")


def test_readwritemany_staging_jobs_spread_over_the_nodes_and_resume(multinode_cluster: Cluster,
                                                                    mkube: Kube) -> None:
    values = merge(base_values(), {"sessions": {"enabled": True, "staging": {
        "accessModes": ["ReadWriteMany"], "storageClassName": SHARED_CLASS}}})
    with installed(multinode_cluster, mkube, "mn-rwx", values) as r:
        issues = [next(_issues) for _ in range(6)]
        for issue in issues:
            r.job(f"cold-{issue}", issue=issue)
        stored = {}
        for issue in issues:
            cold = r.wait_job(f"cold-{issue}", timeout=180)
            assert cold["status"]["phase"] == "Succeeded", cold["status"]
            stored[issue] = stored_digest(r, issue_key_of(issue))
        for issue in issues:
            r.job(f"warm-{issue}", issue=issue, comment="@pi and now the review")
        for issue in issues:
            warm = r.wait_job(f"warm-{issue}", timeout=180)
            assert warm["status"]["phase"] == "Succeeded", warm["status"]
            assert warm["status"]["session"]["reason"] == "resumed", (issue, warm["status"]["session"])
            pod = r.only_pod(f"warm-{issue}")
            assert received_digest(r, pod["metadata"]["name"]) == stored[issue], issue
            assert "podAffinity" not in (pod["spec"].get("affinity") or {})
        nodes = Counter(r.only_pod(f"{kind}-{i}")["spec"]["nodeName"] for i in issues for kind in ("cold", "warm"))
        assert len(nodes) >= 2, f"12 job Pods on {dict(nodes)}"
        print(f"12 job Pods per node: {dict(nodes)}; the operator on {operator_node(r)}")


# ---- the quickstart (docs/quickstart.md), as committed ----------------------------------------------------------

QUICKSTART_VALUES = ROOT / "examples" / "quickstart-values.yaml"
QUICKSTART_TRIGGER = ROOT / "examples" / "trigger.yaml"
APP_ID, INSTALLATION = 4242, 77


def quickstart_overrides(github: FakeGitHubAPI) -> dict[str, Any]:
    """Only what cannot exist on this machine (the test's docstring lists them, with why)."""
    port, health_port = free_port(), free_port()
    while health_port == port:
        health_port = free_port()
    return {
        "github": {"apiUrl": github.url, "app": {"id": APP_ID, "installationId": INSTALLATION}},
        "receiver": {"ingress": {"host": "pi.example.test"}, "replicas": 1, "port": port, "healthPort": health_port},
        "job": {"image": "local/fakepi", "command": ["python3", str(FAKEPI)], "checkout": False},
        "metrics": {"port": free_port()},
        "health": {"port": free_port()},
        **NO_GATEWAY,
    }


def test_the_quickstart_as_committed_runs_a_cold_then_a_resumed_job_on_the_operators_node(
        multinode_cluster: Cluster, mkube: Kube) -> None:
    """docs/quickstart.md, "Quickstart on your cluster", on three nodes with only ReadWriteOnce default storage: its
    Secrets, ``helm install -f examples/quickstart-values.yaml`` as committed, ``kubectl apply -f
    examples/trigger.yaml`` as committed, then two signed ``@pi`` comments on one issue through the receiver:
    a cold job, then a resumed one, both on the operator's node.

    Overridden, because it cannot exist here (nothing else):
    * ``github.app.id``, ``github.app.installationId``: the quickstart's ``--set`` values, here the fake forge's App;
    * ``github.apiUrl``: the fake GitHub API (testkit/fakegithub_api.py) instead of api.github.com, and the
      ``pi-github-app`` Secret holds that fake App's generated private key;
    * ``receiver.ingress.host``: the quickstart's ``--set`` value (no DNS here; the Ingress is made, nothing serves it);
    * ``receiver.replicas: 1``, ``receiver.port``, ``receiver.healthPort``, ``metrics.port``, ``health.port``: the
      test kubelets run Pods as processes sharing this host's network, so two receivers (or two releases) would
      bind one port;
    * ``job.image``, ``job.command``: the scripted job (testkit/fakepi.py) instead of the published job image;
    * ``job.checkout: false``: the fake forge serves no git repositories to clone;
    * ``gateway.enabled: false`` (``NO_GATEWAY``): test kubelets run its two replicas on one host network, where
      they would bind one port.
    """
    committed = yaml.safe_load(QUICKSTART_VALUES.read_text())
    assert committed["sessions"] == {"enabled": True} and committed["github"]["authSource"] == "app"
    assert "storageClassName" not in committed["sessions"], "the default (ReadWriteOnce) class, as committed"
    key, public = generate_app_key()
    secret = b"quickstart-webhook-secret"
    with FakeGitHubAPI(app_id=APP_ID, public_key=public, installation_id=INSTALLATION,
                       installation_repos=("acme/widgets",)) as github:
        def secrets(ns: str) -> None:  # step 2 of the quickstart
            create_secret(mkube, ns, "pi-github-app", {"private-key.pem": key})
            create_secret(mkube, ns, "pi-webhook", {"secret": secret})
            create_secret(mkube, ns, "model-keys", {"openai": b"sk-not-a-real-key"})

        values = merge(committed, quickstart_overrides(github))
        with installed(multinode_cluster, mkube, "mn-quickstart", values, trigger=None, prepare=secrets) as r:
            here = operator_node(r)
            staging = mkube.get(f"/api/v1/namespaces/{r.ns}/persistentvolumeclaims/pi-dispatch-staging")
            assert staging["spec"]["accessModes"] == ["ReadWriteOnce"]
            assert staging["spec"]["storageClassName"] == BLOCK_CLASS
            notes = " ".join(r.helm("get", "notes", RELEASE).stdout.split())
            assert ("resumed jobs run on the operator's node" in notes or "job Pods that resume run on the "
                    "operator's node" in notes), notes
            assert ("That node's capacity bounds how many resumed jobs run at once, and a lost node stops resumed "
                    "jobs until the operator is rescheduled.") in notes, notes
            multinode_cluster.kubectl("apply", "-n", r.ns, "-f", str(QUICKSTART_TRIGGER))  # step 4
            trigger = yaml.safe_load(QUICKSTART_TRIGGER.read_text())["metadata"]["name"]
            wait_for(f"Trigger {trigger} Ready", lambda: (r.condition(r.get("triggers", trigger), "Ready") or {}).get(
                "status") == "True", timeout=60)
            # the receiver as the quickstart's Ingress would reach it; its Secret key is the committed one
            receiver = Receiver(r, secret)
            receiver.await_ready()
            receiver.await_triggers(1)
            hooks = receiver.hooks()
            issue = next(_issues)
            jobs, stored = [], []
            for words in ("@pi fix the flaky test", "@pi and now the review"):
                sent = hooks.send(hooks.issue_comment(issue, words))
                assert sent.status == 202, sent.json
                [name] = sent.json["jobs"]
                done = r.wait_job(name, timeout=180)
                assert done["status"]["phase"] == "Succeeded", done["status"]
                jobs.append(done)
                stored.append(stored_digest(r, issue_key_of(issue)))
            cold, warm = jobs
            assert cold["status"]["session"]["reason"] != "resumed", cold["status"]["session"]
            assert warm["status"]["session"]["reason"] == "resumed", warm["status"]["session"]
            pods = [r.only_pod(j["metadata"]["name"]) for j in jobs]
            assert received_digest(r, pods[1]["metadata"]["name"]) == stored[0], "the resumed job saw the cold one's"
            terms = pods[1]["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert [t["topologyKey"] for t in terms] == [HOSTNAME]
            nodes = [p["spec"]["nodeName"] for p in pods]
            assert set(nodes) == {here}, f"job Pods on {nodes}, the operator on {here}"


# ---- where a Trigger's job Pods go: node selectors, tolerations, and the co-location's refusal ---------------

POOL = "pidispatch.dev/pool"
POOL_TAINT = {"key": POOL, "value": "agents", "effect": "NoSchedule"}
POOL_TOLERATION = {"key": POOL, "operator": "Equal", "value": "agents", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def pool(multinode_cluster: Cluster, mkube: Kube) -> Iterator[tuple[Release, str]]:
    """The chart's defaults (ReadWriteOnce staging, co-location) and a node pool: one node other than the
    operator's labelled and tainted ``pidispatch.dev/pool=agents:NoSchedule``; label and taint removed after."""
    with installed(multinode_cluster, mkube, "mn-pool", merge(base_values(), SESSIONS), trigger=None) as r:
        node = next(n for n in NODE_NAMES if n != operator_node(r))
        mkube.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {POOL: "agents"}},
                                              "spec": {"taints": [POOL_TAINT]}})
        try:
            yield r, node
        finally:
            mkube.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {POOL: None}}, "spec": {"taints": None}})


def test_a_triggers_node_selector_and_tolerations_place_its_job_pods_on_the_tainted_pool(
        pool: tuple[Release, str], mkube: Kube) -> None:
    """Resume off (no staging, no co-location): ``run.nodeSelector`` and ``run.tolerations`` reach the job Pod and
    the real scheduler puts it on the pool's node; without the toleration it stays Pending with the scheduler's
    reason."""
    r, node = pool
    r.trigger("pool", resume=False, nodeSelector={POOL: "agents"}, tolerations=[POOL_TOLERATION])
    r.trigger("pool-untolerated", resume=False, nodeSelector={POOL: "agents"})
    issue = next(_issues)
    done = r.run(f"pool-{issue}", trigger="pool", issue=issue, timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    pod = r.only_pod(f"pool-{issue}")
    assert pod["spec"]["nodeName"] == node
    assert pod["spec"]["nodeSelector"] == {POOL: "agents"}
    assert POOL_TOLERATION in pod["spec"]["tolerations"]
    assert "affinity" not in pod["spec"], "no session: no co-location"

    r.job(f"untolerated-{issue}", trigger="pool-untolerated", issue=issue)
    name = wait_for("the untolerated job's Pod", lambda: r.pods_of(f"untolerated-{issue}"), timeout=60)[0][
        "metadata"]["name"]

    def unschedulable() -> dict[str, Any] | None:
        conditions = (mkube.get(pod_path(r.ns, name)).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"), None)

    scheduled = wait_for("the scheduler's verdict on the untolerated Pod", unschedulable, timeout=60)
    assert scheduled["reason"] == "Unschedulable"
    assert "untolerated taint" in scheduled["message"], scheduled["message"]
    print(f"the scheduler on the untolerated job Pod: {scheduled['message']}")
    assert mkube.get(pod_path(r.ns, name))["status"]["phase"] == "Pending"
    assert not mkube.get(pod_path(r.ns, name))["spec"].get("nodeName")
    mkube.delete(r.path("jobs", f"untolerated-{issue}"))  # else it holds a slot until the start timeout


def test_a_resumed_trigger_that_excludes_the_operators_node_is_not_ready_and_its_jobs_are_refused_at_once(
        pool: tuple[Release, str], mkube: Kube) -> None:
    """ReadWriteOnce staging: a Trigger with ``run.resume`` whose node selector names another node, or the pool
    (even tolerated), can never land on the operator's node: the Trigger says so (Ready False,
    PlacementConflict, every way out) and its Job is refused before any Pod, not left ContainerCreating for the
    start timeout. The same rules on the operator's own node are Ready."""
    r, node = pool
    here = operator_node(r)
    r.trigger("there", nodeSelector={HOSTNAME: node})
    r.trigger("pool-resumed", nodeSelector={POOL: "agents"}, tolerations=[POOL_TOLERATION])
    r.trigger("here", nodeSelector={HOSTNAME: here})

    def ready(name: str) -> dict[str, Any] | None:
        return r.condition(r.get("triggers", name), "Ready")

    for name, said in (("there", f"run.nodeSelector asks for {HOSTNAME}={node}"),
                       ("pool-resumed", f"run.nodeSelector asks for {POOL}=agents and that node has no label")):
        condition = wait_for(f"Trigger {name}'s Ready condition", lambda n=name: ready(n), timeout=60)
        assert (condition["status"], condition["reason"]) == ("False", "PlacementConflict"), condition
        assert said in condition["message"] and f"the operator's node {here}" in condition["message"]
        for way_out in ("ReadWriteMany", "sessions.staging.mode=transfer", "remove run.resume"):
            assert way_out in condition["message"]
    assert wait_for("Trigger here's Ready condition", lambda: ready("here"), timeout=60)["status"] == "True"

    issue = next(_issues)
    refused = r.run(f"there-{issue}", trigger="there", issue=issue, timeout=60)
    assert (refused["status"]["phase"], refused["status"]["reason"]) == ("Refused", "trigger-not-ready"), \
        refused["status"]
    reason = next(c for c in refused["status"]["conditions"] if c.get("reason") == "TriggerNotReady")
    assert "PlacementConflict" not in reason["message"] and f"{HOSTNAME}={node}" in reason["message"]
    assert r.pods_of(f"there-{issue}") == [], "refused before any Pod"
    done = r.run(f"here-{issue}", trigger="here", issue=issue, timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert r.only_pod(f"here-{issue}")["spec"]["nodeName"] == here
