"""The model path over real TLS and real HTTP: the scripted model (OpenAI chat completions) and a fake Anthropic
Messages API as upstreams, the gateway between them and a plain HTTPS client (docs/gateway.md#the-model-path)."""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pidispatch.contract.gateway_wire import REFUSAL_HEADER
from pidispatch.gateway.ledger import MemoryLedger
from pidispatch.gateway.model import NO_USAGE
from pidispatch.gateway.providers import ANTHROPIC_MESSAGES, OPENAI_COMPLETIONS, Provider
from testkit.fake_anthropic import AnthropicUsage, FakeAnthropic
from testkit.gatewaykit import GatewayServer, capability, claims, secrets
from testkit.scripted_model import ScriptedModel, Usage
from testkit.transferkit import Pki, make_pki

OPENAI_KEY = "sk-upstream-openai-0123456789"
ANTHROPIC_KEY = "sk-ant-upstream-0123456789"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("gateway-pki"), "gateway")


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as m:
        yield m


@pytest.fixture
def anthropic() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(ANTHROPIC_KEY, usage=AnthropicUsage(input_tokens=120, output_tokens=33,
                                                           cache_read_input_tokens=40,
                                                           cache_creation_input_tokens=7)) as fake:
        yield fake


@pytest.fixture
def gateway(pki: Pki, model: ScriptedModel, anthropic: FakeAnthropic) -> Iterator[GatewayServer]:
    providers = {
        "fake": Provider("fake", {OPENAI_COMPLETIONS: model.base_url}, ("FAKE_API_KEY",)),
        "claude": Provider("claude", {ANTHROPIC_MESSAGES: anthropic.base_url}, ("ANTHROPIC_API_KEY",)),
    }
    source = secrets({"openai": OPENAI_KEY, "anthropic": ANTHROPIC_KEY})
    with GatewayServer(pki, providers, source, MemoryLedger()) as g:
        yield g


JOB = claims(credentials={"FAKE_API_KEY": "openai", "ANTHROPIC_API_KEY": "anthropic"})


def connect(gateway: GatewayServer, pki: Pki) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(pki.ca))
    return http.client.HTTPSConnection("127.0.0.1", gateway.port, context=context, timeout=30)


def chat(stream: bool = True) -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": stream,
            "stream_options": {"include_usage": True}}


def post(gateway: GatewayServer, pki: Pki, path: str, body: dict[str, Any], headers: dict[str, str],
         ) -> tuple[int, dict[str, str], bytes]:
    conn = connect(gateway, pki)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **headers})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def bearer(job: Any = JOB) -> dict[str, str]:
    return {"Authorization": f"Bearer {capability(job)}"}


def figures(gateway: GatewayServer, job: Any = JOB) -> Any:
    return gateway.ledger.figures[job.uid]


def test_chunks_reach_the_client_while_the_upstream_is_still_streaming(gateway: GatewayServer, pki: Pki,
                                                                       model: ScriptedModel) -> None:
    interval = 0.25
    model.reply("one two three four five six seven eight", interval=interval,
                usage=Usage(prompt_tokens=1000, completion_tokens=7, cached_tokens=300))
    conn = connect(gateway, pki)
    started = time.monotonic()
    conn.request("POST", "/model/fake/chat/completions", body=json.dumps(chat()),
                 headers={"Content-Type": "application/json", **bearer()})
    response = conn.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type", "").startswith("text/event-stream")
    first = response.read1(65536)
    first_at = time.monotonic() - started
    rest = response.read()
    total = time.monotonic() - started
    conn.close()
    assert first.startswith(b"data: ")
    # The scripted model sends 8 chunks a quarter second apart: the first must arrive long before the last.
    assert total - first_at > 5 * interval, (first_at, total)
    assert rest.rstrip().endswith(b"data: [DONE]")


def test_usage_counted_is_what_the_provider_sent_mapped_as_pi_maps_it(gateway: GatewayServer, pki: Pki,
                                                                      model: ScriptedModel) -> None:
    model.reply("hello", usage=Usage(prompt_tokens=1000, completion_tokens=7, cached_tokens=300))
    model.reply("again", usage=Usage(prompt_tokens=50, completion_tokens=5))
    status, _, body = post(gateway, pki, "/model/fake/chat/completions", chat(), bearer())
    assert status == 200 and b'"prompt_tokens": 1000' in body
    status, _, body = post(gateway, pki, "/model/fake/chat/completions", chat(stream=False), bearer())
    assert status == 200 and json.loads(body)["usage"]["prompt_tokens"] == 50
    got = figures(gateway)
    # pi: input = prompt - cached, cacheRead = cached, output = completion.
    assert (got.input, got.output, got.cache_read, got.cache_write, got.requests) == (700 + 50, 7 + 5, 300, 0, 2)
    assert not got.refusals


