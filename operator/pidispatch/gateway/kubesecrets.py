"""The Secrets a capability names, read from the apiserver (docs/gateway.md#the-capability).

Only the key a verified capability names is read, in the capability's namespace. A value is kept for
``ttl_seconds`` so a job's stream of requests does not read its Secret on each one; a rotated key is
picked up within that time.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Callable

from pidispatch.gateway.capability import SecretRef
from pidispatch.gateway.secrets import SecretMissing
from pidispatch.kubeapi import ApiError, KubeApi, name_segment


class KubeSecrets:
    """A :class:`~pidispatch.gateway.secrets.SecretSource` over the apiserver (the gateway's ServiceAccount
    may ``get`` Secrets in the jobs' namespace)."""

    def __init__(self, api: KubeApi, *, ttl_seconds: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.api = api
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._cache: dict[tuple[str, str, str], tuple[float, str]] = {}

    async def read(self, namespace: str, ref: SecretRef) -> str:
        where = (namespace, ref.secret, ref.key)
        cached = self._cache.get(where)
        if cached is not None and self._clock() - cached[0] < self.ttl_seconds:
            return cached[1]
        path = f"/api/v1/namespaces/{name_segment(namespace)}/secrets/{name_segment(ref.secret)}"
        try:
            secret = await asyncio.to_thread(self.api.get_or_none, path)
        except ApiError as exc:
            raise SecretMissing(f"Secret {namespace}/{ref.secret} could not be read ({exc.status})") from None
        encoded = ((secret or {}).get("data") or {}).get(ref.key)
        if not isinstance(encoded, str):
            raise SecretMissing(f"Secret {namespace}/{ref.secret} has no key {ref.key}")
        try:
            value = base64.b64decode(encoded, validate=True).decode("utf-8").strip()
        except (binascii.Error, UnicodeDecodeError):
            raise SecretMissing(f"Secret {namespace}/{ref.secret} key {ref.key} is not UTF-8 text") from None
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[where] = (self._clock(), value)
        return value
