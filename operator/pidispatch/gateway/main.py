"""``pidispatch gateway``: read the settings, connect to the apiserver, serve until SIGTERM (docs/cli.md).

Exit 2 on a configuration error (one line on stderr naming the variable or file and what is accepted):
no TLS files, an unreadable or short gateway key, a models.json the gateway cannot serve from (a command
as an apiKey included), no way to reach the apiserver, a port that cannot be bound. No kopf: the gateway is
its own process in the operator's image.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
import sys

CONFIG_ERROR = 2


def main(_args: argparse.Namespace | None = None) -> int:
    from pidispatch.gateway.capability import CapabilityError, load_key
    from pidispatch.gateway.providers import ProviderError, load_models_file
    from pidispatch.settings import ConfigError
    from pidispatch.settings.gatewayserver import GatewaySettings

    try:
        settings = GatewaySettings.from_env()
        key = load_key(settings.gateway_key_file)
        providers = load_models_file(settings.models_file)
    except (ConfigError, CapabilityError, ProviderError) as exc:
        sys.stderr.write(f"pidispatch gateway: {exc}\n")
        return CONFIG_ERROR

    from pidispatch.events import emit, log_services_as_json
    from pidispatch.gateway.app import Gateway, ListenerLimits, build_app, serve, server_ssl_context
    from pidispatch.gateway.kubeledger import KubeLedger
    from pidispatch.gateway.kubesecrets import KubeSecrets
    from pidispatch.gateway.metrics import GatewayMetrics
    from pidispatch.gateway.model import ModelLimits, ModelPath
    from pidispatch.kubeapi import Api

    try:
        context = server_ssl_context(settings.cert_file, settings.key_file)
    except (OSError, ssl.SSLError) as exc:
        sys.stderr.write(f"pidispatch gateway: cannot load the certificate {settings.cert_file} and key "
                         f"{settings.key_file}: {exc}\n")
        return CONFIG_ERROR
    log_services_as_json(quiet=("aiohttp.access", "urllib3"))
    try:
        api = Api.from_environment()
    except Exception as exc:  # noqa: BLE001 - the config loaders raise several types; all mean "no cluster"
        sys.stderr.write(f"pidispatch gateway: cannot find the API server (in-cluster ServiceAccount or "
                         f"KUBECONFIG): {exc}\n")
        return CONFIG_ERROR

    async def run() -> None:
        metrics = GatewayMetrics()
        ledger = KubeLedger(api, settings.replica, flush_seconds=settings.flush_seconds)
        ledger.start()
        model = ModelPath(key=key, secrets=KubeSecrets(api), ledger=ledger, providers=providers, metrics=metrics,
                          limits=ModelLimits(max_body=settings.max_body, body_seconds=settings.body_seconds,
                                             read_seconds=settings.read_seconds))
        gateway = Gateway(build_app(model, max_body=settings.max_body), metrics, context,
                          limits=ListenerLimits(settings.max_connections, settings.head_seconds,
                                                settings.idle_seconds),
                          on_stop=ledger.close)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(gateway, None, settings.port, settings.metrics_port, stop)

    emit("gateway_starting", namespace=settings.namespace, replica=settings.replica, port=settings.port,
         metricsPort=settings.metrics_port, providers=len(providers), modelsFile=settings.models_file)
    try:
        asyncio.run(run())
    except OSError as exc:
        sys.stderr.write(f"pidispatch gateway: cannot listen on port {settings.port} or {settings.metrics_port}: "
                         f"{exc.strerror or exc}\n")
        return CONFIG_ERROR
    return 0
