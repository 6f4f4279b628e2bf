"""``pidispatch receiver``: read the settings, connect to the API server, serve until SIGTERM.

``PI_DISPATCH_RECEIVER_MODE=poll``: no webhook listener; the receiver reads the forge's REST API instead
(``receiver/poll/``) with the operator's own GitHub credential, and serves only its health listener.

Exit 2 on a configuration error (one line on stderr naming the variable and the accepted form): no
webhook secret (webhook mode), no usable GitHub settings (poll mode), a malformed port or cap, the health port
equal to the webhook port, no namespace, no way to reach the API server, a port that cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import signal
import sys
from typing import TYPE_CHECKING

from pidispatch.settings import ConfigError

if TYPE_CHECKING:
    from pidispatch.kubeapi import Api
    from pidispatch.receiver.app import Receiver
    from pidispatch.receiver.cluster import ApiCluster
    from pidispatch.receiver.poll.poller import Poller
    from pidispatch.receiver.settings import ReceiverSettings

CONFIG_ERROR = 2


def _configure_logging() -> None:
    from pidispatch.events import log_services_as_json

    # aiohttp's access log would print request lines; its server log prints only faults.
    log_services_as_json(quiet=("aiohttp.access", "urllib3"))


async def _run(receiver: Receiver, settings: ReceiverSettings, poller: Poller | None = None) -> None:
    from pidispatch.receiver.app import build_app, build_health_app, serve

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if poller is not None:
        from pidispatch.receiver.poll.run import serve_polling

        await serve_polling(poller, build_health_app(receiver), None, settings.health_port, stop)
        return
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
    cluster = ApiCluster(api, settings.namespace)
    # Poll mode serves no webhook: the health app's Receiver gets a secret nobody holds, and never uses it.
    secret = WebhookSecret(settings.secret, settings.secret_file) if not settings.polling else \
        WebhookSecret(secrets.token_bytes(32))
    receiver = Receiver(cluster, secret, max_body=settings.max_body, auth_source=settings.auth_source,
                        ignore_logins=settings.ignore_logins)
    poller = _poller(api, cluster, settings, receiver) if settings.polling else None
    emit("receiver_starting", namespace=settings.namespace, port=settings.port, healthPort=settings.health_port,
         maxBody=settings.max_body, maxConnections=settings.max_connections, mode=settings.mode,
         secretFrom=None if settings.polling else "file" if settings.secret_file else "env")
    try:
        asyncio.run(_run(receiver, settings, poller))
    except OSError as exc:  # a port is taken or not ours to bind
        sys.stderr.write(f"pidispatch receiver: cannot listen on port {settings.port} (webhooks) and "
                         f"{settings.health_port} (probes, metrics): {exc.strerror or exc}\n")
        return CONFIG_ERROR
    return 0


def _poller(api: Api, cluster: ApiCluster, settings: ReceiverSettings, receiver: Receiver) -> Poller:
    """The poller of poll mode: the operator's forge credential, the cursor's ConfigMap, the same cluster seam, the
    receiver's metrics (served on its health port)."""
    from pidispatch.forge.github import Forge
    from pidispatch.receiver.poll.cursor import ConfigMapCursors
    from pidispatch.receiver.poll.forge import ForgeReader
    from pidispatch.receiver.poll.poller import Poller

    github = settings.github
    assert github is not None
    forge = Forge(github, settings.auth_source or "gh")
    reader = ForgeReader(github.api_url, forge.authorization, timeout=github.timeout_seconds,
                         ca_file=github.ca_bundle_file)
    return Poller(reader, cluster, ConfigMapCursors(api, settings.namespace, settings.poll_cursor),
                  interval=settings.poll_interval, auth_source=settings.auth_source,
                  ignore_logins=settings.ignore_logins, metrics=receiver.metrics)
