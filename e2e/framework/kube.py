"""A small, dependency-light Kubernetes REST client for the e2e harness.

The harness (cluster launcher, test kubelet, harness tests) talks JSON dicts over HTTPS with
``requests`` so that it controls content types (merge patch on ``pods/status``) and watches
exactly. Operator tests that prefer the official client use ``Cluster.api_client()``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests
import urllib3
import yaml

from testkit.wait import wait_until

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, body: Any, method: str, path: str):
        self.status = status
        self.body = body
        self.reason = body.get("reason") if isinstance(body, dict) else None
        msg = body.get("message") if isinstance(body, dict) else str(body)[:500]
        super().__init__(f"{method} {path} -> {status}: {msg}")

    @property
    def message(self) -> str:
        return self.body.get("message", "") if isinstance(self.body, dict) else str(self.body)


class Kube:
    """Minimal client: ``get/list/create/patch/delete/watch`` on raw API paths."""

    def __init__(
        self,
        server: str,
        *,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        token: str | None = None,
        impersonate: str | None = None,
        timeout: float = 30.0,
    ):
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        # ignore REQUESTS_CA_BUNDLE / *_PROXY from the environment: this is a loopback cluster with its own CA
        self.session.trust_env = False
        if ca_file:
            self.session.verify = ca_file
        else:
            self.session.verify = False
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        if cert_file and key_file:
            self.session.cert = (cert_file, key_file)
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        if impersonate:
            self.session.headers["Impersonate-User"] = impersonate

    @classmethod
    def from_kubeconfig(cls, path: str | Path, **kw: Any) -> Kube:
        cfg = yaml.safe_load(Path(path).read_text())
        ctx_name = cfg.get("current-context") or cfg["contexts"][0]["name"]
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
        # inline *-data fields (kind, cloud kubeconfigs) become files next to nothing else: a private temp dir
        files = {}
        for src, key, field in ((cluster, "certificate-authority-data", "certificate-authority"),
                                (user, "client-certificate-data", "client-certificate"),
                                (user, "client-key-data", "client-key")):
            if src.get(key) and not src.get(field):
                files[field] = _data_file(src[key])
        token = user.get("token")
        if not token and user.get("tokenFile"):
            token = Path(user["tokenFile"]).read_text().strip()
        return cls(
            cluster["server"],
            ca_file=cluster.get("certificate-authority") or files.get("certificate-authority"),
            cert_file=user.get("client-certificate") or files.get("client-certificate"),
            key_file=user.get("client-key") or files.get("client-key"),
            token=token,
            impersonate=user.get("as"),
            **kw,
        )

    # -- plumbing ---------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type, "Accept": "application/json"} if data else {}
        r = self.session.request(
            method, self.server + path, data=data, params=params, headers=headers,
            timeout=timeout or self.timeout,
        )
        try:
            payload = r.json()
        except ValueError:
            payload = r.text
        if r.status_code >= 400:
            raise ApiError(r.status_code, payload, method, path)
        return payload

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None)

    def list(self, path: str, **params: Any) -> list[dict]:
        return self.get(path, **params).get("items") or []

    def create(self, path: str, body: dict, **params: Any) -> Any:
        return self.request("POST", path, body, params=params or None)

    def replace(self, path: str, body: dict) -> Any:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH, **params: Any) -> Any:
        return self.request("PATCH", path, body, content_type=content_type, params=params or None)

    def delete(self, path: str, body: dict | None = None, **params: Any) -> Any:
        return self.request("DELETE", path, body, params=params or None)

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def delete_ignore_missing(self, path: str, body: dict | None = None, **params: Any) -> None:
        try:
            self.delete(path, body, **params)
        except ApiError as e:
            if e.status != 404:
                raise

    def watch(self, path: str, *, resource_version: str | None = None, timeout_seconds: int = 60,
              **params: Any) -> Iterator[dict]:
        """Yield watch events ``{"type": ..., "object": ...}`` until the server closes the stream."""
        q = {"watch": "true", "timeoutSeconds": str(timeout_seconds), "allowWatchBookmarks": "true", **params}
        if resource_version:
            q["resourceVersion"] = resource_version
        with self.session.get(self.server + path, params=q, stream=True,
                              timeout=(10, timeout_seconds + 15)) as r:
            if r.status_code >= 400:
                raise ApiError(r.status_code, r.text, "WATCH", path)
            for line in r.iter_lines():
                if line:
                    yield json.loads(line)

    @property
    def ca_file(self) -> str | None:
        return self.session.verify if isinstance(self.session.verify, str) else None


def _data_file(b64: str) -> str:
    import base64
    import tempfile

    fd, path = tempfile.mkstemp(prefix="kubeconfig-", suffix=".pem")
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64decode(b64))
    return path


# The harness (cluster.py, realnode.py, conftest.py) still says ``wait_for``: the same function.
wait_for = wait_until
