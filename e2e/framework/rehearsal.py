"""A release rehearsed end to end on this machine: what ``.github/workflows/release.yml`` publishes, published to a
registry here, verified as a user verifies it, and installed from that registry on a real node.

``make release-rehearsal`` runs it (``python -m e2e.framework.rehearsal``), and ``e2e/test_release_rehearsal.py`` runs
the same :func:`rehearse`. In order:

1. ``release-meta.sh v<chart version> pi-dispatch``: the workflow's first job (the tag agrees with the chart; the
   repositories and the chart's OCI repository), its ``ghcr.io`` replaced by the registry on loopback
   (``e2e/framework/registry.py``: distribution's registry, TLS from the run's CA, htpasswd on every request);
2. the images of ``make images`` pushed by digest, ``<host>/pi-dispatch/{operator,job}:<version>``, each digest
   recorded (``repo@sha256:...``) as the workflow's images job outputs them;
3. an SBOM of each image as the registry serves it (syft, SPDX JSON), then ``cosign sign`` and ``cosign attest
   --type spdxjson`` of each digest with a key pair generated for the run (``e2e/framework/releasetools.py`` says why a
   key and not keyless here);
4. ``helm lint``, ``helm package``, ``helm push`` of the chart to ``oci://<host>/pi-dispatch/charts``, and its
   digest signed;
5. ``cosign verify --key`` of the two images and the chart, ``cosign verify-attestation --key --type spdxjson`` of
   the two images: any failure stops the rehearsal;
6. a real node (``e2e/framework/realnode.py``: kubelet, containerd, runc) with **no image loaded** but the pause image,
   trusting the registry's CA; the README's quickstart installed **from the registry**: ``helm install
   oci://<host>/pi-dispatch/charts/pi-dispatch --version <version>`` with ``examples/quickstart-values.yaml`` as
   committed and the images named by the pushed digests (``image.digest``, ``job.imageDigest``), pulled by
   containerd with the chart's ``imagePullSecrets``;
7. ``kubectl apply -f examples/trigger.yaml`` as committed, a signed ``@pi`` comment posted to the receiver, and
   the job it creates run to ``Succeeded``: the real pi of the pushed job image, against a scripted model
   (``testkit/scripted_model.py``) standing in for ``openai/gpt-4.1``, on a repository of a fake GitHub
   (``testkit/fakegithub_api.py``), the only fakes.

Needs root and what a real node needs (``make node``), the images (``make images``) and the tools
(``make controlplane``); about 85 s on a loaded two-core machine with the images built (the real node, the
pushes of 340 MB and 740 MB, the job image's SBOM and the install take most of it).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.framework.cluster import Cluster
from e2e.framework.cluster import bin_dir as controlplane_bin_dir
from e2e.framework.clusterkit import REPO_ROOT
from e2e.framework.realnode import RealNode, images_env, unavailable
from e2e.framework.registry import PrivateRegistry
from e2e.framework.release import NO_GATEWAY, RELEASE, Release, create_secret, fresh_namespace, merge
from e2e.framework.releasetools import KeyPair, Published, ReleaseError, ReleaseTools
from testkit.fakegithub import Webhooks
from testkit.fakegithub_api import FakeGitHubAPI, generate_app_key
from testkit.gitforge import Repos, make_tls
from testkit.scripted_model import ScriptedModel, write_agent_dir
from testkit.wait import wait_until

OWNER = "pi-dispatch"
QUICKSTART_VALUES = REPO_ROOT / "examples" / "quickstart-values.yaml"
QUICKSTART_TRIGGER = REPO_ROOT / "examples" / "trigger.yaml"
REPO = "acme/widgets"
APP_ID, INSTALLATION = 8282, 88
PULL_SECRET = "registry-creds"
TARGETS = ("operator", "job")


@dataclass
class Rehearsal:
    """What a rehearsal published, verified and ran; the cluster and the release stay up while it is open."""

    work: Path
    tools: ReleaseTools
    registry: PrivateRegistry
    meta: dict[str, str] = field(default_factory=dict)
    key: KeyPair | None = None
    images: dict[str, Published] = field(default_factory=dict)
    sboms: dict[str, dict[str, Any]] = field(default_factory=dict)
    chart: Published | None = None
    signatures: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    attestations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    cluster: Cluster | None = None
    release: Release | None = None
    job: dict[str, Any] | None = None
    model_requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def version(self) -> str:
        return self.meta["version"]

    @property
    def node(self) -> RealNode:
        assert self.cluster is not None
        return self.cluster.backend  # type: ignore[return-value]

    def local(self, ghcr_name: str) -> str:
        """A name of the workflow's (``ghcr.io/<owner>/...``, ``oci://ghcr.io/...``) in this registry."""
        return ghcr_name.replace("ghcr.io/", f"{self.registry.host}/", 1)


