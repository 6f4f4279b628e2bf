"""The release's publishing steps (``.github/workflows/release.yml``) as they run on this machine, against a registry
on loopback (``e2e/framework/registry.py``): push by digest, an SBOM per image (syft, SPDX JSON), a signature and a
signed
SBOM attestation per image (cosign), the chart as an OCI artifact (helm) signed by its digest, and the checks a user
makes before installing (``cosign verify``, ``cosign verify-attestation``; docs/releasing.md).

On GitHub cosign signs keyless: the job's OIDC token buys a short-lived Fulcio certificate and each signature is
logged in Rekor. Neither is reachable here (no network beyond loopback and the package registries), so the same
commands run with a key pair generated for the run (``cosign generate-key-pair``, its password in
``COSIGN_PASSWORD``) and no transparency log (``--tlog-upload=false`` to sign, ``--insecure-ignore-tlog`` to verify).
What a verification proves is the same: a signature, by the release's signer, over the digest that is pulled; an
SPDX document attested for that digest.

cosign, syft and helm are the pinned builds of ``make controlplane`` (``e2e/controlplane/{cosign,syft,helm}``), the
versions the workflow installs. Registry credentials reach them as a Docker ``config.json`` (cosign, syft) and
helm's own registry login; the registry's CA as ``--registry-cacert`` / ``SYFT_REGISTRY_CA_CERT`` / ``--ca-file``.
Nothing here sends traffic beyond 127.0.0.1: syft's update check is off, cosign never reaches Fulcio or Rekor.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.framework.clusterkit import REPO_ROOT
from e2e.framework.registry import PrivateRegistry

CHART_DIR = REPO_ROOT / "charts" / "pi-dispatch"
RELEASE_META = REPO_ROOT / ".github" / "scripts" / "release-meta.sh"
TOOLS = ("cosign", "syft", "helm")
SPDX_PREDICATE = "https://spdx.dev/Document"
# what a signature's payload says it is: cosign v3's bundles, and the older simple-signing payloads. cosign v3's
# `verify` also lists the attestations (an SPDX one says https://spdx.dev/Document): they are not signatures.
SIGNATURE_TYPES = ("https://sigstore.dev/cosign/sign/v1", "cosign container image signature")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class ReleaseError(RuntimeError):
    """A step of the release failed; the message names the step and carries the tool's own words."""


@dataclass(frozen=True)
class Published:
    """An artifact in the registry, named by the digest that was pushed."""

    repository: str  # 127.0.0.1:<port>/pi-dispatch/operator
    digest: str

    def __post_init__(self) -> None:
        if not DIGEST.match(self.digest):
            raise ReleaseError(f"{self.repository}: '{self.digest}' is not a sha256 digest")

    @property
    def ref(self) -> str:
        return f"{self.repository}@{self.digest}"


@dataclass(frozen=True)
class KeyPair:
    """``cosign generate-key-pair``'s two files; the private key is encrypted with ``password``."""

    private: Path
    public: Path
    password: str = field(repr=False)


