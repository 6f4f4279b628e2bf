#!/usr/bin/env python3
"""One Pod create from the operator's Python client against the same create from client-go, in one run.

Not a test: timings are never assertions. Why it exists: in the Job → Pod latency against Kubernetes'
own Job controller (``bench/operator.py``), most of our time after the Job exists is the Pod's POST
until the Pod is seen, and the Job controller makes that POST from Go (client-go, protobuf bodies)
where the operator makes it from CPython (``pidispatch.kubeapi.Api``, urllib3). This measures that one
step on its own, three ways, on one local control plane (no kubelet, so the Pods stay Pending and
nothing else touches them):

* **ours**: ``Api.create`` of the Pod, the call ``jobflow/pod.py`` makes, in this process;
* **client-go, JSON**: ``bench/podpost/main.go``, the same Pod with a JSON body;
* **client-go, protobuf**: the same with a protobuf body, as kube-controller-manager sends.

The Pod is the operator's own manifest (``manifests.pod.job_pod``: the job container, its env, the
restricted security context, resources, the workspace and session volumes), in a namespace that
enforces the ``restricted`` Pod Security level, as the chart's does. Each side creates blocks of Pods
one at a time, the sides' order rotating from block to block; every create is timed from its start to
its response (the client's whole round trip) and to the moment one shared watch thread in this
process sees the Pod (the same watcher for all three, so its own delay is the same for all; ours runs
in this process, so the watcher shares its interpreter lock with our side only: a bias, if any,
against ours). Reported: medians per side, ratios of medians, and the spread of per-block ratios.

    .venv/bin/python bench/podpost.py                  # 12 blocks of 25 creates per side, ~3 minutes
    .venv/bin/python bench/podpost.py --blocks 4 --per-block 10   # a smoke run

Needs Go (``/usr/local/go/bin``) and the module cache ``make controlplane`` filled; the Go program is
built with the control-plane wrapper module's ``go.mod``, so it needs nothing that build did not fetch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "operator"))
sys.path.insert(0, str(REPO / "bench"))

from _common import Watcher, load_average, machine, machine_line, progress, spread  # noqa: E402

from e2e.framework.cluster import Cluster  # noqa: E402
from e2e.framework.kube import Kube, wait_for  # noqa: E402
from pidispatch.kubeapi import Api  # noqa: E402
from pidispatch.manifests.pod import PodInputs, WorkspaceInputs, job_pod  # noqa: E402

GO_SOURCE = REPO / "bench" / "podpost"
GO_MODFILE = REPO / "e2e" / "controlplane" / "k8s" / "go.mod"
SIDES = ("ours", "client-go, JSON", "client-go, protobuf")
WIRE = {"client-go, JSON": "json", "client-go, protobuf": "protobuf"}
# Ratios reported: ours against client-go with each body, and client-go's two bodies against each other.
PAIRS = (("ours", "client-go, JSON"), ("ours", "client-go, protobuf"), ("client-go, JSON", "client-go, protobuf"))
LABEL = "bench.pi-dispatch.dev/podpost"
PAUSE = 0.02  # between creates, on every side: one create in flight at a time


def build_go(out: Path) -> Path:
    """``go build`` of bench/podpost against the wrapper module's go.mod/go.sum, read-only (they are never changed)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    binary = out / "podpost"
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "local"),
           "GOFLAGS": "-mod=readonly"}
    progress("building bench/podpost (client-go; about 2 minutes on a cold build cache)")
    subprocess.run([go, "build", f"-modfile={GO_MODFILE}", "-o", str(binary), "."], cwd=GO_SOURCE, env=env, check=True)
    return binary


