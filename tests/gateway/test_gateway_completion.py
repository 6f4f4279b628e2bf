"""A job behind the gateway, through the job flow (in-memory apiserver, real staging on disk): its Pod holds its
capability and no credential; its end takes the tokens from the gateway's ledger, keeps the report's as the
agent's claim, and a job the gateway stopped at its budget fails ``TokenBudget`` with nothing promoted."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from pidispatch.contract import gateway_wire as protocol
from pidispatch.contract.report import RunnerReport
from pidispatch.gateway.capability import verify
from pidispatch.jobflow.dispatcher import Dispatcher
from pidispatch.jobflow.podview import PodView
from pidispatch.jobflow.slots import Slots
from pidispatch.jobflow.usage import LEDGER_SETTLE_SECONDS, disagreement, settled_ledger, summed
from pidispatch.manifests.pod import gateway_secret_name
from pidispatch.settings import OperatorSettings, Settings
from pidispatch.settings.gateway import Gateway
from testkit.jobflow import Clock, condition, new_job, phase, pump
from testkit.memoryapi import NS, PODS, TRIGGERS, MemoryApi

KEY = b"g" * 48
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"


def dispatcher(api: MemoryApi, clock: Clock, tmp_path: Path) -> Dispatcher:
    key = tmp_path / "gateway.key"
    key.write_bytes(KEY)
    settings = OperatorSettings(store=Settings(), staging_dir=str(tmp_path / "staging"), max_concurrent_jobs=1,
                                job_credentials=(("OPENAI_API_KEY", "model-keys", "openai"),),
                                gateway=Gateway(url="https://pd-gateway.ns.svc", proxy="http://pd-gateway.ns.svc:3128",
                                                ca_configmap="pd-gateway-ca", key_file=str(key),
                                                default_max_tokens=50_000))
    d = Dispatcher(settings, api, NS)  # type: ignore[arg-type]
    d.slots = Slots(1, clock=clock)
    return d


def started(api: MemoryApi, clock: Clock, tmp_path: Path) -> tuple[Dispatcher, dict, str]:
    api.patch(f"{TRIGGERS}/fix", {"spec": {"run": {"maxTokens": 1000, "egress": ["registry.npmjs.org"]}}})
    d = dispatcher(api, clock, tmp_path)
    d.on_job("ADDED", new_job(api, "a"))
    pump(d)
    [pod] = api.pods()
    return d, pod, api.job("a")["metadata"]["uid"]


def test_the_pod_gets_a_capability_for_its_job_and_no_credential(api: MemoryApi, clock: Clock,
                                                                  tmp_path: Path) -> None:
    _, pod, uid = started(api, clock, tmp_path)
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert "OPENAI_API_KEY" not in env, "the model key stays with the gateway"
    assert env["GH_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": gateway_secret_name("a", uid),
                                                            "key": protocol.SECRET_KEY}
    secret = api.get(f"{SECRETS}/{gateway_secret_name('a', uid)}")
    claims = verify(KEY, secret["stringData"][protocol.SECRET_KEY])
    assert (claims.uid, claims.job, claims.repository, claims.max_tokens) == (uid, "a", "acme/widgets", 1000)
    assert claims.credentials["OPENAI_API_KEY"].secret == "model-keys"
    assert claims.egress == ("registry.npmjs.org",)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == uid
    assert secret["immutable"] is True and secret["type"] == "Opaque"  # the Secret policy's shape


def ledger(api: MemoryApi, uid: str, **replicas: dict) -> None:
    api.create(CONFIGMAPS, {"metadata": {"name": protocol.ledger_name(uid)},
                            "data": {name: json.dumps(figures) for name, figures in replicas.items()}})


def end(api: MemoryApi, d: Dispatcher, pod: dict, tokens: dict) -> None:
    path = f"{PODS}/{pod['metadata']['name']}"
    report = RunnerReport(outcome="completed", tokens=tokens).to_message()
    api.patch(path + "/status", {"status": {"phase": "Succeeded", "containerStatuses": [
        {"name": "pi", "state": {"terminated": {"exitCode": 0, "message": report}}}]}})
    d.on_pod(api.get(path))


def test_the_tokens_are_the_gateways_and_the_report_is_only_a_claim(api: MemoryApi, clock: Clock,
                                                                    tmp_path: Path) -> None:
    d, pod, uid = started(api, clock, tmp_path)
    ledger(api, uid, **{"gateway-0": {"input": 300, "output": 20, "cacheRead": 100, "cacheWrite": 0, "requests": 2,
                                      "cost": 0.0125},
                        "gateway-1": {"input": 50, "output": 5, "requests": 1, "cost": 0.0005,
                                      "refusals": {"host-not-allowed:evil.example": 2}}})
    end(api, d, pod, {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "total": 2, "calls": 3,
                      "unpriced": 0, "cost": 0.0})
    status = api.job("a")["status"]
    assert phase(api, "a") == "Succeeded"
    assert status["tokens"] == {"input": 350, "output": 25, "cacheRead": 100, "cacheWrite": 0, "total": 475,
                                "cost": 0.013, "calls": 3, "unpriced": 0}, (
        "summed over both replicas, priced by the gateway; not the cost the agent wrote")
    assert status["gateway"]["claimedTokens"]["input"] == 1
    assert status["gateway"]["refusals"] == {"host-not-allowed:evil.example": 2}
    events = [o for p, o in api.objects.items() if "/events/" in p]
    assert any(e.get("reason") == "TokensDisagree" and "input 1 (gateway 350)" in e.get("message", "")
               for e in events), events


def test_a_job_with_an_unpriced_reply_shows_no_cost(api: MemoryApi, clock: Clock, tmp_path: Path) -> None:
    """A partial sum would read as the job's whole cost: the count of unpriced replies instead, as the report."""
    d, pod, uid = started(api, clock, tmp_path)
    ledger(api, uid, **{"gateway-0": {"input": 100, "output": 10, "requests": 2, "cost": 0.5, "unpriced": 1}})
    end(api, d, pod, {"input": 100, "output": 10, "total": 110, "calls": 2, "unpriced": 0, "cost": 0.5})
    tokens = api.job("a")["status"]["tokens"]
    assert "cost" not in tokens and tokens["unpriced"] == 1 and tokens["calls"] == 2


