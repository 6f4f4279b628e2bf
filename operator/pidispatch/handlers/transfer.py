"""The operator's transfer server (``sessions.staging.mode: transfer``): started with the process, on every replica.

Not gated by leadership, on purpose. The server only reads and writes one Job's directory of the staging
claim at a time, which every running replica mounts (a replica that cannot mount it never starts; on a
ReadWriteOnce claim the standby is co-scheduled with the leader), so the transfer Service may route a job
to either replica. A job's upload then survives a takeover: the runner retries on the next replica instead
of failing while a new leader starts. The commit is a directory exchange and a marker written last
(``transfer/server.py``), so an upload retried on the other replica leaves the same files.

It runs on its own event loop in a daemon thread (kopf's loop is kopf's), like the metrics server.
"""

from __future__ import annotations

import asyncio
import threading

from pidispatch.settings import OperatorSettings
from pidispatch.transfer.server import TransferConfig, build_app, server_ssl_context, start
from pidispatch.transfer.token import load_key

START_TIMEOUT_SECONDS = 30.0


def serve_transfer(settings: OperatorSettings) -> int | None:
    """Start serving in transfer mode; the bound port, or ``None`` in mount mode.

    Raises ``TransferKeyError`` / ``TransferTLSError`` (configuration: the caller exits 2) or ``OSError``
    (the port is taken). Nothing is served without TLS: ``server_ssl_context`` refuses to make a context
    without the certificate and key.
    """
    transfer = settings.staging.transfer
    if transfer is None:
        return None
    key = load_key(transfer.token_key_file)
    context = server_ssl_context(transfer.cert_file, transfer.key_file)
    app = build_app(TransferConfig(settings.staging_dir, key, transfer.max_bytes, transfer.limits))
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="pidispatch-transfer", daemon=True).start()
    _, port = asyncio.run_coroutine_threadsafe(start(app, None, transfer.port, context), loop).result(
        START_TIMEOUT_SECONDS)
    return port