def the_pod(namespace: str) -> dict:
    """The operator's Job Pod for a resumed job on a pull request, with a forge token and a model key."""
    pod = job_pod(PodInputs(
        job_name="podpost", job_uid="00000000-0000-4000-8000-000000000000", namespace=namespace,
        image="local/fakepi:latest", command=["python3", "/opt/fakepi.py"],
        env={"PI_PROMPT": "Address the review comment on the pull request.", "PI_MODEL": "fake/fake-model"},
        staging_claim="pi-dispatch-staging", session_subpath="00000000-0000-4000-8000-000000000000/session",
        host_resume=True, github_token=("podpost-token", "token"), active_deadline_seconds=3600,
        resources={"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        credentials={"ANTHROPIC_API_KEY": ("model-keys", "anthropic")},
        workspace=WorkspaceInputs(checkout={"url": "https://github.com/acme/widgets.git", "ref": "refs/pull/7/head",
                                            "sha": "0" * 40, "branch": "fix-tests"},
                                  subject={"title": "Fix the failing tests", "body": "They fail on main."}),
    ))
    pod["metadata"].pop("ownerReferences")  # no pi-dispatch Job owns these; the garbage collector would remove them
    pod["metadata"]["labels"][LABEL] = "yes"
    return pod


def namespace(kube: Kube, name: str) -> str:
    """A namespace enforcing the ``restricted`` Pod Security level, once its default ServiceAccount exists."""
    kube.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    wait_for(f"ServiceAccount {name}/default",
             lambda: kube.get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default"))
    return name


def python_block(api: Api, namespace: str, pod: dict, prefix: str, n: int, warmup: int) -> list[tuple[str, int, int]]:
    """``Api.create`` of each Pod, as the operator makes it (the body's encoding timed with the POST)."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    out = []
    for i in range(-warmup, n):
        body = json.loads(json.dumps(pod))
        body["metadata"]["name"] = f"{prefix}-{i + warmup}"
        start, t0 = time.time_ns(), time.perf_counter_ns()
        api.create(path, body)
        took = time.perf_counter_ns() - t0
        if i >= 0:
            out.append((body["metadata"]["name"], start, took))
        time.sleep(PAUSE)
    return out


def go_block(binary: Path, cluster: Cluster, namespace: str, pod_file: Path, prefix: str, n: int, warmup: int,
             wire: str) -> list[tuple[str, int, int]]:
    proc = subprocess.run(
        [str(binary), f"-server={cluster.server}", f"-ca={cluster.ca_file}", f"-cert={cluster.pki / 'admin.crt'}",
         f"-key={cluster.pki / 'admin.key'}", f"-namespace={namespace}", f"-pod={pod_file}", f"-prefix={prefix}",
         f"-n={n}", f"-warmup={warmup}", f"-wire={wire}"],
        capture_output=True, text=True, check=True)
    return [(r["name"], r["start_ns"], r["post_ns"]) for r in map(json.loads, proc.stdout.splitlines())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=12, help="blocks per side (default 12)")
    parser.add_argument("--per-block", type=int, default=25, help="timed creates per block (default 25)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed creates at the start of each block (default 3)")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="pidispatch-podpost-"))
    info = machine(tmp)
    try:
        binary = build_go(tmp)
        cluster = Cluster(state_dir=tmp / "cluster")
        progress("starting a local control plane (no kubelet)")
        cluster.start(kubelet=False)
        seen: Watcher | None = None
        try:
            kube = cluster.kube()
            api = Api(cluster.server, ca_file=str(cluster.ca_file), cert_file=str(cluster.pki / "admin.crt"),
                      key_file=str(cluster.pki / "admin.key"))
            seen = Watcher(kube, "/api/v1/pods", clock=time.time_ns, params={"labelSelector": LABEL})
            seen.start()
            if not seen.ready.wait(30):
                raise TimeoutError("the Pod watch did not list within 30s")
            rows: dict[str, list[tuple[int, int]]] = {side: [] for side in SIDES}  # (POST ns, POST → seen ns)
            blocks: dict[str, list[float]] = {side: [] for side in SIDES}  # per-block median of POST → seen
            namespaces = {side: namespace(kube, f"podpost-{i}") for i, side in enumerate(SIDES)}
            pods = {side: the_pod(namespaces[side]) for side in SIDES}
            pod_files = {side: tmp / f"pod-{i}.json" for i, side in enumerate(WIRE)}  # the Go sides read a file
            for side, pod_file in pod_files.items():
                pod_file.write_text(json.dumps(pods[side]))
            for b in range(args.blocks):
                order = SIDES[b % len(SIDES):] + SIDES[: b % len(SIDES)]
                for side in order:
                    prefix = f"b{b}-s{SIDES.index(side)}"
                    if side == "ours":
                        got = python_block(api, namespaces[side], pods[side], prefix, args.per_block, args.warmup)
                    else:
                        got = go_block(binary, cluster, namespaces[side], pod_files[side], prefix, args.per_block,
                                       args.warmup, WIRE[side])
                    to_seen = [int(seen.first_seen(name)) - start for name, start, _ in got]
                    rows[side] += [(took, s) for (_, _, took), s in zip(got, to_seen, strict=True)]
                    blocks[side].append(statistics.median(to_seen))
                progress(f"  block {b + 1}/{args.blocks} done")
        finally:
            if seen is not None:
                seen.stopped.set()  # the watch ends with the apiserver
            cluster.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    info["load_end"] = load_average()
    print(report(rows, blocks, info, args))
    return 0


def report(rows: dict[str, list[tuple[int, int]]], blocks: dict[str, list[float]], info: dict[str, str],
           args: argparse.Namespace) -> str:
    def ms(ns: float) -> str:
        return f"{ns / 1e6:.2f} ms"

    med = {side: (statistics.median(t for t, _ in rows[side]), statistics.median(s for _, s in rows[side]))
           for side in SIDES}
    lines = [
        f"Run: {info['date']} — `.venv/bin/python bench/podpost.py --blocks {args.blocks} --per-block "
        f"{args.per_block}`",
        "",
        machine_line(info) + f" At the end: {info['load_end']}.",
        "",
        "| side | creates | POST → response, median | POST → seen by the watch, median |",
        "|---|---|---|---|",
    ]
    lines += [f"| {side} | {len(rows[side])} | {ms(med[side][0])} | {ms(med[side][1])} |" for side in SIDES]
    lines += ["", "| ratio (POST → seen) | of medians | per block: min / median / max |", "|---|---|---|"]
    for a, b in PAIRS:
        lo, mid, hi = spread([x / y for x, y in zip(blocks[a], blocks[b], strict=True)])
        lines.append(f"| {a} / {b} | {med[a][1] / med[b][1]:.2f}× | {lo:.2f}× / {mid:.2f}× / {hi:.2f}× |")
    lines += ["", "Differences of medians, POST → seen: " + "; ".join(
        f"{a} − {b} {ms(med[a][1] - med[b][1])}" for a, b in PAIRS) + "."]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
