"""TLS verification of the API client is never silently off (``kubeapi.Api``).

It was off whenever the kubeconfig named no CA file; now it verifies against the kubeconfig's CA, or
the system's when there is none, and is off only when the kubeconfig says ``insecure-skip-tls-verify``,
with a warning. Real kubeconfig files through the official client's loader; a real TLS handshake
against a local server whose certificate no CA vouches for.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from pidispatch.kubeapi import Api, ApiError
from testkit.gitforge import make_tls


def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: str, **cluster: Any) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "team"}}],
    }))
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def cert_reqs(api: Api) -> str:
    return str(api._http.connection_pool_kw.get("cert_reqs"))


def test_without_a_ca_file_the_system_cas_verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig(tmp_path, monkeypatch, "https://127.0.0.1:1")
    api = Api.from_environment()
    assert cert_reqs(api) == "CERT_REQUIRED", "no CA named must not mean no verification"
    assert api.namespace_default() == "team"


def test_insecure_skip_tls_verify_turns_it_off_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    kubeconfig(tmp_path, monkeypatch, "https://127.0.0.1:1", **{"insecure-skip-tls-verify": True})
    with caplog.at_level(logging.WARNING, logger="pidispatch.kubeapi"):
        api = Api.from_environment()
    assert cert_reqs(api) == "CERT_NONE"
    assert any("TLS verification" in r.getMessage() and "insecure-skip-tls-verify" in r.getMessage()
               for r in caplog.records)


@pytest.fixture
def untrusted_server(tmp_path: Path) -> Any:
    """A TLS server on loopback with a self-signed certificate (trusted by nobody)."""
    ca, cert, key = make_tls(tmp_path / "tls")  # no openssl binary needed; the CA goes to no client unless asked
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(65536)
                    tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                                b"Connection: close\r\n\r\n{}")
            except (ssl.SSLError, OSError):
                pass  # the client refused our certificate: what the verifying case expects

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{listener.getsockname()[1]}", ca
    stop.set()
    thread.join(5)
    listener.close()


def test_an_untrusted_certificate_is_refused_unless_verification_was_asked_off(untrusted_server: Any) -> None:
    server, ca = untrusted_server
    with pytest.raises(ApiError) as refused:
        Api(server, retries=0).get("/version")
    assert refused.value.status == 0 and "CERTIFICATE_VERIFY_FAILED" in refused.value.message
    assert Api(server, ca_file=str(ca), retries=0).get("/version") == {}, "its own CA vouches for it"
    assert Api(server, verify=False, retries=0).get("/version") == {}
