"""A Job through the operator AND the gateway (docs/gateway.md#inside-the-job), as a user sees it.

The chart is installed with the gateway on (``gateway.enabled``) but no gateway Pods (``gateway.replicas: 0``): the
test kubelet runs Pods as host processes on one network, so the gateway runs here as a host process,
``python -m pidispatch gateway``, with the key and the serving certificate of the chart's own Secret
``<fullname>-gateway`` and the admin's credentials (as e2e/test_gateway_ledger.py runs it). The chart's
``gateway.url``/``gateway.proxyUrl`` point job Pods at it on loopback and ``gateway.extraDNSNames: [127.0.0.1]``
puts that address in its certificate. Job Pods run ``pidispatch runner`` with the pinned pi 0.73.1 against the
local forge (``testkit/fakegithub_api.py`` over real git repositories, GitHub Enterprise's layout, a PAT) and the
scripted model, whose key only the gateway holds (``job.credentials``: a Secret the Pod never names).

1. an issue job clones, commits, pushes and comments (real git, real gh) through the gateway and Succeeds; its Pod
   spec and the agent's environment hold neither the PAT nor the model key, only the Job's capability;
2. its ``status.tokens`` are the gateway ledger ConfigMap's sum, which is the scripted model's usage;
3. a Trigger with a small ``run.maxTokens``: the second model request is refused and the Job ends Failed,
   ``TokenBudget``;
4. a fork's pull request's job (``run.forks``): its ``git push`` is refused by the gateway (``fork-read-only``), its
   comment on the pull request goes through.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.framework.cluster import Cluster, free_port
from e2e.framework.hosttools import require
from e2e.framework.kube import Kube
from e2e.framework.release import RELEASE, Release, base_values, create_secret, installed, merge
from pidispatch.contract.gateway_wire import ledger_name
from pidispatch.manifests.pod import gateway_secret_name
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.gitforge import Repos, make_tls
from testkit.pitool import pi_binary
from testkit.scripted_model import API_KEY, PROVIDER, ScriptedModel, Usage, text_of, write_agent_dir
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

REPO = "acme/widgets"
ISSUE = 7
PAT = "github_pat_gw_e2e_" + uuid.uuid4().hex
MODEL_KEY = "sk-gw-e2e-" + uuid.uuid4().hex
KEY_NAME = "FAKE_API_KEY"  # the environment name models.json gives the fake provider's key (pi's way)


@pytest.fixture(scope="module", autouse=True)
def host_tools() -> None:
    require("git", "gh")


@pytest.fixture(scope="module")
def forge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGitHubAPI]:
    root = tmp_path_factory.mktemp("forge")
    ca, cert, key = make_tls(root / "tls")
    repos = Repos(root / "repos")
    repos.create(REPO, {"README.md": "# widgets\n", "cache.py": "def get(k):\n    return None\n"})
    with FakeGitHubAPI(pats={PAT}, repos=repos, tls=(str(cert), str(key)), prefix="/api/v3") as api:
        api.set_issue(REPO, ISSUE, "The cache test is flaky", "It fails one run in ten on CI.")
        api.ca = ca  # type: ignore[attr-defined]
        yield api


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as m:
        yield m


def models_json(model: ScriptedModel, agent: Path) -> str:
    """The deployment's models.json (job.modelsConfigMap, the gateway's PI_GATEWAY_MODELS_FILE): the scripted
    model's provider, its key by environment name, which only the gateway resolves (from the claims)."""
    models = json.loads((agent / "models.json").read_text())
    models["providers"][PROVIDER]["apiKey"] = KEY_NAME
    assert API_KEY not in json.dumps(models)
    return json.dumps(models)


@dataclass
class World:
    release: Release
    forge: FakeGitHubAPI
    model: ScriptedModel
    root: Path
    gateway_log: Path
    ports: dict[str, int]


