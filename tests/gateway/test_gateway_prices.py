"""What a reply cost, priced by the gateway as pi prices it (docs/gateway.md#cost): pi's own table and its own
``calculateCost`` (run with the installed pi), a deployment's ``models.json`` laid over them, and a reply through
the gateway over real TLS recorded with its cost, or as unpriced."""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from pidispatch.gateway.ledger import MemoryLedger
from pidispatch.gateway.prices import (
    Price,
    builtin_prices,
    models_json_prices,
    price_of,
    price_table,
    requested_model,
)
from pidispatch.gateway.providers import BUILTIN, OPENAI_COMPLETIONS, Provider
from testkit.gatewaykit import GatewayServer, capability, claims, secrets
from testkit.scripted_model import ScriptedModel, Usage
from testkit.transferkit import make_pki
from tools import piprices

PI_AI = piprices.PI_AI


def node_or_fail() -> str:
    node = shutil.which("node")
    if node is None or not PI_AI.is_dir():
        pytest.fail(f"pi is not installed at {PI_AI} (make pi), or node is missing")
    return node


@pytest.mark.pi
def test_the_committed_table_is_the_installed_pis() -> None:
    node_or_fail()
    expected = piprices.render(piprices.pis_prices(list(BUILTIN)))
    assert piprices.PRICES.read_text() == expected, "prices.json is not pi's: run `python -m tools.piprices`"


_CALCULATE = """
const { calculateCost } = await import(process.argv[1] + "/models.js");
const { MODELS } = await import(process.argv[1] + "/models.generated.js");
const cases = JSON.parse(process.argv[2]);
const out = cases.map(([provider, model, u]) => {
  const usage = {input: u[0], output: u[1], cacheRead: u[2], cacheWrite: u[3], cost: {}};
  return calculateCost(MODELS[provider][model], usage).total;
});
console.log(JSON.stringify(out));
"""


@pytest.mark.pi
def test_a_replys_cost_is_what_pis_calculate_cost_makes_of_it() -> None:
    node = node_or_fail()
    table = builtin_prices()
    cases = [("anthropic", "claude-sonnet-4-5", [1200, 340, 50_000, 2048]),
             ("openai", "gpt-4.1", [98_765, 4321, 12_000, 0]),
             ("openrouter", next(iter(table["openrouter"])), [1, 2, 3, 4]),
             ("deepseek", next(iter(table["deepseek"])), [700_000, 9000, 0, 0])]
    done = subprocess.run([node, "--input-type=module", "-e", _CALCULATE, str(PI_AI), json.dumps(cases)],
                          capture_output=True, text=True, timeout=60, check=True)
    pis = json.loads(done.stdout)
    for (provider, model, (i, o, r, w)), theirs in zip(cases, pis, strict=True):
        ours = table[provider][model].of(input=i, output=o, cache_read=r, cache_write=w)
        assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-15), (provider, model)


def test_a_built_in_model_of_no_prices_is_unpriced_not_free() -> None:
    raw = json.loads(piprices.PRICES.read_text())
    zero = [(p, m) for p, models in raw.items() for m, figures in models.items() if not any(figures)]
    table = builtin_prices()
    for provider, model in zero:
        assert price_of(table, provider, model) is None
    assert price_of(table, "openai", "gpt-4.1") == Price(2, 8, 0.5, 0)


def test_models_json_prices_its_models_even_at_zero_and_lays_them_over_pis() -> None:
    models = {"providers": {
        "fake": {"baseUrl": "https://llm.internal/v1", "models": [
            {"id": "paid", "cost": {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75}},
            {"id": "free", "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}},
            {"id": "partial", "cost": {"input": 1, "output": 2}},
            {"id": "listed-without-cost"},
            {"id": "bad", "cost": {"input": -1}},
            {"id": "text", "cost": {"input": "1"}},
            "not-a-model"]},
        "openai": {"models": [{"id": "gpt-4.1", "cost": {"input": 1, "output": 1}}]},
    }}
    assert set(models_json_prices(models)["fake"]) == {"paid", "free", "partial"}
    table = price_table(models)
    assert price_of(table, "fake", "paid") == Price(3, 15, 0.3, 3.75)
    assert price_of(table, "fake", "free") == Price(0, 0, 0, 0), "listed at 0: free, so priced"
    assert price_of(table, "fake", "partial") == Price(1, 2, 0, 0), "a kind not given is 0, as in pi"
    for unpriced in ("listed-without-cost", "bad", "text", "unknown", None):
        assert price_of(table, "fake", unpriced) is None
    assert price_of(table, "openai", "gpt-4.1") == Price(1, 1, 0, 0), "the deployment's price wins"
    assert price_of(table, "openai", "gpt-4o") == builtin_prices()["openai"]["gpt-4o"], "the rest stay pi's"


@pytest.mark.parametrize(("body", "model"), [
    (b'{"model": "gpt-4.1", "messages": []}', "gpt-4.1"),
    (b'{"messages": [{"model": "not-this"}], "model": "claude-sonnet-4-5"}', "claude-sonnet-4-5"),
    (b'{"messages": []}', None), (b'{"model": ""}', None), (b'{"model": 7}', None), (b"[]", None),
    (b"not json", None), (b"", None), (b"[" * 100_000, None),
])
def test_the_model_is_the_request_bodys_own(body: bytes, model: str | None) -> None:
    assert requested_model(body) == model


def test_a_reply_through_the_gateway_is_recorded_with_its_cost_or_as_unpriced(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki", "gateway")
    job = claims(credentials={"FAKE_API_KEY": "fake"})
    prices = price_table({"providers": {"fake": {"models": [
        {"id": "priced", "cost": {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75}}]}}})
    ledger = MemoryLedger()
    with ScriptedModel() as model:
        providers = {"fake": Provider("fake", {OPENAI_COMPLETIONS: model.base_url}, ("FAKE_API_KEY",))}
        with GatewayServer(pki, providers, secrets({"fake": "sk-upstream"}), ledger, prices=prices) as gateway:
            model.reply("one", usage=Usage(prompt_tokens=1000, completion_tokens=100, cached_tokens=200))
            model.reply("two", usage=Usage(prompt_tokens=10, completion_tokens=1))
            for asked in ("priced", "not-in-any-table"):
                conn = http.client.HTTPSConnection("127.0.0.1", gateway.port, timeout=30,
                                                   context=ssl.create_default_context(cafile=str(pki.ca)))
                body = {"model": asked, "messages": [{"role": "user", "content": "hi"}], "stream": True,
                        "stream_options": {"include_usage": True}}
                conn.request("POST", "/model/fake/chat/completions", body=json.dumps(body),
                             headers={"Authorization": f"Bearer {capability(job)}",
                                      "Content-Type": "application/json"})
                response = conn.getresponse()
                assert response.status == 200
                response.read()
                conn.close()
    figures = ledger.figures[job.uid]
    # pi's mapping: input = prompt - cached (800), cacheRead 200; priced at 3/15/0.3 per million.
    assert figures.cost == pytest.approx((800 * 3 + 100 * 15 + 200 * 0.3) / 1e6)
    assert figures.unpriced == 1 and figures.requests == 2
    assert figures.to_json()["cost"] == round(figures.cost, 10)
