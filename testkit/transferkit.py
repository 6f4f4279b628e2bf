"""A CA, a serving certificate and the operator's transfer server on a loop of its own, for tests.

Real TLS on loopback (certificates for ``localhost`` and ``127.0.0.1``, as the chart's genCA would make
for the Service's names) and the real ``transfer/server.py``: ``tests/transfer/test_transfer.py`` holds the
protocol to them, ``tests/transfer/test_transfer_runner.py`` the runner's fetch and hand-back,
``tests/transfer/test_transfer_limits.py`` its limits (:func:`server_process` runs it in a process of its own, with
a file-descriptor limit, where exhausting it cannot touch the test's).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import json
import resource
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pidispatch.settings.staging import TransferLimits
from pidispatch.transfer import protocol
from pidispatch.transfer.server import TransferConfig, build_app, server_ssl_context, start

WAIT = 10.0


# -- PKI -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_pki(directory: Path, label: str) -> Pki:
    """A CA and a serving certificate for localhost and 127.0.0.1 signed by it (as the chart's genCA would)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder().subject_name(_name(f"{label}-ca")).issuer_name(_name(f"{label}-ca"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder().subject_name(_name("pi-dispatch-transfer")).issuer_name(ca_cert.subject)
        .public_key(leaf_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pki = Pki(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    pki.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    pki.cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    pki.key.write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return pki




# -- the server on its own loop ---------------------------------------------------------------------------------
class Server:
    def __init__(self, staging: Path, pki: Pki, max_bytes: int, key: bytes,
                 limits: TransferLimits | None = None) -> None:
        self.staging = staging
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        app = build_app(TransferConfig(str(staging), key, max_bytes, limits or TransferLimits()))
        future = asyncio.run_coroutine_threadsafe(
            start(app, "127.0.0.1", 0, server_ssl_context(str(pki.cert), str(pki.key))), self.loop)
        self.runner, self.port = future.result(WAIT)

    def url(self, uid: str) -> str:
        return protocol.session_url(f"https://localhost:{self.port}", uid)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(WAIT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)
        self.loop.close()


# -- the server in a process of its own -------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerProcess:
    port: int
    pid: int

    def url(self, uid: str) -> str:
        return protocol.session_url(f"https://localhost:{self.port}", uid)


@contextmanager
def server_process(staging: Path, pki: Pki, max_bytes: int, key: bytes, limits: TransferLimits,
                   *, max_files: int) -> Iterator[ServerProcess]:
    """The real server in a child process that may open at most ``max_files`` files (``RLIMIT_NOFILE``)."""
    spec = json.dumps({"staging": str(staging), "cert": str(pki.cert), "key": str(pki.key), "max_bytes": max_bytes,
                       "token_key": key.hex(), "limits": asdict(limits)})

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max_files, max_files))

    child = subprocess.Popen([sys.executable, "-m", "testkit.transferkit", spec], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, preexec_fn=limit_files)  # noqa: PLW1509 - no threads yet
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line:
            raise RuntimeError("the transfer server process did not start")
        yield ServerProcess(int(line), child.pid)
    finally:
        child.kill()
        child.wait(WAIT)


def _serve_until_stdin_closes(spec: dict[str, object]) -> None:
    async def main() -> None:
        limits = spec["limits"]
        assert isinstance(limits, dict)
        app = build_app(TransferConfig(str(spec["staging"]), bytes.fromhex(str(spec["token_key"])),
                                       int(str(spec["max_bytes"])), TransferLimits(**limits)))
        runner, port = await start(app, "127.0.0.1", 0, server_ssl_context(str(spec["cert"]), str(spec["key"])))
        print(port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await runner.cleanup()

    asyncio.run(main())


if __name__ == "__main__":
    _serve_until_stdin_closes(json.loads(sys.argv[1]))