def test_a_job_stopped_at_its_budget_fails_and_promotes_nothing(api: MemoryApi, clock: Clock,
                                                                tmp_path: Path) -> None:
    d, pod, uid = started(api, clock, tmp_path)
    ledger(api, uid, **{"gateway-0": {"input": 990, "output": 30, "requests": 4,
                                      "refusals": {protocol.REFUSED_BUDGET: 1}}})
    end(api, d, pod, {"input": 990, "output": 30, "total": 1020, "calls": 4, "unpriced": 4})
    assert phase(api, "a") == "Failed"
    done = condition(api, "a", "Completed")
    assert done["reason"] == "TokenBudget" and "nothing was promoted" in done["message"]


def test_without_a_ledger_the_job_ends_as_before_with_no_tokens_from_the_agent(api: MemoryApi, clock: Clock,
                                                                              tmp_path: Path) -> None:
    d, pod, _ = started(api, clock, tmp_path)
    end(api, d, pod, {"input": 5, "output": 5, "total": 10, "calls": 1, "unpriced": 1})
    assert phase(api, "a") == "Succeeded"
    assert "gateway" not in api.job("a")["status"]


def test_summing_ignores_damaged_entries_and_disagreement_names_each_figure() -> None:
    figures = summed({"a": json.dumps({"input": 5, "output": -3, "requests": "x"}), "b": "not json"})
    assert figures is not None and (figures.input, figures.output, figures.requests) == (5, 0, 0)
    assert summed({}) is None
    counted = {"input": 5.0, "output": 0.0, "cacheRead": 0.0, "cacheWrite": 0.0}
    assert disagreement(counted, {"input": 5, "output": 0}) is None
    assert disagreement(counted, {"input": 4, "output": 0}) == "input 4 (gateway 5)"



def test_the_ledger_is_read_only_once_the_gateway_had_time_to_write_the_last_reply() -> None:
    """The gateway writes its figures up to a flush after the reply (and ``finishedAt`` is whole seconds): the
    operator waits out the rest of ``LEDGER_SETTLE_SECONDS`` after the Pod finished, never longer, before it reads
    (e2e/test_gateway_job.py saw a job's last reply missing from its tokens without it)."""
    now = 1_800_000_000.0
    slept: list[float] = []

    class Cluster:
        ns = NS
        api = MemoryApi()

    def pod(finished: float | None) -> dict:
        state = {"terminated": {"exitCode": 0}}
        if finished is not None:
            state["terminated"]["finishedAt"] = datetime.fromtimestamp(finished, UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ")
        return {"status": {"containerStatuses": [{"name": "pi", "state": state}]}}

    def read(p: dict | None) -> None:
        settled_ledger(Cluster(), "uid-1", PodView.of(p) if p is not None else None, now=lambda: now,  # type: ignore[arg-type]
                       sleep=slept.append)

    read(pod(now - 1))
    read(pod(now - LEDGER_SETTLE_SECONDS - 5))
    read(pod(None))
    read(None)
    read(pod(now + 3600))  # a node clock far ahead: waits no more than the settle time
    assert slept == [LEDGER_SETTLE_SECONDS - 1, LEDGER_SETTLE_SECONDS]
    assert PodView.of(pod(now - 1)).finished_at == now - 1
