"""The gateway's ConfigMap ledger on the real apiserver (docs/gateway.md#the-ledger): one ConfigMap per Job, owned
by the Job CR (collected with it), one data key per replica written by merge patch, created on the first write,
batched so a burst of replies is a write or two, summed across replicas, carried on by a restarted replica.
And ``pidispatch gateway`` as a process against it: the model key read from the Secret the capability names,
the reply's figures in the ledger, the budget held from the ledger, SIGTERM's last write, logs without secrets."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from pidispatch.api import crds
from pidispatch.contract.gateway_wire import LEDGER_LABEL, ledger_name
from pidispatch.gateway.capability import Claims, SecretRef, mint
from pidispatch.gateway.kubeledger import KubeLedger
from pidispatch.kubeapi import Api
from pidispatch.receiver.delivery import job_body
from testkit.scripted_model import ScriptedModel, Usage
from testkit.transferkit import make_pki
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(kube: Kube) -> Kube:
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        if kube.get_or_none(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") is None:
            kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body)

        def established(name: str = name) -> bool:
            crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            return any(c["type"] == "Established" and c["status"] == "True"
                       for c in crd.get("status", {}).get("conditions", []))

        wait_until(f"CRD {name} Established", established, timeout=60)
    wait_until("pi-dispatch.dev served", lambda: kube.get_or_none(f"/apis/{crds.GROUP}/{crds.VERSION}"), timeout=60)
    return kube


@pytest.fixture
def job(installed: Kube, namespace: str) -> Iterator[Claims]:
    created = installed.create(f"/apis/{crds.GROUP}/{crds.VERSION}/namespaces/{namespace}/jobs",
                               job_body("ledger-job", {"trigger": "t", "forge": "github",
                                                       "repository": "acme/widgets"}))
    yield Claims(uid=created["metadata"]["uid"], namespace=namespace, job="ledger-job", repository="acme/widgets",
                 forge="https://github.com", api="https://api.github.com", exp=int(time.time()) + 3600,
                 max_tokens=10_000)


def admin(cluster: Cluster) -> Api:
    return Api(cluster.server, ca_file=str(cluster.ca_file), cert_file=str(cluster.pki / "admin.crt"),
               key_file=str(cluster.pki / "admin.key"), retries=0)


def data(kube: Kube, claims: Claims) -> dict[str, dict[str, object]]:
    found = kube.get_or_none(f"/api/v1/namespaces/{claims.namespace}/configmaps/{ledger_name(claims.uid)}")
    return {} if found is None else {k: json.loads(v) for k, v in (found.get("data") or {}).items()}


def test_replicas_write_their_own_keys_of_one_configmap_owned_by_the_job(cluster: Cluster, kube: Kube,
                                                                         job: Claims) -> None:
    async def scenario() -> tuple[int, int, int, int]:
        a = KubeLedger(admin(cluster), "gateway-a", flush_seconds=0.2, read_seconds=0)
        b = KubeLedger(admin(cluster), "gateway-b", flush_seconds=0.2, read_seconds=0)
        a.start()
        b.start()
        for _ in range(100):  # a hundred replies in a burst
            await a.record_usage(job, input=10, output=5, cache_read=2, cache_write=1, cost=0.25)
        await a.record_refusal(job, "token-budget")
        await b.record_usage(job, input=1000, output=0, cache_read=0, cache_write=0, cost=None)
        await asyncio.sleep(0.5)
        used_a, used_b = await a.used(job), await b.used(job)
        writes = a.writes
        await a.close()
        await b.close()
        # A replica restarted under the same name carries on from its key.
        again = KubeLedger(admin(cluster), "gateway-a", flush_seconds=0.2, read_seconds=0)
        await again.record_usage(job, input=1, output=1, cache_read=0, cache_write=0, cost=0.5)
        await again.close()
        return used_a, used_b, writes, again.writes

    used_a, used_b, writes, _ = asyncio.run(scenario())
    assert used_a == used_b == 100 * 18 + 1000
    assert writes <= 4, f"{writes} writes for 101 records: not batched"
    figures = data(kube, job)
    assert figures["gateway-a"] == {"input": 1001, "output": 501, "cacheRead": 200, "cacheWrite": 100,
                                    "requests": 101, "refusals": {"token-budget": 1}, "cost": 25.5, "unpriced": 0}
    assert figures["gateway-b"]["input"] == 1000 and figures["gateway-b"]["requests"] == 1
    assert (figures["gateway-b"]["cost"], figures["gateway-b"]["unpriced"]) == (0, 1), "a reply of no known price"
    cm = kube.get(f"/api/v1/namespaces/{job.namespace}/configmaps/{ledger_name(job.uid)}")
    assert cm["metadata"]["labels"][LEDGER_LABEL] == job.uid
    [owner] = cm["metadata"]["ownerReferences"]
    assert owner == {"apiVersion": f"{crds.GROUP}/{crds.VERSION}", "kind": "Job", "name": "ledger-job",
                     "uid": job.uid}
    # Collected with its Job.
    kube.delete(f"/apis/{crds.GROUP}/{crds.VERSION}/namespaces/{job.namespace}/jobs/ledger-job")
    wait_until("the ledger collected with its Job", lambda: not data(kube, job), timeout=90)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_gateway_process_reads_the_key_and_keeps_the_ledger_on_the_apiserver(
        cluster: Cluster, kube: Kube, job: Claims, tmp_path: Path) -> None:
    key = os.urandom(32)
    (tmp_path / "gateway.key").write_bytes(key)
    pki = make_pki(tmp_path / "pki", "gateway")
    model_key = "sk-e2e-upstream-" + os.urandom(8).hex()
    kube.create(f"/api/v1/namespaces/{job.namespace}/secrets",
                {"metadata": {"name": "model-keys"}, "data": {"fake": base64.b64encode(model_key.encode()).decode()}})
    claims = Claims(**{**job.__dict__, "max_tokens": 1500,
                       "credentials": {"FAKE_API_KEY": SecretRef("model-keys", "fake")}})
    capability = mint(key, claims)
    port, metrics, proxy = free_port(), free_port(), free_port()
    with ScriptedModel() as model:
        (tmp_path / "models.json").write_text(json.dumps({"providers": {"fake": {
            "baseUrl": model.base_url, "api": "openai-completions", "apiKey": "FAKE_API_KEY"}}}))
        env = {"PATH": os.environ["PATH"], "KUBECONFIG": str(cluster.kubeconfig),
               "PYTHONPATH": os.pathsep.join(sys.path), "PI_DISPATCH_NAMESPACE": job.namespace,
               "POD_NAME": "gateway-e2e", "PI_GATEWAY_CERT_FILE": str(pki.cert), "PI_GATEWAY_KEY_FILE": str(pki.key),
               "PI_GATEWAY_KEY": str(tmp_path / "gateway.key"), "PI_GATEWAY_MODELS_FILE": str(tmp_path / "models.json"),
               "PI_GATEWAY_PORT": str(port), "PI_GATEWAY_METRICS_PORT": str(metrics),
               "PI_GATEWAY_PROXY_PORT": str(proxy)}
        process = subprocess.Popen([sys.executable, "-m", "pidispatch", "gateway"], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until("the gateway ready", lambda: urllib.request.urlopen(
                f"http://127.0.0.1:{metrics}/readyz", timeout=2).status == 200, timeout=30)
            context = ssl.create_default_context(cafile=str(pki.ca))

            def chat() -> int:
                request = urllib.request.Request(
                    f"https://127.0.0.1:{port}/model/fake/chat/completions", method="POST",
                    data=json.dumps({"model": "fake-model", "messages": [], "stream": True}).encode(),
                    headers={"Authorization": f"Bearer {capability}", "Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, context=context, timeout=30) as response:
                        response.read()
                        return int(response.status)
                except urllib.error.HTTPError as exc:
                    return exc.code

            model.reply("one", usage=Usage(prompt_tokens=1000, completion_tokens=10, cached_tokens=100))
            model.reply("two", usage=Usage(prompt_tokens=1000, completion_tokens=10))
            assert chat() == 200
            assert chat() == 200  # crosses the budget of 1500: it finishes
            assert chat() == 403  # refused from the ledger's figures (a spent budget: 403)
            assert [r["headers"]["authorization"] for r in model.log] == [f"Bearer {model_key}"] * 2
            # The same process serves the forge path and the proxy (gateway/main.py composes all three).
            other = urllib.request.Request(f"https://127.0.0.1:{port}/api/v3/repos/someone/else",
                                           headers={"Authorization": f"token {capability}"})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(other, context=context, timeout=30)
            assert refused.value.code == 403
            assert refused.value.headers["X-Pi-Gateway-Refusal"] == "other-repository"
            with socket.create_connection(("127.0.0.1", proxy), timeout=10) as tunnel:
                tunnel.sendall(b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n")
                assert tunnel.recv(64).startswith(b"HTTP/1.1 407"), "no capability, no tunnel"
        finally:
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    figures = data(kube, job)["gateway-e2e"]
    # The scripted model's models.json gives no price: both replies are counted, unpriced.
    assert figures == {"input": 1900, "output": 20, "cacheRead": 100, "cacheWrite": 0, "requests": 2,
                       "refusals": {"token-budget": 1, "other-repository": 1}, "cost": 0, "unpriced": 2}
    assert "gateway_model_reply" in err
    for secret in (capability, capability.split(".")[2], model_key):
        assert secret not in out + err
