"""The operator's and the runner's side of the gateway (docs/gateway.md#inside-the-job): a job Pod behind the
gateway holds its capability and nothing else, and the runner sends git, gh, pi and every other client there."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from pidispatch.contract import gateway_wire as protocol
from pidispatch.gateway.capability import verify
from pidispatch.manifests.pod import GatewayInputs, PodInputs, WorkspaceInputs, gateway_secret_name, job_pod
from pidispatch.providers import KEY_VARIABLES
from pidispatch.runner.gateway import GatewayConfigError, gateway_of, routed_models, through_gateway
from pidispatch.settings import ConfigError
from pidispatch.settings.gateway import gateway_settings

GATEWAY = GatewayInputs(url="https://pd-gateway.pi.svc", proxy="http://pd-gateway.pi.svc:3128",
                        ca_configmap="pd-gateway-ca", secret=gateway_secret_name("j", "u-1"))
BASE = PodInputs(job_name="delivery-1", job_uid="u-1", namespace="pi", image="pi-job:0.73.1",
                 command=["pidispatch", "runner"], env={"PI_MODEL": "openai/gpt-4.1"},
                 workspace=WorkspaceInputs(gh_host="ghe.example.com"))


def env_of(pod: dict) -> dict[str, dict]:
    return {entry["name"]: entry for entry in pod["spec"]["containers"][0]["env"]}


def test_behind_the_gateway_the_pod_holds_only_its_capability() -> None:
    with_keys = job_pod(replace(BASE, github_token=("gh-token", "token"),
                                credentials={"OPENAI_API_KEY": ("model-keys", "openai")}))
    assert env_of(with_keys)["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "model-keys"
    pod = job_pod(replace(BASE, gateway=GATEWAY, env={**BASE.env, "GH_TOKEN": "literal", "PI_GATEWAY_URL": "x"}))
    env = env_of(pod)
    refs = {name: e["valueFrom"]["secretKeyRef"] for name, e in env.items() if "valueFrom" in e}
    assert refs == {name: {"name": GATEWAY.secret, "key": protocol.SECRET_KEY}
                    for name in ("GH_ENTERPRISE_TOKEN", "GH_TOKEN", protocol.ENV_TOKEN)}
    assert "OPENAI_API_KEY" not in env and "model-keys" not in json.dumps(pod)
    assert env["GH_HOST"]["value"] == "pd-gateway.pi.svc", "gh sends its token to the gateway, nowhere else"
    assert env[protocol.ENV_URL]["value"] == GATEWAY.url, "a literal from job.env never overrides the gateway's"
    assert env[protocol.ENV_CA_FILE]["value"] == f"{protocol.CA_DIR}/{protocol.CA_KEY}"
    assert env["PI_CODING_AGENT_DIR"]["value"] == "/pi-agent"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["gateway-ca"]["configMap"]["name"] == "pd-gateway-ca" and "emptyDir" in volumes["agent"]


def test_a_pod_cannot_be_given_both_the_gateway_and_a_credential() -> None:
    with pytest.raises(ValueError, match="no forge token and no model key"):
        job_pod(replace(BASE, gateway=GATEWAY, github_token=("gh-token", "token")))
    with pytest.raises(ValueError, match="no forge token and no model key"):
        job_pod(replace(BASE, gateway=GATEWAY, credentials={"OPENAI_API_KEY": ("model-keys", "openai")}))


def test_the_deployments_models_json_is_mounted_beside_the_agent_dir_for_the_runner_to_route() -> None:
    pod = job_pod(replace(BASE, gateway=GATEWAY, models_configmap="pi-models"))
    mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["models"] == {"name": "models", "mountPath": protocol.MODELS_DIR, "readOnly": True}
    assert mounts["agent"] == {"name": "agent", "mountPath": "/pi-agent"}
    assert env_of(pod)[protocol.ENV_MODELS_FILE]["value"] == f"{protocol.MODELS_DIR}/models.json"


def test_settings_are_all_or_nothing(tmp_path: Path) -> None:
    assert gateway_settings({}) is None
    full = {"PI_DISPATCH_GATEWAY_URL": "https://pd-gateway.pi.svc/", "PI_DISPATCH_GATEWAY_PROXY":
            "http://pd-gateway.pi.svc:3128", "PI_DISPATCH_GATEWAY_CA_CONFIGMAP": "pd-gateway-ca",
            "PI_DISPATCH_GATEWAY_KEY_FILE": "/etc/pi-dispatch/gateway-key/key",
            "PI_DISPATCH_GATEWAY_DEFAULT_MAX_TOKENS": "200000"}
    settings = gateway_settings(full)
    assert settings is not None and settings.url == "https://pd-gateway.pi.svc"
    assert settings.default_max_tokens == 200000
    for name in ("PI_DISPATCH_GATEWAY_PROXY", "PI_DISPATCH_GATEWAY_CA_CONFIGMAP", "PI_DISPATCH_GATEWAY_KEY_FILE"):
        with pytest.raises(ConfigError, match=name):
            gateway_settings({k: v for k, v in full.items() if k != name})
    with pytest.raises(ConfigError, match="PI_DISPATCH_GATEWAY_URL"):
        gateway_settings({**full, "PI_DISPATCH_GATEWAY_URL": "http://pd-gateway.pi.svc"})
    with pytest.raises(ConfigError, match="PI_DISPATCH_GATEWAY_PROXY"):
        gateway_settings({**full, "PI_DISPATCH_GATEWAY_PROXY": "http://user:pw@pd-gateway.pi.svc:3128"})


def job_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    ca = tmp_path / "gateway-ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nGATEWAY\n-----END CERTIFICATE-----\n")
    return {protocol.ENV_URL: "https://pd-gateway.pi.svc", protocol.ENV_PROXY: "http://pd-gateway.pi.svc:3128",
            protocol.ENV_CA_FILE: str(ca), protocol.ENV_TOKEN: "pdg1.claims.mac/+=",
            "PI_CODING_AGENT_DIR": str(tmp_path / "agent"), **extra}


def test_without_a_gateway_the_runner_changes_nothing(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin", "GH_TOKEN": "t"}
    assert through_gateway(env, lambda: str(tmp_path)) == env
    assert os.listdir(tmp_path) == []


def test_the_runner_sends_every_client_to_the_gateway(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir()
    out = through_gateway(job_env(tmp_path), lambda: str(private))
    bundle = Path(out["SSL_CERT_FILE"]).read_text()
    assert bundle.endswith("GATEWAY\n-----END CERTIFICATE-----\n"), "the gateway's CA after the image's roots"
    if Path("/etc/ssl/certs/ca-certificates.crt").exists():
        assert len(bundle) > 1000, "the image's roots stay trusted for hosts reached through the proxy"
    assert out["GIT_SSL_CAINFO"] == out["CURL_CA_BUNDLE"] == out["SSL_CERT_FILE"]
    assert out["NODE_EXTRA_CA_CERTS"] == str(tmp_path / "gateway-ca.crt")
    assert out["HTTPS_PROXY"] == out["https_proxy"] == "http://job:pdg1.claims.mac%2F%2B%3D@pd-gateway.pi.svc:3128"
    assert out["NO_PROXY"].split(",")[0] == "pd-gateway.pi.svc", "the gateway itself is reached directly"
    models = json.loads((tmp_path / "agent" / "models.json").read_text())
    assert set(KEY_VARIABLES) <= set(models["providers"])
    assert models["providers"]["openai"] == {"baseUrl": "https://pd-gateway.pi.svc/model/openai",
                                             "apiKey": protocol.ENV_TOKEN}
    assert "pdg1" not in json.dumps(models), "models.json names the variable, never the capability"


def test_the_deployments_providers_keep_their_models_and_lose_their_headers(tmp_path: Path) -> None:
    given = tmp_path / "given.json"
    given.write_text(json.dumps({"providers": {"fake": {
        "baseUrl": "http://10.0.0.5:8080/v1", "api": "openai-completions", "apiKey": "FAKE_KEY",
        "headers": {"x-secret": "SECRET_HEADER"}, "authHeader": True,
        "models": [{"id": "fake-model", "contextWindow": 32000, "cost": {"input": 1}}]}}}))
    through_gateway(job_env(tmp_path, **{protocol.ENV_MODELS_FILE: str(given)}), lambda: str(tmp_path))
    fake = json.loads((tmp_path / "agent" / "models.json").read_text())["providers"]["fake"]
    assert fake == {"baseUrl": "https://pd-gateway.pi.svc/model/fake", "api": "openai-completions",
                    "apiKey": protocol.ENV_TOKEN,
                    "models": [{"id": "fake-model", "contextWindow": 32000, "cost": {"input": 1}}]}


@pytest.mark.parametrize("change, word", [
    ({protocol.ENV_TOKEN: ""}, protocol.ENV_TOKEN),
    ({protocol.ENV_URL: "http://pd-gateway.pi.svc"}, protocol.ENV_URL),
    ({protocol.ENV_URL: "https://pd-gateway.pi.svc/path"}, protocol.ENV_URL),
    ({protocol.ENV_PROXY: "http://u:p@pd-gateway.pi.svc:3128"}, protocol.ENV_PROXY),
])
def test_a_half_configured_gateway_is_refused(tmp_path: Path, change: dict[str, str], word: str) -> None:
    with pytest.raises(GatewayConfigError, match=word):
        gateway_of({**job_env(tmp_path), **change})


def test_routing_drops_nothing_pi_needs_from_a_non_object(tmp_path: Path) -> None:
    gateway = gateway_of(job_env(tmp_path))
    assert gateway is not None
    assert set(routed_models(["not", "an", "object"], gateway)["providers"]) == set(KEY_VARIABLES)


def test_the_operator_mints_claims_the_gateway_accepts(tmp_path: Path) -> None:
    from pidispatch.api.models import TriggerSpec
    from pidispatch.api.views import JobView
    from pidispatch.forge.credentials import JobToken
    from pidispatch.jobflow.capability import job_claims
    from pidispatch.settings import OperatorSettings
    from pidispatch.settings.gateway import Gateway

    key = tmp_path / "key"
    key.write_bytes(b"g" * 48)
    settings = replace(OperatorSettings.from_env({}), gateway=Gateway(
        url="https://gw.pi.svc", proxy="http://gw.pi.svc:3128", ca_configmap="gw-ca", key_file=str(key),
        default_max_tokens=5000))
    job = JobView.of({"metadata": {"name": "j", "uid": "0b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"},
                      "spec": {"trigger": "t", "forge": "github", "repository": "acme/app", "pullRequest": 7,
                               "fork": True}})
    trigger = TriggerSpec.model_validate({"on": {"event": "issue_comment.created"}, "run": {
        "egress": ["Registry.NPMjs.org", "registry.npmjs.org"]}})
    claims = job_claims(settings, "pi", job, trigger, JobToken("pi-job-github-x", "token"),
                        {"OPENAI_API_KEY": ("model-keys", "openai")}, 3600, 1_000_000)
    from pidispatch.gateway.capability import mint
    seen = verify(key.read_bytes(), mint(key.read_bytes(), claims), now=1_000_000)
    assert (seen.repository, seen.fork, seen.subject, seen.max_tokens) == ("acme/app", True, 7, 5000)
    assert seen.egress == ("registry.npmjs.org",)
    assert seen.token is not None and seen.token.secret == "pi-job-github-x"
    assert seen.exp > 1_000_000 + 3600, "the capability outlives the run timeout by a margin, not less"
