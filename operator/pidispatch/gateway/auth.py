"""Where a request carries its capability, for each kind of client the gateway serves.

* pi's OpenAI-style clients: ``Authorization: Bearer <capability>``; Anthropic's: ``x-api-key``;
* git: ``Authorization: Basic`` with the capability as the password (any user name);
* ``gh``: ``Authorization: token <capability>`` (``GH_ENTERPRISE_TOKEN``);
* the CONNECT proxy: ``Proxy-Authorization: Basic`` with the capability as the password.

The gateway never forwards these headers: it removes every one of them before it adds the real credential.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

CREDENTIAL_HEADERS = ("authorization", "x-api-key", "proxy-authorization", "api-key", "x-goog-api-key")


def _basic_password(value: str) -> str | None:
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, sep, password = decoded.partition(":")
    return password if sep else None


def from_authorization(value: str | None) -> str | None:
    """The capability in an ``Authorization`` or ``Proxy-Authorization`` value (Bearer, token or Basic)."""
    if not value:
        return None
    scheme, _, rest = value.strip().partition(" ")
    scheme = scheme.lower()
    if scheme in ("bearer", "token"):
        return rest.strip() or None
    if scheme == "basic":
        return _basic_password(rest)
    return None


def presented(headers: Mapping[str, str]) -> str | None:
    """The capability a request to the TLS port presents, from whichever header its client uses."""
    lowered = {name.lower(): value for name, value in headers.items()}
    return from_authorization(lowered.get("authorization")) or lowered.get("x-api-key") or None


def without_credentials(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` less every header that can carry a credential (and hop-by-hop ones the proxy must drop)."""
    hop = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host",
           "content-length"}
    return {name: value for name, value in headers.items()
            if name.lower() not in CREDENTIAL_HEADERS and name.lower() not in hop}
