#!/usr/bin/env python3
"""The gateway's CONNECT proxy: a 50 MB transfer through a tunnel against direct, and the memory a tunnel
holds (issue 40's benchmarks; docs/gateway.md#egress).

Not a test: timings are never assertions. The proxy (the real ``gateway/egress.py``) runs in a process of
its own so its memory is its own; the upstreams (a TLS origin and a plain TCP source, on loopback) and the
clients run here. Paired and interleaved (direct then tunnel, then tunnel then direct, ...):

* **TLS, curl**: ``curl -o /dev/null`` of 50 MB from the TLS origin, directly and with ``--proxy``;
* **TCP, raw**: 50 MB read from a plain TCP source to its end, directly and through a ``CONNECT`` (the
  proxy's copy alone, without TLS on either side).

Then the proxy's RSS (``/proc/<pid>/status``) with ``--idle`` tunnels open and idle, and with ``--stalled``
tunnels whose client reads nothing while the source writes without end (what backpressure bounds), each
against the RSS before, per tunnel.

    .venv/bin/python bench/gateway_egress.py [--runs 5] [--idle 500] [--stalled 20]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, cpu_times, machine, machine_line, mib, proc_status, progress, spread, stolen_since  # noqa: E402

sys.path.insert(0, str(REPO / "operator"))
sys.path.insert(0, str(REPO))

from pidispatch.gateway.egress import EgressLimits, serve  # noqa: E402
from pidispatch.gateway.egress_policy import AddressPolicy  # noqa: E402
from pidispatch.gateway.ledger import MemoryLedger  # noqa: E402
from testkit.egresskit import KEY, Source, capability, echo_upstream, https_upstream, make_pki  # noqa: E402

SIZE = 50 * 1000 * 1000


# -- the proxy, in its own process ---------------------------------------------------------------------------
def proxy_main(spec: str) -> None:
    allowed = json.loads(spec)["allowed"]

    async def run() -> None:
        limits = EgressLimits(max_connections=4096, max_per_job=4096, idle_seconds=3600)
        server = await serve("127.0.0.1", 0, key=KEY, ledger=MemoryLedger(), allowed=allowed,
                             policy=AddressPolicy(allow_loopback=True), limits=limits)
        print(server.port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes it
        server.close()
        await server.wait_closed()

    asyncio.run(run())


# -- upstreams here --------------------------------------------------------------------------------------------
class Upstreams:
    def __init__(self, pki_dir: Path) -> None:
        self.pki = make_pki(pki_dir)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.pki.cert), str(self.pki.key))
        self.https = self._listen(asyncio.start_server(https_upstream, "127.0.0.1", 0, ssl=context))
        self.sized = self._listen(asyncio.start_server(self._sized, "127.0.0.1", 0))
        self.echo = self._listen(asyncio.start_server(echo_upstream, "127.0.0.1", 0))
        self.source = Source()
        self.endless = self._listen(asyncio.start_server(self.source, "127.0.0.1", 0))

    def _listen(self, coro) -> int:  # type: ignore[no-untyped-def]
        server = asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)
        return int(server.sockets[0].getsockname()[1])

    @staticmethod
    async def _sized(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        block = b"t" * 65536
        left = SIZE
        while left:
            writer.write(block[:min(left, len(block))])
            left -= min(left, len(block))
            await writer.drain()
        writer.close()


def tunnel(proxy_port: int, port: int, cap: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy_port))
    auth = base64.b64encode(f"job:{cap}".encode()).decode()
    sock.sendall(f"CONNECT localhost:{port} HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.decode(errors="replace"))
    return sock


def read_all(sock: socket.socket) -> int:
    got = 0
    buffer = bytearray(1 << 20)
    while n := sock.recv_into(buffer):
        got += n
    sock.close()
    return got


def timed_tcp(up: Upstreams, proxy_port: int | None, cap: str) -> float:
    started = time.perf_counter()
    sock = (socket.create_connection(("127.0.0.1", up.sized)) if proxy_port is None
            else tunnel(proxy_port, up.sized, cap))
    if read_all(sock) != SIZE:
        raise RuntimeError("short read")
    return time.perf_counter() - started


def timed_curl(up: Upstreams, proxy_port: int | None, cap: str) -> float:
    argv = ["curl", "-sS", "-o", "/dev/null", "-w", "%{time_total} %{size_download}", "--cacert", str(up.pki.ca),
            f"https://localhost:{up.https}/bytes/{SIZE}"]
    if proxy_port is not None:
        argv[1:1] = ["--proxy", f"http://job:{cap}@127.0.0.1:{proxy_port}"]
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout.split()
    if int(out[1]) != SIZE:
        raise RuntimeError("short download")
    return float(out[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--stalled", type=int, default=20)
    args = parser.parse_args()
    info = machine(tempfile.gettempdir())
    start_cpu = cpu_times()
    with tempfile.TemporaryDirectory() as tmp:
        up = Upstreams(Path(tmp))
        allowed = [f"localhost:{port}" for port in (up.https, up.sized, up.echo, up.endless)]
        child = subprocess.Popen([sys.executable, __file__, "--serve", json.dumps({"allowed": allowed})],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None
            proxy_port = int(child.stdout.readline())
            cap = capability()
            rows = []
            for label, timed in (("TLS, curl", timed_curl), ("TCP, raw", timed_tcp)):
                ratios, direct, through = [], [], []
                timed(up, None, cap), timed(up, proxy_port, cap)  # warm both paths
                for run in range(args.runs):
                    order = (None, proxy_port) if run % 2 == 0 else (proxy_port, None)
                    got = {p: timed(up, p, cap) for p in order}
                    direct.append(got[None])
                    through.append(got[proxy_port])
                    ratios.append(got[proxy_port] / got[None])
                    progress(f"{label} run {run + 1}: direct {got[None]:.3f} s, tunnel {got[proxy_port]:.3f} s")
                rows.append((label, spread(ratios), spread(direct)[1], spread(through)[1]))
            base = proc_status(child.pid, "VmRSS")
            idle = [tunnel(proxy_port, up.echo, cap) for _ in range(args.idle)]
            time.sleep(1.0)
            idle_rss = proc_status(child.pid, "VmRSS")
            for sock in idle:
                sock.close()
            time.sleep(1.0)
            base_stalled = proc_status(child.pid, "VmRSS")
            stalled = [tunnel(proxy_port, up.endless, cap) for _ in range(args.stalled)]
            for sock in stalled:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            time.sleep(3.0)
            stalled_rss = proc_status(child.pid, "VmRSS")
            for sock in stalled:
                sock.close()
        finally:
            if child.stdin is not None:
                child.stdin.close()
            child.wait(30)
    print(machine_line(info) + " " + stolen_since(start_cpu))
    print()
    print("| 50 MB | tunnel / direct min | median | max | direct (median) | tunnel (median) |")
    print("|---|---|---|---|---|---|")
    for label, (low, mid, high), direct_s, through_s in rows:
        print(f"| {label} | {low:.2f}× | {mid:.2f}× | {high:.2f}× | {SIZE / direct_s / 1e6:.0f} MB/s "
              f"| {SIZE / through_s / 1e6:.0f} MB/s |")
    print()
    print(f"Proxy RSS: {mib(base)} before; {args.idle} idle tunnels {mib(idle_rss)} "
          f"({(idle_rss - base) / args.idle / 1024:.1f} KiB per tunnel); {args.stalled} stalled tunnels "
          f"(source writing without end, client reading nothing) {mib(stalled_rss)} from {mib(base_stalled)} "
          f"({(stalled_rss - base_stalled) / args.stalled / 1024:.1f} KiB per tunnel; the source had written "
          f"{mib(up.source.sent)} in all).")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        proxy_main(sys.argv[2])
    else:
        main()
