#!/usr/bin/env python3
"""Resumable refresh benchmark: ``jobflow.timers.refresh_sessionkeys`` over N keys on the real disk and N
SessionKeys on a real apiserver (``e2e.framework.cluster.Cluster``: etcd + kube-apiserver, no kubelet).

Not a test: timings are never assertions. What it lays out (untimed, but timed and reported as seeding):

* N key directories under a temp dir on the real filesystem (/tmp, unless ``--dir``), as promotions leave
  them: ``current.jsonl`` (a pi v3 transcript of about 6 KiB, header timestamped an hour ago, so every
  gate passes and the key is ``Resumable``) and the four sidecars; one key in ten also has a waiting
  ``letter.md`` (it names its transcript's sha256, so judging it hashes the transcript);
* N SessionKeys (created by a thread pool), and their first statuses (written by a thread pool through
  ``sessionkey.write``, as an earlier operator would have left them).

Then one fresh Python process (memo empty, as after an operator restart) runs, one after the other:

1. **cold**: one refresh cycle with an empty scan memo;
2. **warm**: the next cycle, nothing changed;
3. **warm again**: the same, to show the spread of one cycle;
4. **changed**: after ``--promoted`` transcripts are replaced by new ones (written and renamed over, as
   promotion does) and ``--expired`` others are aged past the TTL (untimed), one more cycle;
5. **warm after**: the next cycle, nothing changed since;
6. **warm, pages in turn**: the same with each LIST page fetched only when the previous one is judged (the
   refresh fetches one page ahead), for comparison.

For each cycle: wall time and the process's CPU time (user + system: a wall time far above it is waiting,
on the disk or the apiserver, or a machine shared with other work); transcript reads, counted by wrapping
``os.open``/``os.close`` and ``os.read``/``os.pread``/``os.preadv`` before the package is imported (a read
of a descriptor opened on ``current.jsonl``), split by what reads: the header line (gate 11, ``pread`` at
offset 0), the body scan (gate 12, ``preadv``) and the letter's digest (``read``); ``rchar`` from
/proc/self/io (every byte read, sockets included); the apiserver's own ``apiserver_request_total`` for
sessionkeys by verb (from ``/metrics``, before and after); VmHWM and VmRSS of the process; the memo's size.

    .venv/bin/python bench/refresh.py                  # 100 000 keys
    .venv/bin/python bench/refresh.py --keys 2000      # smoke
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, fmt_seconds, load_average, machine, machine_line, mib, proc_status, progress  # noqa: E402

sys.path.insert(0, str(REPO / "operator"))
sys.path.insert(0, str(REPO))

DAY = 86400
NAMESPACE = "bench-refresh"
PI = "0.73.1"
MODEL = "fake/fake-model"
LETTER_EVERY = 10
TARGET_KEYS = 100_000


# ---- the store ----------------------------------------------------------------------------------------

def transcript(n: int, started: float, turns: int = 6) -> bytes:
    """A pi v3 transcript: header, then ``turns`` user/assistant pairs (about 1 KiB each)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(started))
    lines: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": f"00000000-0000-4000-8000-{n:012d}",
                                    "timestamp": stamp, "cwd": "/workspace"}]
    parent = None
    for t in range(turns):
        uid, aid = f"u{t:07d}", f"a{t:07d}"
        lines.append({"type": "message", "id": uid, "parentId": parent, "timestamp": stamp, "message": {
            "role": "user", "content": [{"type": "text", "text": f"@pi step {t} of issue {n}: " + "x" * 200}],
            "timestamp": int(started * 1000)}})
        lines.append({"type": "message", "id": aid, "parentId": uid, "timestamp": stamp, "message": {
            "role": "assistant", "content": [{"type": "text", "text": "Done: " + "y" * 500}],
            "provider": "fake", "model": "fake-model", "stopReason": "stop",
            "usage": {"input": 610 + t, "output": 12, "totalTokens": 622 + t}, "timestamp": int(started * 1000)}})
        parent = aid
    return b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines)


