"""Where the gateway reads the credentials a capability names (docs/gateway.md#the-capability).

The gateway is the only component that reads model keys and forge tokens for jobs. It reads exactly the
Secret keys a verified capability names, in the capability's namespace, and keeps a value for a short time
so a streaming job does not read its Secret on every request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from pidispatch.gateway.capability import SecretRef


class SecretMissing(LookupError):
    """The Secret or its key does not exist (the message names them, never a value)."""


class SecretSource(Protocol):
    async def read(self, namespace: str, ref: SecretRef) -> str: ...


class StaticSecrets:
    """Values given in process: ``{(namespace, secret, key): value}``. For the gateway's own tests and the
    in-process demo; a deployed gateway reads the apiserver."""

    def __init__(self, values: Mapping[tuple[str, str, str], str]) -> None:
        self._values = dict(values)

    async def read(self, namespace: str, ref: SecretRef) -> str:
        try:
            return self._values[(namespace, ref.secret, ref.key)]
        except KeyError:
            raise SecretMissing(f"Secret {namespace}/{ref.secret} has no key {ref.key}") from None
