"""Which environment variable holds a model provider's API key, as pi reads it.

pi (its ``pi-ai`` package, ``env-api-keys``) looks a provider's key up in the environment by a fixed
name per provider; a provider defined in ``models.json`` names its key there instead. ``pidispatch
doctor`` uses this table to name a Trigger whose model would start without its key. The table is
pi 0.73.1's (the version the project pins); a provider missing here is treated as unknown, never as
"no key needed".
"""

from __future__ import annotations

KEY_VARIABLES: dict[str, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_OAUTH_TOKEN", "ANTHROPIC_API_KEY"),
    "openai": ("OPENAI_API_KEY",),
    "azure-openai-responses": ("AZURE_OPENAI_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "google": ("GEMINI_API_KEY",),
    "google-vertex": ("GOOGLE_CLOUD_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "cerebras": ("CEREBRAS_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "vercel-ai-gateway": ("AI_GATEWAY_API_KEY",),
    "zai": ("ZAI_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "minimax": ("MINIMAX_API_KEY",),
    "minimax-cn": ("MINIMAX_CN_API_KEY",),
    "moonshotai": ("MOONSHOT_API_KEY",),
    "moonshotai-cn": ("MOONSHOT_API_KEY",),
    "huggingface": ("HF_TOKEN",),
    "fireworks": ("FIREWORKS_API_KEY",),
    "opencode": ("OPENCODE_API_KEY",),
    "opencode-go": ("OPENCODE_API_KEY",),
    "kimi-coding": ("KIMI_API_KEY",),
    "cloudflare-workers-ai": ("CLOUDFLARE_API_KEY",),
    "cloudflare-ai-gateway": ("CLOUDFLARE_API_KEY",),
}


def key_variables(model: str | None) -> tuple[str, ...] | None:
    """The variables any one of which gives ``provider/model`` its key; ``None`` for an unknown provider."""
    if not model or "/" not in model:
        return None
    return KEY_VARIABLES.get(model.split("/", 1)[0].lower())
