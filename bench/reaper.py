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
from pidispatch.store.reap import WORKERS  # noqa: E402

DAY = 86400
TTL_DAYS = 14
EXPIRED_AGE = 30 * DAY
TARGET_RATIO = 1.0  # the reaper's time over find's, same store, same run
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


REMOVED_PER_KEY = 1 + len(SIDECARS) + 1  # the transcript, the sidecars, the directory


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


def run_reaper(store: Path, workers: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", str(store), "--workers", str(workers)]
    r = subprocess.run(cmd, capture_output=True, text=True)
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


def worker(store: str, workers: int) -> None:
    """Child process: one sweep, then time, reaped count and VmHWM before/after as a JSON line."""
    from pidispatch.settings import Settings
    from pidispatch.store.reap import reap

    settings = Settings(sessions_dir=store, ttl_days=TTL_DAYS)
    hwm0, rss0 = proc_status("self", "VmHWM"), proc_status("self", "VmRSS")
    reaped = other = 0
    t0 = time.perf_counter()
    for event in reap(settings, workers=workers):
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


def bench_size(root: Path, n: int, reps: int, workers: list[int]) -> dict:
    store = root / f"store-{n}"
    store.mkdir(mode=0o700)
    fresh, expired = range(0, n // 2), range(n // 2, n)
    progress(f"  {n} keys: building the store ({len(fresh)} fresh, {len(expired)} expired)")
    t0 = time.perf_counter()
    build(store, fresh, expired=False, what="fresh")
    build(store, expired, expired=True, what="expired")
    progress(f"  {n} keys: built in {fmt_seconds(time.perf_counter() - t0)}")
    sides = [f"reaper×{w}" for w in workers] + ["find"]
    times: dict[str, list[float]] = {side: [] for side in sides}
    ratios: dict[str, list[float]] = {side: [] for side in sides[:-1]}
    growth: dict[str, list[int]] = {side: [] for side in sides[:-1]}
    hwm: dict[str, list[int]] = {side: [] for side in sides[:-1]}
    loads: list[str] = []
    for p in range(reps):
        order = sides[p % len(sides):] + sides[: p % len(sides)]  # rotate, so no side always goes first
        loads.append(load_average())
        result: dict[str, float] = {}
        for side in order:
            if not (store / key_name(expired[0])).exists():
                build(store, expired, expired=True, what=f"rebuilding the expired half for {side}")
            os.sync()
            if side == "find":
                result[side] = run_find(store)
            else:
                out = run_reaper(store, int(side.split("×")[1]))
                if out["reaped"] != len(expired) or out["other"]:
                    raise SystemExit(
                        f"reaper reaped {out['reaped']} (want {len(expired)}), {out['other']} other events"
                    )
                result[side] = out["seconds"]
                growth[side].append(out["hwm_after"] - out["hwm_before"])
                hwm[side].append(out["hwm_after"])
            check(store, fresh, expired, side)
        for side in sides:
            times[side].append(result[side])
        for side in ratios:
            ratios[side].append(result[side] / result["find"])
        progress(
            f"  {n} keys, repetition {p + 1}/{reps} (load {loads[-1]}; {' then '.join(order)}): "
            + ", ".join(f"{side} {fmt_seconds(result[side])}" for side in sides)
            + "; "
            + ", ".join(f"{side}/find {ratios[side][-1]:.2f}×" for side in ratios)
        )
    shutil.rmtree(store)
    return {"n": n, "times": times, "ratios": ratios, "growth": growth, "hwm": hwm, "loads": loads,
            "removed": len(expired) * REMOVED_PER_KEY}


def report(results: list[dict], info: dict[str, str], command: str, load_end: str) -> str:
    out = [f"Run: {info['date']} — `{command}`", "", machine_line(info) + f" At the end: {load_end}.", ""]
    out += [
        "| Keys (half expired) | side | min | **median** | max | side / find min | **median** | max | "
        "unlinks/s (median) | repetitions |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for side, values in r["times"].items():
            lo, med, hi = spread(values)
            rate = r["removed"] / med
            if side == "find":
                ratio = "— | — | —"
                name = "`find … -exec rm -rf`"
            else:
                rlo, rmed, rhi = spread(r["ratios"][side])
                ratio = f"{rlo:.2f}× | **{rmed:.2f}×** | {rhi:.2f}×"
                name = f"reaper, {side.split('×')[1]} thread(s)"
            out.append(
                f"| {r['n']:,} | {name} | {fmt_seconds(lo)} | **{fmt_seconds(med)}** | {fmt_seconds(hi)} | "
                f"{ratio} | {rate:,.0f} | {len(values)} |"
            )
    out += ["", "Load average at the start of each repetition: "
            + "; ".join(f"{r['n']:,} keys: " + ", ".join(r["loads"]) for r in results) + "."]
    base = results[0]
    out += [
        "",
        "| Keys | side | reaper peak RSS (VmHWM), median | vs the smallest size | growth during the sweep, "
        "median | per reaped key |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        for side in r["hwm"]:
            peak, grew = spread(r["hwm"][side])[1], spread(r["growth"][side])[1]
            b_peak = spread(base["hwm"][side])[1]
            out.append(
                f"| {r['n']:,} | {side.split('×')[1]} thread(s) | {mib(peak)} | {peak / b_peak:.2f}× | "
                f"{grew / 1024:.0f} KiB | {grew / (r['n'] // 2):.1f} B |"
            )
    big = [r for r in results if r["n"] >= TARGET_KEYS]
    if big:
        for side, values in big[0]["ratios"].items():
            med = spread(values)[1]
            verdict = "met" if med <= TARGET_RATIO else f"missed by {med / TARGET_RATIO:.2f}×"
            out += [
                "",
                f"Target ≤ {TARGET_RATIO:.1f}× `find … -exec rm -rf` over {TARGET_KEYS:,} keys, "
                f"reaper with {side.split('×')[1]} thread(s): **{verdict}** (median {med:.2f}×, "
                f"max {max(values):.2f}×; reaper median {fmt_seconds(spread(big[0]['times'][side])[1])}).",
            ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="directory to build the stores in (default: a temp dir under /tmp)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1k, 5k, 10k keys, 2 repetitions each")
    parser.add_argument("--reps", type=int, help="repetitions per size (default 3, quick 2)")
    parser.add_argument("--sizes", help="comma-separated key counts (default 10000,50000,100000)")
    parser.add_argument("--threads", default=f"1,{WORKERS}",
                        help=f"reaper thread counts to run, comma-separated (default 1,{WORKERS})")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=WORKERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.workers)
        return 0
    sizes = [1_000, 5_000, 10_000] if args.quick else [10_000, 50_000, 100_000]
    if args.sizes:
        sizes = [int(x) for x in args.sizes.split(",")]
    reps = args.reps or (2 if args.quick else 3)
    threads = sorted({int(x) for x in args.threads.split(",")})
    root = Path(tempfile.mkdtemp(prefix="pidispatch-reaper-", dir=args.dir))
    info = machine(root)
    progress(f"reaper benchmark in {root}; sizes {sizes}, {reps} repetitions each, reaper threads {threads}; "
             f"load average {info['load']}")
    try:
        results = sorted((bench_size(root, n, reps, threads) for n in sizes), key=lambda r: r["n"])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    command = " ".join([".venv/bin/python bench/reaper.py", *(argv if argv is not None else sys.argv[1:])])
    print(report(results, info, command, load_average()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
