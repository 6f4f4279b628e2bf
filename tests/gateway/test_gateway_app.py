"""The gateway's listeners, settings and command: probes and metrics on their own port, the connection cap
and head deadline on the TLS port, a graceful stop that lets a reply in flight finish, ``pidispatch gateway``'s
configuration errors."""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pidispatch.gateway.app import ListenerLimits
from pidispatch.gateway.providers import OPENAI_COMPLETIONS, Provider
from pidispatch.settings import ConfigError
from pidispatch.settings.gatewayserver import GatewaySettings
from testkit.gatewaykit import GatewayServer, capability, claims, secrets
from testkit.scripted_model import ScriptedModel, Usage
from testkit.transferkit import Pki, make_pki

JOB = claims(credentials={"FAKE_API_KEY": "openai"})


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("gateway-app-pki"), "gateway")


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as m:
        yield m


def serve(pki: Pki, model: ScriptedModel, limits: ListenerLimits | None = None) -> GatewayServer:
    providers = {"fake": Provider("fake", {OPENAI_COMPLETIONS: model.base_url}, ("FAKE_API_KEY",))}
    return GatewayServer(pki, providers, secrets({"openai": "sk-real"}), limits=limits)


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def chat_request(g: GatewayServer, pki: Pki) -> http.client.HTTPResponse:
    conn = http.client.HTTPSConnection("127.0.0.1", g.port, context=ssl.create_default_context(cafile=str(pki.ca)),
                                       timeout=30)
    conn.request("POST", "/model/fake/chat/completions",
                 body=json.dumps({"model": "fake-model", "messages": [], "stream": True}),
                 headers={"Authorization": f"Bearer {capability(JOB)}", "Content-Type": "application/json"})
    return conn.getresponse()


def test_probes_and_metrics_are_on_their_own_port(pki: Pki, model: ScriptedModel) -> None:
    model.reply("hi", usage=Usage(prompt_tokens=100, completion_tokens=4, cached_tokens=10))
    with serve(pki, model) as g:
        assert get(g.metrics_port, "/healthz") == (200, "ok\n")
        assert get(g.metrics_port, "/readyz") == (200, "ready\n")
        assert chat_request(g, pki).read().rstrip().endswith(b"[DONE]")
        conn = http.client.HTTPSConnection("127.0.0.1", g.port,
                                           context=ssl.create_default_context(cafile=str(pki.ca)), timeout=10)
        conn.request("GET", "/model/nowhere/chat/completions", headers={"Authorization": f"Bearer {capability(JOB)}"})
        refused = conn.getresponse()
        assert refused.status == 403
        refused.read()
        status, text = get(g.metrics_port, "/metrics")
        assert status == 200
        assert 'pidispatch_gateway_tokens_total{kind="input"} 90.0' in text
        assert 'pidispatch_gateway_tokens_total{kind="cacheRead"} 10.0' in text
        assert 'pidispatch_gateway_model_requests_total{api="openai-completions",status="2xx"} 1.0' in text
        assert 'pidispatch_gateway_refusals_total{reason="unknown-provider"} 1.0' in text
        assert "pidispatch_gateway_upstream_seconds_count" in text
        # The jobs' port does not serve them.
        conn.request("GET", "/metrics")
        assert conn.getresponse().status == 404


def test_a_connection_over_the_cap_is_dropped_and_an_idle_one_meets_the_head_deadline(pki: Pki,
                                                                                      model: ScriptedModel) -> None:
    with serve(pki, model, ListenerLimits(max_connections=2, head_seconds=0.5, idle_seconds=5)) as g:
        held = [socket.create_connection(("127.0.0.1", g.port)) for _ in range(2)]
        time.sleep(0.1)
        over = socket.create_connection(("127.0.0.1", g.port))
        over.settimeout(5)
        try:
            assert over.recv(1) == b""
        except ConnectionResetError:
            pass
        for sock in held:  # never sent a byte: closed at the head deadline
            sock.settimeout(5)
            try:
                assert sock.recv(1) == b""
            except ConnectionResetError:
                pass
        assert g.gateway.open_connections() == 0
        assert chat_request(g, pki).status == 200  # the slots are free again


def test_a_stop_lets_a_reply_in_flight_finish_and_turns_readiness_off(pki: Pki, model: ScriptedModel) -> None:
    model.reply("one two three four five six", interval=0.2)
    g = serve(pki, model)
    response = chat_request(g, pki)
    first = response.read1(65536)
    stopper = threading.Thread(target=g.close)
    stopper.start()
    time.sleep(0.1)
    assert get(g.metrics_port, "/readyz")[0] == 503
    rest = response.read()
    stopper.join(30)
    assert first.startswith(b"data: ") and rest.rstrip().endswith(b"data: [DONE]")
    assert g.ledger.figures[JOB.uid].requests == 1


def base_env(tmp_path: Path, pki: Pki) -> dict[str, str]:
    key = tmp_path / "gateway.key"
    key.write_bytes(os.urandom(32).hex().encode())
    return {"PI_DISPATCH_NAMESPACE": "pi", "POD_NAME": "pi-dispatch-gateway-0", "PI_GATEWAY_CERT_FILE": str(pki.cert),
            "PI_GATEWAY_KEY_FILE": str(pki.key), "PI_GATEWAY_KEY": str(key)}


def test_settings_are_read_strictly(tmp_path: Path, pki: Pki) -> None:
    env = base_env(tmp_path, pki)
    settings = GatewaySettings.from_env(env)
    assert (settings.port, settings.metrics_port, settings.replica) == (8443, 9090, "pi-dispatch-gateway-0")
    for name, value in (("PI_GATEWAY_CERT_FILE", None), ("PI_GATEWAY_METRICS_PORT", "8443"),
                        ("PI_GATEWAY_MAX_CONNECTIONS", "0"), ("PI_GATEWAY_HEAD_SECONDS", ""),
                        ("POD_NAME", "a/b")):
        broken = dict(env)
        if value is None:
            broken.pop(name)
        else:
            broken[name] = value
        with pytest.raises(ConfigError, match=name):
            GatewaySettings.from_env(broken)


def run_cli(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pidispatch", "gateway"], env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=60)


def test_the_command_exits_2_on_a_configuration_error(tmp_path: Path, pki: Pki) -> None:
    done = run_cli({})
    assert done.returncode == 2 and "PI_DISPATCH_NAMESPACE" in done.stderr
    env = base_env(tmp_path, pki)
    models = tmp_path / "models.json"
    models.write_text(json.dumps({"providers": {"p": {"baseUrl": "https://x/v1", "api": "openai-completions",
                                                      "apiKey": "!cat /etc/shadow"}}}))
    done = run_cli({**env, "PI_GATEWAY_MODELS_FILE": str(models)})
    assert done.returncode == 2 and "command" in done.stderr and "shadow" not in done.stderr
    short = tmp_path / "short.key"
    short.write_bytes(b"short")
    done = run_cli({**env, "PI_GATEWAY_KEY": str(short)})
    assert done.returncode == 2 and "at least 32" in done.stderr
