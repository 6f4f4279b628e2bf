#!/usr/bin/env python3
"""What ``run.command`` costs a job: the runner for a command job against the runner for the same job with
the event's own prompt, real pi of ``make pi`` and the scripted model, paired and interleaved in one run.

A command job pays one more pi start-up before the run: the runner asks pi which commands the image's
extensions register (``runner/command.py``, ``--mode rpc`` ``get_commands``), because pi would send an
unregistered ``/name`` to the model as text. The bench times the whole runner both ways (one model reply
each) and that listing alone, so the difference can be read against it.

Not a test: timings are never assertions.

    .venv/bin/python bench/command.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: testkit

from pidispatch.runner.command import registered_commands  # noqa: E402
from testkit.pitool import pi_env  # noqa: E402
from testkit.runner import real_pi_job  # noqa: E402


def timed(run: object) -> float:
    t = time.perf_counter()
    result = run()  # type: ignore[operator]
    assert result.code == 0, result.stderr[-2000:]
    return time.perf_counter() - t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    plain, command, listing = [], [], []
    with tempfile.TemporaryDirectory() as scratch, real_pi_job(Path(scratch)) as job:
        extensions = Path(scratch) / "image-extensions"
        extensions.mkdir()
        shutil.copy(ROOT / "testkit" / "extensions" / "review_command.ts", extensions)
        files = (str(extensions / "review_command.ts"),)
        env = pi_env(job.agent, job.tmp / "home")
        for _ in range(args.runs):
            job.model.reply("done")
            plain.append(timed(lambda: job.run(session=False)))
            job.model.reply("reviewed")
            command.append(timed(lambda: job.run(session=False, extra={
                "PI_COMMAND": "/review focus on tests", "PI_COMMAND_EXTENSIONS_DIR": str(extensions)})))
            t = time.perf_counter()
            assert "review" in registered_commands(str(job.pi), files, env, scratch)
            listing.append(time.perf_counter() - t)
    p, c, lst = statistics.median(plain), statistics.median(command), statistics.median(listing)
    print(f"{args.runs} pairs, load {os.getloadavg()[0]:.1f}")
    print(f"runner, the event's prompt (baseline): median {p:.3f} s (min {min(plain):.3f}, max {max(plain):.3f})")
    print(f"runner, run.command:                   median {c:.3f} s (min {min(command):.3f}, max {max(command):.3f})")
    print(f"the listing alone (get_commands):      median {lst:.3f} s (min {min(listing):.3f}, max {max(listing):.3f})")
    print(f"ratio (command / baseline): {c / p:.2f}x, difference {c - p:+.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
