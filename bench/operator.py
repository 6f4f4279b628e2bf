#!/usr/bin/env python3
"""Operator benchmark on the local control plane, against Kubernetes' own Job controller.

Not a test: timings are never assertions. Starts a fresh control plane (etcd, kube-apiserver,
kube-controller-manager with its default flags, the test kubelet) in a temp directory, installs the chart
with sessions on (``e2e.framework.release.Release``; job Pods run ``testkit/fakepi.py``), and measures our Jobs against
``batch/v1`` Jobs run by the kube-controller-manager's Job controller on the same apiserver, in the same
run, their Pods the same fakepi process through the same kubelet (a bare Pod is reported as context). Like
for like: the ``batch/v1`` Jobs' and the bare Pods' spec is the spec of one of our Job Pods, taken from the
apiserver at the start (the same container, env, security context and volumes; the session claim becomes
an emptyDir and ``PI_SESSION_FILE`` is dropped; ``--minimal-peer`` gives them a one-container,
one-variable Pod instead, as before):

a. **Pod latency.** Job POST → its Pod seen by a watch on Pods, for our Job, a ``batch/v1`` Job and a bare
   Pod, in interleaved triples whose order rotates. Clocks start just before the POST (a bare Pod's ADDED
   event often arrives before its POST returns). Each runs to its end before the next starts.
b. **API writes per job.** The apiserver's own ``apiserver_request_total`` (read from /metrics with the
   admin client) before and after: b1, K of our Jobs at once, Pods exiting at once; b2, 2×8 of our Jobs at
   once, Pods running 3 s, so 8 wait and are marked ``Queued`` (the per-queued-Job figure is derived from
   b1 and b2); b3, K ``batch/v1`` Jobs at once; K bare Pods; an idle window. The counter's labels do not
   name the client, so writes are attributed by resource and by the Events' reporting components.
c. **Burst.** 500 ``batch/v1`` Jobs held to 8 unfinished at a time by this script, then 500 of ours POSTed
   at once with ``maxConcurrentJobs`` 8 (then 500 bare Pods, 8 at a time, as context): none lost, all
   terminal, time to drain. The operator's peak RSS is VmHWM from /proc/<pid>/status of the ``pidispatch
   operator`` process (the test kubelet runs Pods as local processes: ``containerID: local://<pid>``).
d. **Store system calls per job** (run before c): ``strace -f -c`` on the operator process while K Jobs run
   one at a time on new keys, then K on the same keys (resumed): fsyncs, renames, copies per job, for the
   fleet model in docs/benchmarks.md.

    .venv/bin/python bench/operator.py                   # full: 30 triples, K=20, bursts of 500
    .venv/bin/python bench/operator.py --quick           # smoke: 6 triples, K=5, bursts of 40

Standard library, the e2e harness and the package; nothing else. Tables on stdout (markdown), the
drain curves as CSV with ``--curve FILE`` and as SVG with ``--svg FILE``.
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
    from _common import (  # noqa: E402
        REPO,
        Watcher,
        cpu_times,
        fmt_seconds,
        load_average,
        machine,
        machine_line,
        mib,
        proc_status,
        progress,
        spread,
        stolen_since,
    )

    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "operator"))

    from e2e.framework.cluster import NODE_NAME, Cluster  # noqa: E402
    from e2e.framework.kube import Kube, wait_for  # noqa: E402
    from e2e.framework.release import FAKEPI, TERMINAL, Release, base_values, merge  # noqa: E402
    from pidispatch.api.crds import GROUP  # noqa: E402
    from pidispatch.manifests.pod import job_label  # noqa: E402

    JOB_LABEL = "pi-dispatch.dev/job"
    BARE_LABEL = "bench.pidispatch.dev/bare"
    BATCH_LABEL = "batch.kubernetes.io/job-name"  # set by Kubernetes' Job controller on the Pods it creates
    WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
    POD_DONE = ("Succeeded", "Failed")
    CAP = 8
    TARGET_WRITES = 6.0
    TARGET_RSS = 150 * 1024 * 1024

    # ---- watches ---------------------------------------------------------------------------------------

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

    # What the apiserver fills in on a stored Pod: left out of the template, so each side's POST carries only
    # what its client would write.
    FILLED_POD = ("nodeName", "tolerations", "priority", "serviceAccount", "serviceAccountName", "schedulerName",
                  "dnsPolicy", "terminationGracePeriodSeconds", "preemptionPolicy")
    FILLED_CONTAINER = ("imagePullPolicy", "resources")
    TEMPLATE: dict[str, Any] = {}

    def capture_template(release: Release, pods: Watcher, issue: int) -> None:
        """Take the spec of one of our Job Pods as the template of the peer's and the bare Pods: like for like,
        the same container, env, security context and volumes (its session claim becomes an emptyDir and
        ``PI_SESSION_FILE`` is dropped: the peer has no staged session to mount or continue)."""
        name = f"tpl-{uuid.uuid4().hex[:4]}"
        release.job(name, issue=issue)
        pods.wait(f"the Pod of Job {name}", lambda: job_label(name) in pods.labels.values(), 60)
        pod = wait_for(f"the Pod of Job {name}", lambda: next(iter(
            release.kube.list(f"/api/v1/namespaces/{release.ns}/pods", labelSelector=f"{JOB_LABEL}={job_label(name)}")),
            None), timeout=30)
        spec = {k: v for k, v in pod["spec"].items() if k not in FILLED_POD}
        spec["containers"] = [{k: v for k, v in c.items() if k not in FILLED_CONTAINER} for c in spec["containers"]]
        # No session file either: fakepi reads the one it is pointed at, and the peer has none to hand it.
        container = spec["containers"][0]
        container["env"] = [e for e in container.get("env") or [] if e["name"] != "PI_SESSION_FILE"]
        spec["volumes"] = [{"name": v["name"], "emptyDir": {}} if "persistentVolumeClaim" in v else v
                           for v in spec.get("volumes") or []]
        TEMPLATE.update(spec)
        release.wait_job(name)

    def bare_pod(name: str, comment: str = "@pi") -> dict:
        """What the baselines run: the same fakepi process, through the same kubelet, without the operator;
        with our Job Pod's spec once :func:`capture_template` has run, else a minimal Pod."""
        if TEMPLATE:
            spec = json.loads(json.dumps(TEMPLATE))
            for env in spec["containers"][0].get("env") or []:
                if env["name"] == "PI_JOB_SPEC":
                    env["value"] = json.dumps({"comment": comment})
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {BARE_LABEL: "true"}},
                    "spec": spec}
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

    def batch_job(name: str, comment: str = "@pi") -> dict:
        """The peer: a ``batch/v1`` Job run by Kubernetes' own Job controller (in the kube-controller-manager the
        project builds, its default flags), its Pod the same fakepi process as the bare Pod's, no retries."""
        pod = bare_pod(name, comment)
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "backoffLimit": 0,
                "template": {"metadata": {"labels": {BARE_LABEL: "batch"}}, "spec": pod["spec"]},
            },
        }

    def batch_terminal(obj: dict) -> bool:
        return any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in (obj.get("status") or {}).get("conditions") or []
        )

    def clear_namespace(kube: Kube, ns: str, batch: bool) -> None:
        """Delete what a baseline left in ``ns`` (its Jobs, then their Pods by the garbage collector; or its bare
        Pods) and wait until no Pod is left, so the next run does not share the kubelet with them."""
        if batch:
            kube.delete(f"/apis/batch/v1/namespaces/{ns}/jobs", {"propagationPolicy": "Background"})
        kube.delete(f"/api/v1/namespaces/{ns}/pods", {"gracePeriodSeconds": 0})
        wait_for(f"the Pods of {ns} gone", lambda: not kube.list(f"/api/v1/namespaces/{ns}/pods"), timeout=300)

    # ---- a. latency ------------------------------------------------------------------------------------

    class Sides:
        """The three sides of a run, each with a watch on its Pods and (for Jobs) on its Jobs."""

        def __init__(self, release: Release, bare_ns: str, batch_ns: str, pods: Watcher, bare: Watcher,
                     batch_pods: Watcher, jobs: Watcher, batch_jobs: Watcher) -> None:
            self.release, self.bare_ns, self.batch_ns = release, bare_ns, batch_ns
            self.pods, self.bare, self.batch_pods, self.jobs, self.batch_jobs = pods, bare, batch_pods, jobs, batch_jobs

    def pod_seen_for(watch: Watcher, label: str, t0: float, what: str) -> float:
        """Seconds from ``t0`` to the first Pod ``watch`` saw with ``label`` as its label value."""
        watch.wait(what, lambda: label in watch.labels.values(), 60)
        with watch.cond:
            return min(watch.seen[p] for p, j in watch.labels.items() if j == label) - t0

    def bench_latency(sides: Sides, pairs: int, issues: collections.abc.Iterator[int]) -> dict:
        """Interleaved triples: our Job, a ``batch/v1`` Job, a bare Pod; the order rotates every triple."""
        release, kube = sides.release, sides.release.kube
        got_all: dict[str, list[float]] = {"job": [], "batch": [], "bare": [], "jobseen": [], "batchseen": []}
        vs_batch, vs_bare = [], []
        rotations = (("job", "batch", "bare"), ("batch", "bare", "job"), ("bare", "job", "batch"))
        for i in range(-1, pairs):  # triple -1 is a warm-up, not reported
            got: dict[str, float] = {}
            for side in rotations[i % 3]:
                name = f"lat-{side}-{i + 1}-{uuid.uuid4().hex[:4]}"
                t0 = time.perf_counter()
                if side == "job":
                    release.job(name, issue=next(issues))
                    got["job"] = pod_seen_for(sides.pods, job_label(name), t0, f"the Pod of Job {name}")
                    sides.jobs.wait(f"Job {name} terminal", lambda name=name: name in sides.jobs.done, 120)
                    got["jobseen"] = sides.jobs.seen[name] - t0
                elif side == "batch":
                    kube.create(f"/apis/batch/v1/namespaces/{sides.batch_ns}/jobs", batch_job(name))
                    got["batch"] = pod_seen_for(sides.batch_pods, name, t0, f"the Pod of batch/v1 Job {name}")
                    sides.batch_jobs.wait(f"batch/v1 Job {name} terminal",
                                          lambda name=name: name in sides.batch_jobs.done, 120)
                    got["batchseen"] = sides.batch_jobs.seen[name] - t0
                else:
                    kube.create(f"/api/v1/namespaces/{sides.bare_ns}/pods", bare_pod(name))
                    sides.bare.wait(f"bare Pod {name}", lambda name=name: name in sides.bare.seen, 60)
                    got["bare"] = sides.bare.seen[name] - t0
                    sides.bare.wait(f"bare Pod {name} terminal", lambda name=name: name in sides.bare.done, 120)
            if i < 0:
                continue
            for side, value in got.items():
                got_all[side].append(value)
            vs_batch.append(got["job"] / got["batch"])
            vs_bare.append(got["job"] / got["bare"])
            progress(
                f"  a. triple {i + 1}/{pairs}: Job→Pod {fmt_seconds(got['job'])}, batch/v1 Job→Pod "
                f"{fmt_seconds(got['batch'])}, bare Pod {fmt_seconds(got['bare'])}; Job seen "
                f"{fmt_seconds(got['jobseen'])}, batch/v1 Job seen {fmt_seconds(got['batchseen'])}"
            )
        return {**got_all, "vs_batch": vs_batch, "vs_bare": vs_bare}

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
        if resource == "kopfpeerings":
            return "operator (kopf's peering keep-alive, background)"
        if resource == "leases":
            # Not the kubelet's: the test kubelet keeps no node Lease. The renewals of the operator's leader
            # Lease (every 2 s, pidispatch/election/leader.py) and of the controller-manager's own leader Lease.
            return "operator's and controller-manager's leader Leases (background renewals)"
        if resource == "nodes":
            return "kubelet / controller-manager (background)"
        if resource in ("pods", "secrets", "events"):
            return "operator"
        if resource in ("endpoints", "endpointslices"):
            return "controller-manager (background)"
        return "other"

    def counted(kube: Kube, run: Any) -> tuple[collections.Counter, float, collections.Counter]:
        """Writes made while ``run()`` runs and settles; the window's length; the Events that appeared in it by
        reporting component (the counter cannot tell who POSTed an Event; the Events can)."""
        events_before = event_sources(kube)
        before = writes(kube)
        t0 = time.perf_counter()
        run()
        delta = settled_delta(kube, before)
        new_events = collections.Counter(c for u, c in event_sources(kube).items() if u not in events_before)
        return delta, time.perf_counter() - t0, new_events

    def bench_writes(sides: Sides, k: int, issues: collections.abc.Iterator[int]) -> dict:
        release, kube, jobs = sides.release, sides.release.kube, sides.jobs
        out: dict[str, Any] = {"k": k}

        def ours(prefix: str, n: int, comment: str) -> Any:
            names = [f"{prefix}-{i}-{uuid.uuid4().hex[:4]}" for i in range(n)]

            def run() -> None:
                for name in names:
                    release.job(name, issue=next(issues), comment=comment)
                jobs.wait(f"{n} Jobs terminal", lambda: all(x in jobs.done for x in names), 300)

            return names, run

        progress(f"  b1. {k} Jobs at once, each Pod exiting at once ({CAP} slots), counting writes")
        names, run = ours("w", k, "@pi go")
        out["jobs"], out["window"], out["new_events"] = counted(kube, run)
        out["queued"] = sum(1 for x in names if "Queued" in jobs.phases.get(x, set()))
        out["phases"] = collections.Counter(jobs_phase(release, x) for x in names)
        k2 = 2 * CAP
        progress(f"  b2. {k2} Jobs at once, each Pod running 3 s ({CAP} slots: {k2 - CAP} wait and are marked Queued)")
        names, run = ours("wq", k2, "@pi sleep=3")
        out["q_jobs"], _, out["q_events"] = counted(kube, run)
        out["k2"] = k2
        out["q_queued"] = sum(1 for x in names if "Queued" in jobs.phases.get(x, set()))
        out["q_phases"] = collections.Counter(jobs_phase(release, x) for x in names)
        progress(f"  b3. {k} batch/v1 Jobs at once through Kubernetes' Job controller, counting writes")
        bnames = [f"wj-{i}-{uuid.uuid4().hex[:4]}" for i in range(k)]

        def run_batch() -> None:
            for name in bnames:
                kube.create(f"/apis/batch/v1/namespaces/{sides.batch_ns}/jobs", batch_job(name))
            sides.batch_jobs.wait(f"{k} batch/v1 Jobs terminal",
                                  lambda: all(x in sides.batch_jobs.done for x in bnames), 300)

        out["batch"], _, out["batch_events"] = counted(kube, run_batch)
        progress(f"  b. {k} bare Pods to completion through the same kubelet, counting writes")
        pnames = [f"wb-{i}-{uuid.uuid4().hex[:4]}" for i in range(k)]

        def run_bare() -> None:
            for name in pnames:
                kube.create(f"/api/v1/namespaces/{sides.bare_ns}/pods", bare_pod(name))
            sides.bare.wait(f"{k} bare Pods terminal", lambda: all(x in sides.bare.done for x in pnames), 300)

        out["bare"], _, _ = counted(kube, run_bare)
        progress(f"  b. an idle window of {out['window']:.0f} s (background writes)")
        before = writes(kube)
        time.sleep(out["window"])
        out["idle"] = collections.Counter(
            {kk: v - before.get(kk, 0) for kk, v in writes(kube).items() if v != before.get(kk, 0)}
        )
        return out

    def jobs_phase(release: Release, name: str) -> str:
        return (release.get("jobs", name).get("status") or {}).get("phase", "?")

    # ---- d. store operations per job --------------------------------------------------------------------

    STORE_CALLS = ("fsync", "fdatasync", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "unlink",
                   "unlinkat", "openat", "copy_file_range", "sendfile", "read", "pread64", "write", "pwrite64")

    def traced(pid: int, run: Any) -> dict[str, int]:
        """System calls of the operator process (every thread) while ``run()`` runs, counted by ``strace -c``."""
        import signal
        import subprocess

        out = Path(tempfile.mkdtemp(prefix="pidispatch-strace-")) / "counts"
        tracer = subprocess.Popen(["strace", "-f", "-c", "-U", "name,calls", "-o", str(out),
                                   "-e", "trace=" + ",".join(STORE_CALLS), "-p", str(pid)],
                                  stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # strace attaches to every thread
        try:
            run()
        finally:
            tracer.send_signal(signal.SIGINT)
            tracer.wait(60)
        counts: dict[str, int] = {}
        for line in out.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                counts[parts[0]] = int(parts[1])
        shutil.rmtree(out.parent, ignore_errors=True)
        return counts

    def bench_store_ops(sides: Sides, pid: int, k: int, issues: collections.abc.Iterator[int]) -> dict:
        """K first deliveries on new keys (cold, then promoted), then K second deliveries on the same keys
        (resumed, then promoted), one at a time, each side counted by ``strace -c`` on the operator process."""
        release, jobs = sides.release, sides.jobs
        keys = [next(issues) for _ in range(k)]

        def deliveries(prefix: str) -> Any:
            def run() -> None:
                for issue in keys:
                    name = f"{prefix}-{issue}"
                    release.job(name, issue=issue)
                    jobs.wait(f"Job {name} terminal", lambda name=name: name in jobs.done, 120)
                time.sleep(1.0)  # the last job's end (SessionKey status, staging removed)
            return run

        progress(f"  d. {k} cold deliveries on new keys, then {k} resumed ones on the same keys, under strace -c")
        cold = traced(pid, deliveries("sc"))
        resumed = traced(pid, deliveries("sr"))
        sessions = [((release.get("jobs", f"sr-{i}").get("status") or {}).get("session") or {}).get("reason")
                    for i in keys]
        return {"k": k, "cold": cold, "resumed": resumed, "reasons": collections.Counter(sessions)}

    # ---- c. burst --------------------------------------------------------------------------------------

    def bench_burst_jobs(
        release: Release, jobs: Watcher, n: int, issues: collections.abc.Iterator[int], sampler: RssSampler
    ) -> dict:
        names = [f"b-{i}-{uuid.uuid4().hex[:4]}" for i in range(n)]
        progress(f"  c. burst: creating {n} Jobs (maxConcurrentJobs {CAP})")
        sampler.peak_rss = 0
        cpu0 = cpu_seconds(sampler.pid)
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
        cpu = cpu_seconds(sampler.pid) - cpu0
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
            "cpu": cpu,
            "listed": len(release.kube.list(release.path("jobs"))),
        }

    def bench_burst_capped(what: str, create: Any, done: Watcher, n: int, prefix: str) -> dict:
        """A baseline burst: ``n`` objects made by ``create(name)``, at most CAP unfinished at a time (the script
        holds them to the cap, as ``maxConcurrentJobs`` holds ours); drain = first POST → last seen terminal."""
        progress(f"  c. {what}: {n}, at most {CAP} unfinished at a time")
        names = [f"{prefix}-{i}-{uuid.uuid4().hex[:4]}" for i in range(n)]
        t0 = time.perf_counter()
        created = 0
        while True:
            with done.cond:
                finished = sum(1 for x in names[:created] if x in done.done)
            if finished == n:
                break
            while created < n and created - finished < CAP:
                create(names[created])
                created += 1
                if created % 100 == 0:
                    progress(f"    created {created}/{n}, {finished} finished after {time.perf_counter() - t0:.0f} s")
            done.wait(
                f"one of the {what} to finish",
                lambda c=created, f=finished: sum(1 for x in names[:c] if x in done.done) > f or c == f,
                300,
            )
        drain = max(done.done[x] for x in names) - t0
        curve = sorted(done.done[x] - t0 for x in names)
        return {"n": n, "drain": drain, "curve": curve, "names": names}

    def cpu_seconds(pid: int) -> float:
        """User + system CPU time of ``pid`` so far (``/proc/<pid>/stat`` fields 14 and 15)."""
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

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
        w, h, left, bottom, top, right = 680, 360, 56, 40, 24, 190
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
        colours = {"our Jobs": "#c0392b", "batch/v1 Jobs (peer)": "#2ca25f", "bare Pods (context)": "#2c7fb8"}
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

    def report(args: argparse.Namespace, info: dict, lat: dict | None, wr: dict | None, bursts: dict | None,
               rss: dict, load_end: str, ops: dict | None = None) -> str:
        cmd = (".venv/bin/python bench/operator.py" + (" --quick" if args.quick else "")
               + (f" --only {args.only}" if args.only != "abdc" else "")
               + (" --minimal-peer" if args.minimal_peer else ""))
        peer = ("The `batch/v1` and bare Pods have a minimal spec (one container, one env var)." if not TEMPLATE else
                "The `batch/v1` and bare Pods have the spec of our Job Pods (the same container, env, security "
                "context and volumes; the session claim an emptyDir, no `PI_SESSION_FILE`).")
        out = [f"Run: {info['date']} — `{cmd}`", "",
               machine_line(info) + f" At the end: {load_end}.", "", peer, ""]
        out += ["#### a. Job → Pod latency", "", "(not run)", ""] if lat is None else report_latency(lat)
        out += ["#### b. API writes per job", "", "(not run)", ""] if wr is None else report_writes(wr)
        out += ["#### c. Burst", "", "(not run)", ""] if bursts is None else report_burst(bursts, rss)
        out += [] if ops is None else report_store_ops(ops)
        return "\n".join(out)

    def report_store_ops(ops: dict) -> list[str]:
        k = ops["k"]
        rows = []
        for call in STORE_CALLS:
            c, r = ops["cold"].get(call, 0), ops["resumed"].get(call, 0)
            if c or r:
                rows.append(f"| `{call}` | {c / k:.1f} | {r / k:.1f} |")
        return [
            "#### d. Store system calls per job",
            "",
            f"`strace -f -c` on the operator process (all threads), {k} Jobs one at a time on new keys (cold, "
            f"promoted), then {k} on the same keys ({dict(ops['reasons'])}, promoted). The operator's whole process: "
            "the store, the staging directory, its logs and its HTTP connections alike (`read`/`write` include the "
            "sockets).",
            "",
            "| system call | per cold Job (new key) | per resumed Job |",
            "|---|---|---|",
            *rows,
            "",
        ]

    def report_latency(lat: dict) -> list[str]:
        ours, batch, bare = (spread(lat[x])[1] for x in ("job", "batch", "bare"))
        verdict = "met" if ours <= batch else f"**missed** by {ours / batch:.2f}×"
        rows = []
        for label, ratios, base in (("batch/v1 Job POST → its Pod seen", lat["vs_batch"], batch),
                                    ("bare Pod POST → seen (context)", lat["vs_bare"], bare)):
            lo, med, hi = spread(ratios)
            rows.append(f"| our Job POST → its Pod seen, vs {label} | {lo:.2f}× | **{med:.2f}×** | {hi:.2f}× | "
                        f"{fmt_seconds(ours)} | {fmt_seconds(base)} | {len(ratios)} |")
        return [
            "#### a. Job → Pod latency",
            "",
            "| Comparison (per-triple ratio) | min | **median** | max | ours, median | baseline, median | triples |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Target: our median ≤ the `batch/v1` median: {fmt_seconds(ours)} against {fmt_seconds(batch)}, "
            f"{verdict} ({ours / batch:.2f}× of it).",
            "",
            f"Context, the Job alone (POST → the Job seen by this script's watch, before any controller acts): "
            f"ours {fmt_seconds(spread(lat['jobseen'])[1])}, `batch/v1` {fmt_seconds(spread(lat['batchseen'])[1])} "
            "(medians).",
            "",
        ]

    def attributed(counter: collections.Counter, ours: int, peer: bool = False) -> dict[tuple, float]:
        """(verb, resource, made by) → count; Event POSTs split by the Events' reporting components (``ours``: how
        many were the operator's, or in a ``peer`` window the Job controller's). ``peer``: a batch/v1 window, where
        Kubernetes' Job controller makes the writes the operator makes in ours."""
        rows: dict[tuple, float] = collections.defaultdict(float)
        for (verb, group, res, sub, _code), v in counter.items():
            by = who(verb, group, res, sub)
            if peer and group == "batch" and (verb, res, sub) == ("POST", "jobs", ""):
                by = "test client"
            elif peer and by in ("operator", "other"):
                by = "job controller"
            resname = (f"{res}.{group}" if group else res) + (f"/{sub}" if sub else "")
            if (verb, res, sub) == ("POST", "events", ""):
                mine = min(v, ours)
                rows[(verb, resname, "job controller" if peer else "operator")] += mine
                v, by = v - mine, "controller-manager (background)"
            if v:
                rows[(verb, resname, by)] += v
        return rows

    def report_writes(wr: dict) -> list[str]:
        k, k2 = wr["k"], wr["k2"]
        ours = sum(v for c, v in wr["new_events"].items() if c in OPERATOR_COMPONENTS)
        q_ours = sum(v for c, v in wr["q_events"].items() if c in OPERATOR_COMPONENTS)
        columns = [attributed(wr["jobs"], ours), attributed(wr["q_jobs"], q_ours),
                   attributed(wr["batch"], wr["batch_events"].get("job-controller", 0), peer=True),
                   attributed(wr["bare"], 0), attributed(wr["idle"], 0)]
        per = (k, k2, k, k, k)
        keys = sorted(set().union(*columns), key=lambda r: (r[2], r[1], r[0]))
        out = [
            "#### b. API writes per job",
            "",
            f"Writes per job = count / jobs, from `apiserver_request_total` (all response codes). b1: {k} Jobs at "
            f"once, each Pod exiting at once ({dict(wr['phases'])}; {wr['queued']} marked Queued). b2: {k2} Jobs at "
            f"once, each Pod running 3 s, {CAP} slots ({dict(wr['q_phases'])}; {wr['q_queued']} marked Queued). "
            f"b3: {k} `batch/v1` Jobs at once. Then {k} bare Pods, and an idle window as long as b1 "
            f"({wr['window']:.0f} s). Every one of our Jobs is on a new key (a SessionKey is created: the most a "
            "job writes).",
            "",
            "| verb | resource | b1 per Job | b2 per Job (queued run) | b3 per `batch/v1` Job | per bare Pod | "
            "idle (/K) | made by |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key in keys:
            cells = [col.get(key, 0.0) / n for col, n in zip(columns, per, strict=True)]
            out.append(f"| {key[0]} | {key[1]} | " + " | ".join(f"{c:.2f}" for c in cells) + f" | {key[2]} |")

        def total(col: dict, n: int, by: tuple[str, ...]) -> float:
            return sum(v for key, v in col.items() if key[2] in by) / n

        b1 = total(columns[0], k, ("operator",))
        b2 = total(columns[1], k2, ("operator",))
        plain, per_queued = split_queued(b1 * k, k, wr["queued"], b2 * k2, k2, wr["q_queued"])
        worst = max(plain, per_queued)
        controller = total(columns[2], k, ("job controller",))
        verdict = "met" if worst <= TARGET_WRITES else f"**missed** by {worst / TARGET_WRITES:.2f}×"
        refused = sum(v for (verb, g, r, sub, code), v in wr["q_jobs"].items()
                      if who(verb, g, r, sub) == "operator" and not code.startswith("2"))
        out += [
            "",
            f"By the operator: {b1:.2f} per Job in b1 ({wr['queued']} of {k} queued), {b2:.2f} per Job in b2 "
            f"({wr['q_queued']} of {k2} queued); solved for the two kinds of Job: **{plain:.2f}** per Job that got a "
            f"slot at once, **{per_queued:.2f}** per queued Job. Target ≤ {TARGET_WRITES:.0f}, queued Jobs "
            f"included: {verdict}. By Kubernetes' Job controller for a `batch/v1` Job: **{controller:.2f}** "
            f"(ours / the peer's: {plain / controller:.2f}× without a queue, {per_queued / controller:.2f}× queued). "
            f"Operator writes the "
            f"apiserver refused in b2: {refused}. Events that appeared, by reporting component: b1 "
            f"{dict(wr['new_events'])}, b2 {dict(wr['q_events'])}, b3 {dict(wr['batch_events'])}.",
            "",
        ]
        return out

    def split_queued(w1: float, n1: int, q1: int, w2: float, n2: int, q2: int) -> tuple[float, float]:
        """Writes per Job that got a slot at once and per queued Job, from two runs' operator writes (``w``), Jobs
        (``n``) and queued Jobs (``q``): ``w = plain·(n − q) + queued·q`` for each run, solved. If both runs have
        the same share of queued Jobs the system has no single answer; then the queued cost is reported as
        unknown."""
        det = (n1 - q1) * q2 - (n2 - q2) * q1
        if det == 0:
            return (w1 / n1 if q1 == 0 else float("nan")), float("nan")
        return (w1 * q2 - w2 * q1) / det, ((n1 - q1) * w2 - (n2 - q2) * w1) / det

    def report_burst(bursts: dict, rss: dict) -> list[str]:
        burst, batch, bare = bursts["jobs"], bursts["batch"], bursts.get("bare")
        hwm = burst["hwm"]
        lost = burst["n"] - sum(v for p, v in burst["phases"].items() if p in TERMINAL)
        ratio = burst["drain"] / batch["drain"]
        rows = [
            f"| {burst['n']} of our Jobs, maxConcurrentJobs {CAP} (all POSTed at once) | {dict(burst['phases'])} | "
            f"{fmt_seconds(burst['drain'])} | {burst['n'] / burst['drain']:.2f} |",
            f"| {batch['n']} `batch/v1` Jobs, ≤ {CAP} unfinished (the script holds them) | {dict(batch['phases'])} | "
            f"{fmt_seconds(batch['drain'])} | {batch['n'] / batch['drain']:.2f} |",
        ]
        if bare is not None:
            rows.append(f"| {bare['n']} bare Pods, ≤ {CAP} unfinished (context) | all | {fmt_seconds(bare['drain'])} | "
                        f"{bare['n'] / bare['drain']:.2f} |")
        return [
            "#### c. Burst",
            "",
            "| Run | terminal | drain | jobs/s |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Drain, ours / `batch/v1`: **{ratio:.2f}×** (target ≤ 1: {'met' if ratio <= 1 else '**missed**'})"
            + (f"; ours / bare Pods {burst['drain'] / bare['drain']:.2f}×" if bare is not None else "")
            + f". Lost: {lost} (each of the {burst['n']} read back; {burst['listed']} Jobs in the namespace). "
            f"All {burst['n']} POSTs took {fmt_seconds(burst['created'])}. The operator's CPU time over the burst: "
            f"{burst['cpu']:.1f} s, {burst['cpu'] / burst['n'] * 1e3:.0f} ms per Job (user + system, all threads).",
            "",
            f"Operator peak RSS (VmHWM of `pidispatch operator`, pid {rss['pid']}): **{mib(hwm)}** after the burst "
            f"({mib(rss['hwm_start'])} before any benchmark, {mib(rss['hwm_before_burst'])} before the burst; "
            f"sampled VmRSS peak during the burst {mib(burst['rss_peak_sampled'])}); target ≤ 150 MiB: "
            f"{'met' if hwm <= TARGET_RSS else f'**missed** by {hwm / TARGET_RSS:.2f}×'} "
            f"({hwm / TARGET_RSS:.2f}× of the target).",
            "",
        ]

    def batch_phases(kube: Kube, ns: str, names: list[str]) -> collections.Counter:
        """Complete / Failed / unfinished, per batch/v1 Job, from a fresh list."""
        by_name = {j["metadata"]["name"]: j for j in kube.list(f"/apis/batch/v1/namespaces/{ns}/jobs")}
        out: collections.Counter = collections.Counter()
        for name in names:
            status = by_name.get(name, {}).get("status") or {}
            conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
            out["Complete" if conds.get("Complete") == "True" else "Failed" if conds.get("Failed") == "True"
                else "missing" if name not in by_name else "unfinished"] += 1
        return out

    def main(argv: list[str] | None = None) -> int:
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--quick", action="store_true", help="smoke run: 6 triples, K=5, burst of 40")
        parser.add_argument("--curve", help="write the burst drain curves (seconds, jobs finished) as CSV here")
        parser.add_argument("--svg", help="write the burst drain curves as an SVG here (e.g. docs/bench-drain.svg)")
        parser.add_argument("--from-csv", help=argparse.SUPPRESS)
        parser.add_argument("--only", default="abdc", help="which parts to run (default abdc: d runs before c)")
        parser.add_argument("--triples", type=int, help="how many latency triples (default 30; 6 with --quick)")
        parser.add_argument("--minimal-peer", action="store_true",
                            help="give the batch/v1 and bare Pods a minimal spec instead of our Job Pod's (the "
                                 "method before 2026-12-03)")
        parser.add_argument("--no-bare-burst", action="store_true", help="skip the bare-Pod burst (context only)")
        args = parser.parse_args(argv)
        if args.from_csv and args.svg:  # redraw the picture from a saved --curve file
            curves: dict[str, list[float]] = {}
            for line in Path(args.from_csv).read_text().splitlines()[1:]:
                side, t, _ = line.split(",")
                curves.setdefault(CURVE_LABELS.get(side, side), []).append(float(t))
            Path(args.svg).write_text(drain_svg(curves, len(next(iter(curves.values()))), CAP))
            return 0
        pairs, k, n = (6, 5, 40) if args.quick else (30, 20, 500)
        pairs = args.triples or pairs
        tmp = Path(tempfile.mkdtemp(prefix="pidispatch-bench-op-"))
        info = machine(tmp)
        ticks = cpu_times()
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
            batch_ns = fresh_namespace(kube, "bench-batch")
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
            batch_pods = Watcher(cluster.kube(), f"/api/v1/namespaces/{batch_ns}/pods", pod_terminal, label=BATCH_LABEL)
            jobs = Watcher(cluster.kube(), release.path("jobs"), job_terminal)
            batch_jobs = Watcher(cluster.kube(), f"/apis/batch/v1/namespaces/{batch_ns}/jobs", batch_terminal)
            watches = (pods, bare, batch_pods, jobs, batch_jobs)
            for w in watches:
                w.start()
                w.ready.wait(30)
            sides = Sides(release, bare_ns, batch_ns, pods, bare, batch_pods, jobs, batch_jobs)
            issues = iter(range(1000, 10**9))
            if not args.minimal_peer:
                progress("the peers' Pod template: the spec of one of our Job Pods")
                capture_template(release, pods, next(issues))
            lat = wr = bursts = None
            if "a" in args.only:
                progress(f"a. latency: {pairs} interleaved triples (and one warm-up)")
                lat = bench_latency(sides, pairs, issues)
            if "b" in args.only:
                wr = bench_writes(sides, k, issues)
            ops = None
            if "d" in args.only and shutil.which("strace") is None:
                progress("d. skipped: strace is not installed (Debian's strace package)")
            elif "d" in args.only:
                ops = bench_store_ops(sides, pid, k, issues)
            if "c" in args.only:
                progress("c. clearing the baselines' Pods from the kubelet before the bursts")
                clear_namespace(kube, batch_ns, batch=True)
                clear_namespace(kube, bare_ns, batch=False)
                rss["hwm_before_burst"] = proc_status(pid, "VmHWM")
                bursts = {}
                batch = bench_burst_capped(
                    "batch/v1 Jobs",
                    lambda name: kube.create(f"/apis/batch/v1/namespaces/{batch_ns}/jobs", batch_job(name)),
                    batch_jobs, n, "bj")
                batch["phases"] = batch_phases(kube, batch_ns, batch["names"])
                bursts["batch"] = batch
                clear_namespace(kube, batch_ns, batch=True)
                bursts["jobs"] = bench_burst_jobs(release, jobs, n, issues, sampler)
                if not args.no_bare_burst:
                    bursts["bare"] = bench_burst_capped(
                        "bare Pods", lambda name: kube.create(f"/api/v1/namespaces/{bare_ns}/pods", bare_pod(name)),
                        bare, n, "bb")
                if args.curve:
                    with open(args.curve, "w") as f:
                        f.write("side,seconds,finished\n")
                        for side, run in bursts.items():
                            f.writelines(f"{side},{t:.3f},{i}\n" for i, t in enumerate(run["curve"], 1))
                if args.svg:
                    Path(args.svg).write_text(
                        drain_svg({CURVE_LABELS[side]: run["curve"] for side, run in bursts.items()}, n, CAP))
            stolen = stolen_since(ticks)
            at_end = load_average() + (f"; {stolen} during the run" if stolen else "")
            print(report(args, info, lat, wr, bursts, rss, at_end, ops))
            for w in watches:
                w.stopped.set()
        finally:
            progress("stopping the control plane")
            cluster.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        return 0

    CURVE_LABELS = {"jobs": "our Jobs", "batch": "batch/v1 Jobs (peer)", "bare": "bare Pods (context)"}

    if __name__ == "__main__":
        sys.exit(main())
