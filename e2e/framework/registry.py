"""A private container registry on this machine, as a cluster's would be: TLS from a CA of the run's own and
htpasswd (bcrypt) basic auth on every request, pulls included.

The registry is distribution's own (``github.com/distribution/distribution/v3/cmd/registry``, the one
Docker Hub and most self-hosted registries run), built by ``e2e/controlplane/build.sh`` into the control
plane's bin dir from the pinned wrapper module ``e2e/controlplane/registry``. It listens on loopback only;
a real node's containerd (host network) reaches it there once ``RealNode.trust_registry`` wrote its CA into
containerd's ``hosts.toml``.

``PrivateRegistry.docker_config()`` is the ``.dockerconfigjson`` a ``kubernetes.io/dockerconfigjson`` Secret
carries; the same file is podman's ``--authfile`` for the push, so what the kubelet sends is what the push
proved works.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import requests
import yaml

from e2e.framework.clusterkit import ClusterError, free_port
from testkit.gitforge import make_tls
from testkit.wait import wait_until


@dataclass
class PrivateRegistry:
    """distribution's registry with TLS and htpasswd auth, its storage and logs under ``root``."""

    binary: Path
    root: Path
    username: str = "puller"
    password: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    port: int = field(default_factory=free_port)
    _proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        """``host:port``, as an image reference and a ``.dockerconfigjson`` name it."""
        return f"127.0.0.1:{self.port}"

    @property
    def ca(self) -> Path:
        return self.root / "tls" / "ca.crt"

    @property
    def log(self) -> Path:
        return self.root / "registry.log"

    def docker_config(self, password: str | None = None) -> bytes:
        """The ``.dockerconfigjson`` of a pull Secret for this registry (``password`` to make a wrong one)."""
        secret = password if password is not None else self.password
        auth = base64.b64encode(f"{self.username}:{secret}".encode()).decode()
        return json.dumps({"auths": {self.host: {"username": self.username, "password": secret,
                                                 "auth": auth}}}).encode()

    def start(self, timeout: float = 30) -> PrivateRegistry:
        import bcrypt

        if not os.access(self.binary, os.X_OK):
            raise ClusterError(f"no registry binary at {self.binary}: `make controlplane` builds it "
                               "(e2e/controlplane/build.sh, wrapper module e2e/controlplane/registry)")
        self.root.mkdir(parents=True, exist_ok=True)
        _, cert, key = make_tls(self.root / "tls", ips=("127.0.0.1",))
        htpasswd = self.root / "htpasswd"
        hashed = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=5)).decode()
        htpasswd.write_text(f"{self.username}:{hashed}\n")
        htpasswd.chmod(0o600)
        config = {
            "version": 0.1,
            "log": {"level": "info", "formatter": "text"},
            "storage": {"filesystem": {"rootdirectory": str(self.root / "storage")}},
            "http": {"addr": self.host, "secret": secrets.token_hex(16),
                     "tls": {"certificate": str(cert), "key": str(key)}},
            # every request, a pull's too, needs a user of this file: no anonymous reads
            "auth": {"htpasswd": {"realm": "pidispatch-e2e", "path": str(htpasswd)}},
        }
        (self.root / "config.yml").write_text(yaml.safe_dump(config))
        with self.log.open("ab") as log:
            # no OpenTelemetry export: distribution's default sends traces to localhost:4318, nobody's here
            env = {**os.environ, "OTEL_TRACES_EXPORTER": "none", "OTEL_SDK_DISABLED": "true"}
            self._proc = subprocess.Popen([str(self.binary), "serve", str(self.root / "config.yml")],
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)

        def answers() -> bool:
            if self._proc is not None and self._proc.poll() is not None:
                raise ClusterError(f"the registry exited ({self._proc.returncode}):\n{self.log.read_text()[-2000:]}")
            try:
                return requests.get(f"https://{self.host}/v2/", verify=str(self.ca), timeout=2).status_code == 401
            except requests.RequestException:
                return False

        wait_until(f"the registry at https://{self.host}/v2/ asking for credentials", answers, timeout=timeout)
        return self

    def served(self, user_agent: str) -> list[str]:
        """The requests it answered to a client (``containerd/``, ``containers/``), as ``"<status> <user> <uri>"``
        from its access log (distribution's ``response completed`` lines)."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if 'msg="response completed"' not in line or f'http.request.useragent="{user_agent}' not in line:
                continue
            fields = dict(re.findall(r'([a-z.]+)=("[^"]*"|\S+)', line))
            out.append(" ".join(fields.get(k, "-").strip('"') for k in
                                ("http.response.status", "auth.user.name", "http.request.method", "http.request.uri")))
        return out

    def stop(self) -> None:
        """The registry's own process, by the handle that started it."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=15)
        self._proc = None

    def _client_files(self) -> tuple[Path, Path]:
        """``(cert dir, authfile)`` for podman and buildah: the CA alone as ``ca.crt``, and this registry's
        ``.dockerconfigjson`` (the same bytes the pull Secret carries)."""
        certs = self.root / "client-certs"
        certs.mkdir(exist_ok=True)
        (certs / "ca.crt").write_bytes(self.ca.read_bytes())
        authfile = self.root / "client-auth.json"
        authfile.write_bytes(self.docker_config())
        authfile.chmod(0o600)
        return certs, authfile

    def push(self, image: str, repository_tag: str, containers_env: dict[str, str]) -> str:
        """``podman push`` of a local image to ``<host>/<repository_tag>`` with this registry's credentials and CA;
        returns the pushed manifest's digest."""
        certs, authfile = self._client_files()
        digestfile = self.root / "push-digest"
        digestfile.unlink(missing_ok=True)
        ref = f"{self.host}/{repository_tag}"
        _run(["podman", "push", "--quiet", "--authfile", str(authfile), "--cert-dir", str(certs),
              "--digestfile", str(digestfile), image, f"docker://{ref}"], containers_env)
        return digestfile.read_text().strip()

    def push_layered(self, base: str, repository_tag: str, files: dict[str, bytes],
                     containers_env: dict[str, str]) -> str:
        """A local image ``base`` with one layer more (``files``: absolute path -> bytes, mode 0644), committed by
        buildah straight to ``<host>/<repository_tag>`` (nothing is left in the local storage); returns the
        manifest's digest. A node that has ``base`` already must still fetch that layer, with credentials."""
        certs, authfile = self._client_files()
        work = self.root / f"layer-{secrets.token_hex(4)}"
        work.mkdir()
        name = f"pidispatch-registry-{work.name}"
        _run(["buildah", "from", "--quiet", "--pull=never", "--name", name, base], containers_env)
        try:
            for i, (path, data) in enumerate(sorted(files.items())):
                source = work / str(i)
                source.write_bytes(data)
                source.chmod(0o644)
                _run(["buildah", "copy", "--quiet", name, str(source), path], containers_env)
            _run(["buildah", "commit", "--quiet", "--rm", "--authfile", str(authfile), "--cert-dir", str(certs),
                  name, f"docker://{self.host}/{repository_tag}"], containers_env)
        except BaseException:
            subprocess.run(["buildah", "rm", name], capture_output=True, env={**os.environ, **containers_env},
                           timeout=120)
            raise
        return self.digest(repository_tag)

    def digest(self, repository_tag: str) -> str:
        """The manifest digest the registry serves for ``<repository>:<tag>`` (asked with the credentials)."""
        repository, tag = repository_tag.rsplit(":", 1)
        accept = ", ".join(("application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.v2+json"))
        r = requests.head(f"https://{self.host}/v2/{repository}/manifests/{tag}", verify=str(self.ca), timeout=10,
                          auth=(self.username, self.password), headers={"Accept": accept})
        r.raise_for_status()
        return r.headers["Docker-Content-Digest"]

    def __enter__(self) -> PrivateRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _run(argv: list[str], containers_env: dict[str, str], timeout: float = 600) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **containers_env})
    if r.returncode != 0:
        raise ClusterError(f"{' '.join(argv[:2])} ... {argv[-1]} failed ({r.returncode}): {r.stderr.strip()}")
