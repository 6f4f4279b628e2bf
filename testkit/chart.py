"""The Helm chart rendered offline with the pinned helm (``helm template``, parsed with pyyaml), and the
helpers the chart tests read the rendered objects with. ``helm`` (the fixture in ``tests/conftest.py``)
runs the pinned binary with its own empty home; ``helm_runner`` builds it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from testkit.pinned import bin_dir

ROOT = Path(__file__).resolve().parents[1]

CHART = ROOT / "charts" / "pi-dispatch"
RELEASE, NAMESPACE = "rel", "pi-ns"
POD_NAME = "rel-pi-dispatch-5d9c7b-x2x4q"
FULLNAME = f"{RELEASE}-pi-dispatch"
POD_POLICY = f"{FULLNAME}-{NAMESPACE}"  # the job Pod ValidatingAdmissionPolicy (cluster-scoped: named per namespace)
SECRET_POLICY = f"{POD_POLICY}-secrets"  # the per-job Secret one
STORE_DIR, STAGING_DIR = "/var/lib/pi-dispatch/sessions", "/var/lib/pi-dispatch/jobs"
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
# The commits the releases tag, oldest first: a clone that did not bring the tags along (a clone of the branch
# alone, as CI makes; a mirror without tags) still has them in main's history, so an upgrade is tested from them all
# the same. A release adds its line here when it is tagged (docs/releasing.md).
RELEASES = {
    "v0.1.0": "23968ee1b39576d1ac461b1038d5574cd3f09952",
    "v0.2.0": "f0e2b4521a375119615b2e773c80bc71bf99a2eb",
}


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


def _in_history(commit: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", commit, "HEAD"],
                          capture_output=True).returncode == 0


def released() -> list[str]:
    """Every release in HEAD's history, newest first, as the refs ``git show`` takes: its ``v*`` tag, or the commit
    :data:`RELEASES` names when the clone has no tag for it."""
    tags = git("tag", "--merged", "HEAD", "--list", "v*", "--sort=-v:refname").split()
    tagged = {git("rev-parse", f"{tag}^{{commit}}") for tag in tags}
    untagged = [c for c in reversed(RELEASES.values()) if c not in tagged and _in_history(c)]
    return tags + untagged


def last_release() -> str | None:
    """The newest release before HEAD (a release upgrades from the one before): its tag, else its commit."""
    head = git("rev-parse", "HEAD")
    tags = git("tag", "--merged", "HEAD", "--list", "v*", "--sort=-v:refname").split()
    for tag in tags:
        if git("rev-parse", f"{tag}^{{commit}}") != head:
            return tag
    return next((c for c in reversed(RELEASES.values()) if c != head and _in_history(c)), None)


def _versions() -> dict[str, str]:
    lines = (ROOT / "e2e" / "controlplane" / "versions.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


# The pinned helm is built without Kubernetes' version stamped in and would assume v1.20 (below the
# chart's kubeVersion): render for the pinned control plane's version instead.
KUBE_VERSION = _versions()["K8S_VERSION"]


def helm_runner(home: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run(*args)``: the pinned helm with ``home`` for its cache, config and data; FileNotFoundError when it
    is not built (``make controlplane`` builds it, cached)."""
    path = bin_dir(build=False) / "helm"
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"helm not found at {path}: run `make controlplane` (builds the pinned helm, cached)")
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(path), *args], capture_output=True, text=True, env=env, timeout=120)

    return run


# The store on, with an auth source it can resume under (the chart refuses sessions with the gh default).
STORE_ON: dict[str, Any] = {"sessions.enabled": True, "github.authSource": "app"}


def set_args(values: Mapping[str, Any]) -> list[str]:
    """``--set-json`` for each value, so types reach helm exactly as given (a string stays a string)."""
    return [arg for key, value in values.items() for arg in ("--set-json", f"{key}={json.dumps(value)}")]


def template(helm: Any, values: Mapping[str, Any] | None = None, *extra: str) -> subprocess.CompletedProcess[str]:
    return helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION,
                *set_args(values or {}), *extra)


def render(helm: Any, values: Mapping[str, Any] | None = None, *extra: str) -> list[dict[str, Any]]:
    result = template(helm, values, *extra)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def kinds(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    return containers[0]


def doctor_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``helm test`` hook Pod."""
    return one([d for d in kinds(docs, "Pod") if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"],
               "Pod")


NODE_NAME = "node-a"  # what the downward API gives the operator for spec.nodeName, here


def env_list(container: dict[str, Any]) -> list[dict[str, Any]]:
    return container.get("env", [])


def env_values(container: dict[str, Any], namespace: str = NAMESPACE) -> dict[str, str]:
    """The container's env as the process would see it (the downward-API namespace filled in)."""
    out: dict[str, str] = {}
    for var in env_list(container):
        if "value" in var:
            out[var["name"]] = var["value"]
        elif var["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}:
            out[var["name"]] = POD_NAME
        elif var["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}:
            out[var["name"]] = NODE_NAME
        else:
            assert var["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}, var
            out[var["name"]] = namespace
    return out


ALL_ON: dict[str, Any] = {
    "sessions.enabled": True, "sessions.maxContextPct": 80, "sessions.allowGhSource": True,
    "github.authSource": "app", "github.app.id": 1234, "github.app.installationId": 5678,
    "github.app.privateKeySecret.name": "gh-app",
    "job.credentials.OPENAI_API_KEY.secretName": "model-keys", "job.credentials.OPENAI_API_KEY.key": "openai",
    "job.modelsConfigMap": "pi-models", "job.resources.limits.memory": "2Gi", "job.resources.requests.cpu": 1,
    "job.timeoutSeconds": 900, "job.startTimeoutSeconds": 120,
}

RECEIVER = f"{FULLNAME}-receiver"
RECEIVER_ON: dict[str, Any] = {"receiver.enabled": True, "receiver.webhookSecret.existingSecret": "gh-webhook",
                               "receiver.webhookSecret.key": "token"}

GATEWAY = f"{FULLNAME}-gateway"


def gateway_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gateway's own objects (``gateway.enabled``, on by default): its component label says so."""
    return [d for d in docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "gateway"]


def without_gateway(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every object but the gateway's (whose Secret is random in each render)."""
    gateway = gateway_objects(docs)
    return [d for d in docs if d not in gateway]
