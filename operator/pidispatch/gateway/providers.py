"""Where each model provider is, which wire API a request speaks, and which header carries its key.

docs/gateway.md#the-model-path. The built-in table is pi 0.73.1's own (``@mariozechner/pi-ai``'s
``models.generated.js`` for each provider's ``api`` and ``baseUrl``, ``env-api-keys.js`` for the
environment names its key is read from). Custom providers (and a built-in's new ``baseUrl``) come from a
``models.json`` in pi's format: the chart's ``job.modelsConfigMap``.

The wire API of a request is read from its path, not from the provider: one provider can serve several
(``opencode`` has chat-completions, Responses and Anthropic models, with different base URLs), and pi
sends each model's requests to its own API's path under the provider's ``baseUrl``.

| API | request path ends | key header |
| --- | --- | --- |
| ``openai-completions`` (and Mistral's, the same wire) | ``/chat/completions`` | ``Authorization: Bearer`` |
| ``openai-responses`` | ``/responses`` | ``Authorization: Bearer`` |
| ``anthropic-messages`` | ``/messages`` | ``x-api-key`` |

Google's ``generateContent`` (``x-goog-api-key``) is refused: its usage (``usageMetadata``) is not read yet,
so its budget could not be held. Providers whose credential is not an API key (Bedrock's SigV4, Vertex's
and Codex's OAuth, Copilot's token exchange) or whose base URL pi builds from the environment (Azure,
Cloudflare) are not built in: a chart's ``models.json`` names their URL when it can be reached by key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

OPENAI_COMPLETIONS = "openai-completions"
OPENAI_RESPONSES = "openai-responses"
ANTHROPIC_MESSAGES = "anthropic-messages"
WIRE_APIS = (OPENAI_COMPLETIONS, OPENAI_RESPONSES, ANTHROPIC_MESSAGES)
# pi's API names whose wire is one of the three (Mistral's SDK posts OpenAI chat completions).
_SAME_WIRE = {"mistral-conversations": OPENAI_COMPLETIONS}

_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


class ProviderError(ValueError):
    """A ``models.json`` the gateway cannot serve from (the message names the provider, never a key)."""


@dataclass(frozen=True)
class Provider:
    """One provider: its base URL per wire API, and where its key comes from.

    ``env``: the environment names pi reads its key from, in pi's order; the claims' ``credentials`` are
    keyed by them. ``literal``: a key written in ``models.json`` itself (passed on as is).
    """

    name: str
    bases: Mapping[str, str]
    env: tuple[str, ...] = ()
    literal: str | None = field(default=None, repr=False)

    def base_for(self, api: str) -> str | None:
        """The base URL for ``api``; a provider of one base URL serves every API from it."""
        if api in self.bases:
            return self.bases[api]
        distinct = set(self.bases.values())
        return next(iter(distinct)) if len(distinct) == 1 else None


def key_header(api: str, key: str) -> dict[str, str]:
    """The header that carries ``key`` to an upstream of ``api``."""
    if api == ANTHROPIC_MESSAGES:
        return {"x-api-key": key}
    return {"Authorization": f"Bearer {key}"}


def wire_api(rest: str) -> str | None:
    """The wire API of a request to ``<base>/<rest>`` (``rest`` without its query), or ``None``."""
    path = rest.rstrip("/")
    if path.endswith("chat/completions"):
        return OPENAI_COMPLETIONS
    if path.endswith("responses"):
        return OPENAI_RESPONSES
    if path.endswith("messages"):
        return ANTHROPIC_MESSAGES
    return None


def _p(name: str, env: tuple[str, ...], **bases: str) -> Provider:
    return Provider(name, {api.replace("_", "-"): url for api, url in bases.items()}, env)


# pi 0.73.1's providers that a key reaches (models.generated.js, env-api-keys.js). ANTHROPIC_OAUTH_TOKEN is
# left out: an OAuth token is not an x-api-key.
BUILTIN: dict[str, Provider] = {p.name: p for p in (
    _p("anthropic", ("ANTHROPIC_API_KEY",), anthropic_messages="https://api.anthropic.com"),
    _p("cerebras", ("CEREBRAS_API_KEY",), openai_completions="https://api.cerebras.ai/v1"),
    _p("deepseek", ("DEEPSEEK_API_KEY",), openai_completions="https://api.deepseek.com"),
    _p("fireworks", ("FIREWORKS_API_KEY",), anthropic_messages="https://api.fireworks.ai/inference"),
    _p("groq", ("GROQ_API_KEY",), openai_completions="https://api.groq.com/openai/v1"),
    _p("huggingface", ("HF_TOKEN",), openai_completions="https://router.huggingface.co/v1"),
    _p("kimi-coding", ("KIMI_API_KEY",), anthropic_messages="https://api.kimi.com/coding"),
    _p("minimax", ("MINIMAX_API_KEY",), anthropic_messages="https://api.minimax.io/anthropic"),
    _p("minimax-cn", ("MINIMAX_CN_API_KEY",), anthropic_messages="https://api.minimaxi.com/anthropic"),
    _p("mistral", ("MISTRAL_API_KEY",), openai_completions="https://api.mistral.ai"),
    _p("moonshotai", ("MOONSHOT_API_KEY",), openai_completions="https://api.moonshot.ai/v1"),
    _p("moonshotai-cn", ("MOONSHOT_API_KEY",), openai_completions="https://api.moonshot.cn/v1"),
    _p("openai", ("OPENAI_API_KEY",), openai_responses="https://api.openai.com/v1"),
    _p("opencode", ("OPENCODE_API_KEY",), openai_completions="https://opencode.ai/zen/v1",
       openai_responses="https://opencode.ai/zen/v1", anthropic_messages="https://opencode.ai/zen"),
    _p("opencode-go", ("OPENCODE_API_KEY",), openai_completions="https://opencode.ai/zen/go/v1"),
    _p("openrouter", ("OPENROUTER_API_KEY",), openai_completions="https://openrouter.ai/api/v1"),
    _p("vercel-ai-gateway", ("AI_GATEWAY_API_KEY",), anthropic_messages="https://ai-gateway.vercel.sh"),
    _p("xai", ("XAI_API_KEY",), openai_completions="https://api.x.ai/v1"),
    _p("xiaomi", ("XIAOMI_API_KEY",), anthropic_messages="https://api.xiaomimimo.com/anthropic"),
    _p("xiaomi-token-plan-ams", ("XIAOMI_TOKEN_PLAN_AMS_API_KEY",),
       anthropic_messages="https://token-plan-ams.xiaomimimo.com/anthropic"),
    _p("xiaomi-token-plan-cn", ("XIAOMI_TOKEN_PLAN_CN_API_KEY",),
       anthropic_messages="https://token-plan-cn.xiaomimimo.com/anthropic"),
    _p("xiaomi-token-plan-sgp", ("XIAOMI_TOKEN_PLAN_SGP_API_KEY",),
       anthropic_messages="https://token-plan-sgp.xiaomimimo.com/anthropic"),
    _p("zai", ("ZAI_API_KEY",), openai_completions="https://api.z.ai/api/coding/paas/v4"),
)}


def _custom(name: str, entry: Any, builtin: Provider | None) -> Provider:
    if not isinstance(entry, dict):
        raise ProviderError(f"models.json: provider {name!r} is not an object")
    base = entry.get("baseUrl")
    api = entry.get("api")
    if base is None and builtin is not None:
        return builtin  # a built-in with models or headers added: pi's own URL and key
    if not isinstance(base, str) or not base.startswith(("https://", "http://")):
        raise ProviderError(f"models.json: provider {name!r} needs an http(s) baseUrl")
    if api is None and builtin is not None:
        bases = {wire: base for wire in builtin.bases}
    elif isinstance(api, str):
        bases = {_SAME_WIRE.get(api, api): base}
    else:
        raise ProviderError(f"models.json: provider {name!r} needs an api")
    key = entry.get("apiKey")
    if key is None:
        return Provider(name, bases, builtin.env if builtin else ())
    if not isinstance(key, str) or not key:
        raise ProviderError(f"models.json: provider {name!r} has an apiKey that is not text")
    if key.startswith("!"):
        # pi runs it as a shell command; the gateway runs nothing a ConfigMap names.
        raise ProviderError(f"models.json: provider {name!r} has a command as its apiKey ('!...'), which the "
                            "gateway does not run: name an environment variable the job's credentials map")
    if _ENV_NAME.fullmatch(key):
        return Provider(name, bases, (key,))
    return Provider(name, bases, (), literal=key)


def load_models_json(text: str) -> dict[str, Provider]:
    """The providers of pi's built-in table, with ``models.json``'s (pi's format) added or put in their place."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProviderError(f"models.json is not JSON ({exc.msg} at line {exc.lineno})") from None
    providers = data.get("providers") if isinstance(data, dict) else None
    if not isinstance(providers, dict):
        raise ProviderError("models.json has no providers object")
    table = dict(BUILTIN)
    for name, entry in providers.items():
        table[str(name)] = _custom(str(name), entry, BUILTIN.get(str(name)))
    return table


def load_models_file(path: str | None) -> dict[str, Provider]:
    """The providers table: pi's built-ins, and ``path``'s models.json when given."""
    if not path:
        return dict(BUILTIN)
    try:
        with open(path, encoding="utf-8") as handle:
            return load_models_json(handle.read())
    except OSError as exc:
        raise ProviderError(f"cannot read models.json at {path}: {exc.strerror}") from None