@pytest.fixture(scope="module")
def world(cluster: Cluster, kube: Kube, kubelet: object, forge: FakeGitHubAPI, model: ScriptedModel,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("gw")
    agent = write_agent_dir(root / "agent", model.base_url)
    (root / "home").mkdir()
    (root / "envs").mkdir()
    (root / "envs").chmod(0o777)
    models = models_json(model, agent)
    (root / "models.json").write_text(models)
    ports = {"https": free_port(), "proxy": free_port(), "metrics": free_port()}

    def prepare(ns: str) -> None:
        create_secret(kube, ns, "forge-token", {"token": PAT.encode()})
        create_secret(kube, ns, "model-keys", {"fake": MODEL_KEY.encode()})
        for name, key, text in (("forge-ca", "ca.crt", Path(forge.ca).read_text()),  # type: ignore[attr-defined]
                                ("pi-models", "models.json", models)):
            kube.create(f"/api/v1/namespaces/{ns}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                                "metadata": {"name": name}, "data": {key: text}})

    values = merge(base_values(), {
        "sessions": {"enabled": True},
        "job": {"command": ["pidispatch", "runner"],
                "env": {"PI_BIN": str(pi_binary()), "PI_CODING_AGENT_DIR": str(agent), "HOME": str(root / "home")},
                "modelsConfigMap": "pi-models",
                "credentials": {KEY_NAME: {"secretName": "model-keys", "key": "fake"}},
                "git": {"name": "pi-e2e[bot]", "email": "pi-e2e[bot]@users.noreply.github.com"}},
        "github": {"authSource": "pat", "token": {"secretName": "forge-token", "key": "token"},
                   "apiUrl": forge.url, "webUrl": forge.web_url, "timeoutSeconds": 5,
                   "caBundle": {"configMap": "forge-ca"}},
        "gateway": {"enabled": True, "replicas": 0, "url": f"https://127.0.0.1:{ports['https']}",
                    "proxyUrl": f"http://127.0.0.1:{ports['proxy']}", "extraDNSNames": ["127.0.0.1"]}})
    with installed(cluster, kube, "gw-job", values, prepare=prepare) as r:
        process, log = start_gateway(cluster, kube, r.ns, root, ports, forge)
        try:
            yield World(r, forge, model, root, log, ports)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)


def start_gateway(cluster: Cluster, kube: Kube, ns: str, root: Path, ports: dict[str, int],
                  forge: FakeGitHubAPI) -> tuple[subprocess.Popen, Path]:
    """``pidispatch gateway`` as a host process, with the chart's own key and certificate (the Secret
    ``<fullname>-gateway``), as the chart's Deployment would run it."""
    secret = kube.get(f"/api/v1/namespaces/{ns}/secrets/{RELEASE}-gateway")["data"]
    files = root / "gateway"
    files.mkdir()
    for key in ("key", "tls.crt", "tls.key"):
        (files / key).write_bytes(base64.b64decode(secret[key]))
        (files / key).chmod(0o600)
    env = {"PATH": os.environ["PATH"], "KUBECONFIG": str(cluster.kubeconfig), "PYTHONPATH": os.pathsep.join(sys.path),
           "PI_DISPATCH_NAMESPACE": ns, "POD_NAME": "gateway-host", "PI_GATEWAY_KEY": str(files / "key"),
           "PI_GATEWAY_CERT_FILE": str(files / "tls.crt"), "PI_GATEWAY_KEY_FILE": str(files / "tls.key"),
           "PI_GATEWAY_MODELS_FILE": str(root / "models.json"),
           "PI_GATEWAY_FORGE_CA_FILE": str(forge.ca),  # type: ignore[attr-defined]
           "PI_GATEWAY_PORT": str(ports["https"]), "PI_GATEWAY_PROXY_PORT": str(ports["proxy"]),
           "PI_GATEWAY_METRICS_PORT": str(ports["metrics"])}
    log = root / "gateway.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([sys.executable, "-m", "pidispatch", "gateway"], env=env, stdout=sink,
                                   stderr=subprocess.STDOUT)
    try:
        wait_until("the gateway ready", lambda: process.poll() is None and urllib.request.urlopen(
            f"http://127.0.0.1:{ports['metrics']}/readyz", timeout=2).status == 200, timeout=30)
    except Exception:
        process.kill()
        raise AssertionError(f"the gateway did not start:\n{log.read_text(errors='replace')}") from None
    return process, log


