"""Staging by transfer on a cluster of several nodes (issue 33 item 2's proof): ReadWriteOnce staging, job Pods on
every node, none mounting a claim.

The chart installed with ``sessions.staging.mode: transfer`` on the multi-node harness (``e2e/framework/multinode.py``:
three test kubelets, the real kube-scheduler, block volumes that attach to one node at a time). Job Pods are
spread over the nodes by ``job.topologySpreadConstraints``; they fetch their staged copy from the operator's
transfer server and hand the result back over TLS verified against the chart's CA (fakepi uses the runner's own
client, ``pidispatch.transfer.client``). Test kubelets run containers as host processes on one network, so job
Pods reach the operator's port at ``localhost``: the URL says so (``sessions.staging.transfer.url``) and the
chart's certificate names it (``extraDNSNames``); nothing about TLS is relaxed for the test.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest

from e2e.framework.cluster import Cluster, free_port
from e2e.framework.kube import Kube
from e2e.framework.multinode import NODE_NAMES
from e2e.framework.release import Release, base_values, installed, issue_key_of, merge

pytestmark = pytest.mark.e2e

HOSTNAME = "kubernetes.io/hostname"
CAP = 256 * 1024


@pytest.fixture(scope="module")
def mkube(multinode_cluster: Cluster) -> Kube:
    return multinode_cluster.kube()


def transfer_values() -> dict[str, Any]:
    port = free_port()
    return merge(base_values(), {
        "sessions": {"enabled": True, "staging": {"mode": "transfer", "transfer": {
            "port": port, "maxBytes": CAP, "url": f"https://localhost:{port}", "extraDNSNames": ["localhost"]}}},
        "job": {"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "pi-dispatch"}}}]},
    })


_issues = iter(range(700, 100000))


def logged(r: Release, pod: str, word: str) -> str:
    m = re.search(rf"^{word} (\S+)$", r.pod_log(pod), re.MULTILINE)
    assert m, f"fakepi did not log {word!r}:\n{r.pod_log(pod)}"
    return m.group(1)


def stored(r: Release, issue: int) -> str | None:
    return r.digest(issue_key_of(issue))


def assert_no_claim(pod: dict[str, Any]) -> None:
    claims = [v for v in pod["spec"].get("volumes") or [] if "persistentVolumeClaim" in v]
    assert claims == [], f"{pod['metadata']['name']} mounts {claims}"
    assert "podAffinity" not in (pod["spec"].get("affinity") or {})
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert "valueFrom" in env["PI_TRANSFER_TOKEN"] and "value" not in env["PI_TRANSFER_TOKEN"]


def test_transfer_staging_jobs_run_on_every_node_without_a_claim_and_resume(multinode_cluster: Cluster,
                                                                            mkube: Kube) -> None:
    with installed(multinode_cluster, mkube, "mn-xfer", transfer_values()) as r:
        issues = [next(_issues) for _ in range(6)]
        for issue in issues:
            r.job(f"cold-{issue}", issue=issue)
        digests = {}
        for issue in issues:
            cold = r.wait_job(f"cold-{issue}", timeout=180)
            assert cold["status"]["phase"] == "Succeeded", cold["status"]
            digests[issue] = stored(r, issue)
            assert digests[issue] is not None, "the handed-back transcript was promoted"
        for issue in issues:
            r.job(f"warm-{issue}", issue=issue, comment="@pi and now the review")
        for issue in issues:
            warm = r.wait_job(f"warm-{issue}", timeout=180)
            assert warm["status"]["phase"] == "Succeeded", warm["status"]
            assert warm["status"]["session"]["reason"] == "resumed", (issue, warm["status"]["session"])
            pod = r.only_pod(f"warm-{issue}")
            assert logged(r, pod["metadata"]["name"], "received") == digests[issue], issue
            assert logged(r, pod["metadata"]["name"], "uploaded")
            assert stored(r, issue) == logged(r, pod["metadata"]["name"], "wrote"), \
                "what the job handed back is what was promoted"
        pods = [r.only_pod(f"{kind}-{i}") for i in issues for kind in ("cold", "warm")]
        for pod in pods:
            assert_no_claim(pod)
        nodes = Counter(p["spec"]["nodeName"] for p in pods)
        assert set(nodes) == set(NODE_NAMES), f"12 job Pods on {dict(nodes)}"
        print(f"12 job Pods per node: {dict(nodes)}")


def test_a_job_cannot_read_another_jobs_copy_and_a_cut_or_oversized_upload_promotes_nothing(
        multinode_cluster: Cluster, mkube: Kube) -> None:
    with installed(multinode_cluster, mkube, "mn-xfer-no", transfer_values()) as r:
        issue, other = next(_issues), next(_issues)
        for i in (issue, other):
            assert r.run(f"cold-{i}", issue=i, timeout=180)["status"]["phase"] == "Succeeded"

        # another Job's copy: its staging exists while it waits on a hold file that never comes
        r.job(f"held-{other}", issue=other, comment="@pi hold=never")
        held = r.wait_job(f"held-{other}", ("Running",), timeout=120)
        peek = r.run(f"peek-{issue}", issue=issue, comment=f"@pi peek={held['metadata']['uid']}", timeout=180)
        assert logged(r, r.only_pod(f"peek-{issue}")["metadata"]["name"], "peek") == "401"
        assert peek["status"]["phase"] == "Succeeded", peek["status"]

        # cut mid-upload, the Pod still exits 0: no committed upload, so the Job fails and nothing is promoted
        issue2 = next(_issues)
        assert r.run(f"cold-{issue2}", issue=issue2, timeout=180)["status"]["phase"] == "Succeeded"
        kept = stored(r, issue2)
        cut = r.run(f"cut-{issue2}", issue=issue2, comment="@pi upload=cut", timeout=180)
        assert cut["status"]["phase"] == "Failed", cut["status"]
        done = r.condition(cut, "Completed")
        assert done is not None and done["reason"] == "TransferIncomplete", cut["status"]
        assert stored(r, issue2) == kept, "the stored conversation is unchanged"

        # a body past the cap, streamed without a length: refused while it streams, the Job fails
        big = r.run(f"big-{issue}", issue=issue, comment="@pi upload=stream-big", timeout=180)
        assert logged(r, r.only_pod(f"big-{issue}")["metadata"]["name"], "upload") == "413"
        assert big["status"]["phase"] == "Failed", big["status"]
        assert stored(r, issue) == logged(r, r.only_pod(f"peek-{issue}")["metadata"]["name"], "wrote"), \
            "the last promotion is the peeking job's own, not the oversized one's"
