#!/usr/bin/env python3
"""Staging by transfer against staging by mount, per resumed job, stage to promote (issue 33 item 2).

Not a test: timings are never assertions. One process, real files, the real store and the real transfer
server over TLS on loopback (a CA made here), paired and interleaved (mount then transfer, then transfer
then mount, ...) so that drift and page-cache state hit both sides alike. Per resumed job:

* **mount**: ``stage`` (the gates and the Job's copy), the job appends its turn to the staged file in place
  (what a Pod that mounts its subPath does), ``promote_once``;
* **transfer**: ``stage``, the runner's ``fetch`` of the copy into the Pod's own directory, the turn appended
  there, the runner's ``upload`` (the server unpacks it and swaps it in under the marker), ``promote_once``.

The transcript is pi-shaped (``bench/store.py``'s ``make_transcript``) at 1 KiB, 1 MiB and 8 MiB. Reported:
min / median / max of the per-pair ratios transfer / mount, and the absolute medians. Not included: the
Pods themselves (a Pod's start, the mount of a claim, the network between nodes).

    .venv/bin/python bench/transfer.py [--runs 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, cpu_times, machine, progress, stolen_since  # noqa: E402

sys.path.insert(0, str(REPO / "operator"))
sys.path.insert(0, str(REPO))

from store import MODEL, PI, make_transcript  # noqa: E402

from pidispatch.contract import VENUE  # noqa: E402
from pidispatch.settings import Settings  # noqa: E402
from pidispatch.store.journal import promote_once  # noqa: E402
from pidispatch.store.keys import issue_key  # noqa: E402
from pidispatch.store.promote import promote  # noqa: E402
from pidispatch.store.staging import HostRecord, JobDir, stage  # noqa: E402
from pidispatch.transfer import client, protocol  # noqa: E402
from pidispatch.transfer.server import TransferConfig, build_app, server_ssl_context, start  # noqa: E402
from pidispatch.transfer.token import job_token  # noqa: E402
from testkit.transferkit import make_pki  # noqa: E402

KEY = b"bench-transfer-key-" + b"b" * 32
SIZES = ((1024, "1 KiB"), (1 << 20, "1 MiB"), (8 << 20, "8 MiB"))
CAP = 64 << 20


def last_id(data: bytes) -> str | None:
    for line in reversed([x for x in data.split(b"\n") if x]):
        entry = json.loads(line)
        if entry.get("type") != "session" and entry.get("id"):
            return str(entry["id"])
    return None


def append_turn(path: Path) -> None:
    """One user and one assistant message, as pi appends them (the job's work, the same on both sides)."""
    parent = last_id(path.read_bytes())
    stamp = "2025-01-01T00:00:09.000Z"
    user = {"type": "message", "id": uuid.uuid4().hex[:8], "parentId": parent, "timestamp": stamp,
            "message": {"role": "user", "content": [{"type": "text", "text": "next"}], "timestamp": 9}}
    reply = {"type": "message", "id": uuid.uuid4().hex[:8], "parentId": user["id"], "timestamp": stamp,
             "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}],
                         "api": "openai-completions", "provider": "fake", "model": "fake-model",
                         "stopReason": "stop", "timestamp": 9,
                         "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                                   "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}}}
    with open(path, "ab") as f:
        f.write((json.dumps(user, separators=(",", ":")) + "\n" + json.dumps(reply, separators=(",", ":")) + "\n")
                .encode())


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.staging = root / "jobs"
        self.staging.mkdir()
        (root / "sessions").mkdir()
        self.settings = Settings(sessions_dir=str(root / "sessions"), max_bytes=CAP)
        pki = make_pki(root / "pki", "bench")
        self.ca = str(pki.ca)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        app = build_app(TransferConfig(str(self.staging), KEY, CAP))
        self.runner, port = asyncio.run_coroutine_threadsafe(
            start(app, "127.0.0.1", 0, server_ssl_context(str(pki.cert), str(pki.key))), self.loop).result(10)
        self.base = f"https://localhost:{port}"

    def seed(self, issue: int, data: bytes) -> str:
        key = issue_key("github", "acme/widgets", issue)
        assert key is not None
        src = self.root / f"seed-{issue}"
        src.mkdir()
        (src / "current.jsonl").write_bytes(data)
        result = promote(self.settings, key, str(src), host_resume=False, pi_version=PI, model=MODEL)
        assert result.promoted, result
        return key

    def job(self, key: str, transfer: bool) -> None:
        uid = str(uuid.uuid4())
        jd = JobDir(str(self.staging), uid)
        record = HostRecord(key=key, forge="github", repository="acme/widgets", branch="pi/issue-1", venue=VENUE,
                            pi_version=PI, model=MODEL)
        host = stage(self.settings, jd, record)
        assert host.resume, host
        if transfer:
            pod = self.root / f"pod-{uid}"
            pod.mkdir()
            url, token = protocol.session_url(self.base, uid), job_token(KEY, uid)
            client.fetch(url, token, self.ca, str(pod), max_bytes=CAP)
            append_turn(pod / "current.jsonl")
            client.upload(url, token, self.ca, str(pod), max_bytes=CAP)
            shutil.rmtree(pod)
        else:
            append_turn(Path(jd.session) / "current.jsonl")
        result = promote_once(self.settings, jd, host, None, job=uid)
        assert result.promoted, result
        jd.remove()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


def timed(fn: Callable[[], None]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    start_cpu = cpu_times()
    with tempfile.TemporaryDirectory(prefix="bench-transfer-") as tmp:
        world = World(Path(tmp))
        try:
            rows = []
            for n, (size, label) in enumerate(SIZES):
                key = world.seed(9000 + n, make_transcript(size))
                world.job(key, False)  # warm both paths once, untimed
                world.job(key, True)
                mount, transfer = [], []
                for run in range(args.runs):
                    order = (False, True) if run % 2 == 0 else (True, False)
                    for side in order:
                        (transfer if side else mount).append(timed(lambda s=side, k=key: world.job(k, s)))
                ratios = [t / m for t, m in zip(transfer, mount, strict=True)]
                rows.append((label, min(ratios), statistics.median(ratios), max(ratios),
                             statistics.median(mount), statistics.median(transfer)))
                progress(f"{label}: done")
        finally:
            world.close()
        facts = machine(tmp)
    print(f"{args.runs} pairs per size; {facts}; {stolen_since(start_cpu)}")
    print("| transcript | transfer / mount min | median | max | mount (median) | transfer (median) |")
    print("|---|---|---|---|---|---|")
    for label, lo, med, hi, m, t in rows:
        print(f"| {label} | {lo:.2f}× | {med:.2f}× | {hi:.2f}× | {m * 1000:.1f} ms | {t * 1000:.1f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
