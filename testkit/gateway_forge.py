"""The gateway's forge path served for tests and the bench: an aiohttp app with only ``gateway/forge.py``'s routes,
over TLS with its own throwaway CA, on 127.0.0.1, in a thread of its own (so real ``git`` and ``gh`` can be run
against it from the test's thread).
"""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from pidispatch.gateway import forge
from pidispatch.gateway.capability import Claims, SecretRef, mint
from pidispatch.gateway.ledger import MemoryLedger
from pidispatch.gateway.secrets import SecretSource, StaticSecrets
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.gitforge import Repos, make_tls


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


def job_env(gateway: ForgeGateway, capability: str, home: Path) -> dict[str, str]:
    """What a job's git and gh have: the gateway's CA, the capability through ``GIT_ASKPASS`` and
    ``GH_ENTERPRISE_TOKEN``, ``GH_HOST`` the gateway; no forge token, no other configuration."""
    home.mkdir(parents=True, exist_ok=True)
    askpass = home / "askpass"
    askpass.write_text("#!/bin/sh\nprintf '%s\\n' \"$PI_GATEWAY_TOKEN\"\n")
    askpass.chmod(0o700)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "PI_GATEWAY_TOKEN": capability,
            "GIT_SSL_CAINFO": str(gateway.ca), "GIT_ASKPASS": str(askpass), "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "pi",
            "GIT_AUTHOR_EMAIL": "pi@example.invalid", "GIT_COMMITTER_NAME": "pi",
            "GIT_COMMITTER_EMAIL": "pi@example.invalid", "GH_HOST": gateway.host, "GH_ENTERPRISE_TOKEN": capability,
            "SSL_CERT_FILE": str(gateway.ca), "GH_CONFIG_DIR": str(home / "gh"), "GH_PROMPT_DISABLED": "1",
            "NO_COLOR": "1", "GH_NO_UPDATE_NOTIFIER": "1", "GH_PAGER": "cat", "LC_ALL": "C"}


def run(env: dict[str, str], *args: str, cwd: Path | None = None, timeout: float = 120,
        extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``args`` with exactly ``env`` (plus ``extra``), never the test process's own environment."""
    return subprocess.run(list(args), cwd=cwd, env={**env, **(extra or {})}, capture_output=True, text=True,
                          timeout=timeout, check=False)


REPO = "acme/widgets"
OTHER = "acme/other"
TOKEN = "ghp_" + "T0k3nOfTheJob" * 3  # the job's forge token: only the gateway and the fake forge know it
KEY = b"gateway-key-for-the-forge-tests!!"


@dataclass
class ForgeWorld:
    """A local forge (real repositories behind the fake GitHub API, over TLS) and the gateway in front of it."""

    api: FakeGitHubAPI
    repos: Repos
    gateway: ForgeGateway
    directory: Path

    def capability(self, *, repository: str = REPO, fork: bool = False, subject: int | None = None,
                   token: bool = True) -> str:
        claims = Claims(uid="uid-forge-1", namespace="jobs", job="pi-job-1", repository=repository,
                        forge=self.api.web_url, api=self.api.url, exp=int(time.time()) + 3600, fork=fork,
                        subject=subject, token=SecretRef("pi-job-token-1", "token") if token else None)
        return mint(KEY, claims)

    def env(self, capability: str, name: str = "job") -> dict[str, str]:
        return job_env(self.gateway, capability, self.directory / "homes" / name)

    def stop(self) -> None:
        self.gateway.stop()
        self.api.stop()


def forge_world(directory: Path) -> ForgeWorld:
    """``acme/widgets`` (issue 7, pull request 8 from its branch ``feature``) and ``acme/other`` on the local forge,
    the gateway holding ``TOKEN`` for the job's Secret."""
    ca, cert, key = make_tls(directory / "forge-tls")
    repos = Repos(directory / "repos")
    repos.create(REPO, {"README.md": "# widgets\n"})
    repos.create(OTHER, {"README.md": "# other\n"})
    repos.commit(REPO, "feature", {"feature.txt": "a feature\n"}, "A feature")
    api = FakeGitHubAPI(pats={TOKEN}, repos=repos, tls=(str(cert), str(key)), prefix="/api/v3").start()
    api.set_issue(REPO, 7, "The cache test is flaky", "It fails one run in ten.")
    api.set_issue(REPO, 9, "Another issue", "Not the job's.")
    api.set_pull(REPO, 8, head_ref="feature", title="Add a feature", body="Please review.")
    api.set_issue(OTHER, 1, "Elsewhere", "")
    secrets = StaticSecrets({("jobs", "pi-job-token-1", "token"): TOKEN})
    gateway = ForgeGateway(directory / "gateway-tls", KEY, secrets, upstream_ca=str(ca)).start()
    return ForgeWorld(api, repos, gateway, directory)
