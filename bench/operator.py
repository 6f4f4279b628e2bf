#!/usr/bin/env python3
"""Operator benchmark on the local control plane: Pod latency, API writes per job, a 500-Job burst.

Not a test: timings are never assertions. Starts a fresh control plane (etcd, kube-apiserver,
kube-controller-manager, the test kubelet) in a temp directory, installs the chart with sessions on
(``e2e.release.Release``; job Pods run ``e2e/fakepi.py``), and measures, each against a baseline run
in the same cluster in the same run:

a. **Pod latency.** Job POST → its Pod seen by a watch on Pods, against a bare Pod POST → that Pod
   seen by the same kind of watch. Both clocks start just before the POST is sent (a bare Pod's
   ADDED event often arrives before its POST returns, so "after the POST returned" would make the
   baseline zero or negative). Pairs interleaved, order alternating; each Job runs to its end before
   the next pair.
b. **API writes per job.** The apiserver's own ``apiserver_request_total`` (read from /metrics with
   the admin client) before and after K Jobs run to completion, nothing else running. Its labels
   (verb, group, resource, subresource, code) do not name the client, so writes are attributed by
   resource, and checked against two baselines taken the same way: K bare Pods running the same
   fakepi process through the same kubelet (what the kubelet and controller-manager write for a Pod's
   life) and an idle window as long as the Job window (leases, node status).
c. **Burst.** N Jobs (500) created at once, ``maxConcurrentJobs`` 8, fakepi exiting at once: none lost,
   all terminal, time to drain; against N bare Pods running the same fakepi through the same kubelet
   with the same cap of 8 enforced by this script. The operator's peak RSS is VmHWM from
   /proc/<pid>/status of the ``pidispatch operator`` process (the test kubelet runs Pods as local
   processes and reports ``containerID: local://<pid>``).

    .venv/bin/python bench/operator.py                   # full: 30 pairs, K=20, burst of 500
    .venv/bin/python bench/operator.py --quick           # smoke: 6 pairs, K=5, burst of 40

Standard library, the e2e harness and the package; nothing else. Tables on stdout (markdown), the
drain curve as CSV with ``--curve FILE``.
"""

from __future__ import annotations

import sys

if __name__ == "operator":
    # This file shares its name with the standard library's ``operator``, and every script in bench/
    # has bench/ first on sys.path, so ``import operator`` there (collections does it) lands here.
    # Hand the importer the real module instead, and define nothing of the benchmark.
    import importlib
    import os

    _here = os.path.dirname(os.path.abspath(__file__))
    _saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    del sys.modules["operator"]
    try:
        _real = importlib.import_module("operator")
    finally:
        sys.path[:] = _saved
    sys.modules["operator"] = _real
    globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})
