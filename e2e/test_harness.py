"""Tests of the e2e harness itself: the control plane is real (CRD schemas + CEL, RBAC, GC) and the
test kubelet runs Pods with volumes, subPath, env, working dir and termination messages."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
import requests
import yaml

from e2e.framework.cluster import Cluster, ClusterError
from e2e.framework.kube import ApiError, Kube
from e2e.framework.kubelet import PodRunner
from e2e.framework.pods import container_status, pod_path, restricted_security_context, wait_pod_gone, wait_pod_phase
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

GROUP = "harness.e2e.pidispatch.dev"


def widget_crd() -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{GROUP}"},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Min", "type": "integer", "jsonPath": ".spec.min"}],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object", "required": ["min", "max"],
                            "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
                            "x-kubernetes-validations": [
                                {"rule": "self.min <= self.max", "message": "min must not exceed max"}],
                        },
                        "status": {"type": "object", "properties": {"seen": {"type": "integer"}}},
                    },
                }},
            }],
        },
    }


def test_crd_cel_rule_rejects_invalid_object_at_apply(cluster: Cluster, kube: Kube, namespace: str):
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(widget_crd()))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/widgets.{GROUP}", "--timeout=60s")

    def widget(name: str, lo: int, hi: int) -> str:
        return yaml.safe_dump({"apiVersion": f"{GROUP}/v1", "kind": "Widget",
                               "metadata": {"name": name, "namespace": namespace},
                               "spec": {"min": lo, "max": hi}})

    # discovery may lag Established by a moment: wait until the good object is accepted
    wait_until("Widget kind served", lambda: cluster.kubectl("apply", "-f", "-", input=widget("good", 1, 2),
                                                           check=False).returncode == 0, timeout=30)
    bad = cluster.kubectl("apply", "-f", "-", input=widget("bad", 5, 1), check=False)
    assert bad.returncode != 0, f"invalid Widget was accepted: {bad.stdout}"
    assert "min must not exceed max" in bad.stderr, bad.stderr
    assert kube.get_or_none(f"/apis/{GROUP}/v1/namespaces/{namespace}/widgets/bad") is None

    # status subresource: a spec change through /status is ignored, status through the main resource too
    path = f"/apis/{GROUP}/v1/namespaces/{namespace}/widgets/good"
    kube.patch(path + "/status", {"status": {"seen": 7}, "spec": {"min": 0}})
    got = kube.get(path)
    assert got["status"] == {"seen": 7} and got["spec"]["min"] == 1
    # printer column
    out = cluster.kubectl("get", f"widgets.{GROUP}", "-n", namespace, "good").stdout
    assert out.split("\n")[0].split()[:2] == ["NAME", "MIN"] and out.split("\n")[1].split()[:2] == ["good", "1"]


def test_service_account_without_rolebinding_is_denied(cluster: Cluster, kube: Kube, namespace: str,
                                                       service_account):
    sa = service_account("nobody")
    denied = sa.kubectl("get", "pods", "-n", namespace, check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower() and sa.username in denied.stderr, denied.stderr
    with pytest.raises(ApiError) as e:
        sa.kube.list(f"/api/v1/namespaces/{namespace}/configmaps")
    assert e.value.status == 403

    # the same identity is allowed once a RoleBinding grants it (so the denial above is RBAC, not auth)
    kube.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles", {
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]})
    kube.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", {
        "metadata": {"name": "nobody-reads-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": namespace}]})
    wait_until("RBAC to allow nobody to list pods",
               lambda: sa.kubectl("get", "pods", "-n", namespace, check=False).returncode == 0, timeout=30)
    assert sa.kubectl("auth", "can-i", "delete", "pods", "-n", namespace, check=False).stdout.strip() == "no"


def test_pod_with_subpath_pvc_runs_to_succeeded(cluster: Cluster, kube: Kube, namespace: str, kubelet):
    kube.create(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", {
        "metadata": {"name": "store"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    root = cluster.pvc_host_path(namespace, "store")
    (root / "other-job").mkdir()
    (root / "other-job" / "private.txt").write_text("not for you")
    (root / "jobs" / "j1").mkdir(parents=True)
    (root / "jobs" / "j1" / "input.txt").write_text("from the host")

    script = textwrap.dedent("""\
        set -eu
        while [ ! -e /session/go ]; do sleep 0.05; done
        pwd > where.txt
        ls -A /session > /session/listing.txt
        cat /session/input.txt > copied.txt
        printf '%s' "$GREETING" > /session/env.txt
        python -c 'import pidispatch, sys; print(sys.prefix)' > /session/python.txt
        cat /etc/job/config.json > /session/config-seen.json
        if touch /etc/job/x 2>/dev/null; then echo writable > /session/ro-check.txt; fi
        printf 'job j1 done: %s' "$(cat /session/input.txt)" > /dev/termination-log
        """)
    kube.create(f"/api/v1/namespaces/{namespace}/configmaps",
                {"metadata": {"name": "cfg"}, "data": {"config.json": '{"k": 1}'}})
    kube.create(pod_path(namespace), {
        "metadata": {"name": "runner"},
        "spec": {
            "restartPolicy": "Never", "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
            "containers": [{
                "name": "main", "image": "ignored.invalid/image:1",
                "command": ["sh", "-c"], "args": [script],
                "workingDir": "/session",
                "env": [{"name": "WHO", "value": "world"}, {"name": "GREETING", "value": "hello $(WHO)"}],
                "securityContext": restricted_security_context(),
                "volumeMounts": [{"name": "store", "mountPath": "/session", "subPath": "jobs/j1"},
                                 {"name": "cfg", "mountPath": "/etc/job", "readOnly": True}],
            }],
            "volumes": [{"name": "store", "persistentVolumeClaim": {"claimName": "store"}},
                        {"name": "cfg", "configMap": {"name": "cfg"}}],
        }})
    running = wait_pod_phase(kube, namespace, "runner", "Running", timeout=60)
    assert running["spec"]["nodeName"] == kubelet.node_name
    assert "running" in container_status(running, "main")["state"]
    (root / "jobs" / "j1" / "go").touch()

    done = wait_pod_phase(kube, namespace, "runner", ("Succeeded", "Failed"), timeout=60)
    log = kubelet.pod_log(kube, namespace, "runner", "main")
    term = container_status(done, "main")["state"]["terminated"]
    assert done["status"]["phase"] == "Succeeded", (done["status"], log)
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    assert term["message"] == "job j1 done: from the host"
    j1 = root / "jobs" / "j1"
    assert (j1 / "where.txt").read_text().strip() == "/session"
    assert (j1 / "copied.txt").read_text() == "from the host"
    assert (j1 / "env.txt").read_text() == "hello world"
    # `python` in a Pod is the interpreter that runs the kubelet (the project's venv)
    assert (j1 / "python.txt").read_text().strip() == sys.prefix
    assert json.loads((j1 / "config-seen.json").read_text()) == {"k": 1}
    assert not (j1 / "ro-check.txt").exists(), "readOnly mount was writable"
    listing = (j1 / "listing.txt").read_text().split()
    assert "input.txt" in listing and "other-job" not in listing and "jobs" not in listing
    # the host path of the mount point is not written to by the Pod
    assert not os.path.exists("/session/listing.txt")


def test_failed_pod_reports_exit_code_and_message(kube: Kube, namespace: str, kubelet):
    kube.create(pod_path(namespace), {
        "metadata": {"name": "fails"},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "containers": [{
            "name": "main", "image": "ignored", "command": ["sh", "-c",
                                                             "echo boom >&2; echo bad-input > $(MSG); exit 3"],
            "env": [{"name": "MSG", "value": "/tmp/termination"}],
            "terminationMessagePath": "/tmp/termination"}]}})
    pod = wait_pod_phase(kube, namespace, "fails", ("Succeeded", "Failed"))
    term = container_status(pod, "main")["state"]["terminated"]
    assert pod["status"]["phase"] == "Failed"
    assert (term["exitCode"], term["reason"], term["message"].strip()) == (3, "Error", "bad-input")
    assert "boom" in kubelet.pod_log(kube, namespace, "fails", "main")


def test_a_volume_over_the_checkout_does_not_hide_the_code(kube: Kube, namespace: str, kubelet):
    """A volume at a parent of the checkout (as /tmp is on CI clones under /tmp) covers that path, yet
    the project's code stays visible to the Pod's process, and the Pod's own writes land in the volume."""
    from pathlib import Path

    parent = str(Path(__file__).resolve().parents[2])
    fakepi = str(Path(__file__).resolve().parents[1] / "testkit" / "fakepi.py")
    marker = f"{parent}/pod-wrote-{uuid.uuid4().hex[:8]}"
    script = f"import os, pidispatch; assert os.path.isfile({fakepi!r}); open({marker!r}, 'w').write('x')"
    if os.geteuid() != 0:
        pytest.skip("mount namespaces need root: without them the kubelet applies no mounts at all")
    kube.create(pod_path(namespace), {
        "metadata": {"name": "shadow"},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                 "volumes": [{"name": "scratch", "emptyDir": {}}],
                 "containers": [{"name": "main", "image": "ignored", "command": [
                     "python", "-c", script],
                     "volumeMounts": [{"name": "scratch", "mountPath": parent}]}]}})
    pod = wait_pod_phase(kube, namespace, "shadow", ("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded", kubelet.pod_log(kube, namespace, "shadow", "main")
    assert not os.path.exists(marker), "the Pod's write went to the host instead of its volume"


def test_deleting_owner_garbage_collects_running_pod(kube: Kube, namespace: str, kubelet):
    owner = kube.create(f"/api/v1/namespaces/{namespace}/configmaps",
                        {"metadata": {"name": f"owner-{uuid.uuid4().hex[:4]}"}, "data": {}})
    kube.create(pod_path(namespace), {
        "metadata": {"name": "owned", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"]}]},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                 "terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "main", "image": "ignored", "command": ["sleep", "300"]}]}})
    pod = wait_pod_phase(kube, namespace, "owned", "Running")
    pid = int(container_status(pod, "main")["containerID"].removeprefix("local://"))
    assert os.path.exists(f"/proc/{pid}")
    kube.delete(f"/api/v1/namespaces/{namespace}/configmaps/{owner['metadata']['name']}")
    wait_pod_gone(kube, namespace, "owned", timeout=60)
    wait_until(f"process {pid} of the deleted Pod to exit", lambda: not _alive(pid), timeout=15)


