#!/usr/bin/env python3
"""The runner's check of pi's version: read from pi's package (``runner/pipackage.py``) against running
`pi --version` (a Node.js start-up), on the real pi of ``make pi``, paired and interleaved in one run.

Not a test: timings are never assertions. Both sides answer the same question with the same answer (the
bench checks it); the baseline is the old way, `pi --version` as the runner ran it.

    .venv/bin/python bench/piversion.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: testkit

from pidispatch.runner.pi import read_pi_version  # noqa: E402
from pidispatch.runner.version import parse_version_output  # noqa: E402
from testkit.pitool import pi_binary  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    binary = pi_binary()
    with tempfile.TemporaryDirectory() as home:
        env = {"PATH": f"{binary.parent}:{os.environ['PATH']}", "HOME": home, "PI_OFFLINE": "1"}
        started, read = [], []
        for _ in range(args.runs):
            t = time.perf_counter()
            done = subprocess.run([str(binary), "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=env, check=True)
            started.append(time.perf_counter() - t)
            printed = parse_version_output(done.stdout.decode())
            t = time.perf_counter()
            answer = read_pi_version(str(binary), env)
            read.append(time.perf_counter() - t)
            assert answer == printed, f"the package says {answer}, pi --version says {printed}"
    s, r = statistics.median(started), statistics.median(read)
    print(f"pi {printed}, {args.runs} pairs, load {os.getloadavg()[0]:.1f}")
    print(f"`pi --version` (baseline): median {s * 1000:.1f} ms (min {min(started) * 1000:.1f}, "
          f"max {max(started) * 1000:.1f})")
    print(f"read from the package:     median {r * 1000:.3f} ms (min {min(read) * 1000:.3f}, "
          f"max {max(read) * 1000:.3f})")
    print(f"ratio (package / baseline): {r / s:.5f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
