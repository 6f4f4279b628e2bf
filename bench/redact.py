#!/usr/bin/env python3
"""The credential scan before a promotion (issue 31 item 5) against the promotion itself, in one run.

Not a test: timings are never assertions. As ``bench/store.py`` does, every figure is a ratio of paired
runs measured in the same process on the same bytes, interleaved (A B, then B A, ...), reported as
min / median / max of the per-pair ratios with the absolute medians.

    .venv/bin/python bench/redact.py            # 8 MiB, 15 pairs
    .venv/bin/python bench/redact.py --quick    # fewer pairs, a smoke run

Compared, at 8 MiB of a pi-shaped transcript (``bench/store.py``'s ``make_transcript``, with a tool result
that printed a token every 64 KiB, so the scan has hits to replace):

1. the transcript scan alone, in memory (``redact_lines``: each line's JSON string values decoded, then
   scanned): common formats only, then with three of the job's secret digests (every run, wrapped run,
   base64 run and split between adjacent values of those lengths is hashed); ``redact``, the scan of bytes
   as they stand, is what it was before the decoding and is now only for lines that are not JSON;
2. where the transcript scan can decode (``redact_lines`` importable), the decoding scan against ``redact``,
   the scan of bytes as they stood before it, paired the same way: the cost of decoding, in one process;
3. the promotion as the operator now runs it (``promote_once``: the scanned copy written and fsynced, the
   journal, then ``promote``) against ``promote`` of the same staged file (the promotion before the scan).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))
sys.path.insert(0, str(REPO / "bench"))

from _common import machine, machine_line  # noqa: E402
from store import make_transcript  # noqa: E402

from pidispatch.contract.digests import digest_of  # noqa: E402
from pidispatch.settings import Settings  # noqa: E402
from pidispatch.store.journal import promote_once  # noqa: E402
from pidispatch.store.promote import promote  # noqa: E402
from pidispatch.store.redact import redact  # noqa: E402
from pidispatch.store.staging import HOST, HostRecord, JobDir  # noqa: E402

try:  # the decoding scan; a checkout before it has only the scan of bytes, so the same bench runs on both
    from pidispatch.store.transcriptscan import redact_lines as scan_transcript
except ImportError:  # pragma: no cover
    scan_transcript = redact

MIB = 1024 * 1024
KEY = "0123456789abcdef0123456789abcdef"
TOKEN = "ghs_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zA0b1"
LEAK = ('{"type":"message","id":"leak","parentId":"e3418de6","timestamp":"2026-11-29T12:53:13.410Z","message":'
        '{"role":"toolResult","toolCallId":"call_abc123","toolName":"bash","content":[{"type":"text","text":'
        f'"GH_TOKEN={TOKEN}\\n"}}],"isError":false,"timestamp":1795956793410}}}}\n').encode()


def transcript(size: int) -> bytes:
    """``make_transcript`` with a leaking tool result after every 64 KiB of lines, cut back to ``size``."""
    lines = make_transcript(size).splitlines(keepends=True)
    out, since = [], 0
    for line in lines[:-1]:
        out.append(line)
        since += len(line)
        if since >= 64 * 1024:
            out.append(LEAK)
            since = 0
    data = b"".join(out)
    return data[:data.rfind(b"\n", 0, size) + 1]


def row(name: str, base: list[float], other: list[float]) -> str:
    ratios = sorted(o / b for b, o in zip(base, other, strict=True))
    return (f"| {name} | {statistics.median(base) * 1000:.1f} ms | {statistics.median(other) * 1000:.1f} ms | "
            f"{ratios[0]:.2f}× / **{statistics.median(ratios):.2f}×** / {ratios[-1]:.2f}× |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    pairs = 5 if args.quick else 15
    size = 8 * MIB
    data = transcript(size)
    secrets = [d for d in (digest_of(TOKEN), digest_of("Zq8Lr2Nv5Tx7Wb1Yd4Fh6Jk9Mp3Rs0Ug"),
                           digest_of("sk-proj-" + "Ab12Cd34" * 20)) if d is not None]
    hits = scan_transcript(data, secrets).hits
    with tempfile.TemporaryDirectory(prefix="bench-redact-") as tmp:
        root, staging = Path(tmp, "store"), Path(tmp, "staging")
        root.mkdir(mode=0o700)
        staging.mkdir(mode=0o700)
        settings = Settings(sessions_dir=str(root), max_bytes=0)
        info = machine(tmp)
        staged = staging / "plain" / "session"
        staged.mkdir(parents=True, mode=0o700)
        (staged / "current.jsonl").write_bytes(data)
        host = HostRecord(key=KEY, forge="github", repository="acme/widgets", branch="pi/issue-7",
                          venue="kubernetes", pi_version="0.73.1", model="fake/fake-model", mounted=True,
                          resume=False, reason="absent", bytes=0)
        counter = iter(range(10 ** 6))

        def plain_promote() -> None:
            assert promote(settings, KEY, str(staged), host_resume=False, pi_version="0.73.1").promoted

        jobs: list[JobDir] = []

        def fresh_job() -> JobDir:  # untimed: a Job's staging as its Pod left it
            jd = JobDir(str(staging), f"uid-{next(counter)}")
            jd.prepare()
            jd.write(HOST, host.to_json())
            Path(jd.session, "current.jsonl").write_bytes(data)
            return jd

        def scanned_promote() -> None:
            result = promote_once(settings, jobs.pop(), host, None, secrets=secrets)
            assert result.promoted and result.redacted == hits, result

        base, scan_common = [], []
        base_b, scan_secrets = [], []
        for i in range(pairs):
            order = [0, 1] if i % 2 == 0 else [1, 0]
            for which in order:
                gc.collect()
                start = time.perf_counter()
                if which == 0:
                    plain_promote()
                    base.append(time.perf_counter() - start)
                else:
                    scan_transcript(data, ())
                    scan_common.append(time.perf_counter() - start)
            for which in order:
                gc.collect()
                start = time.perf_counter()
                if which == 0:
                    plain_promote()
                    base_b.append(time.perf_counter() - start)
                else:
                    scan_transcript(data, secrets)
                    scan_secrets.append(time.perf_counter() - start)
        base_c, full = [], []
        for i in range(pairs):
            jobs.append(fresh_job())
            for which in ([0, 1] if i % 2 == 0 else [1, 0]):
                gc.collect()
                start = time.perf_counter()
                if which == 0:
                    plain_promote()
                    base_c.append(time.perf_counter() - start)
                else:
                    scanned_promote()
                    full.append(time.perf_counter() - start)
                    JobDir(str(staging), f"uid-{next(counter) - 1}").remove()
    decoding: list[str] = []
    if scan_transcript is not redact:
        for label, digests in (("common formats only", []), (f"with {len(secrets)} secret digests", secrets)):
            raw, decoded = [], []
            for i in range(pairs):
                for which in ([0, 1] if i % 2 == 0 else [1, 0]):
                    gc.collect()
                    start = time.perf_counter()
                    if which == 0:
                        redact(data, digests)
                        raw.append(time.perf_counter() - start)
                    else:
                        scan_transcript(data, digests)
                        decoded.append(time.perf_counter() - start)
            decoding.append(row(f"`redact_lines` against `redact`, {label}", raw, decoded))
    print(machine_line(info))
    print(f"Transcript {len(data) / MIB:.2f} MiB with {hits} planted tokens; {pairs} pairs.")
    print()
    print("| compared with `promote` (8 MiB) | promote, median | other, median | ratio min / **median** / max |")
    print("|---|---|---|---|")
    name = "`redact_lines`" if scan_transcript is not redact else "`redact`"
    print(row(f"{name}, common formats only (in memory)", base, scan_common))
    print(row(f"{name}, with {len(secrets)} secret digests (in memory)", base_b, scan_secrets))
    print(row("`promote_once`: scanned copy + journal + promote", base_c, full))
    if decoding:
        print()
        print("| the decoding scan against the scan of bytes (8 MiB) | `redact`, median | `redact_lines`, median "
              "| ratio min / **median** / max |")
        print("|---|---|---|---|")
        print("\n".join(decoding))


if __name__ == "__main__":
    main()