else:
    import argparse
    import collections
    import json
    import os
    import re
    import shutil
    import sys
    import tempfile
    import threading
    import time
    import uuid
    from pathlib import Path
    from typing import Any

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import REPO, fmt_seconds, load_average, machine, machine_line, mib, proc_status, progress, spread  # noqa: E402

    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "operator"))

    from e2e.cluster import NODE_NAME, Cluster  # noqa: E402
    from e2e.kube import Kube, wait_for  # noqa: E402
    from e2e.release import FAKEPI, TERMINAL, Release, base_values, merge  # noqa: E402
    from pidispatch.api.crds import GROUP  # noqa: E402
    from pidispatch.manifests.pod import job_label  # noqa: E402

    JOB_LABEL = "pi-dispatch.dev/job"
    BARE_LABEL = "bench.pidispatch.dev/bare"
    WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
    POD_DONE = ("Succeeded", "Failed")
    CAP = 8
    TARGET_LATENCY = 2.0
    TARGET_WRITES = 6.0
    TARGET_RSS = 150 * 1024 * 1024

    # ---- watches ---------------------------------------------------------------------------------------

    class Watcher(threading.Thread):
        """Records, per object name, when a watch first saw it and when it first saw it terminal."""

        def __init__(self, kube: Kube, path: str, terminal: Any, label: str | None = None) -> None:
            super().__init__(daemon=True, name=f"watch {path}")
            self.kube, self.path, self.terminal, self.label = kube, path, terminal, label
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
                        listing = self.kube.get(self.path)
                        rv = listing["metadata"]["resourceVersion"]
                        for obj in listing.get("items") or []:
                            self._record(obj, time.perf_counter())
                        self.ready.set()
                    for ev in self.kube.watch(self.path, resource_version=rv, timeout_seconds=600):
                        now = time.perf_counter()
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

        def wait(self, what: str, pred: Any, timeout: float) -> None:
            deadline = time.monotonic() + timeout
            with self.cond:
                while not pred():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
                    self.cond.wait(min(left, 1.0))

    def job_terminal(obj: dict) -> bool:
        return (obj.get("status") or {}).get("phase") in TERMINAL

    def pod_terminal(obj: dict) -> bool:
        return (obj.get("status") or {}).get("phase") in POD_DONE

    # ---- the cluster and the operator ------------------------------------------------------------------

    def fresh_namespace(kube: Kube, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        kube.create("/api/v1/namespaces", {"metadata": {"name": name}})
        wait_for(
            f"ServiceAccount {name}/default",
            lambda: kube.get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
            timeout=30,
        )
        return name

    def operator_pid(release: Release) -> int:
        """The ``pidispatch operator`` process: the Pod's container pid, or a descendant of it."""
        pod = wait_for(
            "operator containerID",
            lambda: next(
                (
                    p
                    for p in release.operator_pods()
                    if (p.get("status") or {}).get("containerStatuses")
                    and p["status"]["containerStatuses"][0].get("containerID")
                ),
                None,
            ),
            timeout=30,
        )
        pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("local://"))
        todo = [pid]
        while todo:
            p = todo.pop(0)
            try:
                argv = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"operator" in argv and any(a.endswith(b"pidispatch") or a == b"pidispatch" for a in argv):
                return p
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        raise SystemExit(f"no `pidispatch operator` process under pid {pid}")

    def bare_pod(name: str, comment: str = "@pi") -> dict:
        """What the baseline runs: the same fakepi process, through the same kubelet, without the operator."""
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {BARE_LABEL: "true"}},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "pi",
                        "image": "local/fakepi",
                        "command": ["python3", str(FAKEPI)],
                        "env": [{"name": "PI_JOB_SPEC", "value": json.dumps({"comment": comment})}],
                    }
                ],
            },
        }

    # ---- a. latency ------------------------------------------------------------------------------------

    def bench_latency(
        release: Release,
        bare_ns: str,
        pods: Watcher,
        bare: Watcher,
        jobs: Watcher,
        pairs: int,
        issues: collections.abc.Iterator[int],
    ) -> dict:
        kube = release.kube
        job_l, bare_l, ratios = [], [], []
        for i in range(-1, pairs):  # pair -1 is a warm-up, not reported
            order = ("job", "bare") if i % 2 == 0 else ("bare", "job")
            got: dict[str, float] = {}
            for side in order:
                name = f"lat-{side}-{i + 1}-{uuid.uuid4().hex[:4]}"
                if side == "job":
                    t0 = time.perf_counter()
                    release.job(name, issue=next(issues))
                    label = job_label(name)  # equal to the name for these short names
                    pods.wait(f"the Pod of Job {name}", lambda label=label: label in pods.labels.values(), 60)
                    with pods.cond:
                        got["job"] = min(pods.seen[p] for p, j in pods.labels.items() if j == label) - t0
                    jobs.wait(f"Job {name} terminal", lambda name=name: name in jobs.done, 120)
                else:
                    t0 = time.perf_counter()
                    kube.create(f"/api/v1/namespaces/{bare_ns}/pods", bare_pod(name))
                    bare.wait(f"bare Pod {name}", lambda name=name: name in bare.seen, 60)
                    got["bare"] = bare.seen[name] - t0
                    bare.wait(f"bare Pod {name} terminal", lambda name=name: name in bare.done, 120)
            if i < 0:
                continue
            job_l.append(got["job"])
            bare_l.append(got["bare"])
            ratios.append(got["job"] / got["bare"])
            progress(
                f"  a. pair {i + 1}/{pairs}: Job→Pod {fmt_seconds(got['job'])}, bare Pod {fmt_seconds(got['bare'])}, "
                f"ratio {ratios[-1]:.1f}×"
            )
        return {"job": job_l, "bare": bare_l, "ratios": ratios}

    # ---- b. writes -------------------------------------------------------------------------------------

    LINE = re.compile(r"^apiserver_request_total\{(.*)\} ([0-9.e+]+)$")

    def writes(kube: Kube) -> collections.Counter:
        text = kube.request("GET", "/metrics")
        out: collections.Counter = collections.Counter()
        for line in text.splitlines():
            m = LINE.match(line)
            if not m:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if labels.get("verb") in WRITE_VERBS and labels.get("dry_run", "") == "":
                key = (
                    labels["verb"],
                    labels.get("group", ""),
                    labels["resource"],
                    labels.get("subresource", ""),
                    labels.get("code", ""),
                )
                out[key] += int(float(m.group(2)))
        return out

    def settled_delta(
        kube: Kube, before: collections.Counter, quiet: float = 3.0, timeout: float = 60
    ) -> collections.Counter:
        """Writes since ``before``, once the pod/job related counters stop moving for ``quiet`` seconds."""

        def related(c: collections.Counter) -> dict:
            return {k: v for k, v in c.items() if k[2] not in ("leases", "nodes")}

        last, since, deadline = related(writes(kube)), time.monotonic(), time.monotonic() + timeout
        while time.monotonic() - since < quiet and time.monotonic() < deadline:
            time.sleep(0.5)
            now = related(writes(kube))
            if now != last:
                last, since = now, time.monotonic()
        after = writes(kube)
        return collections.Counter({k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)})

    OPERATOR_COMPONENTS = ("pi-dispatch-operator", "kopf")

    def event_sources(kube: Kube) -> dict[str, str]:
        """Every Event in the cluster: uid → the component that reported it."""
        return {
            e["metadata"]["uid"]: e.get("reportingComponent") or (e.get("source") or {}).get("component") or "?"
            for e in kube.list("/api/v1/events")
        }

    def who(verb: str, group: str, resource: str, sub: str) -> str:
        """Which component makes this write, from the resource alone (the counter has no client label).

        Events are split further in ``bench_writes``: POSTs by the reporting component of the Events
        that appeared, PATCHes (count bumps of a repeated Event) by client-go's recorder in the
        controller-manager: neither the operator nor kopf ever patches an Event.
        """
        if (resource, sub) == ("events", "") and verb == "PATCH":
            return "controller-manager (background)"
        if group == GROUP:
            return "test client" if (verb, resource, sub) == ("POST", "jobs", "") else "operator"
        if resource == "pods" and sub in ("status", "binding"):
            return "kubelet"
        if resource == "serviceaccounts" and sub == "token":
            return "kubelet"
        if resource in ("leases", "nodes"):
            return "kubelet / controller-manager (background)"
        if resource in ("pods", "secrets", "events"):
            return "operator"
        if resource in ("endpoints", "endpointslices"):
            return "controller-manager (background)"
        return "other"

    def bench_writes(
        release: Release, bare_ns: str, jobs: Watcher, bare: Watcher, k: int, issues: collections.abc.Iterator[int]
    ) -> dict:
        kube = release.kube
        progress(f"  b. {k} Jobs to completion, counting writes")
        events_before = event_sources(kube)
        before = writes(kube)
        t0 = time.perf_counter()
        names = [f"w-{i}-{uuid.uuid4().hex[:4]}" for i in range(k)]
        for n in names:
            release.job(n, issue=next(issues))
        jobs.wait(f"{k} Jobs terminal", lambda: all(n in jobs.done for n in names), 300)
        job_delta = settled_delta(kube, before)
        window = time.perf_counter() - t0
        # The counter cannot tell who POSTed an Event; the Events that appeared in the window can.
        new_events = collections.Counter(c for u, c in event_sources(kube).items() if u not in events_before)
        queued = sum(1 for n in names if "Queued" in jobs.phases.get(n, set()))
        progress(f"  b. {k} bare Pods to completion through the same kubelet, counting writes")
        before = writes(kube)
        pnames = [f"wb-{i}-{uuid.uuid4().hex[:4]}" for i in range(k)]
        for n in pnames:
            kube.create(f"/api/v1/namespaces/{bare_ns}/pods", bare_pod(n))
        bare.wait(f"{k} bare Pods terminal", lambda: all(n in bare.done for n in pnames), 300)
        pod_delta = settled_delta(kube, before)
        progress(f"  b. an idle window of {window:.0f} s (background writes)")
        before = writes(kube)
        time.sleep(window)
        idle = collections.Counter(
            {kk: v - before.get(kk, 0) for kk, v in writes(kube).items() if v != before.get(kk, 0)}
        )
        phases = collections.Counter(jobs_phase(release, n) for n in names)
        return {
            "k": k,
            "jobs": job_delta,
            "bare": pod_delta,
            "idle": idle,
            "window": window,
            "phases": phases,
            "queued": queued,
            "new_events": new_events,
        }

    def jobs_phase(release: Release, name: str) -> str:
        return (release.get("jobs", name).get("status") or {}).get("phase", "?")

    # ---- c. burst --------------------------------------------------------------------------------------

    def bench_burst_jobs(
        release: Release, jobs: Watcher, n: int, issues: collections.abc.Iterator[int], sampler: RssSampler
    ) -> dict:
        names = [f"b-{i}-{uuid.uuid4().hex[:4]}" for i in range(n)]
        progress(f"  c. burst: creating {n} Jobs (maxConcurrentJobs {CAP})")
        sampler.peak_rss = 0
        t0 = time.perf_counter()
        for i, name in enumerate(names, 1):
            release.job(name, issue=next(issues))
            if i % 100 == 0:
                progress(f"    created {i}/{n}")
        created = time.perf_counter() - t0
        last = [0]

        def all_done() -> bool:
            done = sum(1 for x in names if x in jobs.done)
            if done - last[0] >= max(1, n // 10):
                last[0] = done
                progress(f"    {done}/{n} Jobs terminal after {time.perf_counter() - t0:.0f} s")
            return done == n

        jobs.wait(f"{n} Jobs terminal", all_done, 60 * 60)
        drain = max(jobs.done[x] for x in names) - t0
        phases = collections.Counter(jobs_phase(release, x) for x in names)
        curve = sorted(jobs.done[x] - t0 for x in names)
        return {
            "n": n,
            "drain": drain,
            "created": created,
            "phases": phases,
            "curve": curve,
            "hwm": proc_status(sampler.pid, "VmHWM"),
            "rss_peak_sampled": sampler.peak_rss,
            "listed": len(release.kube.list(release.path("jobs"))),
        }

    def bench_burst_bare(kube: Kube, bare_ns: str, bare: Watcher, n: int) -> dict:
        progress(f"  c. baseline: {n} bare Pods, at most {CAP} unfinished at a time")
        names = [f"bb-{i}-{uuid.uuid4().hex[:4]}" for i in range(n)]
        t0 = time.perf_counter()
        created = 0
        while True:
            with bare.cond:
                finished = sum(1 for x in names[:created] if x in bare.done)
            if finished == n:
                break
            while created < n and created - finished < CAP:
                kube.create(f"/api/v1/namespaces/{bare_ns}/pods", bare_pod(names[created]))
                created += 1
                if created % 100 == 0:
                    progress(f"    created {created}/{n}, {finished} finished after {time.perf_counter() - t0:.0f} s")
            bare.wait(
                "a bare Pod to finish",
                lambda c=created, f=finished: sum(1 for x in names[:c] if x in bare.done) > f or c == f,
                120,
            )
        drain = max(bare.done[x] for x in names) - t0
        curve = sorted(bare.done[x] - t0 for x in names)
        return {"n": n, "drain": drain, "curve": curve}

    class RssSampler(threading.Thread):
        """Samples the operator's VmRSS every 0.2 s (VmHWM is the kernel's own peak; this is a cross-check)."""

        def __init__(self, pid: int) -> None:
            super().__init__(daemon=True)
            self.pid, self.peak_rss = pid, 0

        def run(self) -> None:
            while True:
                try:
                    self.peak_rss = max(self.peak_rss, proc_status(self.pid, "VmRSS"))
                except (OSError, KeyError):
                    return
                time.sleep(0.2)

    def drain_svg(curves: dict[str, list[float]], n: int, cap: int) -> str:
        """Jobs finished over time, one polyline per side, as a hand-written SVG (no plotting library)."""
        w, h, left, bottom, top, right = 640, 360, 56, 40, 24, 150
        tmax = max(max(c) for c in curves.values())
        step = next(s for s in (1, 2, 5, 10, 20, 30, 60, 120, 300, 600) if tmax / s <= 10)

        def x(t: float) -> float:
            return left + (w - left - right) * t / tmax

        def y(k: float) -> float:
            return h - bottom - (h - bottom - top) * k / n

        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            'font-family="sans-serif" font-size="12">',
            f'<rect width="{w}" height="{h}" fill="white"/>',
            f'<text x="{left}" y="16">Burst of {n}: finished over time (≤ {cap} at a time)</text>',
        ]
        for i in range(0, int(tmax // step) + 1):
            t = i * step
            parts.append(
                f'<line x1="{x(t):.1f}" y1="{top}" x2="{x(t):.1f}" y2="{h - bottom}" stroke="#ddd"/>'
                f'<text x="{x(t):.1f}" y="{h - bottom + 16}" text-anchor="middle">{t}</text>'
            )
        for k in range(0, n + 1, max(1, n // 5)):
            parts.append(
                f'<line x1="{left}" y1="{y(k):.1f}" x2="{w - right}" y2="{y(k):.1f}" stroke="#ddd"/>'
                f'<text x="{left - 6}" y="{y(k) + 4:.1f}" text-anchor="end">{k}</text>'
            )
        parts.append(
            f'<text x="{(left + w - right) / 2}" y="{h - 6}" text-anchor="middle">seconds since the first POST</text>'
        )
        colours = {"Jobs (operator)": "#c0392b", "bare Pods (baseline)": "#2c7fb8"}
        for i, (label, curve) in enumerate(curves.items()):
            pts = " ".join(f"{x(t):.1f},{y(k):.1f}" for k, t in enumerate([0.0, *curve]))
            colour = colours.get(label, "black")
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{pts}"/>')
            parts.append(
                f'<line x1="{w - right + 10}" y1="{top + 20 + 18 * i}" x2="{w - right + 30}" '
                f'y2="{top + 20 + 18 * i}" stroke="{colour}" stroke-width="2"/>'
                f'<text x="{w - right + 34}" y="{top + 24 + 18 * i}">{label}</text>'
            )
        parts.append("</svg>")
        return "\n".join(parts) + "\n"

    # ---- report ----------------------------------------------------------------------------------------

    def report(
        args: argparse.Namespace, info: dict, lat: dict, wr: dict, burst: dict, base: dict, rss: dict, load_end: str
    ) -> str:
        cmd = ".venv/bin/python bench/operator.py" + (" --quick" if args.quick else "")
        out = [f"Run: {info['date']} — `{cmd}`", "", machine_line(info) + f" At the end: {load_end}.", ""]
        # a
        if lat is None:
            out += ["### a. Job → Pod latency", "", "(not run)", ""]
        else:
            out += report_latency(lat)
        out += ["### b. API writes per job", "", "(not run)", ""] if wr is None else report_writes(wr)
        out += ["### c. Burst", "", "(not run)", ""] if burst is None else report_burst(burst, base, rss)
        return "\n".join(out)

    def report_latency(lat: dict) -> list[str]:
        lo, med, hi = spread(lat["ratios"])
        verdict = "met" if med <= TARGET_LATENCY else f"**missed** by {med / TARGET_LATENCY:.1f}× (median {med:.1f}×)"
        return [
            "### a. Job → Pod latency",
            "",
            "| Comparison | min | **median** | max | Job→Pod median | bare Pod median | pairs | target ≤ 2× |",
            "|---|---|---|---|---|---|---|---|",
            f"| Job POST → its Pod seen by a watch, vs bare Pod POST → seen | {lo:.1f}× | **{med:.1f}×** | {hi:.1f}× | "
            f"{fmt_seconds(spread(lat['job'])[1])} | {fmt_seconds(spread(lat['bare'])[1])} | {len(lat['ratios'])} | "
            f"{verdict} |",
            "",
        ]

    def report_writes(wr: dict) -> list[str]:
        k = wr["k"]
        rows: dict[tuple, list[float]] = {}
        refused = 0
        ours = sum(v for c, v in wr["new_events"].items() if c in OPERATOR_COMPONENTS)
        for name, counter in (("jobs", wr["jobs"]), ("bare", wr["bare"]), ("idle", wr["idle"])):
            column = ("jobs", "bare", "idle").index(name)
            for (verb, group, res, sub, code), v in counter.items():
                by = who(verb, group, res, sub)
                if name == "jobs" and by == "operator" and not code.startswith("2"):
                    refused += v
                if (verb, res, sub) == ("POST", "events", "") and name == "jobs":
                    mine = min(v, ours)
                    rows.setdefault((verb, group, res, sub, by), [0.0, 0.0, 0.0])[column] += mine
                    v, by = v - mine, "controller-manager (background)"
                    if not v:
                        continue
                rows.setdefault((verb, group, res, sub, by), [0.0, 0.0, 0.0])[column] += v
        out = [
            "### b. API writes per job",
            "",
            f"K = {k} Jobs to completion ({dict(wr['phases'])}), then K bare Pods, then an idle window as long as the "
            f"Job window ({wr['window']:.0f} s). Writes per job = count / K, from `apiserver_request_total` "
            f"(all response codes).",
            "",
            "| verb | resource | per Job run | per bare Pod | idle window (/K) | made by |",
            "|---|---|---|---|---|---|",
        ]
        per_op = per_total = per_bg = 0.0
        for key in sorted(rows, key=lambda r: (r[4], r[2], r[3], r[0])):
            j, b, i = (x / k for x in rows[key])
            verb, group, res, sub, by = key
            if j:
                per_total += j
                per_op += j if by == "operator" else 0
                per_bg += j if by.endswith("(background)") else 0
            resname = (f"{res}.{group}" if group else res) + (f"/{sub}" if sub else "")
            out.append(f"| {verb} | {resname} | {j:.2f} | {b:.2f} | {i:.2f} | {by} |")
        op_verdict = "met" if per_op <= TARGET_WRITES else f"**missed** by {per_op / TARGET_WRITES:.2f}×"
        out += [
            "",
            f"Writes per job: **{per_total:.2f}** in all ({per_bg:.2f} of them background: leases, node status, "
            f"endpoints, the controller-manager's Events), **{per_op:.2f} by the operator**; target ≤ "
            f"{TARGET_WRITES:.0f}: {op_verdict} (ratio {per_op / TARGET_WRITES:.2f}× of the target).",
            "",
            f"Jobs marked `Queued` (seen by a watch): {wr['queued']} of {k}; each costs one `jobs/status` write, "
            f"a Job that gets a slot within the operator's short wait goes straight to `Running`. Operator "
            f"writes the apiserver refused (non-2xx, counted above): {refused / k:.2f} per job. Events that "
            f"appeared in the Job window, by reporting component: {dict(wr['new_events'])}.",
            "",
        ]
        return out

    def report_burst(burst: dict, base: dict, rss: dict) -> list[str]:
        ratio = burst["drain"] / base["drain"]
        hwm = burst["hwm"]
        lost = (
            burst["n"] - sum(burst["phases"].values()) + sum(v for p, v in burst["phases"].items() if p not in TERMINAL)
        )
        return [
            "### c. Burst",
            "",
            "| Run | Jobs | terminal | drain | jobs/s |",
            "|---|---|---|---|---|",
            f"| {burst['n']} Jobs, maxConcurrentJobs {CAP} | {burst['n']} | {dict(burst['phases'])} | "
            f"{fmt_seconds(burst['drain'])} | {burst['n'] / burst['drain']:.2f} |",
            f"| {base['n']} bare Pods, ≤ {CAP} unfinished (script) | {base['n']} | all | "
            f"{fmt_seconds(base['drain'])} | "
            f"{base['n'] / base['drain']:.2f} |",
            "",
            f"Drain time ratio (Jobs / bare Pods): **{ratio:.2f}×**. Lost: {lost}. Jobs listed afterwards: "
            f"{burst['listed']}. All {burst['n']} POSTs took {fmt_seconds(burst['created'])}.",
            "",
            f"Operator peak RSS (VmHWM of `pidispatch operator`, pid {rss['pid']}): **{mib(hwm)}** after the burst "
            f"({mib(rss['hwm_start'])} before any benchmark, {mib(rss['hwm_before_burst'])} before the burst; "
            f"sampled VmRSS peak during the burst {mib(burst['rss_peak_sampled'])}); target ≤ 150 MiB: "
            f"{'met' if hwm <= TARGET_RSS else f'**missed** by {hwm / TARGET_RSS:.2f}×'} "
            f"({hwm / TARGET_RSS:.2f}× of the target).",
            "",
        ]

    def main(argv: list[str] | None = None) -> int:
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--quick", action="store_true", help="smoke run: 6 pairs, K=5, burst of 40")
        parser.add_argument("--curve", help="write the burst drain curves (seconds, jobs finished) as CSV here")
        parser.add_argument("--svg", help="write the burst drain curves as an SVG here (e.g. docs/bench-drain.svg)")
        parser.add_argument("--from-csv", help=argparse.SUPPRESS)
        parser.add_argument("--only", default="abc", help="which parts to run (default abc)")
        args = parser.parse_args(argv)
        if args.from_csv and args.svg:  # redraw the picture from a saved --curve file
            curves: dict[str, list[float]] = {"Jobs (operator)": [], "bare Pods (baseline)": []}
            for line in Path(args.from_csv).read_text().splitlines()[1:]:
                side, t, _ = line.split(",")
                curves["Jobs (operator)" if side == "jobs" else "bare Pods (baseline)"].append(float(t))
            Path(args.svg).write_text(drain_svg(curves, len(curves["Jobs (operator)"]), CAP))
            return 0
        pairs, k, n = (6, 5, 40) if args.quick else (30, 20, 500)
        tmp = Path(tempfile.mkdtemp(prefix="pidispatch-bench-op-"))
        info = machine(tmp)
        progress(f"operator benchmark; state in {tmp}; load average {info['load']}")
        cluster = Cluster(state_dir=tmp / "cluster")
        progress("starting the local control plane")
        cluster.start(kubelet=True)
        try:
            kube = cluster.kube()
            wait_for(
                f"Node {NODE_NAME} Ready",
                lambda: any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (kube.get_or_none(f"/api/v1/nodes/{NODE_NAME}") or {})
                    .get("status", {})
                    .get("conditions", [])
                ),
                timeout=60,
            )
            ns, bare_ns = fresh_namespace(kube, "bench-op"), fresh_namespace(kube, "bench-bare")
            progress("installing the chart (sessions on, maxConcurrentJobs 8)")
            release = Release(
                cluster, kube, ns, merge(base_values(), {"sessions": {"enabled": True}, "maxConcurrentJobs": CAP})
            ).install()
            release.trigger("fix")
            pid = operator_pid(release)
            rss = {"pid": pid, "hwm_start": proc_status(pid, "VmHWM")}
            sampler = RssSampler(pid)
            sampler.start()
            pods = Watcher(cluster.kube(), f"/api/v1/namespaces/{ns}/pods", pod_terminal, label=JOB_LABEL)
            bare = Watcher(cluster.kube(), f"/api/v1/namespaces/{bare_ns}/pods", pod_terminal)
            jobs = Watcher(cluster.kube(), release.path("jobs"), job_terminal)
            for w in (pods, bare, jobs):
                w.start()
                w.ready.wait(30)
            issues = iter(range(1000, 10**9))
            lat = wr = burst = base = None
            if "a" in args.only:
                progress(f"a. latency: {pairs} interleaved pairs (and one warm-up)")
                lat = bench_latency(release, bare_ns, pods, bare, jobs, pairs, issues)
            if "b" in args.only:
                wr = bench_writes(release, bare_ns, jobs, bare, k, issues)
            if "c" in args.only:
                rss["hwm_before_burst"] = proc_status(pid, "VmHWM")
                base = bench_burst_bare(kube, bare_ns, bare, n)
                burst = bench_burst_jobs(release, jobs, n, issues, sampler)
                if args.curve:
                    with open(args.curve, "w") as f:
                        f.write("side,seconds,finished\n")
                        for side, run in (("jobs", burst), ("bare", base)):
                            f.writelines(f"{side},{t:.3f},{i}\n" for i, t in enumerate(run["curve"], 1))
                if args.svg:
                    Path(args.svg).write_text(
                        drain_svg({"Jobs (operator)": burst["curve"], "bare Pods (baseline)": base["curve"]}, n, CAP)
                    )
            print(report(args, info, lat, wr, burst, base, rss, load_average()))
            for w in (pods, bare, jobs):
                w.stopped.set()
        finally:
            progress("stopping the control plane")
            cluster.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        return 0

    if __name__ == "__main__":
        sys.exit(main())