def test_the_key_reaches_the_upstream_and_the_capability_never_does(gateway: GatewayServer, pki: Pki,
                                                                    model: ScriptedModel,
                                                                    anthropic: FakeAnthropic) -> None:
    cap = capability(JOB)
    model.reply("hi")
    status, _, _ = post(gateway, pki, "/model/fake/chat/completions", chat(), {"Authorization": f"Bearer {cap}"})
    assert status == 200
    status, _, _ = post(gateway, pki, "/model/claude/v1/messages",
                        {"model": "claude-fake-1", "max_tokens": 64, "stream": True,
                         "messages": [{"role": "user", "content": "hi"}]},
                        {"x-api-key": cap, "anthropic-version": "2023-06-01"})
    assert status == 200
    [openai_request] = model.log
    [anthropic_request] = anthropic.requests
    assert openai_request["headers"]["authorization"] == f"Bearer {OPENAI_KEY}"
    assert anthropic_request["headers"]["x-api-key"] == ANTHROPIC_KEY
    assert "authorization" not in anthropic_request["headers"]
    assert anthropic_request["headers"]["anthropic-version"] == "2023-06-01"  # the client's own headers pass
    for seen in (openai_request, anthropic_request):
        assert cap not in json.dumps(seen)
        assert cap.split(".")[2] not in json.dumps(seen)