def letter(data: bytes) -> str:
    from pidispatch.store import handoff

    h = handoff.parse_handoff({"writer": "agent", "status": "partial", "letter": {}, "entry": {}})
    return handoff.render_letter(h, job="bench-job", sha256=hashlib.sha256(data).hexdigest(), size=len(data),
                                 session=None, now_s=time.time())


def key_name(i: int) -> str:
    from pidispatch.store.keys import issue_key

    key = issue_key("github", "acme/widgets", i + 1)
    assert key is not None
    return key


def write_key(store: Path, i: int, started: float) -> None:
    d = store / key_name(i)
    d.mkdir(mode=0o700)
    data = transcript(i, started)
    files = {"current.jsonl": data, "pi-version": f"{PI}\n".encode(), "venue": b"kubernetes\n",
             "resume-chain": b"1\n", "context": f"{622 + i % 5} 128000 {MODEL}\n".encode()}
    if i % LETTER_EVERY == 0:
        files["letter.md"] = letter(data).encode()
    for name, content in files.items():
        fd = os.open(d / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, content)
        finally:
            os.close(fd)


def lay_store(store: Path, n: int, threads: int) -> float:
    started = time.time() - 3600
    t0 = time.perf_counter()
    step = max(1, n // 4)
    with ThreadPoolExecutor(threads) as pool:
        for done, _ in enumerate(pool.map(lambda i: write_key(store, i, started), range(n)), 1):
            if done % step == 0:
                progress(f"    store: {done}/{n} keys")
    os.sync()
    return time.perf_counter() - t0


# ---- the apiserver ------------------------------------------------------------------------------------

REQUESTS = re.compile(r"^apiserver_request_total\{(.*)\} ([0-9.e+]+)$")


def sessionkey_requests(api: Any) -> dict[str, int]:
    """``apiserver_request_total`` for sessionkeys, by ``VERB[/subresource] code``."""
    r = api._http.request("GET", api.server + "/metrics", timeout=30.0)
    out: dict[str, int] = {}
    for line in r.data.decode().splitlines():
        m = REQUESTS.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("resource") != "sessionkeys":
            continue
        name = labels["verb"] + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        name += f" {labels.get('code', '')}"
        out[name] = out.get(name, 0) + int(float(m.group(2)))
    return out


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in sorted(after.items()) if v != before.get(k, 0)}


def api_of(args: argparse.Namespace) -> Any:
    from pidispatch.kubeapi import Api

    return Api(args.server, ca_file=args.ca, cert_file=args.cert, key_file=args.key, pool=64, timeout=120.0)


