"""Shared by the benchmarks in bench/: machine description, progress lines, ratio summaries, /proc reads,
and a watch that records when each object was first seen.

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
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def progress(message: str) -> None:
    """One progress line on stderr (stdout carries the tables)."""
    print(message, file=sys.stderr, flush=True)


def load_average() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def cpu_times() -> list[int]:
    """The machine's CPU time so far, all CPUs together, in ticks: ``/proc/stat``'s ``cpu`` line (user, nice,
    system, idle, iowait, irq, softirq, steal, ...)."""
    return [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def stolen_since(start: list[int]) -> str:
    """The share of CPU time the hypervisor gave to other guests since ``start`` (``cpu_times()``).

    Load average counts only this machine's work; on a VM the host's other guests show as steal, which
    slows both sides of a pair unevenly when it comes in bursts. Empty where the kernel reports no steal.
    """
    now = cpu_times()
    if len(now) < 8 or len(start) < 8:
        return ""
    delta = [b - a for a, b in zip(start[:8], now[:8], strict=True)]
    total = sum(delta)
    return f"{100 * delta[7] / total:.1f} % of CPU time stolen by the hypervisor" if total > 0 else ""


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


class Watcher(threading.Thread):
    """Records, per object name, when a watch first saw it and when it first saw it terminal.

    ``kube`` is an ``e2e.framework.kube.Kube`` (its ``get`` and ``watch``). ``clock`` says what a time is:
    ``time.perf_counter`` (the default) for durations within this process, ``time.time_ns`` to compare
    with another process's wall clock. ``params``: the list's and the watch's query (a label selector).
    A watch that drops is listed and watched again; a listed object counts as seen when listed.
    """

    def __init__(self, kube: Any, path: str, terminal: Callable[[dict], bool] = lambda _: False,
                 label: str | None = None, clock: Callable[[], float] = time.perf_counter,
                 params: dict[str, str] | None = None) -> None:
        super().__init__(daemon=True, name=f"watch {path}")
        self.kube, self.path, self.terminal, self.label = kube, path, terminal, label
        self.clock, self.params = clock, params or {}
        self.seen: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.labels: dict[str, str] = {}
        self.phases: dict[str, set[str]] = {}
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self.cond = threading.Condition()

    def run(self) -> None:
        rv = None
        while not self.stopped.is_set():
            try:
                if rv is None:
                    listing = self.kube.get(self.path, **self.params)
                    rv = listing["metadata"]["resourceVersion"]
                    for obj in listing.get("items") or []:
                        self._record(obj, self.clock())
                    self.ready.set()
                for ev in self.kube.watch(self.path, resource_version=rv, timeout_seconds=600, **self.params):
                    now = self.clock()
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        rv = None
                        break
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self._record(obj, now)
            except Exception as exc:  # noqa: BLE001 - a dropped watch is re-listed
                if self.stopped.is_set():
                    return
                progress(f"  (watch {self.path} restarted: {exc!r})")
                rv = None
                time.sleep(0.2)

    def _record(self, obj: dict, now: float) -> None:
        name = obj["metadata"]["name"]
        with self.cond:
            self.seen.setdefault(name, now)
            self.phases.setdefault(name, set()).add(str((obj.get("status") or {}).get("phase")))
            if self.label:
                self.labels.setdefault(name, (obj["metadata"].get("labels") or {}).get(self.label, ""))
            if name not in self.done and self.terminal(obj):
                self.done[name] = now
            self.cond.notify_all()

    def wait(self, what: str, pred: Callable[[], object], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
                self.cond.wait(min(left, 1.0))

    def first_seen(self, name: str, timeout: float = 30) -> float:
        """When ``name`` was first seen, waiting up to ``timeout`` seconds for it."""
        self.wait(name, lambda: name in self.seen, timeout)
        return self.seen[name]
