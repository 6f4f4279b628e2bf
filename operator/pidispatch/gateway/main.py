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
    from pidispatch.gateway.prices import price_table_file
    from pidispatch.gateway.providers import ProviderError, load_models_file
    from pidispatch.settings import ConfigError
    from pidispatch.settings.gatewayserver import GatewaySettings

    try:
        settings = GatewaySettings.from_env()
        key = load_key(settings.gateway_key_file)
        providers = load_models_file(settings.models_file)
        prices = price_table_file(settings.models_file)
    except (ConfigError, CapabilityError, ProviderError) as exc:
        sys.stderr.write(f"pidispatch gateway: {exc}\n")
        return CONFIG_ERROR

    from pidispatch.events import emit, log_services_as_json
    from pidispatch.gateway import egress
    from pidispatch.gateway.app import ForgeInputs, Gateway, ListenerLimits, build_app, serve, server_ssl_context
    from pidispatch.gateway.egress_metrics import EgressMetrics
    from pidispatch.gateway.egress_policy import AddressPolicy
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
                                             read_seconds=settings.read_seconds), prices=prices)
        proxy = await egress.serve(None, settings.proxy_port, key=key, ledger=ledger, allowed=settings.egress_hosts,
                                   policy=AddressPolicy.of(denied=settings.denied_networks),
                                   metrics=EgressMetrics(metrics.registry))

        async def stop_all() -> None:
            proxy.close()
            await proxy.wait_closed()
            await ledger.close()

        app = build_app(model, max_body=settings.max_body, forge=ForgeInputs(upstream_ca=settings.forge_ca_file))
        gateway = Gateway(app, metrics, context,
                          limits=ListenerLimits(settings.max_connections, settings.head_seconds,
                                                settings.idle_seconds),
                          on_stop=stop_all)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(gateway, None, settings.port, settings.metrics_port, stop)

    emit("gateway_starting", namespace=settings.namespace, replica=settings.replica, port=settings.port,
         metricsPort=settings.metrics_port, proxyPort=settings.proxy_port, providers=len(providers),
         modelsFile=settings.models_file, egressHosts=len(settings.egress_hosts))
    try:
        asyncio.run(run())
    except OSError as exc:
        sys.stderr.write(f"pidispatch gateway: cannot listen on port {settings.port}, {settings.metrics_port} or "
                         f"{settings.proxy_port}: {exc.strerror or exc}\n")
        return CONFIG_ERROR
    return 0
