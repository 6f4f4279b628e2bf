"""A small JSON client for the Kubernetes API, used by the operator's handlers and by doctor.

Plain dicts over HTTPS with urllib3 (thread-safe pooling), because the handlers patch status
subresources with merge patches and read custom resources as dicts; the official client's models
would only be converted back. Connection details come from the official client's config loaders
(in-cluster ServiceAccount, or ``KUBECONFIG``), so every auth form it supports works here.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote, urlencode

import urllib3

log = logging.getLogger("pidispatch.kubeapi")
MERGE_PATCH = "application/merge-patch+json"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class ApiError(Exception):
    """A non-2xx answer. ``status`` is the HTTP code (0 when the server could not be reached)."""

    def __init__(self, status: int, method: str, path: str, message: str, body: Any = None) -> None:
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status
        self.message = message
        self.body = body  # the answer's JSON (a ``Status``), when it had one


@runtime_checkable
class KubeApi(Protocol):
    """What the job flow asks of the API server, on raw paths with dicts: the calls it makes of ``Api``.

    ``Api`` is the one that speaks HTTP; the unit tests run the same job flow against an in-memory one
    (``testkit.memoryapi.MemoryApi``). Missing objects are ``ApiError`` 404 (``None`` from ``get_or_none``),
    a name taken on create is 409, a failed resourceVersion precondition on patch is 409.
    """

    def get(self, path: str) -> dict[str, Any]: ...

    def get_or_none(self, path: str) -> dict[str, Any] | None: ...

    def list(self, path: str, **params: Any) -> list[dict[str, Any]]: ...

    def pages(self, path: str, *, limit: int = 500, **params: Any) -> Iterator[builtins.list[dict[str, Any]]]: ...

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def delete(self, path: str) -> Any: ...


class Api:
    """``get/list/create/patch/delete`` on raw API paths, returning dicts (the ``KubeApi`` over HTTPS)."""

    def __init__(self, server: str, *, ca_file: str | None = None, cert_file: str | None = None,
                 key_file: str | None = None, token: str | None = None, token_file: str | None = None,
                 timeout: float = 30.0, pool: int = 32, verify: bool = True, namespace: str | None = None,
                 retries: int = 3) -> None:
        self.server = server.rstrip("/")
        # Called with (method, path) before every request that is not a GET: the leader's fence
        # (``pidispatch/election/fence.py``), which ends a process that may have lost the Lease before it writes.
        self.write_guard: Callable[[str, str], None] | None = None
        # The namespace the configuration names (the Pod's own, or the kubeconfig context's), if any.
        self.namespace = namespace
        self._token = token
        self._token_file = token_file
        self._token_read = 0.0
        self._token_lock = threading.Lock()
        self._timeout = urllib3.Timeout(connect=5.0, read=timeout)
        if not verify:
            # Only when the kubeconfig asks for it (insecure-skip-tls-verify), and never silently.
            log.warning("TLS verification of the API server at %s is off (insecure-skip-tls-verify)", self.server)
        # Verified against the configuration's CA, or the system's when it names none.
        self._http = urllib3.PoolManager(
            num_pools=4, maxsize=pool, block=False, cert_reqs="CERT_REQUIRED" if verify else "CERT_NONE",
            ca_certs=ca_file, cert_file=cert_file, key_file=key_file,
            retries=urllib3.Retry(total=retries, connect=retries, read=0, status=0, backoff_factor=0.2,
                                  allowed_methods=None),
        )

    @classmethod
    def from_environment(cls, **options: Any) -> Api:
        """In-cluster ServiceAccount when running in a Pod, else the current ``KUBECONFIG`` context.

        Raises the official loader's ``ConfigException`` (or ``OSError``) when there is neither.
        """
        token_file = os.path.join(SA_DIR, "token")
        if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(token_file):
            host = os.environ["KUBERNETES_SERVICE_HOST"]
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            host = f"[{host}]" if ":" in host else host
            return cls(f"https://{host}:{port}", ca_file=os.path.join(SA_DIR, "ca.crt"), token_file=token_file,
                       namespace=_pod_namespace(), **options)
        from kubernetes import client, config

        cfg = client.Configuration()
        # KUBECONFIG as it is now: the loader's own default is read once, when the module is imported.
        files = os.environ.get("KUBECONFIG") or None
        config.load_kube_config(config_file=files, client_configuration=cfg)
        _, active = config.list_kube_config_contexts(config_file=files)
        token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        if token and token.lower().startswith("bearer "):
            token = token[7:]
        return cls(cfg.host, ca_file=cfg.ssl_ca_cert, cert_file=cfg.cert_file, key_file=cfg.key_file, token=token,
                   verify=bool(cfg.verify_ssl), namespace=(active.get("context") or {}).get("namespace"), **options)

    def namespace_default(self) -> str:
        return self.namespace or "default"

    def _bearer(self) -> str | None:
        if self._token_file is None:
            return self._token
        with self._token_lock:
            # Bound tokens rotate (the kubelet rewrites the file); re-read it every minute.
            if self._token is None or time.monotonic() - self._token_read > 60:
                with open(self._token_file) as f:
                    self._token = f.read().strip()
                self._token_read = time.monotonic()
            return self._token

    def request(self, method: str, path: str, body: Any = None, *, params: dict[str, Any] | None = None,
                content_type: str = "application/json") -> Any:
        if method != "GET" and self.write_guard is not None:
            self.write_guard(method, path)
        url = self.server + path + (("?" + urlencode(params)) if params else "")
        headers = {"Accept": "application/json"}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type
        try:
            response = self._http.request(method, url, body=data, headers=headers, timeout=self._timeout)
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(0, method, path, f"cannot reach the API server: {exc}") from None
        payload = json_body(response.data)
        if response.status >= 300:
            message = payload.get("message", "") if isinstance(payload, dict) else response.data[:200].decode(
                "utf-8", "replace")
            raise ApiError(response.status, method, path, message, payload)
        return payload

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, path: str, **params: Any) -> list[dict[str, Any]]:
        """Every item, following ``continue`` tokens in pages of 500."""
        return [item for page in self.pages(path, **params) for item in page]

    # `builtins.list`: in this class `list` is the method above.
    def pages(self, path: str, *, limit: int = 500, **params: Any) -> Iterator[builtins.list[dict[str, Any]]]:
        """The items a page at a time (``limit`` each), fetched as the caller asks for them.

        Only one page is held, so a walk over 100 000 objects stays small. Each page is fetched when the
        previous one is done with; a walk that outlasts the snapshot the first page was read at (the API
        server keeps it until etcd compacts, about five minutes) gets 410 Gone, and carries on with the
        token that answer offers: the rest of the list as it is now, not as it was at the first page.
        """
        query: dict[str, Any] = {"limit": limit, **params}
        while True:
            try:
                page = self.request("GET", path, params=query)
            except ApiError as exc:
                status = exc.body if isinstance(exc.body, dict) else {}
                token = (status.get("metadata") or {}).get("continue")
                if exc.status != 410 or "continue" not in query or not token:
                    raise
                log.info("listing %s outlasted its snapshot; continuing with the list as it is now", path)
                query["continue"] = token
                continue
            yield page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
            query["continue"] = token

    def stream(self, path: str, *, params: dict[str, Any], read_timeout: float) -> Iterator[dict[str, Any]]:
        """A watch's events as they arrive: one JSON object per line of the chunked answer (``election/watch.py``).

        ``read_timeout`` bounds the silence between two chunks, not the whole answer: a watch stays open
        for minutes. A non-2xx answer is :class:`ApiError`; a line that is not a JSON object ends the stream
        with ``ApiError`` 0, so the caller resumes rather than acting on half an event.
        """
        url = self.server + path + "?" + urlencode(params)
        headers = {"Accept": "application/json"}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            response = self._http.request("GET", url, headers=headers, preload_content=False, retries=False,
                                          timeout=urllib3.Timeout(connect=5.0, read=read_timeout))
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(0, "GET", path, f"cannot reach the API server: {exc}") from None
        try:
            if response.status >= 300:
                payload = json_body(response.data)
                message = payload.get("message", "") if isinstance(payload, dict) else ""
                raise ApiError(response.status, "GET", path, message, payload)
            try:
                # urllib3 yields a chunked answer's lines as each chunk arrives: one event, one chunk.
                for line in response:
                    if not line.strip():
                        continue
                    event = json_body(line)
                    if not isinstance(event, dict):
                        raise ApiError(0, "GET", path, "a watch line that is not a JSON object")
                    yield event
            except urllib3.exceptions.HTTPError as exc:
                raise ApiError(0, "GET", path, f"the watch broke off: {exc}") from None
        finally:
            # Closed, not pooled: a watch left half-read (stopped, broken off) must not be reused mid-answer.
            response.close()
            response.release_conn()

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body)

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, body, content_type=MERGE_PATCH)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)


def _pod_namespace() -> str | None:
    try:
        with open(os.path.join(SA_DIR, "namespace")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def json_body(data: bytes) -> Any:
    """An HTTP response body as JSON, or ``None`` when it is empty or not JSON (an error page, say)."""
    if not data:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def name_segment(name: str) -> str:
    return quote(name, safe="")

