#!/usr/bin/env python3
"""Where a delivery's seconds go: a signed webhook to pi's first request to the model, stage by stage.

Not a test: timings are never assertions. Starts a fresh local control plane (etcd, kube-apiserver,
kube-controller-manager, the test kubelet) in a temp directory, installs the chart with the receiver and
sessions on, job Pods running the real ``pidispatch runner`` and the pinned pi 0.73.1 against the scripted
model on loopback (``e2e/test_pi_end_to_end.py``'s setup), and sends signed ``issue_comment`` deliveries to
the receiver one at a time: a first delivery on a new issue (cold), then a second on the same issue
(resumed: the operator stages the first one's transcript).

Each stage ends at a moment one of these sees, all on this machine's wall clock:

- this script: just before the webhook POST;
- a watch on the Jobs (this script's): the Job first seen (the receiver created it);
- a watch on the Pods: the job Pod first seen (the operator admitted, staged, created it), and first seen
  ``Running``;
- ``runner.sh``, the job command: a line before it ``exec``s ``pidispatch runner`` (the test kubelet
  spawned the container);
- ``pi.sh``, the runner's ``PI_BIN``: a line before it ``exec``s pi, with pi's first argument
  (``--version``: the runner's version check, which it also stamps at its end; else the agent's run);
- the scripted model: the arrival of pi's first request (``testkit/scripted_model.py`` records ``at``);
- the watch on the Jobs again: the Job first seen terminal (the tail, reported as context).

The two wrappers cost a ``date`` each (about 1 ms), within the stage they end. There is no checkout in this
setup (no forge to clone from): a real delivery also clones the repository between the version check and
pi's start (``workspace_checked_out`` logs its seconds).

    .venv/bin/python bench/delivery.py            # 10 pairs (cold, resumed) after a warm-up pair
    .venv/bin/python bench/delivery.py --pairs 3  # smoke
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, Watcher, machine, machine_line, progress  # noqa: E402

sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "operator"))

from e2e.framework.cluster import NODE_NAME, Cluster  # noqa: E402
from e2e.framework.kube import wait_for  # noqa: E402
from e2e.framework.receiver_release import Receiver, create_webhook_secret, receiver_values  # noqa: E402
from e2e.framework.release import TAMPER_BOUNDS, TERMINAL, Release, base_values, fresh_namespace, merge  # noqa: E402
from pidispatch.manifests.pod import pod_name  # noqa: E402
from testkit.pitool import pi_binary  # noqa: E402
from testkit.scripted_model import ScriptedModel, write_agent_dir  # noqa: E402

SECRET = b"bench-webhook-" + uuid.uuid4().hex.encode()
POINTS = ("post", "job", "pod", "runner", "version", "versioned", "pi", "model")
STAGES = [  # (from, to, what happens in between)
    ("post", "job", "receiver: verify the signature, match the Trigger, create the Job"),
    ("job", "pod", "operator: admit, resolve, stage the session, mint the token, create the Pod"),
    ("pod", "runner", "kubelet: bind, mount, spawn the container (test kubelet: a local process)"),
    ("runner", "version", "runner start-up: Python, imports, configuration, up to `pi --version`"),
    ("version", "versioned", "`pi --version` (the runner's version check: Node.js loads all of pi to print it)"),
    ("versioned", "pi", "runner: the session opened (no checkout here), the prompt, up to pi's start"),
    ("pi", "model", "pi: Node.js start-up, loading the session, up to its first model request"),
]


def wrappers(tmp: Path, stamps: Path) -> tuple[Path, Path]:
    """``runner.sh`` and ``pi.sh``: each appends ``<wall time> <what>`` to ``stamps``, then execs the real one."""
    runner = shutil.which("pidispatch", path=str(Path(sys.executable).parent)) or "pidispatch"
    run_sh, pi_sh = tmp / "runner.sh", tmp / "pi.sh"
    run_sh.write_text(f'#!/bin/sh\necho "$(date +%s.%N) runner" >> {stamps}\nexec {runner} runner\n')
    pi_sh.write_text(f'#!/bin/sh\necho "$(date +%s.%N) pi $1" >> {stamps}\n'
                     # The version check runs to its end here, so that its end is stamped too.
                     f'if [ "$1" = --version ]; then {pi_binary()} "$@"; rc=$?\n'
                     f'  echo "$(date +%s.%N) pi-done $1" >> {stamps}; exit $rc; fi\n'
                     f'exec {pi_binary()} "$@"\n')
    for f in (run_sh, pi_sh):
        f.chmod(0o755)
    return run_sh, pi_sh


def read_stamps(stamps: Path, since: float) -> dict[str, float]:
    """The first ``runner``, ``pi --version`` and pi run after ``since`` (deliveries run one at a time)."""
    out: dict[str, float] = {}
    if not stamps.exists():
        return out
    for line in stamps.read_text().splitlines():
        at, what, *arg = line.split()
        if float(at) < since:
            continue
        if what == "pi-done":
            point = "versioned"
        else:
            point = "runner" if what == "runner" else "version" if arg[:1] == ["--version"] else "pi"
        out.setdefault(point, float(at))
    return out


def deliver(receiver: Receiver, jobs: Watcher, pods: Watcher, model: ScriptedModel, stamps: Path,
            issue: int, comment: str) -> dict[str, float]:
    """One delivery, to its Job's end: each point's wall time."""
    hooks = receiver.hooks()
    delivery = hooks.issue_comment(issue, comment)
    requests_before = len(model.log)
    t0 = time.time()
    sent = hooks.send(delivery)
    returned = time.time()
    if sent.status != 202 or not sent.json.get("jobs"):
        raise RuntimeError(f"the receiver did not create a Job: {sent.status} {sent.json}")
    name = sent.json["jobs"][0]
    jobs.wait(f"Job {name} terminal", lambda: name in jobs.done, timeout=180)
    pod = pod_name(name)
    pods.wait(f"Pod {pod} seen", lambda: pod in pods.seen, timeout=10)
    job = receiver.release.get("jobs", name)
    if (job.get("status") or {}).get("phase") != "Succeeded":
        raise RuntimeError(f"Job {name} ended {json.dumps(job.get('status'))}")
    first = next(r for r in model.log[requests_before:])
    points = {"post": t0, "returned": returned, "job": jobs.seen[name], "pod": pods.seen[pod],
              "running": pods.running.get(pod, float("nan")), "model": first["at"], "end": jobs.done[name],
              **read_stamps(stamps, t0)}
    missing = [p for p in POINTS if p not in points]
    if missing:
        raise RuntimeError(f"Job {name}: no time for {missing} (stamps: {stamps.read_text()[-500:]})")
    points["resumed"] = float(bool(((job.get("status") or {}).get("session") or {}).get("resumed")))
    return points


class PodWatcher(Watcher):
    """The Pods' watch, also noting when each Pod is first seen ``Running``."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.running: dict[str, float] = {}

    def _record(self, obj: dict, now: float) -> None:
        if (obj.get("status") or {}).get("phase") == "Running":
            self.running.setdefault(obj["metadata"]["name"], now)
        super()._record(obj, now)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def table(runs: list[dict[str, float]], title: str) -> list[str]:
    total = [r["model"] - r["post"] for r in runs]
    whole = statistics.median(total)
    lines = [f"#### {title} ({len(runs)} deliveries)", "",
             "| stage | median | share of the median total | min–max | what happens |", "|---|---|---|---|---|"]
    for a, b, what in STAGES:
        d = [r[b] - r[a] for r in runs]
        lines.append(f"| {a} → {b} | {ms(statistics.median(d))} | {statistics.median(d) / whole:.0%} | "
                     f"{ms(min(d))}–{ms(max(d))} | {what} |")
    lines.append(f"| **webhook → first model request** | **{ms(whole)}** | 100% | {ms(min(total))}–{ms(max(total))} "
                 "| |")
    context = [("the webhook POST answered", "post", "returned"), ("Pod first seen Running, after its creation",
                                                                   "pod", "running"),
               ("first model request → Job terminal (the tail)", "model", "end")]
    lines += ["", "Context: " + "; ".join(
        f"{label} {ms(statistics.median([r[b] - r[a] for r in runs]))}" for label, a, b in context) + ".", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=10, help="cold + resumed pairs, after one warm-up pair")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="pidispatch-bench-delivery-"))
    info = machine(tmp)
    stamps = tmp / "stamps"
    run_sh, pi_sh = wrappers(tmp, stamps)
    progress(f"delivery benchmark; state in {tmp}; load average {info['load']}")
    cluster = Cluster(state_dir=tmp / "cluster")
    progress("starting the local control plane")
    cluster.start(kubelet=True)
    try:
        with ScriptedModel() as model:
            kube = cluster.kube()
            wait_for(f"Node {NODE_NAME} Ready", lambda: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (kube.get_or_none(f"/api/v1/nodes/{NODE_NAME}") or {}).get("status", {}).get(
                    "conditions", [])), timeout=60)
            agent = write_agent_dir(tmp / "pi" / "agent", model.base_url, context_window=32000)
            (tmp / "pi" / "home").mkdir()
            ns = fresh_namespace(kube, "bench-delivery")
            create_webhook_secret(kube, ns, SECRET)
            job = {"command": [str(run_sh)], "env": {"PI_BIN": str(pi_sh), "PI_CODING_AGENT_DIR": str(agent),
                                                     "HOME": str(tmp / "pi" / "home")}}
            values = merge(merge(base_values(), receiver_values()),
                           {"sessions": {"enabled": True, **TAMPER_BOUNDS}, "job": job})
            progress("installing the chart (receiver on, sessions on, real pi)")
            release = Release(cluster, kube, ns, values).install()
            receiver = Receiver(release, SECRET)
            receiver.await_ready()
            release.trigger("fix")
            receiver.await_triggers(1)
            jobs = Watcher(cluster.kube(), release.path("jobs"), lambda o: (o.get("status") or {}).get("phase")
                           in TERMINAL, clock=time.time)
            pods = PodWatcher(cluster.kube(), f"/api/v1/namespaces/{ns}/pods", clock=time.time)
            for w in (jobs, pods):
                w.start()
                w.ready.wait(30)
            cold: list[dict[str, float]] = []
            resumed: list[dict[str, float]] = []
            for i in range(args.pairs + 1):
                issue = 100 + i
                model.reply(f"Looked at issue {issue}.")
                a = deliver(receiver, jobs, pods, model, stamps, issue, f"@pi look at issue {issue}")
                model.reply(f"Followed up on issue {issue}.")
                b = deliver(receiver, jobs, pods, model, stamps, issue, "@pi and add a test")
                if i == 0:
                    progress("  warm-up pair done")
                    continue
                if not b["resumed"]:
                    raise RuntimeError(f"the second delivery on issue {issue} did not resume")
                cold.append(a)
                resumed.append(b)
                progress(f"  pair {i}/{args.pairs}: cold {ms(a['model'] - a['post'])}, "
                         f"resumed {ms(b['model'] - b['post'])}")
            for w in (jobs, pods):
                w.stopped.set()
            print("\n".join([
                f"Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} — `.venv/bin/python bench/delivery.py "
                f"--pairs {args.pairs}`", "", machine_line(info), "",
                *table(cold, "Cold: a first delivery on a new issue"),
                *table(resumed, "Resumed: the second delivery on the same issue"),
            ]))
    finally:
        progress("stopping the control plane")
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
