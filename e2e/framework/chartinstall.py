"""The chart installed with the pinned helm on the local control plane, the operator at ``replicas=0``:
the chart's contract (CRDs, claims, RBAC), not the operator's code. Shared by ``test_chart_install.py``
and ``test_job_pod_policy.py``.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pi-dispatch"
RELEASE = "pid"
FULLNAME = f"{RELEASE}-pi-dispatch"


def helm(cluster: Cluster, home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env(), "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data")}
    result = subprocess.run([str(cluster.helm_path), *args], capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
    return result


def fresh_namespace(kube: Kube, base: str) -> str:
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    kube.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": {"pidispatch.dev/e2e": "true"}}})
    return name


def install(cluster: Cluster, home: Path, namespace: str, *values: str) -> str:
    # replicas=0 (and gateway.replicas=0): the operator's and the gateway's own code is not under test here;
    # everything else is installed. The App auth source: the chart refuses a store under the gh default (it could
    # never resume); `values` may name another.
    return helm(cluster, home, "install", RELEASE, str(CHART), "--namespace", namespace,
                "--set", "sessions.enabled=true", "--set", "github.authSource=app", "--set", "replicas=0",
                "--set", "gateway.replicas=0", *values).stdout
