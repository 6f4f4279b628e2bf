#!/usr/bin/env python3
"""A clone through the gateway's forge path against the same clone straight from the forge (issue 40).

Not a test: timings are never assertions. The local forge (``testkit/gitforge.py`` behind the fake GitHub API,
HTTPS on loopback) holds one repository of ``--mib`` MiB of random hex text (it compresses about 2:1) over four
commits; each pair clones it with real ``git`` once directly (the token as the Basic password) and once through
the gateway (``testkit/gateway_forge.py``: its own TLS, the capability as the password, the token added
upstream), in alternating order so drift hits both sides alike. Reported: min / median / max of the per-pair ratios
gateway / direct and the absolute medians. Not included: a real network between the job, the gateway and the
forge (here all three share loopback and two cores).

    .venv/bin/python bench/gateway_forge.py [--runs 5] [--mib 16]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, cpu_times, machine, progress, stolen_since  # noqa: E402

sys.path.insert(0, str(REPO / "operator"))
sys.path.insert(0, str(REPO))

from testkit.gateway_forge import REPO as FULL_NAME  # noqa: E402
from testkit.gateway_forge import TOKEN, forge_world, job_env, run  # noqa: E402


def fill(world_repos: object, mib: int) -> None:
    """``mib`` MiB of random hex text over four commits (files are text: ``Repos.commit`` writes strings)."""
    per = max(1, mib // 4)
    for step in range(4):
        files = {f"data/part-{step}-{i}.bin": os.urandom(1 << 20).hex()[: 1 << 20] for i in range(per)}
        world_repos.commit(FULL_NAME, "main", files, f"data {step}")  # type: ignore[attr-defined]


def clone(env: dict[str, str], url: str, into: Path) -> float:
    started = time.perf_counter()
    done = run(env, "git", "clone", "-q", url, str(into), timeout=600)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"clone of {url} failed: {done.stderr.strip()}")
    shutil.rmtree(into)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-gateway-forge-") as scratch:
        root = Path(scratch)
        world = forge_world(root)
        try:
            progress(f"filling {FULL_NAME} with {args.mib} MiB")
            fill(world.repos, args.mib)
            through = world.env(world.capability(), "through")
            direct = job_env(world.gateway, TOKEN, root / "homes" / "direct")  # the askpass prints the token
            direct["GIT_SSL_CAINFO"] = str(root / "forge-tls" / "ca.crt")
            urls = {"direct": f"{world.api.web_url}/{FULL_NAME}.git", "gateway": f"{world.gateway.url}/{FULL_NAME}.git"}
            envs = {"direct": direct, "gateway": through}
            clone(direct, urls["direct"], root / "warm")  # warm the page cache and git's own
            ratios: list[float] = []
            times: dict[str, list[float]] = {"direct": [], "gateway": []}
            start = cpu_times()
            for pair in range(args.runs):
                order = ("direct", "gateway") if pair % 2 == 0 else ("gateway", "direct")
                got = {side: clone(envs[side], urls[side], root / f"c-{side}") for side in order}
                for side, value in got.items():
                    times[side].append(value)
                ratios.append(got["gateway"] / got["direct"])
                progress(f"pair {pair + 1}/{args.runs}: direct {got['direct']:.3f} s, gateway {got['gateway']:.3f} s")
            stolen = stolen_since(start)
        finally:
            world.stop()
        facts = machine(root)
    print(f"# clone of {args.mib} MiB, {args.runs} pairs; " + "; ".join(f"{k}: {v}" for k, v in facts.items()))
    if stolen:
        print(f"# {stolen}")
    print("| clone | gateway / direct min | median | max | direct (median) | gateway (median) |")
    print("|---|---|---|---|---|---|")
    print(f"| {args.mib} MiB | {min(ratios):.2f}× | {statistics.median(ratios):.2f}× | {max(ratios):.2f}× | "
          f"{statistics.median(times['direct']) * 1000:.0f} ms | {statistics.median(times['gateway']) * 1000:.0f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
