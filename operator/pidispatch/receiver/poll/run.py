"""The poller's loop in the receiver's process (``PI_DISPATCH_RECEIVER_MODE=poll``): a pass, then the wait it asks
for (the interval, or longer when the forge says so: ``ratelimit.py``), until SIGTERM. Only the health listener is
served (``/healthz``, ``/readyz``, ``/metrics``): there is no webhook port to expose.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from pidispatch.events import emit
from pidispatch.receiver.poll.poller import Poller


async def poll_forever(poller: Poller, stop: asyncio.Event) -> None:
    """Passes until ``stop`` is set; a pass that fails unexpectedly is logged and the next one comes after the
    interval (the cursor was written only for what was done)."""
    while not stop.is_set():
        try:
            wait = (await poller.pass_once()).wait.seconds
        except Exception as exc:  # noqa: BLE001 - one bad pass must not end the receiver; the next reads again
            emit("receiver_poll_failed", error=type(exc).__name__, why=str(exc)[:300])
            wait = poller.interval
        try:
            await asyncio.wait_for(stop.wait(), wait)
        except TimeoutError:
            pass


async def serve_polling(poller: Poller, health: web.Application, host: str | None, health_port: int,
                        stop: asyncio.Event, started: asyncio.Event | None = None) -> None:
    """The health listener on ``host:health_port`` and the poller, until ``stop`` is set."""
    runner = web.AppRunner(health, access_log=None, handle_signals=False, shutdown_timeout=5.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, health_port).start()
        emit("receiver_polling", healthPort=health_port, intervalSeconds=poller.interval)
        if started is not None:
            started.set()
        await poll_forever(poller, stop)
    finally:
        await runner.cleanup()