@dataclass
class ReleaseTools:
    """cosign, syft and helm with this run's registry credentials and CA, their state under ``work``."""

    bin_dir: Path
    registry: PrivateRegistry
    work: Path
    #: seconds each step took, by step name, in the order they ran
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [t for t in TOOLS if not os.access(self.bin_dir / t, os.X_OK)]
        if missing:
            raise ReleaseError(f"missing {', '.join(missing)} in {self.bin_dir}: `make controlplane` builds them "
                               "(e2e/controlplane/build.sh)")
        self.work.mkdir(parents=True, exist_ok=True)
        docker = self.work / "docker"
        docker.mkdir(exist_ok=True)
        (docker / "config.json").write_bytes(self.registry.docker_config())
        (docker / "config.json").chmod(0o600)

    # -- running a tool ---------------------------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        helm = self.work / "helm"
        return {**os.environ,
                "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                # the registry's credentials, for cosign and syft (go-containerregistry's keychain)
                "DOCKER_CONFIG": str(self.work / "docker"),
                # helm's registry login and caches: this run's, never ~/.config/helm
                "HELM_REGISTRY_CONFIG": str(helm / "registry.json"), "HELM_CONFIG_HOME": str(helm / "config"),
                "HELM_CACHE_HOME": str(helm / "cache"), "HELM_DATA_HOME": str(helm / "data"),
                # syft: this registry's CA, and no update check (the only request it would send elsewhere)
                "SYFT_REGISTRY_CA_CERT": str(self.registry.ca), "SYFT_CHECK_FOR_APP_UPDATE": "false",
                "TMPDIR": str(self._tmp()),
                **extra}

    def _tmp(self) -> Path:
        tmp = self.work / "tmp"
        tmp.mkdir(exist_ok=True)
        return tmp

    def run(self, step: str, argv: list[str], *, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``argv`` (its first element a tool of the bin dir, or any command); a failure raises naming ``step``."""
        tool = self.bin_dir / argv[0]
        cmd = [str(tool) if tool.exists() else argv[0], *argv[1:]]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env or self.env(), input=input, timeout=timeout,
                           cwd=self.work)
        self.timings[step] = self.timings.get(step, 0.0) + time.monotonic() - t0
        if r.returncode != 0:
            raise ReleaseError(f"{step}: {' '.join(argv[:3])} ... exited {r.returncode}:\n"
                               f"{(r.stderr or r.stdout).strip()[-3000:]}")
        return r

    # -- the workflow's steps -------------------------------------------------------------------------------------
    def meta(self, tag: str, owner: str) -> dict[str, str]:
        """``release-meta.sh``: the workflow's first job, its ``KEY=VALUE`` outputs."""
        out = self.run(f"release-meta {tag}", ["bash", str(RELEASE_META), tag, owner]).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def push_image(self, local: str, repository: str, tag: str, containers_env: dict[str, str]) -> Published:
        """``podman push`` of a local image to ``<repository>:<tag>``; the digest pushed, as the workflow's
        build-push-action reports it."""
        t0 = time.monotonic()
        digest = self.registry.push(local, f"{repository.split('/', 1)[1]}:{tag}", containers_env)
        self.timings[f"push {repository.rsplit('/', 1)[-1]}"] = time.monotonic() - t0
        served = self.registry.digest(f"{repository.split('/', 1)[1]}:{tag}")
        if served != digest:
            raise ReleaseError(f"pushed {repository}:{tag} as {digest} but the registry serves {served}")
        return Published(repository, digest)

    def sbom(self, image: Published, out: Path) -> dict[str, Any]:
        """syft's SPDX JSON of the image as the registry serves it, by digest (anchore/sbom-action's step)."""
        self.run(f"sbom {image.repository.rsplit('/', 1)[-1]}",
                 ["syft", "scan", f"registry:{image.ref}", "--output", f"spdx-json={out}", "--quiet"],
                 env=self.env(SYFT_REGISTRY_AUTH_AUTHORITY=self.registry.host,
                              SYFT_REGISTRY_AUTH_USERNAME=self.registry.username,
                              SYFT_REGISTRY_AUTH_PASSWORD=self.registry.password))
        doc: dict[str, Any] = json.loads(out.read_text())
        if not doc.get("spdxVersion", "").startswith("SPDX-") or not doc.get("packages"):
            raise ReleaseError(f"syft wrote no SPDX document with packages for {image.ref}: {out}")
        return doc

    def generate_key_pair(self, name: str) -> KeyPair:
        """A cosign key pair of this run, its private key encrypted with a password of this run."""
        password = secrets.token_urlsafe(24)
        prefix = self.work / "keys" / name
        prefix.parent.mkdir(parents=True, exist_ok=True)
        self.run(f"generate-key-pair {name}", ["cosign", "generate-key-pair", "--output-key-prefix", str(prefix)],
                 env=self.env(COSIGN_PASSWORD=password))
        return KeyPair(prefix.with_suffix(".key"), prefix.with_suffix(".pub"), password)

    def _cosign_registry(self) -> list[str]:
        return ["--registry-cacert", str(self.registry.ca)]

    def sign(self, artifact: Published, key: KeyPair) -> None:
        """``cosign sign`` by digest with the run's key, no transparency log."""
        self.run(f"sign {artifact.repository.rsplit('/', 1)[-1]}",
                 ["cosign", "sign", "--yes", "--key", str(key.private), "--tlog-upload=false",
                  "--use-signing-config=false", *self._cosign_registry(), artifact.ref],
                 env=self.env(COSIGN_PASSWORD=key.password))

    def attest(self, image: Published, key: KeyPair, sbom: Path) -> None:
        """``cosign attest --type spdxjson``: the SBOM as a signed in-toto statement about the image's digest."""
        self.run(f"attest {image.repository.rsplit('/', 1)[-1]}",
                 ["cosign", "attest", "--yes", "--key", str(key.private), "--type", "spdxjson", "--predicate",
                  str(sbom), "--tlog-upload=false", "--use-signing-config=false", *self._cosign_registry(),
                  image.ref],
                 env=self.env(COSIGN_PASSWORD=key.password))

    def verify(self, artifact: Published, public: Path) -> list[dict[str, Any]]:
        """``cosign verify --key``: the signatures' payloads. At least one must be a signature (not only an
        attestation, which cosign v3 lists too) and every one must name ``artifact``'s digest, or it raises."""
        out = self.run(f"verify {artifact.repository.rsplit('/', 1)[-1]}",
                       ["cosign", "verify", "--key", str(public), "--insecure-ignore-tlog=true",
                        *self._cosign_registry(), artifact.ref]).stdout
        payloads = [p for line in out.splitlines() if line.strip() for p in _json_list(line)]
        signatures = [p for p in payloads if (p.get("critical") or {}).get("type") in SIGNATURE_TYPES]
        signed = {(p.get("critical") or {}).get("image", {}).get("docker-manifest-digest") for p in payloads}
        if not signatures or signed != {artifact.digest}:
            raise ReleaseError(f"cosign verify of {artifact.ref}: {len(signatures)} signature(s) among "
                               f"{len(payloads)} verified payload(s), over {signed or 'nothing'}")
        return signatures

    def verify_attestation(self, image: Published, public: Path) -> list[dict[str, Any]]:
        """``cosign verify-attestation --key --type spdxjson``: the in-toto statements, each about ``image``'s
        digest with an SPDX predicate, or it raises."""
        out = self.run(f"verify-attestation {image.repository.rsplit('/', 1)[-1]}",
                       ["cosign", "verify-attestation", "--key", str(public), "--type", "spdxjson",
                        "--insecure-ignore-tlog=true", *self._cosign_registry(), image.ref]).stdout
        statements = [json.loads(base64.b64decode(json.loads(line)["payload"]))
                      for line in out.splitlines() if line.strip()]
        want = image.digest.split(":", 1)[1]
        for st in statements:
            subjects = {s.get("digest", {}).get("sha256") for s in st.get("subject", [])}
            if st.get("predicateType") != SPDX_PREDICATE or subjects != {want}:
                raise ReleaseError(f"an attestation of {image.ref} is a {st.get('predicateType')} about {subjects}")
        if not statements:
            raise ReleaseError(f"cosign verify-attestation of {image.ref} returned no statement")
        return statements

    def package_chart(self, version: str) -> Path:
        """``helm lint`` and ``helm package`` of the chart, as the workflow's chart job."""
        out = self.work / "chart"
        self.run("helm lint", ["helm", "lint", str(CHART_DIR)])
        self.run("helm package", ["helm", "package", str(CHART_DIR), "--destination", str(out)])
        tgz = out / f"pi-dispatch-{version}.tgz"
        if not tgz.is_file():
            raise ReleaseError(f"helm package made no {tgz.name} in {out}: {sorted(p.name for p in out.iterdir())}")
        return tgz

    def helm_login(self) -> None:
        self.run("helm registry login", ["helm", "registry", "login", self.registry.host, "--username",
                                         self.registry.username, "--password-stdin", "--ca-file",
                                         str(self.registry.ca)], input=self.registry.password)

    def push_chart(self, tgz: Path, chart_repo: str) -> Published:
        """``helm push`` to ``oci://<host>/...``; the digest it prints (``Digest: sha256:...``)."""
        r = self.run("helm push", ["helm", "push", str(tgz), chart_repo, "--ca-file", str(self.registry.ca)])
        m = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", r.stdout + r.stderr, re.M)
        if not m:
            raise ReleaseError(f"helm push printed no digest:\n{r.stdout}{r.stderr}")
        return Published(f"{chart_repo.removeprefix('oci://')}/pi-dispatch", m.group(1))


def _json_list(line: str) -> list[dict[str, Any]]:
    value = json.loads(line)
    return value if isinstance(value, list) else [value]
