"""The gateway proven enforced on a real node, not only rendered (issue 40, docs/gateway.md#proven-on-a-real-node).

On the real node (``e2e/framework/realnode.py``: containerd, runc, a real kubelet, the images of ``make images``) with
a real
NetworkPolicy implementation (kube-router's firewall, ``e2e/framework/netpolicy.py``), the chart is installed with the
gateway (one replica, the operator's image) and the job NetworkPolicy (the default), a GitHub App against the fake forge
(``testkit/fakegithub_api.py`` over TLS on the node's address) and the scripted model on the node's address, whose
key only the gateway reads (``job.credentials``; the deployment's ``models.json`` names it, never holds it). Real pi
in the real job image:

(a) an issue job clones, commits, pushes and comments through the gateway; the model sees the real key and never a
    capability, the forge sees the installation token and never a capability; ``status.tokens`` is the gateway's
    ledger ConfigMap;
(b) from inside the running job container (``kubectl exec``, as the job's own user, while pi's bash tool waits),
    neither the App's installation tokens, its private key nor the model key appear in the environment, the
    ``/proc/<pid>/environ`` of every process the job can read (pi, its shell: the runner, PID 1, is not dumpable), or
    the files under ``/etc``, ``/tmp``, the workspace, ``$HOME``, pi's agent directory and ``/var/run/secrets``; the
    Job's capability does (the scan sees what the job sees);
(c) from the same container, a connection straight to the forge's and the model's address fails (the policy),
    while the forge through the gateway answers and the proxy port answers;
(d) a fork pull request's job: ``git push`` through the gateway is refused ``fork-read-only``, its comment is made;
(e) a Trigger with a tiny ``run.maxTokens``: the Job ends Failed, ``TokenBudget``, and the stored conversation of
    its issue is unchanged.

And the gateway's log holds no key, token or capability; a gateway Pod deleted comes back at a new address, is routed
again, and serves the next job.

**How job Pods reach the gateway here.** This node has no kube-proxy (only the ``kubernetes`` Service is DNAT-ed,
by the node's own nat chain) and no cluster DNS, so the Service's name means nothing to a job Pod. The chart is
installed with no gateway replica first, to learn the Service's ClusterIP; the upgrade then starts one replica with
``gateway.url: https://<clusterIP>``, ``gateway.proxyUrl: http://<clusterIP>:3128`` and the address in the
certificate (``gateway.extraDNSNames``), and ``RealNode.route_service`` adds the two DNAT rules kube-proxy would
(443 → the Pod's 8443, 3128 → 3128) to the node's chain. So a job Pod addresses the Service, as on a cluster, and
the gateway loads its certificate once, with the address in it. The DNAT happens in ``PREROUTING``, before the
filter table where kube-router enforces: the policy sees the gateway Pod's address and port 8443, which is what
the chart's policy admits (a policy matches Pod ports, not Service ports). (c) checks it from the job: the Service's
443 works, the gateway Pod's 8443 connects and its 9090 (not admitted) does not, and kube-router's counters show its
rules for 8443 and 3128 took the job's packets; were the policy judging the Service's address and port, 443 would
be refused. The gateway Pod is not selected by the job policy: it reaches the apiserver (through the node's
``kubernetes`` DNAT), the forge and the model at the node's address.

Run with ``pytest -m realnode e2e/test_gateway_realnode.py`` (root, ``make node images``). Where a real node or
kube-router cannot run, the tests are skipped with the reason, unless ``PIDISPATCH_REQUIRE_REAL_NODE=1`` (CI).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from e2e.framework import netpolicy
from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.realnode import RealNode, images_env, unavailable
from e2e.framework.realnodekit import run
from e2e.framework.release import RELEASE, Release, create_secret, fresh_namespace, issue_key_of
from pidispatch.contract.gateway_wire import PROXY_PORT, ledger_name
from pidispatch.manifests.pod import gateway_secret_name
from testkit.fakegithub_api import FakeGitHubAPI, generate_app_key
from testkit.gitforge import Repos, make_tls
from testkit.scripted_model import API_KEY, PROVIDER, ScriptedModel, Usage, text_of, write_agent_dir
from testkit.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

REPO = "acme/widgets"
APP_ID, INSTALLATION = 7171, 77
ISSUE, FORK_PR = 1, 50
MODEL_KEY = "sk-realnode-gw-" + uuid.uuid4().hex
KEY_NAME = "FAKE_API_KEY"  # the environment name the deployment's models.json gives the fake provider's key
GATEWAY = f"{RELEASE}-gateway"
HTTPS_PORT = 8443  # the gateway Pod's TLS port (the Service's 443)
GO = "/tmp/pi-e2e-go"  # the marker pi's bash waits for while the test looks inside the container

#: run inside the job container as its own user: everything it can read of the places a credential could be left
SCAN = r"""
import os, sys
out = []
def emit(tag, data):
    out.append("\n==== " + tag + "\n" + data.decode("utf-8", "replace"))