def ledger(r: Release, uid: str) -> dict[str, dict[str, Any]]:
    found = r.kube.get_or_none(f"/api/v1/namespaces/{r.ns}/configmaps/{ledger_name(uid)}")
    return {} if found is None else {k: json.loads(v) for k, v in (found.get("data") or {}).items()}


def ledger_sum(figures: dict[str, dict[str, Any]]) -> dict[str, int]:
    out = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "requests": 0}
    for replica in figures.values():
        for name in out:
            out[name] += int(replica.get(name, 0))
    return out


def tokens_of(usages: list[Usage]) -> dict[str, int]:
    """What the gateway counts of the scripted model's usage (chat completions, no cache figures here)."""
    fresh = sum(u.prompt_tokens for u in usages)
    output = sum(u.completion_tokens for u in usages)
    return {"input": fresh, "output": output, "cacheRead": 0, "cacheWrite": 0, "total": fresh + output,
            "calls": len(usages), "unpriced": len(usages)}


def env_file(world: World, name: str) -> Path:
    return world.root / "envs" / name


def secret_refs(pod: dict[str, Any]) -> list[str]:
    """Every Secret a Pod names: by secretKeyRef, envFrom or a volume."""
    names: list[str] = []
    for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
        names += [e["valueFrom"]["secretKeyRef"]["name"] for e in c.get("env") or []
                  if "secretKeyRef" in (e.get("valueFrom") or {})]
        names += [e["secretRef"]["name"] for e in c.get("envFrom") or [] if "secretRef" in e]
    for v in pod["spec"].get("volumes") or []:
        if "secret" in v:
            names.append(v["secret"]["secretName"])
        for s in (v.get("projected") or {}).get("sources") or []:
            if "secret" in s:
                names.append(s["secret"]["name"])
    return names