@dataclass
class RegistryRelease(Release):
    """The chart installed from an OCI registry (``helm install oci://... --version``), not from this checkout."""

    chart_ref: str = ""
    version: str = ""
    helm_env: dict[str, str] = field(default_factory=dict)
    ca_file: str = ""

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.cluster.helm_path), *args, "--namespace", self.ns]
        r = subprocess.run(cmd, capture_output=True, text=True, env={**self.cluster.env(), **self.helm_env},
                           timeout=300)
        if check and r.returncode != 0:
            raise ReleaseError(f"{' '.join(cmd[:4])} ... failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        return r

    def install(self) -> RegistryRelease:
        path = self._values_file()
        try:
            self.helm("install", RELEASE, self.chart_ref, "--version", self.version, "--ca-file", self.ca_file,
                      "--values", path)
        finally:
            os.unlink(path)
        # the first start pulls the operator's image from the registry: more than await_operator's own wait
        wait_until("the operator Pod Running", lambda: any(
            (p.get("status") or {}).get("phase") == "Running" for p in self.operator_pods()), timeout=300)
        self.await_operator()
        return self


# -- 1-5: publish and verify ----------------------------------------------------------------------------------
def publish(r: Rehearsal, say: Callable[[str], None]) -> None:
    """The workflow's steps against this registry: meta, both images by digest, their SBOMs, signatures and
    attestations, the chart pushed and signed."""
    tools = r.tools
    chart_version = yaml.safe_load((REPO_ROOT / "charts" / "pi-dispatch" / "Chart.yaml").read_text())["version"]
    r.meta = tools.meta(f"v{chart_version}", OWNER)
    say(f"release-meta: version {r.version}, images {r.meta['operator_image']} {r.meta['job_image']}")
    env = images_env()
    containers = {k: v for k, v in env.items() if k.startswith("CONTAINERS_")}
    for target in TARGETS:
        local = env[f"{target.upper()}_IMAGE"]
        r.images[target] = tools.push_image(local, r.local(r.meta[f"{target}_image"]), r.version, containers)
        say(f"pushed {local} as {r.images[target].ref}")
    r.key = tools.generate_key_pair("release")
    for target in TARGETS:
        image = r.images[target]
        sbom = r.work / f"sbom-{target}.spdx.json"
        r.sboms[target] = tools.sbom(image, sbom)
        say(f"SBOM of {target}: {len(r.sboms[target]['packages'])} packages ({sbom})")
        tools.sign(image, r.key)
        tools.attest(image, r.key, sbom)
        say(f"signed and attested {image.ref}")
    tgz = tools.package_chart(r.version)
    tools.helm_login()
    r.chart = tools.push_chart(tgz, r.local(r.meta["chart_repo"]))
    tools.sign(r.chart, r.key)
    say(f"chart pushed and signed: {r.chart.ref}")


def verify(r: Rehearsal, say: Callable[[str], None]) -> None:
    """What a user checks before installing (docs/releasing.md), with the run's public key: raises on any
    failure."""
    assert r.key is not None and r.chart is not None
    for target, image in r.images.items():
        r.signatures[target] = r.tools.verify(image, r.key.public)
        r.attestations[target] = r.tools.verify_attestation(image, r.key.public)
        say(f"verified {target}: {len(r.signatures[target])} signature(s), "
            f"{len(r.attestations[target])} SPDX attestation(s)")
    r.signatures["chart"] = r.tools.verify(r.chart, r.key.public)
    say("verified the chart's signature")


# -- 6-7: install from the registry and run the quickstart -------------------------------------------------------
def start_node(r: Rehearsal, stack: ExitStack, say: Callable[[str], None]) -> Cluster:
    """A real node with nothing of ``make images`` imported (only the pause image), trusting the registry."""
    why = unavailable()
    if why:
        raise ReleaseError(f"no real node can run here: {why}")
    t0 = time.monotonic()
    cluster = Cluster(state_dir=r.work / "cluster", backend=RealNode(images=()))
    cluster.start()
    stack.callback(cluster.stop)
    r.cluster = cluster
    r.node.trust_registry(r.registry.host, r.registry.ca)
    r.tools.timings["real node up"] = time.monotonic() - t0
    say(f"real node up ({r.node.ip}), trusting {r.registry.host}")
    return cluster


def quickstart_values(r: Rehearsal, forge: FakeGitHubAPI) -> dict[str, Any]:
    """``examples/quickstart-values.yaml`` as committed, and only what cannot be as committed here: the images by
    the digests just pushed (and the registry's pull Secret), the fake GitHub for api.github.com (its App, its
    CA), a model configuration that sends ``openai/*`` to the scripted model, the Ingress host of the README's
    ``--set``, and the gateway left out (``NO_GATEWAY``: the real node has no kube-proxy for its Service)."""
    committed = yaml.safe_load(QUICKSTART_VALUES.read_text())
    operator, job = r.images["operator"], r.images["job"]
    return merge(committed, {
        "image": {"repository": operator.repository, "digest": operator.digest},
        "imagePullSecrets": [{"name": PULL_SECRET}],
        "job": {"image": job.repository, "imageDigest": job.digest, "imagePullSecrets": [{"name": PULL_SECRET}],
                "modelsConfigMap": "pi-models"},
        "github": {"apiUrl": forge.url, "webUrl": forge.web_url, "caBundle": {"configMap": "forge-ca"},
                   "app": {"id": APP_ID, "installationId": INSTALLATION}},
        "receiver": {"ingress": {"host": "pi.example.test"}},
        **NO_GATEWAY,
    })


def models_json(base_url: str) -> str:
    """pi's models.json with a provider named ``openai`` (it replaces pi's built-in one) whose ``gpt-4.1`` is
    the scripted model; its key is the job's ``OPENAI_API_KEY`` (the quickstart's ``job.credentials``)."""
    with tempfile.TemporaryDirectory() as d:
        agent = write_agent_dir(Path(d) / "agent", base_url, model_ids=("gpt-4.1",))
        models = json.loads((agent / "models.json").read_text())
    provider = models["providers"].pop("fake")
    provider["apiKey"] = "OPENAI_API_KEY"
    return json.dumps({"providers": {"openai": provider}}, indent=2)


def install(r: Rehearsal, stack: ExitStack, forge: FakeGitHubAPI, model: ScriptedModel, webhook_secret: bytes,
            say: Callable[[str], None]) -> RegistryRelease:
    """The README quickstart's steps 2 and 3 (its Secrets, ``helm install``), from the registry."""
    assert r.cluster is not None and r.chart is not None
    kube = r.cluster.kube()
    ns = fresh_namespace(kube, "rehearsal")
    stack.callback(kube.delete_ignore_missing, f"/api/v1/namespaces/{ns}")
    create_secret(kube, ns, "pi-github-app", {"private-key.pem": forge.app_pem})  # type: ignore[attr-defined]
    create_secret(kube, ns, "pi-webhook", {"secret": webhook_secret})
    create_secret(kube, ns, "model-keys", {"openai": b"sk-rehearsal-not-a-real-key"})
    kube.create(f"/api/v1/namespaces/{ns}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": PULL_SECRET},
        "data": {".dockerconfigjson": base64.b64encode(r.registry.docker_config()).decode()}})
    for name, key, text in (("forge-ca", "ca.crt", Path(forge.ca).read_text()),  # type: ignore[attr-defined]
                            ("pi-models", "models.json", models_json(model.base_url))):
        kube.create(f"/api/v1/namespaces/{ns}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                            "metadata": {"name": name}, "data": {key: text}})
    t0 = time.monotonic()
    release = RegistryRelease(r.cluster, kube, ns, quickstart_values(r, forge),
                              chart_ref=f"oci://{r.chart.repository}", version=r.version,
                              helm_env=r.tools.env(), ca_file=str(r.registry.ca))
    r.release = release
    stack.callback(release.uninstall)
    release.install()
    r.tools.timings["helm install, operator up"] = time.monotonic() - t0
    say(f"installed oci://{r.chart.repository} --version {r.version} in {ns}; the operator is up")
    return release


def run_quickstart(r: Rehearsal, release: RegistryRelease, forge: FakeGitHubAPI, model: ScriptedModel,
                   webhook_secret: bytes, say: Callable[[str], None]) -> None:
    """Step 4 of the quickstart (the Trigger as committed) and a comment through the receiver, to ``Succeeded``."""
    assert r.cluster is not None
    t0 = time.monotonic()
    r.cluster.kubectl("apply", "-n", release.ns, "-f", str(QUICKSTART_TRIGGER))
    trigger = yaml.safe_load(QUICKSTART_TRIGGER.read_text())["metadata"]["name"]
    wait_until(f"Trigger {trigger} Ready", lambda: (release.condition(release.get("triggers", trigger), "Ready")
                                                    or {}).get("status") == "True", timeout=60)
    receiver = ready_receiver(release)
    issue = 1
    forge.set_issue(REPO, issue, "Rehearse the release", "")
    model.tool_call("bash", {"command": "cat README.md"}).reply("Rehearsed: the release's job image ran.")
    before = len(model.requests)
    hooks = Webhooks(f"http://{receiver}:{port_of(release, 'port')}/webhook", webhook_secret)
    sent = hooks.send(hooks.issue_comment(issue, "@pi rehearse the release"))
    if sent.status != 202:
        raise ReleaseError(f"the receiver answered {sent.status}: {sent.json}")
    [name] = sent.json["jobs"]
    r.job = release.wait_job(name, timeout=420)
    r.model_requests = model.requests[before:]
    r.tools.timings["quickstart job"] = time.monotonic() - t0
    if r.job["status"]["phase"] != "Succeeded":
        raise ReleaseError(f"the quickstart's job {name} ended {r.job['status']['phase']}: "
                           f"{json.dumps(r.job['status'])}\noperator log:\n{release.operator_log()[-3000:]}")
    say(f"the quickstart's job {name} Succeeded (pod {r.job['status']['podName']})")


def port_of(release: Release, key: str) -> int:
    chart_default = yaml.safe_load((REPO_ROOT / "charts" / "pi-dispatch" / "values.yaml").read_text())["receiver"]
    return int(release.values.get("receiver", {}).get(key, chart_default[key]))


def ready_receiver(release: Release, timeout: float = 300) -> str:
    """A receiver Pod's address once it answers ``/readyz`` seeing the one Trigger (as GitHub would reach it
    through the Ingress; there is no ingress controller here, the Pod network is the bridge on this machine)."""
    import requests

    def ready() -> str | None:
        pods = release.kube.list(f"/api/v1/namespaces/{release.ns}/pods",
                                 labelSelector="app.kubernetes.io/component=receiver")
        for pod in pods:
            ip = (pod.get("status") or {}).get("podIP")
            if not ip or (pod.get("status") or {}).get("phase") != "Running":
                continue
            with requests.Session() as s:
                s.trust_env = False
                try:
                    got = s.get(f"http://{ip}:{port_of(release, 'healthPort')}/readyz", timeout=5)
                except requests.RequestException:
                    continue
            if got.status_code == 200 and got.json().get("triggers") == 1:
                return str(ip)
        return None

    return wait_until("a receiver Pod ready with the quickstart's Trigger", ready, timeout=timeout)


@contextmanager
def rehearse(work: Path, *, say: Callable[[str], None] | None = None,
             bin_dir: Path | None = None) -> Iterator[Rehearsal]:
    """Every step, in order; the rehearsal stays up (registry, node, release) until the block ends."""
    log = say or (lambda msg: print(f"[rehearsal] {msg}", file=sys.stderr, flush=True))
    bins = bin_dir or controlplane_bin_dir(build=False)
    work.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        registry = PrivateRegistry(bins / "registry", work / "registry").start()
        stack.callback(registry.stop)
        r = Rehearsal(work=work, tools=ReleaseTools(bins, registry, work / "release"), registry=registry)
        publish(r, log)
        verify(r, log)
        start_node(r, stack, log)
        assert r.cluster is not None
        forge, model = start_fakes(r, stack)
        webhook_secret = uuid.uuid4().hex.encode()
        release = install(r, stack, forge, model, webhook_secret, log)
        run_quickstart(r, release, forge, model, webhook_secret, log)
        yield r


def start_fakes(r: Rehearsal, stack: ExitStack) -> tuple[FakeGitHubAPI, ScriptedModel]:
    """The fake GitHub (its App, a repository to clone over HTTPS) and the scripted model, on the node's address."""
    root = r.work / "forge"
    ca, cert, key = make_tls(root / "tls", ips=("127.0.0.1", r.node.ip))
    repos = Repos(root / "repos")
    repos.create(REPO, {"README.md": "# widgets\n"})
    pem, public = generate_app_key()
    forge = stack.enter_context(FakeGitHubAPI(
        app_id=APP_ID, public_key=public, installation_id=INSTALLATION, installation_repos=(REPO,), repos=repos,
        tls=(str(cert), str(key)), prefix="/api/v3", bind=r.node.ip))
    forge.app_pem = pem  # type: ignore[attr-defined]
    forge.ca = ca  # type: ignore[attr-defined]
    model = stack.enter_context(ScriptedModel(host=r.node.ip))
    return forge, model


# -- make release-rehearsal ----------------------------------------------------------------------------------------
def summary(r: Rehearsal) -> str:
    assert r.chart is not None and r.job is not None
    lines = [f"release {r.version} rehearsed against {r.registry.host}:"]
    for target, image in r.images.items():
        lines.append(f"  {target:9} {image.ref}")
        lines.append(f"  {'':9} signature verified; SPDX attestation verified "
                     f"({len(r.sboms[target]['packages'])} packages)")
    lines.append(f"  chart     oci://{r.chart.ref} (signature verified)")
    lines.append(f"  installed from oci://{r.chart.repository} --version {r.version}; quickstart job "
                 f"{r.job['metadata']['name']}: {r.job['status']['phase']}")
    lines.append("timings:")
    lines += [f"  {step:28} {seconds:6.1f}s" for step, seconds in r.tools.timings.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.framework.rehearsal", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="where its state goes (default: a new temporary directory, "
                                                  "removed after a success)")
    args = parser.parse_args(argv)
    why = unavailable()
    if why:
        print(f"release rehearsal: no real node can run here: {why}", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="pidispatch-rehearsal-"))
    t0 = time.monotonic()
    try:
        with rehearse(work) as r:
            text = summary(r)
    except ReleaseError as exc:
        print(f"release rehearsal FAILED: {exc}\n(state kept in {work})", file=sys.stderr)
        return 1
    print(f"{text}\n  {'total':28} {time.monotonic() - t0:6.1f}s")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
