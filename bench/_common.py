"""Shared by the benchmarks in bench/: machine description, progress lines, ratio summaries, /proc reads.

Standard library only. Every figure a benchmark publishes is a ratio against a baseline measured in
the same run; ``spread`` turns a list of such ratios into min / median / max.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def progress(message: str) -> None:
    """One progress line on stderr (stdout carries the tables)."""
    print(message, file=sys.stderr, flush=True)


def load_average() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def machine(root: Path | str) -> dict[str, str]:
    """What the figures were measured on: CPUs, kernel, Python, load, the filesystem of ``root``."""
    df = subprocess.run(["df", "-T", str(root)], capture_output=True, text=True).stdout.splitlines()
    fields = df[-1].split() if len(df) > 1 else ["?", "?"]
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {
        "commit": commit(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": f"{os.cpu_count()} ({cpu})",
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load": load_average(),
        "filesystem": f"{fields[1]} on {fields[0]}",
    }


def commit() -> str:
    """The checkout measured: its commit, and whether tracked files differ from it."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (head.stdout.strip() or "unknown") + (" plus uncommitted changes" if dirty else "")


def machine_line(info: dict[str, str]) -> str:
    return (
        f"Commit `{info['commit']}`. Machine: {info['cpus']} CPUs; {info['kernel']}; Python {info['python']}; "
        f"filesystem {info['filesystem']}. Load average at the start: {info['load']}."
    )


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """min, median, max."""
    return min(values), statistics.median(values), max(values)


def fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} µs"


def proc_status(pid: int | str, field: str) -> int:
    """A ``kB`` field of /proc/<pid>/status (``VmHWM``, ``VmRSS``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(f"{field} not in /proc/{pid}/status")


def mib(n: float) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"