def test_an_issue_job_clones_pushes_and_comments_through_the_gateway_holding_no_token(world: World) -> None:
    r, forge, model = world.release, world.forge, world.model
    name = f"issue-{uuid.uuid4().hex[:5]}"
    envs = env_file(world, name)
    work = (f"set -e; env -0 > {envs}; echo 'lock around the cache' > fix.txt; git add fix.txt; "
            "git commit -qm 'Fix the flaky cache test'; git push -q; "
            f"gh issue comment {ISSUE} --repo \"$GH_HOST/{REPO}\" --body 'Pushed a fix on pi/issue-{ISSUE}.'")
    usages = [Usage(1000, 20), Usage(1300, 30)]
    model.tool_call("bash", {"command": work}, usage=usages[0]).reply("Pushed the fix and commented.",
                                                                        usage=usages[1])
    before = len(model.log)
    main = forge.repos.tip(REPO, "main")
    job = r.run(name, issue=ISSUE, comment="@pi the cache test is flaky, fix it", timeout=180)
    pod_name = job["status"].get("podName")
    assert job["status"]["phase"] == "Succeeded", (json.dumps(job["status"]), r.pod_log(pod_name or ""))
    seen = model.log[before:]
    assert len(seen) == 2 and model.pending == 0, "pi made both requests through the gateway"

    # The work, on the forge: cloned at main, committed, pushed, commented.
    assert job["status"]["checkout"] == {"ref": "refs/heads/main", "sha": main, "branch": f"pi/issue-{ISSUE}"}
    pushed = forge.repos.tip(REPO, f"pi/issue-{ISSUE}")
    assert pushed is not None and forge.repos.log(REPO, f"pi/issue-{ISSUE}")[0].endswith("Fix the flaky cache test")
    assert job["status"]["workspace"] == {"head": pushed, "pushed": pushed}
    assert job["status"]["outputs"] == {"branch": f"pi/issue-{ISSUE}", "commit": pushed}, \
        "the operator confirmed the push on the forge with its own credential; no pull request was opened"
    assert [c["body"] for c in forge.comments(REPO, ISSUE)] == [f"Pushed a fix on pi/issue-{ISSUE}."]
    tool_result = "\n".join(text_of(m.get("content")) for m in seen[1]["body"]["messages"] if m.get("role") == "tool")
    assert "error" not in tool_result.lower(), tool_result

    # The credentials: the model saw the gateway's key, the forge the PAT, neither saw a capability.
    assert [request["headers"]["authorization"] for request in seen] == [f"Bearer {MODEL_KEY}"] * 2
    assert not [h for h in forge.headers_seen if "pdg1." in json.dumps(h)], "a capability reached the forge"
    git_auth = {h.get("Authorization") or h.get("authorization") for h in forge.headers_seen}
    assert "Basic " + base64.b64encode(f"x-access-token:{PAT}".encode()).decode() in git_auth, \
        "the push reached the forge with the PAT the gateway added"

    # The Pod holds no forge token and no model key: its only Secret is the Job's capability.
    pod = r.kube.get(f"/api/v1/namespaces/{r.ns}/pods/{pod_name}")
    own = gateway_secret_name(name, job["metadata"]["uid"])
    assert own.startswith("pij-") and "-gateway-" in own
    assert set(secret_refs(pod)) == {own}, secret_refs(pod)
    text = json.dumps(pod)
    assert PAT not in text and MODEL_KEY not in text
    capability = base64.b64decode(r.kube.get(f"/api/v1/namespaces/{r.ns}/secrets/{own}")["data"]["capability"]).decode()
    env = dict(line.split("=", 1) for line in envs.read_text().split("\0") if "=" in line)
    assert env["PI_GATEWAY_TOKEN"] == env["GH_TOKEN"] == env["GH_ENTERPRISE_TOKEN"] == capability
    assert env["GH_HOST"] == f"127.0.0.1:{world.ports['https']}"
    assert env["HTTPS_PROXY"].endswith(f"@127.0.0.1:{world.ports['proxy']}")
    leaked = [k for k, v in env.items() if PAT in v or MODEL_KEY in v]
    assert leaked == [] and KEY_NAME not in env, "the agent's environment holds a forge token or a model key"

    # The gateway's log: the replies, never a secret.
    log = world.gateway_log.read_text(errors="replace")
    assert "gateway_model_reply" in log
    for secret in (PAT, MODEL_KEY, capability, capability.split(".")[2]):
        assert secret not in log


def test_the_jobs_tokens_are_the_gateway_ledgers_and_the_models_usage(world: World) -> None:
    r, model = world.release, world.model
    name = f"tokens-{uuid.uuid4().hex[:5]}"
    usages = [Usage(700, 15), Usage(900, 25)]
    model.tool_call("bash", {"command": "git status --short"}, usage=usages[0]).reply("Looked.", usage=usages[1])
    job = r.run(name, issue=next_issue(world.forge), comment="@pi look at the cache", timeout=180)
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    figures = ledger(r, job["metadata"]["uid"])
    assert list(figures) == ["gateway-host"], "one replica wrote the Job's ledger"
    summed = ledger_sum(figures)
    want = tokens_of(usages)
    assert job["status"]["tokens"] == want
    assert {k: summed[k] for k in ("input", "output", "cacheRead", "cacheWrite")} == \
        {k: want[k] for k in ("input", "output", "cacheRead", "cacheWrite")}
    assert summed["requests"] == job["status"]["tokens"]["calls"] == 2
    assert job["status"]["gateway"]["requests"] == 2
    cm = r.kube.get(f"/api/v1/namespaces/{r.ns}/configmaps/{ledger_name(job['metadata']['uid'])}")
    assert [o["uid"] for o in cm["metadata"]["ownerReferences"]] == [job["metadata"]["uid"]]


