"""``pidispatch receiver``: read the settings, connect to the API server, serve until SIGTERM.

Exit 2 on a configuration error (one line on stderr naming the variable and the accepted form): no
webhook secret, a malformed port or cap, the health port equal to the webhook port, no namespace, no
way to reach the API server, a port that cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import TYPE_CHECKING

from pidispatch.settings import ConfigError

if TYPE_CHECKING:
    from pidispatch.receiver.app import Receiver
    from pidispatch.receiver.settings import ReceiverSettings

CONFIG_ERROR = 2


def _configure_logging() -> None:
    from pidispatch.events import log_services_as_json

    # aiohttp's access log would print request lines; its server log prints only faults.
    log_services_as_json(quiet=("aiohttp.access", "urllib3"))


async def _run(receiver: Receiver, settings: ReceiverSettings) -> None:
    from pidispatch.receiver.app import build_app, build_health_app, serve

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(build_app(receiver), None, settings.port, stop, health=build_health_app(receiver),
                health_port=settings.health_port, max_connections=settings.max_connections)


def main(args: argparse.Namespace | None = None) -> int:
    """Run the receiver until SIGTERM; 2 on a configuration error."""
    from pidispatch.receiver.settings import ReceiverSettings

    try:
        settings = ReceiverSettings.from_env()
    except ConfigError as exc:
        sys.stderr.write(f"pidispatch receiver: {exc}\n")
        return CONFIG_ERROR

    from pidispatch.events import emit
    from pidispatch.kubeapi import Api
    from pidispatch.receiver.app import Receiver
    from pidispatch.receiver.cluster import ApiCluster
    from pidispatch.receiver.signature import WebhookSecret

    _configure_logging()
    try:
        api = Api.from_environment()
    except Exception as exc:  # noqa: BLE001 - the config loaders raise several types; all mean "no cluster"
        sys.stderr.write(f"pidispatch receiver: cannot find the API server (in-cluster ServiceAccount or "
                         f"KUBECONFIG): {exc}\n")
        return CONFIG_ERROR
    receiver = Receiver(ApiCluster(api, settings.namespace), WebhookSecret(settings.secret, settings.secret_file),
                        max_body=settings.max_body, auth_source=settings.auth_source,
                        ignore_logins=settings.ignore_logins)
    emit("receiver_starting", namespace=settings.namespace, port=settings.port, healthPort=settings.health_port,
         maxBody=settings.max_body, maxConnections=settings.max_connections,
         secretFrom="file" if settings.secret_file else "env")
    try:
        asyncio.run(_run(receiver, settings))
    except OSError as exc:  # a port is taken or not ours to bind
        sys.stderr.write(f"pidispatch receiver: cannot listen on port {settings.port} (webhooks) and "
                         f"{settings.health_port} (probes, metrics): {exc.strerror or exc}\n")
        return CONFIG_ERROR
    return 0
