"""The webhook receiver of a chart release (``receiver.enabled=true``) on the local control plane.

The test kubelet runs the receiver Pod as a local process (``pidispatch receiver`` from this venv)
with the chart's env, its webhook Secret mounted as a file and a real projected token of the
receiver's ServiceAccount; Pods share the host's network, so the receiver listens on
``127.0.0.1:<receiver.port>`` and tests post to it there with :class:`testkit.fakegithub.Webhooks`; its
probes and metrics answer on ``127.0.0.1:<receiver.healthPort>``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import requests

from e2e.framework.cluster import Cluster, free_port
from e2e.framework.kube import Kube
from e2e.framework.release import PI_VERSION, RELEASE, Release, base_values, fresh_namespace, merge
from pidispatch.api.crds import GROUP, VERSION
from testkit.fakegithub import Webhooks
from testkit.wait import wait_until

RECEIVER = f"{RELEASE}-receiver"
SECRET_NAME = "github-webhook"
SECRET_KEY = "webhook-secret"


def create_webhook_secret(kube: Kube, namespace: str, secret: bytes) -> None:
    """The Secret the chart's ``receiver.webhookSecret.existingSecret`` names (made by the admin, as a user would)."""
    kube.create(f"/api/v1/namespaces/{namespace}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET_NAME}, "type": "Opaque",
        "data": {SECRET_KEY: base64.b64encode(secret).decode()}})


def receiver_values(*, port: int | None = None, max_body: int = 1024 * 1024) -> dict[str, Any]:
    port = port or free_port()
    health_port = free_port()
    while health_port == port:
        health_port = free_port()
    # One replica (the chart's default is two): the test kubelet's Pods share the host's network, so a
    # second receiver could not bind the same port.
    return {"receiver": {"enabled": True, "replicas": 1, "port": port, "healthPort": health_port,
                         "maxBodyBytes": max_body,
                         "webhookSecret": {"existingSecret": SECRET_NAME, "key": SECRET_KEY}}}


@dataclass
class Receiver:
    """The receiver of ``release``: its Pods, its address, and a signed-webhook sender pointed at it."""

    release: Release
    secret: bytes

    @property
    def port(self) -> int:
        return int(self.release.values["receiver"]["port"])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def health_url(self) -> str:
        """Where ``/healthz``, ``/readyz`` and ``/metrics`` answer (never on the webhook port)."""
        return f"http://127.0.0.1:{int(self.release.values['receiver']['healthPort'])}"

    def hooks(self, **kw: Any) -> Webhooks:
        return Webhooks(f"{self.url}/webhook", self.secret, **kw)

    def pods(self) -> list[dict[str, Any]]:
        return self.release.kube.list(f"/api/v1/namespaces/{self.release.ns}/pods",
                                      labelSelector="app.kubernetes.io/component=receiver")

    def get(self, path: str, timeout: float = 5, *, webhook_port: bool = False) -> requests.Response:
        """``GET path`` on the health port (``webhook_port=True``: on the webhook port)."""
        with requests.Session() as s:
            s.trust_env = False
            return s.get(f"{self.url if webhook_port else self.health_url}{path}", timeout=timeout)

    def await_ready(self, timeout: float = 90) -> None:
        """The Pod Running and ``/readyz`` answering 200 (it can list Triggers as its ServiceAccount)."""
        def running() -> bool:
            return any((p.get("status") or {}).get("phase") == "Running" for p in self.pods())

        try:
            wait_until("the receiver Pod Running", running, timeout=timeout)
            wait_until(f"the receiver's /readyz on {self.health_url}", lambda: self.get("/readyz").status_code == 200,
                       timeout=timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\nreceiver log:\n{self.log()[-4000:]}") from None

    def await_triggers(self, count: int, timeout: float = 30) -> None:
        """Until the receiver's Trigger list (it caches for a moment) holds ``count`` Triggers."""
        wait_until(f"the receiver to see {count} Triggers",
                   lambda: self.get("/readyz").json().get("triggers") == count, timeout=timeout)

    def log(self) -> str:
        out = []
        for pod in self.pods():
            md = pod["metadata"]
            d = self.release.cluster.kubelet_dir / "pods" / f"{md['namespace']}_{md['name']}_{md['uid']}" / "logs"
            f = d / "receiver.log"
            if f.exists():
                out.append(f.read_text(errors="replace"))
        return "\n".join(out)

    def deliveries(self) -> dict[str, float]:
        """``pidispatch_receiver_deliveries_total`` by result, scraped from ``/metrics``."""
        text = self.get("/metrics").text
        return {m.group(1): float(m.group(2)) for m in re.finditer(
            r'^pidispatch_receiver_deliveries_total\{result="([^"]*)"\} (\S+)$', text, re.M)}


@contextmanager
def installed_receiver(cluster: Cluster, kube: Kube, prefix: str, secret: bytes,
                       triggers: dict[str, dict[str, Any]], **values: Any) -> Iterator[Receiver]:
    """The chart with its receiver in a fresh namespace (``prefix``-...), the webhook Secret made by the admin,
    and one Trigger per ``triggers`` entry (its ``spec.on``; fake pi's run); uninstalled and deleted after."""
    ns = fresh_namespace(kube, prefix)
    create_webhook_secret(kube, ns, secret)
    release = Release(cluster, kube, ns, merge(base_values(), receiver_values(**values)))
    try:
        release.install()
        r = Receiver(release, secret)
        r.await_ready()
        for name, on in triggers.items():
            kube.create(release.path("triggers"), {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trigger", "metadata": {"name": name},
                "spec": {"on": on, "run": {"model": "fake/fake-model", "piVersion": PI_VERSION}}})
        r.await_triggers(len(triggers))
        yield r
    finally:
        release.uninstall()
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")
