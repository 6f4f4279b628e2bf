"""The gateway's listeners: TLS for jobs on ``HTTPS_PORT``, probes and metrics on ``METRICS_PORT``.

docs/gateway.md#the-wire.

The TLS listener is the transfer server's :class:`~pidispatch.transfer.gate.ConnectionGate`: a cap on
connections counted at the accept (one over it is aborted before any handshake), and a deadline from the
accept to a complete first request head; aiohttp's keep-alive timer bounds an idle connection, and the
model path bounds a request body's arrival. The probes and metrics listen on their own port, uncapped, so
the kubelet is answered whatever a flood does to the jobs' port, and no job reaches them (the job
NetworkPolicy admits 443 and 3128 only).

:func:`build_app` makes the jobs' app; the forge path adds its routes to the same app when composed.
:func:`serve` runs both listeners until ``stop`` is set, then stops accepting, lets replies in flight
finish for ``grace_seconds`` and writes the ledger's last figures (graceful shutdown).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pidispatch.events import emit
from pidispatch.gateway import forge as forge_path
from pidispatch.gateway.metrics import GatewayMetrics
from pidispatch.gateway.model import ModelPath, add_routes
from pidispatch.transfer.gate import ConnectionGate

DEFAULT_GRACE_SECONDS = 25.0  # inside the kubelet's 30 s termination grace


@dataclass(frozen=True)
class ListenerLimits:
    max_connections: int = 1024
    head_seconds: float = 10.0
    idle_seconds: float = 75.0


def server_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """The TLS context jobs are served with (TLS 1.2 at least)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def build_app(model: ModelPath, *, max_body: int, forge: ForgeInputs | None = None) -> web.Application:
    """The jobs' app: the model path, then (``forge``) the forge path, whose ``/{owner}/{name}/...`` routes
    would otherwise take ``/model/...``."""
    app = web.Application(client_max_size=max_body)
    add_routes(app, model)
    if forge is not None:
        forge_path.add_routes(app, key=model.key, secrets=model.secrets, ledger=model.ledger,
                              upstream_ca=forge.upstream_ca)
    return app


@dataclass(frozen=True)
class ForgeInputs:
    """What the forge path needs beyond the model path's key, Secrets and ledger."""

    upstream_ca: str | None = None  # the forge's CA (GitHub Enterprise); None: the system's roots


def build_health_app(metrics: GatewayMetrics, ready: Callable[[], bool]) -> web.Application:
    """``/healthz`` (the process answers), ``/readyz`` (listening, not shutting down), ``/metrics``."""
    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_request: web.Request) -> web.Response:
        return web.Response(text="ready\n") if ready() else web.Response(status=503, text="not ready\n")

    async def metrics_view(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_view)
    return app


class Gateway:
    """Both listeners of one gateway process (or one test)."""

    def __init__(self, app: web.Application, metrics: GatewayMetrics, ssl_context: ssl.SSLContext, *,
                 limits: ListenerLimits | None = None,
                 on_stop: Callable[[], Awaitable[None]] | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self.ssl_context = ssl_context
        self.limits = limits or ListenerLimits()
        self.on_stop = on_stop
        self.ready = False
        self.port = 0
        self.metrics_port = 0
        self._runner: web.AppRunner | None = None
        self._health: web.AppRunner | None = None
        self._gate: ConnectionGate | None = None

    async def start(self, host: str | None, port: int, metrics_port: int | None) -> None:
        limits = self.limits
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False, lingering_time=0,
                               keepalive_timeout=limits.idle_seconds, shutdown_timeout=DEFAULT_GRACE_SECONDS)
        self._runner = runner

        def server() -> asyncio.Protocol:
            assert runner.server is not None
            return runner.server()

        gate = ConnectionGate(server, self.ssl_context, limit=limits.max_connections,
                              head_seconds=limits.head_seconds, event="gateway_connections_refused")
        self._gate = gate
        self.app.middlewares.append(gate.middleware)
        self.app.on_shutdown.append(gate.shutdown)
        await runner.setup()
        self.port = await gate.listen(host, port)
        if metrics_port is not None:
            health = web.AppRunner(build_health_app(self.metrics, lambda: self.ready), access_log=None,
                                   handle_signals=False, shutdown_timeout=2.0)
            self._health = health
            await health.setup()
            site = web.TCPSite(health, host, metrics_port)
            await site.start()
            server_ = site._server  # noqa: SLF001 - aiohttp keeps the bound socket there; port 0 needs it
            assert isinstance(server_, asyncio.Server)
            self.metrics_port = int(server_.sockets[0].getsockname()[1])
        self.ready = True
        emit("gateway_listening", port=self.port, metricsPort=self.metrics_port,
             maxConnections=limits.max_connections, headSeconds=limits.head_seconds, idleSeconds=limits.idle_seconds)

    def open_connections(self) -> int:
        return self._gate.open if self._gate is not None else 0

    async def stop(self) -> None:
        """Stop accepting, let replies in flight finish (aiohttp's shutdown timeout), write the last figures."""
        self.ready = False
        if self._runner is not None:
            await self._runner.cleanup()
        if self.on_stop is not None:
            await self.on_stop()
        if self._health is not None:
            await self._health.cleanup()
        emit("gateway_stopped")


async def serve(gateway: Gateway, host: str | None, port: int, metrics_port: int, stop: asyncio.Event) -> None:
    """Run ``gateway`` until ``stop`` is set, then shut it down gracefully."""
    await gateway.start(host, port, metrics_port)
    try:
        await stop.wait()
    finally:
        await gateway.stop()