def test_an_anthropic_stream_is_counted_from_message_start_and_message_delta(gateway: GatewayServer, pki: Pki,
                                                                             anthropic: FakeAnthropic) -> None:
    body = {"model": "claude-fake-1", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    status, headers, reply = post(gateway, pki, "/model/claude/v1/messages", body, {"x-api-key": capability(JOB)})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = [line[7:] for line in reply.decode().splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    status, _, reply = post(gateway, pki, "/model/claude/v1/messages", dict(body, stream=False),
                            {"x-api-key": capability(JOB)})
    assert status == 200 and json.loads(reply)["usage"]["input_tokens"] == 120
    got = figures(gateway)
    # message_start gives input 120, cache 40 / 7 and output 1; message_delta the final output 33.
    assert (got.input, got.output, got.cache_read, got.cache_write, got.requests) == (240, 66, 80, 14, 2)


def test_a_job_over_its_budget_is_refused_without_reaching_the_provider(gateway: GatewayServer, pki: Pki,
                                                                       model: ScriptedModel) -> None:
    job = claims(uid="budget-job", max_tokens=1000, credentials={"FAKE_API_KEY": "openai"})
    model.reply("a", usage=Usage(prompt_tokens=600, completion_tokens=10))
    model.reply("b", usage=Usage(prompt_tokens=700, completion_tokens=10))  # crosses the budget: it finishes
    model.reply("never sent")
    for _ in range(2):
        status, _, body = post(gateway, pki, "/model/fake/chat/completions", chat(), bearer(job))
        assert status == 200 and body.rstrip().endswith(b"[DONE]")
    status, headers, body = post(gateway, pki, "/model/fake/chat/completions", chat(), bearer(job))
    assert status == 403, "a spent budget is a 403: clients retry a 429"
    assert headers[REFUSAL_HEADER.lower()] == "token-budget"
    assert json.loads(body)["error"]["reason"] == "token-budget"
    assert len(model.log) == 2  # the third request never reached the provider
    got = figures(gateway, job)
    assert got.tokens == 1320 and got.requests == 2 and got.refusals == {"token-budget": 1}


def test_a_stream_without_usage_is_counted_as_a_request_and_an_anomaly(pki: Pki) -> None:
    with FakeAnthropic(ANTHROPIC_KEY, report_usage=False) as silent:
        providers = {"claude": Provider("claude", {ANTHROPIC_MESSAGES: silent.base_url}, ("ANTHROPIC_API_KEY",))}
        with GatewayServer(pki, providers, secrets({"anthropic": ANTHROPIC_KEY})) as g:
            status, _, _ = post(g, pki, "/model/claude/v1/messages",
                                {"model": "m", "max_tokens": 8, "stream": True, "messages": []},
                                {"x-api-key": capability(JOB)})
            assert status == 200
            got = figures(g)
            assert got.requests == 1 and got.tokens == 0 and got.refusals == {NO_USAGE: 1}


@pytest.mark.parametrize(("path", "headers", "status", "reason"), [
    ("/model/fake/chat/completions", {}, 401, "no-capability"),
    ("/model/fake/chat/completions", {"Authorization": "Bearer pdg1.e30.AAAA"}, 401, "bad-capability"),
    ("/model/nowhere/chat/completions", None, 403, "unknown-provider"),
    ("/model/fake/v1/models", None, 403, "unknown-provider"),
    ("/model/fake/../claude/v1/messages", None, 403, "unknown-provider"),
    ("/model/claude/v1/messages", "no-key", 403, "no-provider-key"),
], ids=["no capability", "a forged capability", "an unknown provider", "a path of no wire API", "a path stepping out",
        "no key for the provider"])
def test_refusals_never_reach_an_upstream(gateway: GatewayServer, pki: Pki, model: ScriptedModel,
                                          anthropic: FakeAnthropic, path: str, headers: Any, status: int,
                                          reason: str) -> None:
    if headers is None:
        headers = bearer()
    elif headers == "no-key":
        headers = bearer(claims(uid="keyless", credentials={"FAKE_API_KEY": "openai"}))
    conn = connect(gateway, pki)
    conn.putrequest("POST", path, skip_accept_encoding=True)  # the path as written (no normalising)
    data = json.dumps(chat()).encode()
    for name, value in {"Content-Type": "application/json", "Content-Length": str(len(data)), **headers}.items():
        conn.putheader(name, value)
    conn.endheaders(data)
    response = conn.getresponse()
    body = json.loads(response.read())
    conn.close()
    assert (response.status, response.getheader(REFUSAL_HEADER)) == (status, reason)
    assert body["error"]["type"] == "pi_gateway_refusal" and body["error"]["reason"] == reason
    assert model.log == [] and anthropic.requests == []


def test_the_gateways_logs_hold_neither_the_capability_nor_a_key(gateway: GatewayServer, pki: Pki,
                                                                 model: ScriptedModel,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    cap = capability(JOB)
    model.reply("hi").error(500)
    post(gateway, pki, "/model/fake/chat/completions", chat(), {"Authorization": f"Bearer {cap}"})
    post(gateway, pki, "/model/fake/chat/completions", chat(), {"Authorization": f"Bearer {cap}"})
    post(gateway, pki, "/model/nowhere/chat/completions", chat(), {"Authorization": f"Bearer {cap}"})
    post(gateway, pki, "/model/fake/chat/completions", chat(), {"Authorization": f"Bearer {cap}x"})
    text = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    assert caplog.records, "nothing logged: the test would prove nothing"
    for secret in (cap, cap.split(".")[2], OPENAI_KEY, ANTHROPIC_KEY):
        assert secret not in text


def test_an_unreachable_upstream_is_a_502_and_counts_nothing(pki: Pki, tmp_path: Path) -> None:
    providers = {"fake": Provider("fake", {OPENAI_COMPLETIONS: "http://127.0.0.1:9/v1"}, ("FAKE_API_KEY",))}
    with GatewayServer(pki, providers, secrets({"openai": OPENAI_KEY})) as g:
        status, _, body = post(g, pki, "/model/fake/chat/completions", chat(), bearer())
        assert status == 502 and json.loads(body)["error"]["type"] == "pi_gateway_upstream"
        assert JOB.uid not in g.ledger.figures


def test_an_upstream_that_breaks_off_mid_reply_is_seen_broken_off_by_the_job(pki: Pki) -> None:
    """A chunked reply whose upstream closes before its terminator: the job's reply must not look whole."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))

    def serve_once() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            event = b'data: {"choices":[]}\n\n'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + b"%x\r\n" % len(event) + event + b"\r\n")
            time.sleep(0.3)  # one whole chunk, then gone without the terminator

    thread = threading.Thread(target=serve_once, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    providers = {"fake": Provider("fake", {OPENAI_COMPLETIONS: base}, ("FAKE_API_KEY",))}
    with GatewayServer(pki, providers, secrets({"openai": OPENAI_KEY})) as g:
        conn = connect(g, pki)
        conn.request("POST", "/model/fake/chat/completions", body=json.dumps(chat()),
                     headers={"Content-Type": "application/json", **bearer()})
        response = conn.getresponse()
        assert response.status == 200
        with pytest.raises(http.client.IncompleteRead):
            response.read()
        conn.close()
        deadline = time.monotonic() + 5  # counted as the handler ends, just after the job saw the abort
        while JOB.uid not in g.ledger.figures and time.monotonic() < deadline:
            time.sleep(0.02)
        got = figures(g)
        assert got.requests == 1 and got.refusals == {NO_USAGE: 1}
    listener.close()
