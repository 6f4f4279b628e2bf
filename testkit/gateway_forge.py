"""The gateway's forge path served for tests and the bench: an aiohttp app with only ``gateway/forge.py``'s routes,
over TLS with its own throwaway CA, on 127.0.0.1, in a thread of its own (so real ``git`` and ``gh`` can be run
against it from the test's thread).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from pidispatch.gateway import forge
from pidispatch.gateway.ledger import MemoryLedger
from pidispatch.gateway.secrets import SecretSource
from testkit.gitforge import make_tls


@dataclass
class ForgeGateway:
    """``start()`` serves; ``url`` is ``https://127.0.0.1:<port>``, ``ca`` the CA a client trusts."""

    directory: Path
    key: bytes
    secrets: SecretSource
    upstream_ca: str | None = None
    ledger: MemoryLedger = field(default_factory=MemoryLedger)
    ca: Path | None = None
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _runner: web.AppRunner | None = None
    _thread: threading.Thread | None = None

    def start(self) -> ForgeGateway:
        ca, cert, key = make_tls(self.directory)
        self.ca = ca
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(cert), str(key))
        ready = threading.Event()
        failure: list[BaseException] = []

        async def serve() -> None:
            app = web.Application()
            forge.add_routes(app, key=self.key, secrets=self.secrets, ledger=self.ledger,
                             upstream_ca=self.upstream_ca)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
            await site.start()
            server: Any = site._server  # noqa: SLF001 - the bound port of a port-0 site
            self.port = server.sockets[0].getsockname()[1]

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(serve())
            except BaseException as exc:  # noqa: BLE001 - said in the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="forge-gateway", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is None or self._runner is None:
            return
        runner, loop = self._runner, self._loop
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(30)
        self._loop = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


def quiet_access_log() -> None:
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
