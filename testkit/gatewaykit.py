"""The gateway's model path on its own event loop and a real TLS port, for tests and the benchmark.

``GatewayServer(pki, providers, secrets, ledger)`` serves ``/model/...`` over TLS on 127.0.0.1 (the
listener, the connection gate and the probes of ``gateway/app.py``) in a background thread; ``claims()``
and ``capability()`` make a job's signed capability with the test key. The PKI is
``testkit.transferkit.make_pki``'s (a throwaway CA and a certificate for localhost and 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from pidispatch.gateway.app import Gateway, ListenerLimits, build_app, server_ssl_context
from pidispatch.gateway.capability import Claims, SecretRef, mint
from pidispatch.gateway.ledger import Ledger, MemoryLedger
from pidispatch.gateway.metrics import GatewayMetrics
from pidispatch.gateway.model import ModelLimits, ModelPath
from pidispatch.gateway.prices import PriceTable
from pidispatch.gateway.providers import Provider
from pidispatch.gateway.secrets import SecretSource, StaticSecrets
from testkit.transferkit import Pki

KEY = b"k" * 32 + b"-gateway-test-key"
NAMESPACE = "jobs"


def claims(*, uid: str = "0b7e6c1e-uid", max_tokens: int | None = None,
           credentials: Mapping[str, str] | None = None, exp: int | None = None) -> Claims:
    """A job's claims; ``credentials`` maps an environment name to a key of the Secret ``model-keys``."""
    return Claims(uid=uid, namespace=NAMESPACE, job="job-1", repository="acme/widgets", forge="https://github.com",
                  api="https://api.github.com", exp=exp or int(time.time()) + 3600, max_tokens=max_tokens,
                  credentials={env: SecretRef("model-keys", key) for env, key in (credentials or {}).items()})


def capability(job: Claims) -> str:
    return mint(KEY, job)


def secrets(values: Mapping[str, str]) -> StaticSecrets:
    """``{key of Secret model-keys: value}`` in the test namespace."""
    return StaticSecrets({(NAMESPACE, "model-keys", key): value for key, value in values.items()})


class GatewayServer:
    """The gateway on a loop of its own (so blocking clients in the test thread can talk to it)."""

    def __init__(self, pki: Pki, providers: Mapping[str, Provider], secret_source: SecretSource,
                 ledger: Ledger | None = None, *, limits: ListenerLimits | None = None,
                 model_limits: ModelLimits | None = None, metrics_port: int | None = 0,
                 prices: PriceTable | None = None) -> None:
        self.ledger: Any = ledger if ledger is not None else MemoryLedger()
        self.metrics = GatewayMetrics()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        model = ModelPath(key=KEY, secrets=secret_source, ledger=self.ledger, providers=providers,
                          metrics=self.metrics, limits=model_limits, prices=prices)
        self.gateway = Gateway(build_app(model, max_body=(model_limits or ModelLimits()).max_body), self.metrics,
                               server_ssl_context(str(pki.cert), str(pki.key)), limits=limits)
        self.call(self.gateway.start("127.0.0.1", 0, metrics_port))
        self.port = self.gateway.port
        self.metrics_port = self.gateway.metrics_port

    def call(self, coroutine: Any, timeout: float = 30.0) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def model_url(self, provider: str) -> str:
        return f"{self.url}/model/{provider}"

    def close(self) -> None:
        try:
            self.call(self.gateway.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

    def __enter__(self) -> GatewayServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ssl_env(pki: Pki) -> dict[str, str]:
    """Environment that makes Node (pi) trust the test CA."""
    return dict(os.environ, NODE_EXTRA_CA_CERTS=str(pki.ca))