emit("env", "\n".join(k + "=" + v for k, v in os.environ.items()).encode())
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    try:
        cmd = open("/proc/%s/cmdline" % pid, "rb").read().replace(b"\0", b" ")[:160].decode("utf-8", "replace")
        emit("environ %s %s" % (pid, cmd), open("/proc/%s/environ" % pid, "rb").read())
    except OSError as e:
        emit("environ %s unreadable %s" % (pid, e.errno), b"")
roots = ["/etc", "/tmp", os.environ.get("PI_WORKSPACE", "/workspace"), os.environ.get("HOME", "/home"),
         os.environ.get("PI_CODING_AGENT_DIR", "/pi-agent"), "/var/run/secrets", "/run/secrets"]
files = 0
for root in roots:
    for d, dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            try:
                if os.path.islink(p) or os.path.getsize(p) > (4 << 20):
                    continue
                emit("file " + p, open(p, "rb").read())
                files += 1
            except OSError:
                pass
emit("files", str(files).encode())
sys.stdout.write("".join(out))
"""

#: run inside the job container: each way out, straight and through the gateway (argv: node address, forge port,
#: model port, gateway address, proxy port, the gateway Pod's address)
PROBE = r"""
import base64, json, os, socket, ssl, sys, urllib.request
node, forge_port, model_port, gateway, proxy_port, pod = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    sys.argv[4], int(sys.argv[5]), sys.argv[6]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                     urllib.request.HTTPSHandler(context=ssl._create_unverified_context()))
out = {}
def attempt(name, fn):
    try:
        out[name] = fn()
    except Exception as e:
        out[name] = "%s: %s" % (type(e).__name__, e)
def connect(host, port):
    socket.create_connection((host, port), timeout=4).close()
    return "connected"
attempt("forge tcp", lambda: connect(node, forge_port))
attempt("model tcp", lambda: connect(node, model_port))
attempt("gateway pod 8443 tcp", lambda: connect(pod, 8443))
attempt("gateway pod 9090 tcp", lambda: connect(pod, 9090))
attempt("forge https", lambda: opener.open("https://%s:%d/api/v3/repos/acme/widgets" % (node, forge_port),
                                           timeout=5).status)
attempt("model http", lambda: opener.open("http://%s:%d/v1/models" % (node, model_port), timeout=5).status)
capability = os.environ["PI_GATEWAY_TOKEN"]
trusted = ssl.create_default_context(cafile=os.environ["PI_GATEWAY_CA_FILE"])
def via_gateway():
    req = urllib.request.Request("https://%s/api/v3/repos/acme/widgets" % gateway,
                                 headers={"Authorization": "token " + capability})
    with urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                     urllib.request.HTTPSHandler(context=trusted)).open(req, timeout=10) as r:
        return "%d %s" % (r.status, json.loads(r.read())["full_name"])
attempt("forge via gateway", via_gateway)
def via_proxy():
    s = socket.create_connection((gateway, proxy_port), timeout=10)
    auth = base64.b64encode(("job:" + capability).encode()).decode()
    s.sendall(("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic %s\r\n\r\n"
               % auth).encode())
    head = s.recv(4096).decode("latin-1")
    s.close()
    return head.split("\r\n")[0] + " " + next((l for l in head.split("\r\n") if l.lower().startswith(
        "x-pi-gateway-refusal")), "")
