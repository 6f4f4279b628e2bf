"""The gateway's refusals: one shape every client shows as its error's message (docs/gateway.md#the-wire)."""

from __future__ import annotations

import json

from pidispatch.contract.gateway_wire import REFUSAL_HEADER


def status_of(reason: str) -> int:
    """401 without a valid capability, else 403 — a spent token budget included: the OpenAI and Anthropic
    clients (and pi's own retry) retry a 429 as a passing rate limit, and a budget does not come back."""
    if reason in ("no-capability", "bad-capability"):
        return 401
    return 403


def body(reason: str, message: str) -> bytes:
    """``{"error": {"type": "pi_gateway_refusal", "reason", "message"}}``: OpenAI's and Anthropic's SDKs both
    read ``error.message``; git and ``gh`` print the body of a failed request."""
    return json.dumps({"error": {"type": "pi_gateway_refusal", "reason": reason, "message": message}}).encode()


def headers(reason: str) -> dict[str, str]:
    return {REFUSAL_HEADER: reason, "Content-Type": "application/json"}