def test_namespace_deletion_completes(kube: Kube, kubelet):
    name = f"doomed-{uuid.uuid4().hex[:6]}"
    kube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    wait_until(f"ServiceAccount {name}/default", lambda: kube.get_or_none(
        f"/api/v1/namespaces/{name}/serviceaccounts/default"))
    kube.create(pod_path(name), {"metadata": {"name": "p"}, "spec": {
        "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 2,
        "containers": [{"name": "main", "image": "ignored", "command": ["sleep", "300"]}]}})
    wait_pod_phase(kube, name, "p", "Running")
    kube.delete(f"/api/v1/namespaces/{name}")
    wait_until(f"namespace {name} to finish deleting",
               lambda: kube.get_or_none(f"/api/v1/namespaces/{name}") is None, timeout=90)


def test_pod_with_default_service_account_token_can_call_the_api(cluster: Cluster, kube: Kube, namespace: str,
                                                                  kubelet):
    """ServiceAccount admission injects a projected token volume; the kubelet fills it via TokenRequest."""
    kube.create(pod_path(namespace), {"metadata": {"name": "incluster"}, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "ignored", "command": [
            str(cluster.kubectl_path), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"],
            # no kubeconfig: kubectl falls back to the in-cluster config (mounted token + ca.crt,
            # KUBERNETES_SERVICE_HOST/PORT)
            "env": [{"name": "KUBECONFIG", "value": "/nonexistent"}]}]}})
    pod = wait_pod_phase(kube, namespace, "incluster", ("Succeeded", "Failed"))
    log = kubelet.pod_log(kube, namespace, "incluster", "main")
    assert pod["status"]["phase"] == "Succeeded", log
    assert log.strip() == f"system:serviceaccount:{namespace}:default"