_issues = iter(range(100, 100000))


def next_issue(forge: FakeGitHubAPI) -> int:
    """A new open issue on the forge (the operator reads it for the checkout and the prompt)."""
    number = next(_issues)
    forge.set_issue(REPO, number, f"Issue {number}", "Reported by the test.")
    return number


def test_a_job_over_its_token_budget_is_refused_its_next_request_and_ends_token_budget(world: World) -> None:
    r, model = world.release, world.model
    r.trigger("budget", resume=False, maxTokens=500)
    name = f"budget-{uuid.uuid4().hex[:5]}"
    before = len(model.log)
    model.tool_call("bash", {"command": "true"}, usage=Usage(1000, 10))  # crosses 500: the next request is refused
    job = r.run(name, trigger="budget", issue=next_issue(world.forge), comment="@pi go", timeout=180)
    assert len(model.log) == before + 1, "the second request never reached the model"
    assert model.pending == 0
    assert job["status"]["phase"] == "Failed", json.dumps(job["status"])
    assert (r.condition(job, "Completed") or {}).get("reason") == "TokenBudget", json.dumps(job["status"])
    # pi asks again after a refusal (a few times, whatever its retry settings): each one is refused, none reaches
    # the model.
    refused = job["status"]["gateway"]["refusals"]
    assert list(refused) == ["token-budget"] and refused["token-budget"] >= 1, refused
    assert job["status"]["tokens"] == tokens_of([Usage(1000, 10)])
    figures = ledger(r, job["metadata"]["uid"])["gateway-host"]
    assert (figures["requests"], figures["refusals"]) == (1, refused)


def test_a_fork_pull_requests_job_is_refused_its_push_and_allowed_its_comment(world: World) -> None:
    r, forge, model = world.release, world.forge, world.model
    r.trigger("forks", resume=False, forks=True)
    number = next_issue(forge)
    head = forge.repos.commit(REPO, f"fork-head-{number}", {"patch.txt": "a fork's change\n"}, "A fork's change")
    forge.repos.set_ref(REPO, f"refs/pull/{number}/head", head)
    forge.set_pull(REPO, number, head_ref="patch", head_repo="mallory/widgets", title="A fork's change")
    name = f"fork-{uuid.uuid4().hex[:5]}"
    pushed = env_file(world, f"{name}.push")
    # The runner leaves a fork's checkout no push URL; an agent that pushes anyway names the fetch URL (the gateway).
    work = (f"if git push \"$(git remote get-url origin)\" HEAD:refs/heads/from-fork-{number} > {pushed} 2>&1; "
            f"then echo pushed >> {pushed}; "
            f"fi; gh pr comment {number} --repo \"$GH_HOST/{REPO}\" --body 'Reviewed the fork.'")
    model.tool_call("bash", {"command": work}, usage=Usage(500, 5)).reply("Reviewed.", usage=Usage(600, 5))
    job = r.run(name, trigger="forks", pullRequest=number, comment="@pi review this", timeout=180)
    assert job["status"]["phase"] == "Succeeded", (json.dumps(job["status"]), r.pod_log(job["status"]["podName"]))
    assert job["status"]["checkout"] == {"ref": f"refs/pull/{number}/head", "sha": head}
    said = pushed.read_text()
    assert "fork-read-only" in said and "pushed" not in said.split(), said
    assert forge.repos.tip(REPO, f"from-fork-{number}") is None, "the fork's job pushed nothing"
    assert [c["body"] for c in forge.comments(REPO, number)] == ["Reviewed the fork."]
    refused = job["status"]["gateway"]["refusals"]
    assert refused.get("fork-read-only", 0) >= 1 and "token-budget" not in refused, refused
