"""The real pi 0.73.1 through the gateway: its models.json routes the provider to ``https://<gateway>/model/fake``
over TLS (the test CA by ``NODE_EXTRA_CA_CERTS``) with the capability as its API key, as a job's runner will
(docs/gateway.md#the-model-path). What pi's transcript says it used and cost is what the gateway's ledger counted, the
provider saw the real key and never the capability, and the gateway's logs hold neither."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from pidispatch.contract.gateway_wire import ENV_TOKEN
from pidispatch.gateway.ledger import MemoryLedger
from pidispatch.gateway.prices import price_table
from pidispatch.gateway.providers import OPENAI_COMPLETIONS, Provider
from testkit.gatewaykit import GatewayServer, capability, claims, secrets
from testkit.pitool import pi_binary, run_pi
from testkit.scripted_model import MODEL_ID, ScriptedModel, Usage, write_agent_dir
from testkit.transferkit import make_pki

pytestmark = pytest.mark.pi  # runs the real pi (make pi): not in `make unit`

UPSTREAM_KEY = "sk-upstream-for-pi-0123456789"
PRICE = {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75}  # US dollars per million tokens


def assistant_usage(session: Path) -> dict[str, float]:
    """The tokens and cost pi wrote on its replies (the cost pi priced them at, from models.json's prices)."""
    total: dict[str, float] = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "cost": 0.0}
    for line in session.read_text().splitlines():
        entry: dict[str, Any] = json.loads(line)
        if entry.get("type") == "message" and entry["message"]["role"] == "assistant":
            usage = entry["message"]["usage"]
            for name in ("input", "output", "cacheRead", "cacheWrite"):
                total[name] += usage[name]
            total["cost"] += usage["cost"]["total"]
    return total


def test_pis_transcript_usage_equals_the_gateways_ledger(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    try:
        pi_binary()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.fail(str(exc))
    caplog.set_level(logging.DEBUG)
    pki = make_pki(tmp_path / "pki", "gateway")
    job = claims(max_tokens=100_000, credentials={"FAKE_API_KEY": "fake"})
    cap = capability(job)
    with ScriptedModel() as model:
        providers = {"fake": Provider("fake", {OPENAI_COMPLETIONS: model.base_url}, ("FAKE_API_KEY",))}
        ledger = MemoryLedger()
        prices = price_table({"providers": {"fake": {"models": [{"id": MODEL_ID, "cost": PRICE}]}}})
        with GatewayServer(pki, providers, secrets({"fake": UPSTREAM_KEY}), ledger, prices=prices) as gateway:
            agent = write_agent_dir(tmp_path / "agent", gateway.model_url("fake"))
            models = json.loads((agent / "models.json").read_text())
            models["providers"]["fake"]["apiKey"] = ENV_TOKEN  # pi reads the capability from the environment
            models["providers"]["fake"]["models"][0]["cost"] = PRICE  # pi prices its replies, as the gateway does
            (agent / "models.json").write_text(json.dumps(models))
            model.tool_call("bash", {"command": "echo through-the-gateway"},
                            usage=Usage(prompt_tokens=1200, completion_tokens=30, cached_tokens=200))
            model.reply("done", usage=Usage(prompt_tokens=1300, completion_tokens=9, cached_tokens=1100,
                                            cache_write_tokens=50))
            model.reply("second turn", interval=0.05, usage=Usage(prompt_tokens=1400, completion_tokens=12))
            cwd = tmp_path / "work"
            cwd.mkdir()
            session = tmp_path / "s.jsonl"
            env = {"NODE_EXTRA_CA_CERTS": str(pki.ca), ENV_TOKEN: cap}
            for prompt in ("run the command", "and again"):
                done = run_pi("-p", "--session", str(session), prompt, agent_dir=agent, home=tmp_path / "home",
                              cwd=cwd, timeout=60, env=env)
                assert done.returncode == 0, done.stderr
            figures = ledger.figures[job.uid]
    assert len(model.log) == 3
    transcript = assistant_usage(session)
    assert transcript == {"input": figures.input, "output": figures.output, "cacheRead": figures.cache_read,
                          "cacheWrite": figures.cache_write, "cost": pytest.approx(figures.cost, rel=1e-12)}
    assert figures.cost > 0 and figures.unpriced == 0
    # pi's mapping: cacheRead = cached - cache written (1100 - 50), input = prompt - cacheRead - cache written.
    assert (figures.input, figures.output, figures.cache_read, figures.cache_write) == (1000 + 200 + 1400, 51,
                                                                                         200 + 1050, 50)
    assert figures.requests == 3 and not figures.refusals
    for request in model.log:
        assert request["headers"]["authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert cap not in json.dumps(request)
    logged = caplog.text + "".join(str(record.__dict__) for record in caplog.records)
    assert "gateway_model_reply" in logged
    for secret in (cap, cap.split(".")[2], UPSTREAM_KEY):
        assert secret not in logged
