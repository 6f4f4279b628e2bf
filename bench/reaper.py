#!/usr/bin/env python3
"""Store reaper benchmark: ``pidispatch.store.reap.reap`` over a large store, against ``find … -exec rm -rf``.

Not a test: timings are never assertions. Each size gets its own store on a real filesystem (a temp
directory under /tmp unless ``--dir``), built as promotions leave keys: a directory named by the key
hash holding ``current.jsonl`` (a pi v3 transcript of a few hundred bytes) and the four sidecars
(``pi-version``, ``venue``, ``resume-chain``, ``context``). Half the keys are expired (every file and
the directory itself 30 days old; the TTL is 14 days), half are fresh.

Each repetition is a pair, run back to back with the order alternating (A B, B A, …):

* A: the reaper, in a fresh Python process (so its peak RSS is its own), timed around ``reap`` alone
  with ``time.perf_counter``; VmHWM from /proc/self/status before and after the sweep.
* B: ``find STORE -mindepth 1 -maxdepth 1 -mtime +14 -exec rm -rf {} +``, timed around the process
  (its start-up, about a millisecond, is on B's side only).

Between runs the expired half is rebuilt and ``sync`` is called (untimed), so both sides delete the
same 50 % of the same store with the same files hot in the dentry and inode caches. After every run
the store is checked: every expired key gone, every fresh key still there.

    .venv/bin/python bench/reaper.py            # full: 10k, 50k, 100k keys, 3 pairs each
    .venv/bin/python bench/reaper.py --quick    # smoke: 1k, 5k, 10k keys, 2 pairs each
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    REPO,
    fmt_seconds,
    load_average,
    machine,
    machine_line,
    mib,
    proc_status,
    progress,
    spread,
)

sys.path.insert(0, str(REPO / "operator"))

from pidispatch.store.keys import issue_key  # noqa: E402

DAY = 86400
TTL_DAYS = 14
EXPIRED_AGE = 30 * DAY
TARGET_SECONDS = 10.0
TARGET_KEYS = 100_000


def transcript(n: int) -> bytes:
    """A short pi v3 transcript (header, one user turn, one reply): about 600 bytes."""
    sid = str(uuid.UUID(int=n))
    lines = [
        {"type": "session", "version": 3, "id": sid, "timestamp": "2026-10-01T12:00:00.000Z", "cwd": "/workspace"},
        {
            "type": "message",
            "id": "a1b2c3d4",
            "parentId": None,
            "timestamp": "2026-10-01T12:00:01.000Z",
            "message": {
                "role": "user",
                "content": [{"type": "text", "text": f"@pi fix issue {n}"}],
                "timestamp": 1790000001000,
            },
        },
        {
            "type": "message",
            "id": "e5f6a7b8",
            "parentId": "a1b2c3d4",
            "timestamp": "2026-10-01T12:00:09.000Z",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": "Done: pushed pi/issue branch."}],
                "provider": "fake",
                "model": "fake-model",
                "stopReason": "stop",
                "usage": {"input": 610, "output": 12, "totalTokens": 622},
                "timestamp": 1790000009000,
            },
        },
    ]
    return b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines)


SIDECARS = {
    "pi-version": b"0.73.1\n",
    "venue": b"host\n",
    "resume-chain": b"2\n",
    "context": b'{"tokens":622,"window":128000,"model":"fake/fake-model"}\n',
}


def key_name(i: int) -> str:
    key = issue_key("github", "acme/widgets", i + 1)
    assert key is not None
    return key


def write_key(store: Path, i: int, mtime: float) -> None:
    d = store / key_name(i)
    os.mkdir(d, 0o700)
    for name, data in (("current.jsonl", transcript(i)), *SIDECARS.items()):
        p = d / name
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.utime(p, (mtime, mtime))
    os.utime(d, (mtime, mtime))


def build(store: Path, indices: range | list[int], *, expired: bool, what: str) -> None:
    now = time.time()
    mtime = now - EXPIRED_AGE if expired else now - 3600
    total = len(indices)
    step = max(1, total // 4)
    for n, i in enumerate(indices, 1):
        write_key(store, i, mtime)
        if n % step == 0 or n == total:
            progress(f"    {what}: {n}/{total} keys")


def check(store: Path, fresh: range, expired: range, who: str) -> None:
    left = set(os.listdir(store))
    gone_fresh = [i for i in fresh if key_name(i) not in left]
    kept_expired = [i for i in expired if key_name(i) in left]
    if gone_fresh or kept_expired or len(left) != len(fresh):
        raise SystemExit(
            f"{who} left the store wrong: {len(gone_fresh)} fresh keys deleted, "
            f"{len(kept_expired)} expired keys kept, {len(left)} entries left (want {len(fresh)})"
        )


def run_reaper(store: Path) -> dict:
    r = subprocess.run([sys.executable, __file__, "--worker", str(store)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"reaper worker failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_find(store: Path) -> float:
    cmd = [
        "find",
        str(store),
        "-mindepth",
        "1",
        "-maxdepth",
        "1",
        "-mtime",
        f"+{TTL_DAYS}",
        "-exec",
        "rm",
        "-rf",
        "{}",
        "+",
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def worker(store: str) -> None:
    """Child process: one sweep, then time, reaped count and VmHWM before/after as a JSON line."""
    from pidispatch.settings import Settings
    from pidispatch.store.reap import reap

    settings = Settings(sessions_dir=store, ttl_days=TTL_DAYS)
    hwm0, rss0 = proc_status("self", "VmHWM"), proc_status("self", "VmRSS")
    reaped = other = 0
    t0 = time.perf_counter()
    for event in reap(settings):
        if event["event"] == "reaped_session":
            reaped += 1
        else:
            other += 1
    seconds = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "seconds": seconds,
                "reaped": reaped,
                "other": other,
                "hwm_before": hwm0,
                "rss_before": rss0,
                "hwm_after": proc_status("self", "VmHWM"),
            }
        )
    )


def bench_size(root: Path, n: int, pairs: int) -> dict:
    store = root / f"store-{n}"
    store.mkdir(mode=0o700)
    fresh, expired = range(0, n // 2), range(n // 2, n)
    progress(f"  {n} keys: building the store ({len(fresh)} fresh, {len(expired)} expired)")
    build(store, fresh, expired=False, what="fresh")
    build(store, expired, expired=True, what="expired")
    reaper_s, find_s, ratios, growth, hwm = [], [], [], [], []
    for p in range(pairs):
        order = ("reaper", "find") if p % 2 == 0 else ("find", "reaper")
        result: dict[str, float] = {}
        for side in order:
            if not (store / key_name(expired[0])).exists():
                build(store, expired, expired=True, what=f"rebuilding the expired half for {side}")
            os.sync()
            if side == "reaper":
                out = run_reaper(store)
                if out["reaped"] != len(expired) or out["other"]:
                    raise SystemExit(
                        f"reaper reaped {out['reaped']} (want {len(expired)}), {out['other']} other events"
                    )
                result["reaper"] = out["seconds"]
                growth.append(out["hwm_after"] - out["hwm_before"])
                hwm.append(out["hwm_after"])
            else:
                result["find"] = run_find(store)
            check(store, fresh, expired, side)
        reaper_s.append(result["reaper"])
        find_s.append(result["find"])
        ratios.append(result["reaper"] / result["find"])
        progress(
            f"  {n} keys, pair {p + 1}/{pairs} ({' then '.join(order)}): reaper {fmt_seconds(result['reaper'])}, "
            f"find {fmt_seconds(result['find'])}, ratio {ratios[-1]:.2f}×, "
            f"reaper peak RSS {mib(hwm[-1])} (growth during the sweep {growth[-1] / 1024:.0f} KiB)"
        )
    shutil.rmtree(store)
    return {"n": n, "reaper": reaper_s, "find": find_s, "ratios": ratios, "growth": growth, "hwm": hwm}


def report(results: list[dict], info: dict[str, str], command: str, load_end: str) -> str:
    out = [f"Run: {info['date']} — `{command}`", "", machine_line(info) + f" At the end: {load_end}.", ""]
    out += [
        "| Keys (half expired) | reaper min | **median** | max | `find … -exec rm -rf` median | "
        "reaper / find min | **median** | max | pairs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lo, med, hi = spread(r["reaper"])
        rlo, rmed, rhi = spread(r["ratios"])
        out.append(
            f"| {r['n']:,} | {fmt_seconds(lo)} | **{fmt_seconds(med)}** | {fmt_seconds(hi)} | "
            f"{fmt_seconds(spread(r['find'])[1])} | {rlo:.2f}× | **{rmed:.2f}×** | {rhi:.2f}× | {len(r['ratios'])} |"
        )
    base = results[0]
    b_hwm, b_growth = spread(base["hwm"])[1], spread(base["growth"])[1]
    out += [
        "",
        f"| Keys | reaper peak RSS (VmHWM), median | vs {base['n']:,} keys | growth during the sweep, median "
        f"| per reaped key |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        hwm, growth = spread(r["hwm"])[1], spread(r["growth"])[1]
        rel = "—" if b_growth <= 0 else f"{growth / b_growth:.2f}× the {base['n']:,}-key growth"
        out.append(
            f"| {r['n']:,} | {mib(hwm)} | {hwm / b_hwm:.2f}× | {growth / 1024:.0f} KiB ({rel}) | "
            f"{growth / (r['n'] // 2):.1f} B |"
        )
    big = [r for r in results if r["n"] >= TARGET_KEYS]
    if big:
        med = spread(big[0]["reaper"])[1]
        verdict = "met" if med <= TARGET_SECONDS else f"missed by {med / TARGET_SECONDS:.2f}×"
        out += [
            "",
            f"Target ≤ {TARGET_SECONDS:.0f} s over {TARGET_KEYS:,} keys: **{verdict}** "
            f"(median {fmt_seconds(med)}, max {fmt_seconds(max(big[0]['reaper']))}).",
        ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="directory to build the stores in (default: a temp dir under /tmp)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1k, 5k, 10k keys, 2 pairs each")
    parser.add_argument("--pairs", type=int, help="pairs per size (default 3, quick 2)")
    parser.add_argument("--sizes", help="comma-separated key counts (default 10000,50000,100000)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    sizes = [1_000, 5_000, 10_000] if args.quick else [10_000, 50_000, 100_000]
    if args.sizes:
        sizes = [int(x) for x in args.sizes.split(",")]
    pairs = args.pairs or (2 if args.quick else 3)
    root = Path(tempfile.mkdtemp(prefix="pidispatch-reaper-", dir=args.dir))
    info = machine(root)
    progress(f"reaper benchmark in {root}; sizes {sizes}, {pairs} pairs each; load average {info['load']}")
    try:
        results = sorted((bench_size(root, n, pairs) for n in sizes), key=lambda r: r["n"])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    command = (
        ".venv/bin/python bench/reaper.py"
        + (" --quick" if args.quick else "")
        + (f" --pairs {args.pairs}" if args.pairs else "")
    )
    print(report(results, info, command, load_average()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
