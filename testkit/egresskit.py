"""The gateway's CONNECT proxy and real upstreams on a loop of their own, for tests and the benchmark.

Real sockets on loopback: a TLS upstream (a throwaway CA, a certificate for ``localhost``, ``127.0.0.1``
and the test names below, as a package registry would present) serving a page and a sized body, a plain
TCP echo upstream (for half-close and idle), and the real ``gateway/egress.py`` in front of them with
loopback allowed (``AddressPolicy(allow_loopback=True)``): the tests' upstreams live there.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pidispatch.gateway.capability import Claims, mint
from pidispatch.gateway.egress import EgressLimits, EgressServer, serve
from pidispatch.gateway.egress_metrics import EgressMetrics
from pidispatch.gateway.egress_policy import AddressPolicy, Resolver, static_resolver
from pidispatch.gateway.ledger import MemoryLedger

WAIT = 10.0
KEY = b"egress-test-key-".ljust(32, b"k")
UID = "5f0c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"
NAMES = ("localhost", "mirror.pkg.test", "deep.mirror.pkg.test", "rebind.test", "pkg.test")
# Names the tests' resolver answers with loopback (the real resolver knows only ``localhost``).
PINNED = {name: ["127.0.0.1"] for name in NAMES if name != "localhost"}
PAGE = b"hello through the gateway\n"

T = TypeVar("T")


def claims(**overrides: Any) -> Claims:
    base: dict[str, Any] = dict(uid=UID, namespace="pi", job="fix-1", repository="acme/app",
                                forge="https://github.com", api="https://api.github.com", exp=4_000_000_000)
    base.update(overrides)
    return Claims(**base)


def capability(**overrides: Any) -> str:
    return mint(KEY, claims(**overrides))


def basic(cap: str, user: str = "job") -> str:
    return "Basic " + base64.b64encode(f"{user}:{cap}".encode()).decode()


def connect(proxy: EgressServer, target: str, headers: dict[str, str] | None = None,
            method: str = "CONNECT") -> tuple[int, dict[str, str], bytes, socket.socket]:
    """One raw request head; the status, headers and body of the answer, and the socket (still open)."""
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=WAIT)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {target}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *fields = head.decode().split("\r\n")
    parsed = {name.lower(): value.strip() for name, _, value in (f.partition(":") for f in fields)}
    length = int(parsed.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(status_line.split(" ")[1]), parsed, body, sock


# -- PKI ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path


def make_pki(directory: Path, names: Sequence[str] = NAMES) -> Pki:
    """A CA and a serving certificate for ``names`` and ``127.0.0.1`` signed by it."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=1)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("egress-test-ca")).issuer_name(name("egress-test-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(later)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False),
                         critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder().subject_name(name("egress-upstream")).issuer_name(ca.subject)
            .public_key(leaf_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(later)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    pki = Pki(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    pki.key.write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return pki


# -- upstreams ---------------------------------------------------------------------------------------------
async def https_upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A minimal HTTPS origin: ``GET /`` is :data:`PAGE`, ``GET /bytes/<n>`` is ``n`` bytes; one request."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        path = head.split(b" ", 2)[1].decode()
        size = int(path.rsplit("/", 1)[1]) if path.startswith("/bytes/") else len(PAGE)
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nContent-Type: application/octet-stream\r\n"
                     "Connection: close\r\n\r\n".encode())
        if path.startswith("/bytes/"):
            block = b"x" * 65536
            left = size
            while left:
                writer.write(block[:min(left, len(block))])
                left -= min(left, len(block))
                await writer.drain()
        else:
            writer.write(PAGE)
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def echo_upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Plain TCP: echoes every byte; at the client's EOF writes ``bye`` and closes (a half-close's proof)."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.write(b"bye")
        await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


class Source:
    """Plain TCP: writes without end, counting what its socket accepted (what backpressure must bound)."""

    def __init__(self) -> None:
        self.sent = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        block = b"s" * 65536
        try:
            while True:
                writer.write(block)
                await writer.drain()
                self.sent += len(block)
        except ConnectionError:
            pass
        finally:
            writer.close()


# -- everything on a loop of its own -------------------------------------------------------------------------
class Rig:
    """A loop in a thread holding the upstreams and (``start_proxy``) proxies, for synchronous tests."""

    def __init__(self, pki: Pki) -> None:
        self.pki = pki
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.ledger = MemoryLedger()
        self.metrics = EgressMetrics()
        self.servers: list[asyncio.AbstractServer] = []
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(pki.cert), str(pki.key))
        self.https_port = self._listen(lambda: asyncio.start_server(https_upstream, "127.0.0.1", 0, ssl=context))
        self.echo_port = self._listen(lambda: asyncio.start_server(echo_upstream, "127.0.0.1", 0))
        self.source = Source()
        self.source_port = self._listen(lambda: asyncio.start_server(self.source, "127.0.0.1", 0))

    def run(self, make: Callable[[], Awaitable[T]]) -> T:
        async def call() -> T:
            return await make()
        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(WAIT)

    def _listen(self, make: Callable[[], Awaitable[asyncio.Server]]) -> int:
        server = self.run(make)
        self.servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def start_proxy(self, *, allowed: Sequence[str] = (), allow_loopback: bool = True,
                    resolver: Resolver | None = None, limits: EgressLimits | None = None) -> EgressServer:
        policy = AddressPolicy(allow_loopback=allow_loopback)
        proxy = self.run(lambda: serve("127.0.0.1", 0, key=KEY, ledger=self.ledger, allowed=allowed, policy=policy,
                                       resolver=resolver or static_resolver(PINNED), limits=limits,
                                       metrics=self.metrics))
        self.servers.append(proxy)
        return proxy

    def refusals(self, uid: str = UID) -> dict[str, int]:
        figures = self.ledger.figures.get(uid)
        return dict(figures.refusals) if figures else {}

    def close(self) -> None:
        async def shut() -> None:
            for server in self.servers:
                server.close()
            for server in self.servers:
                await server.wait_closed()
        try:
            self.run(shut)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(WAIT)
            self.loop.close()