def seed_sessionkeys(api: Any, n: int, threads: int) -> float:
    from pidispatch.api.crds import GROUP, VERSION
    from pidispatch.jobflow.sessionkey import FINALIZER

    path = f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/sessionkeys"

    def create(i: int) -> None:
        api.create(path, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SessionKey",
                          "metadata": {"name": key_name(i), "finalizers": [FINALIZER]},
                          "spec": {"forge": "github", "repository": "acme/widgets", "branch": f"pi/issue-{i + 1}"}})

    t0 = time.perf_counter()
    step = max(1, n // 10)
    with ThreadPoolExecutor(threads) as pool:
        for done, _ in enumerate(pool.map(create, range(n)), 1):
            if done % step == 0:
                progress(f"    SessionKeys: {done}/{n} created ({done / (time.perf_counter() - t0):.0f}/s)")
    return time.perf_counter() - t0


def first_statuses(api: Any, settings: Any, threads: int) -> float:
    """What an earlier operator left: every status written once (by the refresh's own ``write``, in parallel)."""
    from pidispatch.api.views import SessionKeyView
    from pidispatch.jobflow import sessionkey
    from pidispatch.jobflow.cluster import Cluster

    cluster = Cluster(api, NAMESPACE)
    t0 = time.perf_counter()
    done = 0
    with ThreadPoolExecutor(threads) as pool:
        for page in api.pages(cluster.crd("sessionkeys")):
            list(pool.map(lambda sk: sessionkey.write(settings, cluster, sk["metadata"]["name"],
                                                      listed=SessionKeyView.of(sk)), page))
            done += len(page)
            if done % 10_000 < len(page):
                progress(f"    first statuses: {done} written ({done / (time.perf_counter() - t0):.0f}/s)")
    return time.perf_counter() - t0


# ---- the measured process -----------------------------------------------------------------------------

class TranscriptReads:
    """Reads of descriptors opened on ``current.jsonl``, by the call that made them (installed before the
    package is imported, so ``read_first_line``'s ``pread`` default is the counting one)."""

    def __init__(self) -> None:
        self.fds: dict[int, bool] = {}  # fd → read from yet
        self.reset()
        real_open, real_close = os.open, os.close

        def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
            fd = real_open(path, flags, mode, dir_fd=dir_fd)
            if os.fsdecode(path).endswith("current.jsonl") and not flags & (os.O_WRONLY | os.O_RDWR):
                self.fds[fd] = False
            return fd

        def close_(fd: int) -> None:
            self.fds.pop(fd, None)
            real_close(fd)

        os.open, os.close = open_, close_  # type: ignore[assignment]
        os.pread = self._wrap(os.pread, "header (pread)")  # type: ignore[assignment]
        os.preadv = self._wrap(os.preadv, "body scan (preadv)")  # type: ignore[assignment]
        os.read = self._wrap(os.read, "digest (read)")  # type: ignore[assignment]

    def reset(self) -> None:
        self.calls: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        self.files = 0

    def _wrap(self, real: Any, kind: str) -> Any:
        def counted(fd: int, *args: Any) -> Any:
            result = real(fd, *args)
            if fd in self.fds:
                got = result if isinstance(result, int) else len(result)
                self.calls[kind] = self.calls.get(kind, 0) + 1
                self.bytes[kind] = self.bytes.get(kind, 0) + got
                if not self.fds[fd]:
                    self.fds[fd] = True
                    self.files += 1
            return result
        return counted


def rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def promote_anew(store: Path, i: int) -> None:
    """A new transcript renamed over the key's, as promotion does (a new inode: a new version)."""
    d = store / key_name(i)
    tmp = d / "current.jsonl.bench.incoming"
    tmp.write_bytes(transcript(i, time.time() - 3600, turns=7))
    os.replace(tmp, d / "current.jsonl")


def worker(args: argparse.Namespace) -> None:
    reads = TranscriptReads()
    from pidispatch.jobflow.cluster import Cluster
    from pidispatch.jobflow.timers import refresh_sessionkeys
    from pidispatch.settings import OperatorSettings, Settings
    from pidispatch.store import scanmemo

    store = Path(args.worker)
    settings = OperatorSettings(store=Settings(sessions_dir=str(store)), staging_dir=str(store.parent / "staging"))
    api = api_of(args)
    cluster = Cluster(api, NAMESPACE)
    results = []

    def cycle(name: str) -> None:
        load = load_average()
        before, io0, hwm0 = sessionkey_requests(api), rchar(), proc_status("self", "VmHWM")
        reads.reset()
        cpu0, t0 = os.times(), time.perf_counter()
        refresh_sessionkeys(settings, cluster, set())
        seconds, cpu1 = time.perf_counter() - t0, os.times()
        io1 = rchar()
        results.append({"cycle": name, "seconds": seconds, "load": load,
                        "cpu": cpu1.user + cpu1.system - cpu0.user - cpu0.system, "reads": dict(reads.calls),
                        "bytes": dict(reads.bytes), "files": reads.files, "rchar": io1 - io0,
                        "requests": delta(sessionkey_requests(api), before), "hwm_before": hwm0,
                        "hwm": proc_status("self", "VmHWM"), "rss": proc_status("self", "VmRSS"),
                        "memo": len(scanmemo.MEMO)})
        progress(f"  {name} cycle: {fmt_seconds(seconds)} (CPU {results[-1]['cpu']:.1f} s), "
                 f"{reads.files} transcripts read "
                 f"({sum(reads.bytes.values()):,} bytes: {reads.bytes}), "
                 f"API {results[-1]['requests']}, VmHWM {mib(results[-1]['hwm'])}, load {load}")

    cycle("cold")
    cycle("warm")
    cycle("warm again")
    n = args.keys
    promoted = range(1, 1 + args.promoted * 7, 7)  # spread over the store, letters included (i % 10 == 0)
    expired = [i for i in range(3, n, max(1, n // (2 * args.expired))) if i not in set(promoted)][: args.expired]
    assert not set(promoted) & set(expired) and len(expired) == args.expired
    old = time.time() - 30 * DAY
    for i in promoted:
        promote_anew(store, i)
    for i in expired:
        os.utime(store / key_name(i) / "current.jsonl", (old, old))
    cycle("changed")
    results[-1]["promoted"], results[-1]["expired"] = len(promoted), len(expired)
    cycle("warm after")
    # The same cycle with the pages fetched in turn instead of one ahead (timers._ahead), for comparison.
    import pidispatch.jobflow.timers as timers

    ahead, timers._ahead = timers._ahead, lambda pages: pages  # type: ignore[assignment]
    cycle("warm, pages in turn")
    timers._ahead = ahead
    # What the refresh held before it read a page at a time: every SessionKey at once (Api.list).
    hwm0, t0 = proc_status("self", "VmHWM"), time.perf_counter()
    whole = api.list(cluster.crd("sessionkeys"))
    results[-1]["whole_list"] = {"items": len(whole), "seconds": time.perf_counter() - t0, "hwm_before": hwm0,
                                 "hwm_after": proc_status("self", "VmHWM")}
    del whole
    progress(f"  one whole LIST, as the refresh did before: {results[-1]['whole_list']}")
    print(json.dumps(results))


# ---- the report ---------------------------------------------------------------------------------------

def report(info: dict[str, str], args: argparse.Namespace, seeding: dict[str, float], cycles: list[dict],
           load_end: str, command: str) -> str:
    n = args.keys
    out = [f"Run: {info['date']} — `{command}` (commit `{info['commit']}`)", "",
           machine_line(info) + f" At the end: {load_end}.", "",
           f"Seeding (untimed by the cycles): {n:,} key directories laid in {fmt_seconds(seeding['store'])} "
           f"({args.threads} threads); {n:,} SessionKeys created in {fmt_seconds(seeding['create'])} "
           f"({n / seeding['create']:,.0f}/s, {args.threads} threads); their first statuses written in "
           f"{fmt_seconds(seeding['status'])} ({n / seeding['status']:,.0f}/s, {args.threads} threads).", "",
           "| Cycle | wall time | CPU (user + sys) | per key | transcripts read | header bytes (gate 11) | "
           "body bytes (gate 12) | "
           "digest bytes (letters) | rchar (all reads, sockets too) | SessionKey requests | VmHWM before → after | "
           "memo entries | load at start |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cycles:
        b = c["bytes"]
        out.append(
            f"| {c['cycle']} | **{fmt_seconds(c['seconds'])}** | {fmt_seconds(c['cpu'])} | "
            f"{c['seconds'] / n * 1e6:.0f} µs | "
            f"{c['files']:,} | "
            f"{b.get('header (pread)', 0):,} | {b.get('body scan (preadv)', 0):,} | {b.get('digest (read)', 0):,} | "
            f"{c['rchar'] / 1024 / 1024:,.1f} MiB | "
            + ", ".join(f"{k}: {v:,}" for k, v in c["requests"].items())
            + f" | {mib(c['hwm_before'])} → {mib(c['hwm'])} | {c['memo']:,} | {c['load']} |")
    changed = next(c for c in cycles if c["cycle"] == "changed")
    writes = sum(v for k, v in changed["requests"].items() if not k.startswith(("LIST", "GET", "WATCH")))
    want = changed["promoted"] + changed["expired"]
    out += ["", f"Changed cycle: {changed['promoted']} transcripts promoted anew and {changed['expired']} aged past "
            f"the TTL; writes {writes} (want exactly {want}: **{'met' if writes == want else 'missed'}**)."]
    whole = next((c["whole_list"] for c in cycles if "whole_list" in c), None)
    if whole:
        out += ["", f"For comparison, the whole list at once (`Api.list`, what the refresh held before it read a page "
                f"at a time): {whole['items']:,} SessionKeys in {fmt_seconds(whole['seconds'])}, VmHWM "
                f"{mib(whole['hwm_before'])} → {mib(whole['hwm_after'])}."]
    return "\n".join(out)


def commit() -> str:
    r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + (" + uncommitted changes in the tree" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=TARGET_KEYS, help="keys and SessionKeys (default 100000)")
    parser.add_argument("--dir", help="directory for the store and the control plane (default: a temp dir in /tmp)")
    parser.add_argument("--threads", type=int, default=8, help="threads that seed the store and the apiserver")
    parser.add_argument("--promoted", type=int, default=100, help="transcripts promoted anew before the last cycle")
    parser.add_argument("--expired", type=int, default=50, help="keys aged past the TTL before the last cycle")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    for name in ("server", "ca", "cert", "key"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    from e2e.framework.cluster import Cluster as ControlPlane
    from pidispatch.settings import OperatorSettings, Settings

    root = Path(tempfile.mkdtemp(prefix="pidispatch-refresh-", dir=args.dir))
    info = machine(root)
    info["commit"] = commit()
    progress(f"refresh benchmark in {root}: {args.keys} keys; load average {info['load']}")
    plane = ControlPlane(state_dir=root / "cluster")
    seeding: dict[str, float] = {}
    try:
        progress("starting etcd and kube-apiserver")
        plane.start(kubelet=False)
        plane.kubectl("apply", "-f", str(REPO / "crds" / "pi-dispatch.dev_sessionkeys.yaml"))
        plane.kubectl("wait", "--for=condition=established", "crd/sessionkeys.pi-dispatch.dev", "--timeout=60s")
        plane.kubectl("create", "namespace", NAMESPACE)
        args.server, args.ca = plane.server, str(plane.ca_file)
        args.cert, args.key = str(plane.pki / "admin.crt"), str(plane.pki / "admin.key")
        api = api_of(args)
        store = root / "store"
        store.mkdir(mode=0o700)
        progress(f"laying {args.keys} keys in {store}")
        seeding["store"] = lay_store(store, args.keys, args.threads)
        progress(f"creating {args.keys} SessionKeys")
        seeding["create"] = seed_sessionkeys(api, args.keys, args.threads)
        progress("writing their first statuses")
        settings = OperatorSettings(store=Settings(sessions_dir=str(store)), staging_dir=str(root / "staging"))
        seeding["status"] = first_statuses(api, settings, args.threads)
        from pidispatch.store import scanmemo
        scanmemo.MEMO.clear()
        progress("the measured process: cold, warm and changed cycles")
        cmd = [sys.executable, __file__, "--worker", str(store), "--keys", str(args.keys),
               "--promoted", str(args.promoted), "--expired", str(args.expired), "--server", args.server,
               "--ca", args.ca, "--cert", args.cert, "--key", args.key]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise SystemExit(f"the measured process failed ({r.returncode})")
        cycles = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        progress("stopping the control plane, removing the store")
        plane.stop()
        shutil.rmtree(root, ignore_errors=True)
    command = " ".join([".venv/bin/python bench/refresh.py", *(argv if argv is not None else sys.argv[1:])])
    print(report(info, args, seeding, cycles, load_average(), command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
