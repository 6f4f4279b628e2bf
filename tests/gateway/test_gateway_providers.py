"""Where each provider is and how its key goes: pi's own table, and a chart's models.json
(docs/gateway.md#the-model-path)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pidispatch.gateway.providers import (
    ANTHROPIC_MESSAGES,
    BUILTIN,
    OPENAI_COMPLETIONS,
    OPENAI_RESPONSES,
    ProviderError,
    key_header,
    load_models_file,
    load_models_json,
    wire_api,
)

PI_AI = Path(__file__).resolve().parents[2] / "e2e" / "pi" / "node_modules" / "@mariozechner" / "pi-ai" / "dist"
_PI_TABLE = """
const { MODELS } = await import(process.argv[1] + "/models.generated.js");
const out = {};
for (const [provider, models] of Object.entries(MODELS)) {
  out[provider] = {bases: {}};
  for (const m of Object.values(models)) out[provider].bases[m.api] = m.baseUrl;
}
console.log(JSON.stringify(out));
"""


def pis_table() -> dict[str, dict[str, str]]:
    node = shutil.which("node")
    if node is None or not PI_AI.is_dir():
        pytest.skip("pi is not installed here (make pi)")
    done = subprocess.run([node, "--input-type=module", "-e", _PI_TABLE, str(PI_AI)], capture_output=True,
                          text=True, timeout=60, check=True)
    return {name: entry["bases"] for name, entry in json.loads(done.stdout).items()}


def test_the_built_in_table_is_pis_own_for_every_provider_a_key_reaches() -> None:
    table = pis_table()
    wire = {"mistral-conversations": OPENAI_COMPLETIONS}
    for name, provider in BUILTIN.items():
        assert name in table, f"{name} is not one of pi's providers"
        # Google's API is refused (its usage is not read), so opencode's Gemini models are left out.
        theirs = {wire.get(api, api): url for api, url in table[name].items() if api != "google-generative-ai"}
        assert dict(provider.bases) == theirs, name
    left_out = set(table) - set(BUILTIN)
    # Their credential is not an API key, or pi builds their base URL from the environment.
    assert left_out == {"amazon-bedrock", "azure-openai-responses", "cloudflare-ai-gateway", "cloudflare-workers-ai",
                        "github-copilot", "google", "google-vertex", "openai-codex"}


def test_the_environment_names_are_pis() -> None:
    source = (PI_AI / "env-api-keys.js")
    if not source.is_file():
        pytest.skip("pi is not installed here (make pi)")
    text = source.read_text()
    for provider in BUILTIN.values():
        for env in provider.env:
            assert f'"{env}"' in text, (provider.name, env)


@pytest.mark.parametrize(("rest", "api"), [
    ("chat/completions", OPENAI_COMPLETIONS), ("v1/chat/completions", OPENAI_COMPLETIONS),
    ("responses", OPENAI_RESPONSES), ("v1/messages", ANTHROPIC_MESSAGES), ("v1/models", None),
    ("v1beta/models/gemini:streamGenerateContent", None), ("", None),
])
def test_the_wire_api_is_read_from_the_path(rest: str, api: str | None) -> None:
    assert wire_api(rest) == api


def test_the_key_goes_in_the_header_each_api_reads() -> None:
    assert key_header(ANTHROPIC_MESSAGES, "k") == {"x-api-key": "k"}
    assert key_header(OPENAI_COMPLETIONS, "k") == {"Authorization": "Bearer k"}
    assert key_header(OPENAI_RESPONSES, "k") == {"Authorization": "Bearer k"}


def test_a_provider_of_several_apis_picks_the_base_by_the_request() -> None:
    opencode = BUILTIN["opencode"]
    assert opencode.base_for(ANTHROPIC_MESSAGES) == "https://opencode.ai/zen"
    assert opencode.base_for(OPENAI_COMPLETIONS) == "https://opencode.ai/zen/v1"
    assert BUILTIN["openai"].base_for(OPENAI_COMPLETIONS) == "https://api.openai.com/v1"  # one base serves all


def test_models_json_adds_providers_and_says_where_their_keys_are() -> None:
    table = load_models_json(json.dumps({"providers": {
        "local": {"baseUrl": "http://llm.internal:8000/v1", "api": "openai-completions", "apiKey": "LOCAL_KEY",
                  "models": [{"id": "m"}]},
        "literal": {"baseUrl": "https://x.example/v1", "api": "openai-completions", "apiKey": "sk-literal-1"},
        "anthropic": {"baseUrl": "https://proxy.example/anthropic"},
        "openai": {"models": [{"id": "gpt-x"}]},
    }}))
    assert table["local"].env == ("LOCAL_KEY",) and table["local"].literal is None
    assert table["local"].base_for(OPENAI_COMPLETIONS) == "http://llm.internal:8000/v1"
    assert table["literal"].env == () and table["literal"].literal == "sk-literal-1"
    assert "sk-literal-1" not in repr(table["literal"])
    # A built-in moved: its API and key name stay pi's.
    assert table["anthropic"].base_for(ANTHROPIC_MESSAGES) == "https://proxy.example/anthropic"
    assert table["anthropic"].env == ("ANTHROPIC_API_KEY",)
    assert table["openai"] == BUILTIN["openai"]
    assert table["groq"] == BUILTIN["groq"]


@pytest.mark.parametrize(("entry", "says"), [
    ({"baseUrl": "https://x/v1", "api": "openai-completions", "apiKey": "!cat /secret"}, "command"),
    ({"baseUrl": "ftp://x", "api": "openai-completions"}, "baseUrl"),
    ({"baseUrl": "https://x/v1"}, "api"),
    ({"baseUrl": "https://x/v1", "api": "openai-completions", "apiKey": 5}, "apiKey"),
], ids=["a command as apiKey", "not http", "no api", "a number as apiKey"])
def test_a_models_json_the_gateway_cannot_serve_from_is_refused(entry: dict[str, object], says: str) -> None:
    with pytest.raises(ProviderError, match=says):
        load_models_json(json.dumps({"providers": {"p": entry}}))


def test_a_missing_or_broken_models_file_is_refused(tmp_path: Path) -> None:
    assert load_models_file(None) == BUILTIN
    with pytest.raises(ProviderError, match="cannot read"):
        load_models_file(str(tmp_path / "absent.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ProviderError, match="not JSON"):
        load_models_file(str(tmp_path / "bad.json"))