attempt("proxy via gateway", via_proxy)
print(json.dumps(out))
"""


def _skip_or_fail(why: str) -> None:
    if os.environ.get("PIDISPATCH_REQUIRE_REAL_NODE") == "1":
        pytest.fail(f"PIDISPATCH_REQUIRE_REAL_NODE=1 but {why}")
    pytest.skip(why)


def log(message: str) -> None:
    print(f"[gateway-realnode] {message}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = unavailable()
    if why:
        _skip_or_fail(f"no real node on this machine: {why}")
    c = Cluster(state_dir=tmp_path_factory.mktemp("gw-node"), backend=RealNode())
    why = netpolicy.unavailable(c)
    if why:
        _skip_or_fail(f"no NetworkPolicy implementation for the real node: {why}")
    c.start()
    try:
        netpolicy.start(c)
        yield c
    finally:
        try:
            netpolicy.stop(c)
        finally:
            c.stop()


@pytest.fixture(scope="module")
def kube(node: Cluster) -> Kube:
    return node.kube()


@pytest.fixture(scope="module")
def forge(tmp_path_factory: pytest.TempPathFactory, node: Cluster) -> Iterator[FakeGitHubAPI]:
    root = tmp_path_factory.mktemp("forge")
    ca, cert, key = make_tls(root / "tls", ips=("127.0.0.1", node.backend.ip))
    repos = Repos(root / "repos")
    repos.create(REPO, {"README.md": "# widgets\n", "cache.py": "def get(k):\n    return None\n"})
    pem, public = generate_app_key()
    with FakeGitHubAPI(app_id=APP_ID, public_key=public, installation_id=INSTALLATION, installation_repos=(REPO,),
                       repos=repos, tls=(str(cert), str(key)), prefix="/api/v3", bind=node.backend.ip) as api:
        api.app_pem = pem  # type: ignore[attr-defined]
        api.ca = ca  # type: ignore[attr-defined]
        yield api


@pytest.fixture(scope="module")
def model(node: Cluster) -> Iterator[ScriptedModel]:
    with ScriptedModel(host=node.backend.ip) as m:  # the gateway Pod reaches it through the node's bridge
        yield m


@dataclass
class World:
    node: Cluster
    release: Release
    forge: FakeGitHubAPI
    model: ScriptedModel
    cluster_ip: str
    routed: list[str] = field(default_factory=list)

    def gateway_pod(self) -> dict[str, Any]:
        pods = [p for p in self.release.kube.list(f"/api/v1/namespaces/{self.release.ns}/pods",
                                                  labelSelector="app.kubernetes.io/component=gateway")
                if not p["metadata"].get("deletionTimestamp")]
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        return pods[0]

    def gateway_log(self) -> str:
        return self.node.backend.pod_log(self.release.ns, self.gateway_pod()["metadata"]["name"])  # type: ignore


def models_json(model: ScriptedModel, agent: Path) -> str:
    """The deployment's models.json (job.modelsConfigMap: the gateway's and every job Pod's): the scripted model's
    provider with its key by environment name, which only the gateway resolves (from the claims' credentials)."""
    models = json.loads((agent / "models.json").read_text())
    models["providers"][PROVIDER]["apiKey"] = KEY_NAME
    assert API_KEY not in json.dumps(models) and MODEL_KEY not in json.dumps(models)
    return json.dumps(models)


def gateway_ready(r: Release) -> dict[str, Any] | None:
    for p in r.kube.list(f"/api/v1/namespaces/{r.ns}/pods", labelSelector="app.kubernetes.io/component=gateway"):
        ready = next((c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None)
        if ready and ready["status"] == "True" and p["status"].get("podIP") and not p["metadata"].get(
                "deletionTimestamp"):
            return p
    return None


@pytest.fixture(scope="module")
def world(node: Cluster, kube: Kube, forge: FakeGitHubAPI, model: ScriptedModel,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    images = images_env()
    agent = write_agent_dir(tmp_path_factory.mktemp("pi") / "agent", model.base_url)
    ns = fresh_namespace(kube, "gw-realnode")
    create_secret(kube, ns, "gh-app", {"private-key.pem": forge.app_pem})  # type: ignore[attr-defined]
    create_secret(kube, ns, "model-keys", {"fake": MODEL_KEY.encode()})
    for name, key, text in (("forge-ca", "ca.crt", Path(forge.ca).read_text()),  # type: ignore[attr-defined]
                            ("pi-models", "models.json", models_json(model, agent))):
        kube.create(f"/api/v1/namespaces/{ns}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                            "metadata": {"name": name}, "data": {key: text}})
    repository, tag = images["OPERATOR_IMAGE"].rsplit(":", 1)
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "sessions": {"enabled": True},
        "job": {"image": images["JOB_IMAGE"], "modelsConfigMap": "pi-models", "startTimeoutSeconds": 30,
                "credentials": {KEY_NAME: {"secretName": "model-keys", "key": "fake"}},
                "git": {"name": "pi-node[bot]", "email": "pi-node[bot]@users.noreply.github.com"}},
        "github": {"authSource": "app", "apiUrl": forge.url, "webUrl": forge.web_url, "timeoutSeconds": 5,
                   "caBundle": {"configMap": "forge-ca"},
                   "app": {"id": APP_ID, "installationId": INSTALLATION, "privateKeySecret": {"name": "gh-app"}}},
        "extraEnv": [{"name": "PI_DISPATCH_RESUMABLE_REFRESH_SECONDS", "value": "5"}],
        # no replica yet: its Service's address goes into its certificate before it first starts (the docstring)
        "gateway": {"enabled": True, "replicas": 0},
    }
    started = time.monotonic()
    r = Release(node, kube, ns, values).install()
    try:
        cluster_ip = kube.get(f"/api/v1/namespaces/{ns}/services/{GATEWAY}")["spec"]["clusterIP"]
        r.upgrade({"gateway": {"replicas": 1, "url": f"https://{cluster_ip}",
                               "proxyUrl": f"http://{cluster_ip}:{PROXY_PORT}", "extraDNSNames": [cluster_ip]}})
        world = World(node, r, forge, model, cluster_ip)
        pod = wait_until("the gateway Pod Ready", lambda: gateway_ready(r), timeout=120)
        route(world, pod)
        log(f"installed with the gateway at {cluster_ip} (Pod {pod['status']['podIP']}) in "
            f"{time.monotonic() - started:.0f}s")
        r.trigger("fix")
        yield world
    finally:
        r.uninstall()
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")


def route(world: World, pod: dict[str, Any]) -> None:
    """The gateway Service's two ports to its one Pod, as kube-proxy would (RealNode.route_service)."""
    backend: RealNode = world.node.backend  # type: ignore[assignment]
    ip = pod["status"]["podIP"]
    backend.route_service(world.cluster_ip, 443, ip, HTTPS_PORT)
    backend.route_service(world.cluster_ip, PROXY_PORT, ip, PROXY_PORT)
    world.routed.append(ip)


def ledger_sum(r: Release, uid: str) -> dict[str, int]:
    found = r.kube.get(f"/api/v1/namespaces/{r.ns}/configmaps/{ledger_name(uid)}")
    out = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "requests": 0}
    for text in (found.get("data") or {}).values():
        figures = json.loads(text)
        for name in out:
            out[name] += int(figures.get(name, 0))
    return out


def model_key_sent(request: dict[str, Any]) -> str:
    """What a model request's key was, named, never shown (a failing assertion prints it)."""
    auth = request["headers"].get("authorization") or ""
    return "the model key" if auth == f"Bearer {MODEL_KEY}" else "a capability" if "pdg1." in auth else \
        f"another ({len(auth)} characters)"


def tool_output(request: dict[str, Any]) -> str:
    return "\n".join(text_of(m.get("content")) for m in request["body"]["messages"] if m.get("role") == "tool")


def exec_in(world: World, pod: str, *argv: str, timeout: float = 120) -> str:
    r = world.node.kubectl("exec", "-n", world.release.ns, pod, "-c", "pi", "--", *argv, timeout=timeout)
    return str(r.stdout)


@dataclass
class IssueRun:
    job: dict[str, Any]
    seen: list[dict[str, Any]]
    scan: str
    probes: dict[str, str]
    capability: str
    tokens: list[str]
    usages: list[Usage]
    policy_rules: list[str]  # kube-router's rules of the policies with their counters, while the job ran


@pytest.fixture(scope="module")
def issue_run(world: World) -> IssueRun:
    """One issue job: pi's bash commits, pushes and comments through the gateway, then waits while the test looks
    inside its container (the scan and the probes, as the job's own user), then pi ends."""
    r, forge, model = world.release, world.forge, world.model
    forge.set_issue(REPO, ISSUE, "The cache test is flaky", "It fails one run in ten.")
    work = (f"set -e; echo 'lock around the cache' > fix.txt; git add fix.txt; "
            "git commit -qm 'Fix the flaky cache test'; git push -q; "
            f"gh issue comment {ISSUE} --repo \"$GH_HOST/{REPO}\" --body 'Pushed a fix on pi/issue-{ISSUE}.'; "
            f"echo WORK-DONE; n=0; while [ ! -e {GO} ] && [ $n -lt 300 ]; do sleep 1; n=$((n+1)); done; echo RESUMED")
    usages = [Usage(1000, 20), Usage(1300, 30)]
    model.tool_call("bash", {"command": work}, usage=usages[0]).reply("Pushed the fix and commented.",
                                                                        usage=usages[1])
    before = len(model.log)
    name = f"i{ISSUE}-{uuid.uuid4().hex[:5]}"
    started = time.monotonic()
    r.job(name, issue=ISSUE, comment="@pi the cache test is flaky, fix it")

    def waiting() -> str | None:
        if forge.comments(REPO, ISSUE):
            return "commented"
        phase = (r.get("jobs", name).get("status") or {}).get("phase")
        return "ended" if phase in ("Succeeded", "Failed", "Refused") else None

    outcome = wait_until("the job's comment on the forge (pi's bash pushed and commented)", waiting, timeout=240,
                         interval=1)
    if outcome == "ended":
        pytest.fail(f"the job ended before its work was seen: {json.dumps(r.get('jobs', name)['status'])}"
                    f"\ngateway log:\n{world.gateway_log()[-3000:]}")
    log(f"the job pushed and commented after {time.monotonic() - started:.0f}s")
    [pod] = r.pods_of(name)
    pod_name = pod["metadata"]["name"]
    job = r.get("jobs", name)
    secret = r.kube.get(f"/api/v1/namespaces/{r.ns}/secrets/{gateway_secret_name(name, job['metadata']['uid'])}")
    capability = base64.b64decode(secret["data"]["capability"]).decode()
    scan = exec_in(world, pod_name, "python3", "-c", SCAN)
    backend: RealNode = world.node.backend  # type: ignore[assignment]
    forge_port = forge.host.rsplit(":", 1)[1]
    probes = json.loads(exec_in(world, pod_name, "python3", "-c", PROBE, backend.ip, forge_port, str(model.port),
                                world.cluster_ip, str(PROXY_PORT), world.routed[-1]).strip().splitlines()[-1])
    policy_rules = [line for line in run("iptables-save", "-c", "-t", "filter").stdout.splitlines()
                    if " KUBE-NWPLCY-" in line]
    log(f"from inside the job container: scanned {len(scan)} characters; probes {probes}")
    tokens = [t for t, _ in forge.tokens.items()]
    exec_in(world, pod_name, "touch", GO)
    job = r.wait_job(name, timeout=180)
    log(f"the job ended {job['status']['phase']} after {time.monotonic() - started:.0f}s")
    return IssueRun(job, model.log[before:], scan, probes, capability, tokens, usages, policy_rules)


def test_a_an_issue_job_works_through_the_gateway_and_its_tokens_are_the_ledgers(
        world: World, issue_run: IssueRun) -> None:
    r, forge = world.release, world.forge
    job, seen = issue_run.job, issue_run.seen
    assert job["status"]["phase"] == "Succeeded", (json.dumps(job["status"]), r.pod_log(job["status"]["podName"]))
    assert len(seen) == 2, "pi's two model requests, both through the gateway"
    assert "WORK-DONE" in tool_output(seen[1]) and "RESUMED" in tool_output(seen[1]), tool_output(seen[1])

    # the work, on the forge: cloned, committed, pushed, commented, through the gateway's address
    pushed = forge.repos.tip(REPO, f"pi/issue-{ISSUE}")
    assert pushed is not None and forge.repos.log(REPO, f"pi/issue-{ISSUE}")[0].endswith("Fix the flaky cache test")
    assert [c["body"] for c in forge.comments(REPO, ISSUE)] == [f"Pushed a fix on pi/issue-{ISSUE}."]
    pod = r.kube.get(f"/api/v1/namespaces/{r.ns}/pods/{job['status']['podName']}")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["PI_GATEWAY_URL"] == f"https://{world.cluster_ip}", env

    # the credentials: the model saw the real key, never a capability; the forge an installation token, never one
    assert [model_key_sent(s) for s in seen] == ["the model key"] * 2
    assert not [s for s in seen if "pdg1." in json.dumps(s["headers"])], "a capability reached the model"
    assert not [h for h in forge.headers_seen if "pdg1." in json.dumps(h)], "a capability reached the forge"
    pushes = [q for q in forge.requests if q.path.endswith("/git-receive-pack") and q.method == "POST"]
    assert pushes and {q.auth for q in pushes} == {"git-installation"}, [(q.path, q.auth) for q in pushes]

    # status.tokens is the gateway's ledger, which is what the model reported
    ledger = ledger_sum(r, job["metadata"]["uid"])
    tokens = job["status"]["tokens"]
    assert {k: tokens.get(k, 0) for k in ("input", "output", "cacheRead", "cacheWrite")} == {
        k: ledger[k] for k in ("input", "output", "cacheRead", "cacheWrite")}, (tokens, ledger)
    assert ledger == {"input": sum(u.prompt_tokens for u in issue_run.usages),
                      "output": sum(u.completion_tokens for u in issue_run.usages),
                      "cacheRead": 0, "cacheWrite": 0, "requests": 2}, ledger
    assert tokens["calls"] == 2, tokens


def test_b_the_job_container_holds_no_forge_token_and_no_model_key(world: World, issue_run: IssueRun) -> None:
    scan, forge = issue_run.scan, world.forge
    # the scan sees what the job sees: its own capability, in the environment of pi's processes
    capability_seen = issue_run.capability.startswith("pdg1.") and issue_run.capability in scan
    assert capability_seen, "the Job's capability is in what the scan read"  # (a bool: a failure never prints it)
    procs = [line for line in scan.splitlines() if line.startswith("==== environ ")]
    log(f"the processes whose environment the scan read: {procs}")
    assert any(" pi" in line or "node" in line for line in procs if "unreadable" not in line), procs
    assert int(scan.rsplit("==== files\n", 1)[1].strip()) > 20, "the files under the roots were read"
    secrets = {"the model key": MODEL_KEY,
               "the App's private key": forge.app_pem.decode().splitlines()[1]}  # type: ignore[attr-defined]
    assert issue_run.tokens, "the operator minted installation tokens"
    for i, token in enumerate(issue_run.tokens):
        secrets[f"installation token #{i}"] = token
        secrets[f"installation token #{i} as git's Basic"] = base64.b64encode(
            f"x-access-token:{token}".encode()).decode()
    found = {what: [line for line in scan.splitlines() if line.startswith("==== ")
                    and secret in scan.split(line, 1)[1].split("\n==== ", 1)[0]][:3]
             for what, secret in secrets.items() if secret in scan}
    assert not found, f"secrets inside the job container: {found}"


def test_c_the_job_reaches_the_forge_and_the_model_only_through_the_gateway(issue_run: IssueRun) -> None:
    p = issue_run.probes
    for way in ("forge tcp", "model tcp", "forge https", "model http"):
        assert "Error" in p[way] or "timed out" in p[way], f"{way} straight from the job: {p[way]}"
    assert p["forge via gateway"] == f"200 {REPO}", p
    assert p["proxy via gateway"].startswith("HTTP/1.1 403") and "host-not-allowed" in p["proxy via gateway"], p
    # The policy judges the job's packets after the DNAT (PREROUTING's nat, before the filter table where kube-router
    # enforces): it admits the gateway Pods' 8443, not the Service's 443, and the Service's 443 works; the gateway
    # Pod's own 8443 connects and its 9090 (metrics, which the policy does not admit) does not.
    assert p["gateway pod 8443 tcp"] == "connected", p
    assert "Error" in p["gateway pod 9090 tcp"] or "timed out" in p["gateway pod 9090 tcp"], p
    # And kube-router's own counters, read right after the probes: the job policy's rules for the gateway Pods' ports
    # (never 443) counted the job's packets to the Service's address. (A resync of kube-router resets them: they are
    # read within a second of the probes, and its periodic sync is minutes apart.)
    rules = [line for line in issue_run.policy_rules if "--dport" in line]
    log("kube-router's rules of the job policy (counters since its last sync):\n" + "\n".join(rules))
    assert not [line for line in rules if "--dport 443 " in line], rules
    assert sum(int(line[1:].split(":", 1)[0]) for line in rules if line.startswith("[") and (
        "--dport 8443 " in line or f"--dport {PROXY_PORT} " in line)) > 0, rules


def test_d_a_fork_pull_requests_push_is_refused_and_its_comment_made(world: World) -> None:
    r, forge, model = world.release, world.forge, world.model
    head = forge.repos.commit(REPO, "contributor", {"fork.txt": "from a fork\n"}, "fork work")
    forge.repos.set_ref(REPO, f"refs/pull/{FORK_PR}/head", head)
    forge.set_pull(REPO, FORK_PR, head_ref="contributor", head_repo="mallory/widgets")
    # The runner leaves a fork's origin with no push URL (runner/checkout.py); an agent that means to push names the
    # fetch URL (the gateway's) itself, and the gateway is what refuses it.
    work = ("echo more >> fork.txt; git commit -qam 'more'; "
            "git push \"$(git remote get-url origin)\" HEAD:refs/heads/pi-from-fork 2>&1; "
            f"echo push-exit=$?; gh pr comment {FORK_PR} --repo \"$GH_HOST/{REPO}\" --body 'Reviewed the fork.' 2>&1; "
            "echo comment-exit=$?")
    model.tool_call("bash", {"command": work}).reply("Reviewed.")
    before = len(model.log)
    job = r.run(f"fork-{uuid.uuid4().hex[:5]}", pullRequest=FORK_PR, comment="@pi review this", timeout=240)
    seen = model.log[before:]
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    out = tool_output(seen[1])
    assert "fork-read-only" in out and "push-exit=0" not in out, out
    assert "comment-exit=0" in out, out
    assert forge.repos.tip(REPO, "pi-from-fork") is None, "nothing pushed"
    assert [c["body"] for c in forge.comments(REPO, FORK_PR)] == ["Reviewed the fork."]


def test_e_a_job_past_its_token_budget_fails_and_promotes_nothing(world: World, issue_run: IssueRun) -> None:
    r, model = world.release, world.model
    key = issue_key_of(ISSUE, REPO)
    before = r.digest(key)
    assert before is not None, "the issue job (a) stored its conversation"
    r.trigger("tight", maxTokens=100)
    model.tool_call("bash", {"command": "echo spending"}, usage=Usage(500, 10)).reply("never sent")
    sent = len(model.log)
    job = r.run(f"budget-{uuid.uuid4().hex[:5]}", trigger="tight", issue=ISSUE, comment="@pi once more",
                timeout=240)
    assert job["status"]["phase"] == "Failed", json.dumps(job["status"])
    done = r.condition(job, "Completed")
    assert done and done["reason"] == "TokenBudget", json.dumps(job["status"])
    assert len(model.log) == sent + 1, "the request past the budget never reached the model"
    model.replace_script([])
    assert r.digest(key) == before, "nothing promoted: the stored conversation is unchanged"
    assert ledger_sum(r, job["metadata"]["uid"])["input"] >= 500


def test_the_gateways_log_holds_no_key_and_no_capability(world: World, issue_run: IssueRun) -> None:
    text = world.gateway_log()
    assert text.strip(), "the gateway logged"
    secrets = {"the model key": MODEL_KEY, "the capability": issue_run.capability,
               **{f"installation token #{i}": t for i, t in enumerate(issue_run.tokens)}}
    assert not [what for what, secret in secrets.items() if secret in text], "secrets in the gateway's log"


def test_a_restarted_gateway_at_a_new_address_is_routed_again_and_serves_the_next_job(
        world: World, issue_run: IssueRun) -> None:
    """The Service's address stays, the Pod's changes: ``route_service`` replaces the two rules (as kube-proxy follows
    the endpoints), and the next job's model requests reach the model with the real key through the new Pod."""
    r, forge, model = world.release, world.forge, world.model
    old = world.gateway_pod()
    r.kube.delete(f"/api/v1/namespaces/{r.ns}/pods/{old['metadata']['name']}")
    pod = wait_until("a new gateway Pod Ready", lambda: (p := gateway_ready(r)) is not None and p["metadata"][
        "uid"] != old["metadata"]["uid"] and p, timeout=120)
    route(world, pod)
    assert pod["status"]["podIP"] != old["status"]["podIP"]
    rules = run("iptables", "-w", "-t", "nat", "-S", world.node.backend.chain).stdout  # type: ignore[attr-defined]
    assert rules.count(f"-d {world.cluster_ip}/32") == 2 and old["status"]["podIP"] not in rules, rules
    issue = ISSUE + 1
    forge.set_issue(REPO, issue, "Another", "")
    model.reply("Looked again.")
    before = len(model.log)
    job = r.run(f"after-restart-{uuid.uuid4().hex[:5]}", issue=issue, comment="@pi look", timeout=240)
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    assert [model_key_sent(s) for s in model.log[before:]] == ["the model key"]