def test_startup_failure_names_component_and_shows_its_log(tmp_path):
    """No cluster needed: a broken etcd must fail fast with its own last log lines, not a bare timeout."""
    bins = tmp_path / "bin"
    bins.mkdir()
    (bins / "etcd").write_text("#!/bin/sh\necho 'etcd: simulated failure: disk on fire' >&2\nexit 3\n")
    (bins / "etcd").chmod(0o755)
    c = Cluster(state_dir=tmp_path / "state", bin=bins)
    t0 = time.monotonic()
    with pytest.raises(ClusterError) as e:
        c.start(timeout=30)
    assert time.monotonic() - t0 < 15, "the exit was noticed only at the deadline"
    msg = str(e.value)
    assert "etcd: exited with code 3" in msg and "disk on fire" in msg, msg
    assert not c.is_running()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_stale_pid_now_serving_another_cluster_is_left_alone(tmp_path):
    """No cluster needed. ``down`` after a crash reads pids from the state file; one may since belong to the
    same binary serving another cluster (the demo beside a test run). Only this cluster's process is stopped."""
    def fake(state: str) -> subprocess.Popen:
        # Its command line looks like an apiserver's: the binary's name and a path under a state directory.
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "kube-apiserver",
                                 f"--tls-cert-file={tmp_path / state / 'pki' / 'apiserver.crt'}"],
                                start_new_session=True)

    other, ours = fake("state2"), fake("state")  # "state2" starts with "state": a prefix is not a match
    try:
        # stop() waits for what it signals to exit, so had it signalled ``other``, ``other`` has exited by now.
        Cluster(state_dir=tmp_path / "state", pids={"kube-apiserver": other.pid}).stop()
        assert other.poll() is None, "another cluster's apiserver was stopped"
        Cluster(state_dir=tmp_path / "state", pids={"kube-apiserver": ours.pid}).stop()
        assert ours.wait(15) == -signal.SIGTERM, "this cluster's own apiserver was not stopped"
    finally:
        for p in (other, ours):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_the_test_kubelet_waits_out_an_apiserver_restart_while_preparing_volumes(tmp_path):
    """No cluster needed. A Pod bound just before the apiserver stops must wait for it, as a real kubelet's
    volume manager does, not fail (it did once in CI: ``runner crashed`` on a refused connection)."""
    store = tmp_path / "pv"
    calls = []

    class Restarting:
        """The apiserver's answers for a bound claim, after refusing the first connection."""
        def get_or_none(self, path):
            calls.append(path)
            if len(calls) == 1:
                raise requests.ConnectionError("[Errno 111] Connection refused")
            return {"spec": {"volumeName": "pv-1"}, "status": {"phase": "Bound"}}

        def get(self, path):
            return {"metadata": {"name": "pv-1"}, "spec": {"hostPath": {"path": str(store)}}}

    class Kubelet:
        data_dir = tmp_path

        def new_kube(self):
            return Restarting()

    pod = {"metadata": {"namespace": "ns", "name": "p", "uid": "u-1"},
           "spec": {"containers": [{"name": "c"}],
                    "volumes": [{"name": "staging", "persistentVolumeClaim": {"claimName": "claim"}}]}}
    runner = PodRunner(Kubelet(), pod)
    assert runner._await_volumes(retry_every=0.01)
    assert runner.phase == "Pending" and runner.volumes == {"staging": store}
    assert len(calls) == 2, "the claim was not read again after the refused connection"
