"""The operator installed with its own Helm chart on the local control plane, for end-to-end tests.

``helm install`` creates everything a user gets: CRDs, the operator Deployment, its ServiceAccount
and RBAC, the store and staging PVCs. The kube-controller-manager turns the Deployment into a Pod,
and the test kubelet runs that Pod as a local process (``pidispatch operator`` from this venv) with
a real projected ServiceAccount token: the operator talks to the API server *as the chart's
ServiceAccount*, so a missing RBAC rule fails a test. Job Pods run ``testkit/fakepi.py``, the scripted
stand-in for the job image, through the same kubelet.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.framework.cluster import Cluster, free_port
from e2e.framework.kube import Kube
from pidispatch.api.crds import GROUP, VERSION
from testkit.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pi-dispatch"
FAKEPI = ROOT / "testkit" / "fakepi.py"
RELEASE = "pi-dispatch"
TERMINAL = ("Succeeded", "Failed", "Refused")
PI_VERSION = "0.73.1"
# The owner every Release.trigger serves (api/serves.py): resume is armed only on a Trigger that names its repositories.
TRUSTED = "acme/*"


DAY = 86400


def fresh_namespace(kube: Kube, prefix: str) -> str:
    """A new namespace enforcing the ``restricted`` Pod Security Standard (every Pod of ours must pass it)."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kube.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": {
        "pidispatch.dev/e2e": "true", "pod-security.kubernetes.io/enforce": "restricted"}}})
    wait_until(f"ServiceAccount {name}/default", lambda: kube.get_or_none(
        f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout=30)
    return name


@contextmanager
def installed(cluster: Cluster, kube: Kube, prefix: str, values: dict[str, Any], trigger: str | None = "fix",
              prepare: Callable[[str], object] | None = None) -> Iterator[Release]:
    """The chart installed in a fresh namespace (with a resume Trigger ``trigger``); all of it removed after.

    ``prepare(namespace)`` runs before the install (e.g. to create the Secrets the chart mounts).
    """
    ns = fresh_namespace(kube, prefix)
    r = Release(cluster, kube, ns, values)
    try:
        if prepare is not None:
            prepare(ns)
        r.install()
        if trigger:
            r.trigger(trigger)
        yield r
    finally:
        r.uninstall()
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")


def rewrite_header_timestamp(path: Path, iso: str) -> None:
    lines = path.read_bytes().split(b"\n")
    header = json.loads(lines[0])
    header["timestamp"] = iso
    lines[0] = json.dumps(header, separators=(",", ":")).encode()
    path.write_bytes(b"\n".join(lines))


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


# How to make a stored key refuse with each cold reason that can be produced from outside, for a release
# installed with maxBytes 1 MiB, maxResumeChain 3, maxContextPct 90, maxAgeDays 30 and ttlDays 14.
TAMPER: dict[str, Callable[[Path], object]] = {
    "expired": lambda d: os.utime(d / "current.jsonl", (time.time() - 15 * DAY,) * 2),
    "too-large": lambda d: _append(d / "current.jsonl", b"x" * (1024 * 1024 + 1)),
    "unparseable": lambda d: d.joinpath("current.jsonl").write_bytes(b"this is not a session\n"),
    "venue-changed": lambda d: d.joinpath("venue").write_text("local"),
    "pi-version-changed": lambda d: d.joinpath("pi-version").write_text("0.1.0"),
    "resume-chain-too-long": lambda d: d.joinpath("resume-chain").write_text("3"),
    "context-too-full": lambda d: d.joinpath("context").write_text("127000 128000 fake/fake-model"),
    "conversation-too-old": lambda d: rewrite_header_timestamp(d / "current.jsonl", "2020-01-01T00:00:00.000Z"),
}
TAMPER_BOUNDS = {"maxBytes": 1024 * 1024, "maxResumeChain": 3, "maxContextPct": 90, "maxAgeDays": 30, "ttlDays": 14}


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# The chart's gateway (on by default) left out of a release. The test kubelet runs Pods as host processes on one
# network, where two gateway replicas would bind the same ports, and the real node has no kube-proxy to carry the
# gateway's Service: suites that do not test the gateway run their jobs with the credentials in the Pod, as before
# it. e2e/test_gateway_job.py runs jobs through a gateway.
NO_GATEWAY: dict[str, Any] = {"gateway": {"enabled": False}}


def base_values(**env: str) -> dict[str, Any]:
    return {
        "job": {"image": "local/fakepi", "command": ["python3", str(FAKEPI)]},
        "metrics": {"port": free_port()},
        "health": {"port": free_port()},
        "github": {"authSource": "app"},
        **NO_GATEWAY,
        "extraEnv": [{"name": k, "value": v} for k, v in
                     {"PI_DISPATCH_RESUMABLE_REFRESH_SECONDS": "5", **env}.items()],
    }


@dataclass
class Release:
    cluster: Cluster
    kube: Kube
    ns: str
    values: dict[str, Any] = field(default_factory=dict)

    # ---- helm --------------------------------------------------------------------------------------

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.cluster.helm_path), *args, "--namespace", self.ns]
        r = subprocess.run(cmd, capture_output=True, text=True, env=self.cluster.env(), timeout=180)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        return r

    def _values_file(self) -> str:
        fd, path = tempfile.mkstemp(suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(self.values, f)
        return path

    def install(self) -> Release:
        path = self._values_file()
        try:
            self.helm("install", RELEASE, str(CHART), "--values", path)
        finally:
            os.unlink(path)
        self.await_operator()
        return self

    def upgrade(self, values: dict[str, Any]) -> None:
        """Change values (``Recreate``: the old operator Pod goes, a new one starts)."""
        self.values = merge(self.values, values)
        old = {p["metadata"]["uid"] for p in self.operator_pods()}
        path = self._values_file()
        try:
            self.helm("upgrade", RELEASE, str(CHART), "--values", path)
        finally:
            os.unlink(path)
        wait_until("a new operator Pod", lambda: any(p["metadata"]["uid"] not in old for p in self.operator_pods()),
                   timeout=60)
        self.await_operator()

    def operator_pods(self) -> list[dict[str, Any]]:
        return self.kube.list(f"/api/v1/namespaces/{self.ns}/pods",
                              labelSelector="app.kubernetes.io/component=operator")

    def await_operator(self) -> None:
        """The operator is up when it has written a status on a probe Trigger."""
        def running() -> bool:
            return any((p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get(
                "deletionTimestamp") for p in self.operator_pods())

        wait_until("the operator Pod Running", running, timeout=90)
        probe = f"probe-{int(time.time() * 1000)}"
        self.trigger(probe, resume=False)
        try:
            wait_until(f"the operator to report on Trigger {probe}", lambda: (self.get("triggers", probe).get(
                "status") or {}).get("conditions"), timeout=60)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\noperator log:\n{self.operator_log()[-4000:]}") from None
        self.kube.delete(self.path("triggers", probe))

    def uninstall(self) -> None:
        """Forget the SessionKeys while the operator can still run their finalizer, then uninstall."""
        for sk in self.kube.list(self.path("sessionkeys")):
            self.kube.delete_ignore_missing(self.path("sessionkeys", sk["metadata"]["name"]))
        try:
            wait_until("SessionKeys finalized", lambda: not self.kube.list(self.path("sessionkeys")), timeout=30)
        except TimeoutError:
            for sk in self.kube.list(self.path("sessionkeys")):
                self.kube.patch(self.path("sessionkeys", sk["metadata"]["name"]), {"metadata": {"finalizers": []}})
        self.helm("uninstall", RELEASE, check=False)

    def operator_log(self) -> str:
        logs = []
        if self.cluster.node == "real":  # a real kubelet serves `kubectl logs`
            return "\n".join(self.cluster.pod_log(self.ns, p["metadata"]["name"])  # type: ignore[attr-defined]
                             for p in self.operator_pods())
        for pod in self.operator_pods():
            d = self.cluster.kubelet_dir / "pods" / f"{self.ns}_{pod['metadata']['name']}_{pod['metadata']['uid']}"
            for f in sorted((d / "logs").glob("*.log")) if d.exists() else []:
                logs.append(f.read_text(errors="replace"))
        return "\n".join(logs)

    def pod_log(self, pod: str) -> str:
        if self.cluster.node == "real":
            return self.cluster.pod_log(self.ns, pod)  # type: ignore[attr-defined]
        p = self.kube.get(f"/api/v1/namespaces/{self.ns}/pods/{pod}")
        f = self.cluster.kubelet_dir / "pods" / f"{self.ns}_{pod}_{p['metadata']['uid']}" / "logs" / "pi.log"
        return f.read_text(errors="replace") if f.exists() else ""

    # ---- objects -----------------------------------------------------------------------------------

    def path(self, plural: str, name: str | None = None) -> str:
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{self.ns}/{plural}"
        return base if name is None else f"{base}/{name}"

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.kube.get(self.path(plural, name))

    def trigger(self, name: str, *, resume: bool = True, pi_version: str = PI_VERSION,
                repositories: tuple[str, ...] = (TRUSTED,), **run: Any) -> dict[str, Any]:
        """A Trigger for ``@pi`` comments on ``repositories`` (:data:`TRUSTED`, ``acme/*``: every Job here is for
        ``acme/widgets`` unless a test names another), resume armed unless ``resume=False``."""
        spec_run = {"model": "fake/fake-model", "piVersion": pi_version, **run}
        if resume:
            spec_run["resume"] = True
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Trigger", "metadata": {"name": name},
                "spec": {"on": {"event": "issue_comment.created", "phrase": "@pi", "repositories": list(repositories)},
                         "run": spec_run}}
        existing = self.kube.get_or_none(self.path("triggers", name))
        if existing is None:
            return self.kube.create(self.path("triggers"), body)
        return self.kube.patch(self.path("triggers", name), {"spec": body["spec"]})

    def job(self, name: str, *, trigger: str = "fix", issue: int | None = None, comment: str = "@pi go",
            repository: str = "acme/widgets", **spec: Any) -> dict[str, Any]:
        body_spec = {"trigger": trigger, "forge": "github", "repository": repository, "comment": comment, **spec}
        if issue is not None:
            body_spec["issue"] = issue
        return self.kube.create(self.path("jobs"), {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job",
                                                    "metadata": {"name": name}, "spec": body_spec})

    def wait_job(self, name: str, phases: tuple[str, ...] = TERMINAL, timeout: float = 90) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            job = self.get("jobs", name)
            return job if (job.get("status") or {}).get("phase") in phases else None

        try:
            return wait_until(f"Job {name} in {phases}", done, timeout=timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\nJob: {json.dumps(self.get('jobs', name).get('status'))}\n"
                               f"operator log:\n{self.operator_log()[-4000:]}") from None

    def run(self, name: str, *, timeout: float = 90, **kw: Any) -> dict[str, Any]:
        self.job(name, **kw)
        return self.wait_job(name, timeout=timeout)

    def pods_of(self, job: str) -> list[dict[str, Any]]:
        from pidispatch.manifests.pod import job_label  # a long Job name is shortened in the label

        return self.kube.list(f"/api/v1/namespaces/{self.ns}/pods",
                              labelSelector=f"pi-dispatch.dev/job={job_label(job)}")

    def only_pod(self, job: str) -> dict[str, Any]:
        """The one Pod of ``job`` (a second Pod for one Job is a failure of the operator, so it fails here)."""
        pods = self.pods_of(job)
        assert len(pods) == 1, f"Job {job}: {len(pods)} Pods"
        return pods[0]

    def sessionkey(self, key: str) -> dict[str, Any] | None:
        return self.kube.get_or_none(self.path("sessionkeys", key))

    def condition(self, obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
        return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_),
                    None)

    def sessionkey_when(self, key: str, type_: str, timeout: float = 60, **want: str) -> dict[str, Any]:
        """The SessionKey ``key`` once its condition ``type_`` has every field of ``want`` (``status="True"``,
        ``reason="Quarantined"``...)."""
        def matches() -> dict[str, Any] | None:
            sk = self.sessionkey(key)
            condition = self.condition(sk, type_)
            return sk if condition is not None and all(condition.get(k) == v for k, v in want.items()) else None

        shown = ", ".join(f"{k}={v}" for k, v in want.items())
        return wait_until(f"SessionKey {key} {type_} {shown}", matches, timeout=timeout)

    # ---- the store, seen from the host -------------------------------------------------------------

    @property
    def store(self) -> Path:
        return self.cluster.pvc_host_path(self.ns, f"{RELEASE}-sessions")

    @property
    def staging(self) -> Path:
        return self.cluster.pvc_host_path(self.ns, f"{RELEASE}-staging")

    def key_dir(self, key: str) -> Path:
        return self.store / key

    def digest(self, key: str) -> str | None:
        f = self.key_dir(key) / "current.jsonl"
        return hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else None


def issue_key_of(issue: int, repository: str = "acme/widgets") -> str:
    """The store key of ``issue``'s branch (``pi/issue-<n>``) in ``repository`` on github, as the operator makes it."""
    from pidispatch.store.keys import issue_key

    key = issue_key("github", repository, issue)
    assert key is not None
    return key


def create_secret(kube: Kube, ns: str, name: str, data: dict[str, bytes]) -> None:
    kube.create(f"/api/v1/namespaces/{ns}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()}})


def received_digest(r: Release, job: dict) -> str | None:
    """What the job saw at /session (sha256 as fakepi logged it), ``None`` for an empty file."""
    m = re.search(r"received ([0-9a-f]{64}|empty)", r.pod_log(job["status"]["podName"]))
    assert m, f"fakepi did not log what it received:\n{r.pod_log(job['status']['podName'])}"
    return None if m.group(1) == "empty" else m.group(1)
