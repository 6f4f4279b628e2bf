#!/usr/bin/env python3
"""A streamed reply through the gateway's model path against the same reply straight from the model.

Not a test: timings are never assertions. Loopback only. The scripted model (``testkit/scripted_model.py``)
runs in its own process and streams each reply as 7 SSE chunks ``--interval`` seconds apart; the gateway
(``gateway/app.py`` with the model path, a MemoryLedger and a throwaway CA) runs in another; the client
here sends the same chat-completions request either straight to the model (plain HTTP, as pi would
without a gateway) or to the gateway (TLS, the capability as its key; the gateway verifies it, reads the
key, checks the budget, forwards, streams back and counts the usage). Paired and interleaved (direct then
gateway, then gateway then direct, ...), 1 request at a time and 50 at once. Reported: the medians of the
time to the first SSE chunk and of the whole reply, and their ratios gateway / direct.

    .venv/bin/python bench/gateway_model.py [--rounds 20] [--interval 0.005]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, machine, machine_line, progress  # noqa: E402

sys.path.insert(0, str(REPO / "operator"))
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402

from testkit.scripted_model import RemoteScriptedModel, reply_step  # noqa: E402
from testkit.transferkit import Pki, make_pki  # noqa: E402

TEXT = "The gateway adds the key, streams the reply as it comes and counts the provider's own figures. " * 3
BODY = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                   "stream_options": {"include_usage": True}}).encode()


def serve_gateway(model_url: str, pki_dir: str) -> None:
    """Child process: the gateway in front of ``model_url`` until stdin closes; prints its port and capability."""
    from pidispatch.gateway.providers import OPENAI_COMPLETIONS, Provider
    from testkit.gatewaykit import GatewayServer, capability, claims, secrets

    pki = Pki(Path(pki_dir) / "ca.crt", Path(pki_dir) / "tls.crt", Path(pki_dir) / "tls.key")
    job = claims(max_tokens=10**12, credentials={"FAKE_API_KEY": "fake"})
    providers = {"fake": Provider("fake", {OPENAI_COMPLETIONS: model_url}, ("FAKE_API_KEY",))}
    with GatewayServer(pki, providers, secrets({"fake": "sk-bench"}), metrics_port=None) as gateway:
        print(json.dumps({"port": gateway.port, "capability": capability(job)}), flush=True)
        sys.stdin.read()


async def one(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> tuple[float, float]:
    started = time.perf_counter()
    first = None
    async with session.post(url, data=BODY, headers=headers) as response:
        assert response.status == 200, response.status
        async for _chunk in response.content.iter_any():
            if first is None:
                first = time.perf_counter() - started
    assert first is not None
    return first, time.perf_counter() - started


def memory_kib(pid: int, field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (the most it was resident) of process ``pid``, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User and system CPU of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(args: argparse.Namespace, model_url: str, gateway_port: int, cap: str, ca: Path, gateway_pid: int,
                  ) -> dict[int, dict[str, list[float]]]:
    """Timings by concurrency (1, 50), and under 0 the gateway's memory: idle, and per concurrent job."""
    context = ssl.create_default_context(cafile=str(ca))
    direct = (f"{model_url}/chat/completions", {"Content-Type": "application/json", "Authorization": "Bearer k"})
    through = (f"https://127.0.0.1:{gateway_port}/model/fake/chat/completions",
               {"Content-Type": "application/json", "Authorization": f"Bearer {cap}"})
    results: dict[int, dict[str, list[float]]] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=context)) as session:
        idle = memory_kib(gateway_pid, "VmRSS")  # started, no job connected yet
        for url, headers in (direct, through):  # warm: 50 connections open (pi's SDK keeps its own alive)
            await asyncio.gather(*(one(session, url, headers) for _ in range(50)))
        # Fifty jobs each holding a TLS connection and streaming a reply at once: what each one costs the gateway.
        results[0] = {"idle_kib": [idle], "per_job_kib": [(memory_kib(gateway_pid, "VmHWM") - idle) / 50]}
        for concurrency in (1, 50):
            got = results[concurrency] = {"direct_first": [], "direct_total": [], "gateway_first": [],
                                          "gateway_total": []}
            rounds = args.rounds if concurrency == 1 else max(4, args.rounds // 3)
            cpu = cpu_seconds(gateway_pid)
            for i in range(rounds):
                order = [("direct", direct), ("gateway", through)]
                for name, (url, headers) in order if i % 2 == 0 else order[::-1]:
                    timings = await asyncio.gather(*(one(session, url, headers) for _ in range(concurrency)))
                    got[f"{name}_first"] += [t[0] for t in timings]
                    got[f"{name}_total"] += [t[1] for t in timings]
            got["cpu_per_request"] = [(cpu_seconds(gateway_pid) - cpu) / (rounds * concurrency)]
            progress(f"{concurrency} at once: {rounds} rounds")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.005, help="seconds between two chunks of a reply")
    parser.add_argument("--verbose", action="store_true", help="also the 10th and 90th percentiles")
    parser.add_argument("--serve-gateway", nargs=2, metavar=("MODEL_URL", "PKI_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_gateway:
        serve_gateway(*args.serve_gateway)
        return 0
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'operator'}:{REPO}")
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        port_file = Path(tmp) / "port"
        model_proc = subprocess.Popen([sys.executable, "-m", "testkit.scripted_model", "--port", "0", "--port-file",
                                       str(port_file)], cwd=REPO, env=env, stdout=subprocess.DEVNULL)
        gateway_proc = None
        try:
            deadline = time.monotonic() + 20
            while not (port_file.exists() and port_file.read_text().strip()):
                if time.monotonic() > deadline:
                    raise RuntimeError("the scripted model did not start")
                time.sleep(0.05)
            model_root = f"http://127.0.0.1:{port_file.read_text().strip()}"
            remote = RemoteScriptedModel(model_root)
            remote.wait_until_up()
            total = 100 + args.rounds * 2 + max(4, args.rounds // 3) * 2 * 50 + 10
            remote.replace_script([reply_step(TEXT, interval=args.interval) for _ in range(total)])
            model_url = remote.base_url
            pki = make_pki(Path(tmp) / "pki", "bench-gateway")
            gateway_proc = subprocess.Popen([sys.executable, __file__, "--serve-gateway", model_url,
                                             str(Path(tmp) / "pki")], env=env, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True)
            assert gateway_proc.stdout is not None
            started = json.loads(gateway_proc.stdout.readline())
            results = asyncio.run(measure(args, model_url, started["port"], started["capability"], pki.ca,
                                           gateway_proc.pid))
        finally:
            if gateway_proc is not None and gateway_proc.stdin is not None:
                gateway_proc.stdin.close()
                gateway_proc.wait(20)
            model_proc.terminate()
            model_proc.wait(10)
    print(machine_line(machine(REPO)))
    print(f"reply: 7 SSE chunks {args.interval * 1000:g} ms apart; medians; ratio = gateway / direct")
    print(f"{'at once':>8} {'direct TTFT':>12} {'gateway TTFT':>13} {'ratio':>6} {'direct total':>13} "
          f"{'gateway total':>14} {'ratio':>6} {'gateway CPU/request':>20}")
    memory = results.pop(0)
    for concurrency, got in results.items():
        m = {k: statistics.median(v) for k, v in got.items()}
        if args.verbose:
            for name in ("direct_first", "gateway_first"):
                q = statistics.quantiles(got[name], n=10)
                progress(f"{concurrency} at once, {name}: p10 {q[0] * 1000:.1f} ms, p90 {q[-1] * 1000:.1f} ms")
        print(f"{concurrency:>8} {m['direct_first'] * 1000:>10.2f}ms {m['gateway_first'] * 1000:>11.2f}ms "
              f"{m['gateway_first'] / m['direct_first']:>6.2f} {m['direct_total'] * 1000:>11.2f}ms "
              f"{m['gateway_total'] * 1000:>12.2f}ms {m['gateway_total'] / m['direct_total']:>6.2f} "
              f"{m['cpu_per_request'] * 1000:>18.2f}ms")
    print(f"gateway memory: {memory['idle_kib'][0] / 1024:.1f} MiB resident with no job, "
          f"{memory['per_job_kib'][0]:.0f} KiB more per concurrent job (its TLS connection and a streamed reply)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
