"""The real node's pieces that need no running node (``e2e/framework/realnode.py`` uses them): its names per state
directory (the bridge, the iptables chain, the ``/24``), the pause image built from Kubernetes' own
``pause.c`` and written as a docker archive, and the two small shell helpers."""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path

from e2e.framework.clusterkit import ClusterError

#: the node subnets: one /24 of it per real node, the first free one from the state directory's tag on
NODE_NETWORKS = ipaddress.IPv4Network("10.244.0.0/16")
CACHE = Path(os.environ.get("PIDISPATCH_CACHE") or Path.home() / ".cache" / "pidispatch")


def say(msg: str) -> None:
    print(f"[realnode] {msg}", file=sys.stderr, flush=True)


def run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return r


# -- the pause image ------------------------------------------------------------------------------------
def pause_image(k8s_version: str) -> tuple[str, Path]:
    """``(name, docker-archive)`` of the sandbox image, built once from the pinned module's pause.c."""
    name = f"localhost/pidispatch/pause:k8s-{k8s_version}"
    archive = CACHE / "images" / f"pause-k8s-{k8s_version}.tar"
    if archive.exists():
        return name, archive
    gomodcache = run("go", "env", "GOMODCACHE").stdout.strip()
    source = Path(gomodcache) / f"k8s.io/kubernetes@v{k8s_version}" / "build" / "pause" / "linux" / "pause.c"
    if not source.exists():  # the module is in the cache once build.sh has built the control plane
        run("go", "mod", "download", f"k8s.io/kubernetes@v{k8s_version}", timeout=600)
    if not shutil.which("gcc"):
        raise ClusterError("the pause image is compiled from Kubernetes' pause.c: apt-get install gcc libc6-dev")
    archive.parent.mkdir(parents=True, exist_ok=True)
    binary = archive.with_suffix(".bin")
    run("gcc", "-Os", "-static", f"-DVERSION=v{k8s_version}-pidispatch", "-o", str(binary), str(source))
    write_docker_archive(archive, name, {"pause": (binary.read_bytes(), 0o755)}, entrypoint=["/pause"],
                         user="65535:65535")
    binary.unlink()
    return name, archive


def write_docker_archive(path: Path, name: str, files: dict[str, tuple[bytes, int]], *,
                         entrypoint: list[str], user: str) -> None:
    """A one-layer image in the ``docker save`` format (what ``ctr images import`` reads)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        for fname, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(fname)
            info.size, info.mode, info.mtime = len(data), mode, 0
            t.addfile(info, io.BytesIO(data))
    layer_bytes = layer.getvalue()
    diff_id = hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Entrypoint": entrypoint, "User": user},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
    }, sort_keys=True).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [name], "Layers": [f"{diff_id}/layer.tar"]}]).encode()
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, mode="w") as t:
        for fname, data in ((f"{diff_id}/layer.tar", layer_bytes), (config_name, config),
                            ("manifest.json", manifest)):
            info = tarfile.TarInfo(fname)
            info.size, info.mtime = len(data), 0
            t.addfile(info, io.BytesIO(data))
    tmp.rename(path)


# -- names of its own, per state directory ----------------------------------------------------------------
def node_tag(state_dir: Path) -> str:
    """Eight hex digits of the state directory's hash: the bridge, the iptables chain and the cgroup root are
    named after it, so real nodes from two state directories never share one."""
    return hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:8]


def bridge_name(tag: str) -> str:
    """``pidisp<tag>``: 14 characters, within Linux's 15 for an interface name."""
    return f"pidisp{tag}"


def chain_name(tag: str) -> str:
    return f"PIDISP-{tag.upper()}"


def choose_subnet(tag: str, taken: Iterable[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """The node's ``/24`` in ``NODE_NETWORKS``: the tag's own, or the next one overlapping nothing ``taken``
    (the addresses and routes this machine has: another real node's bridge among them)."""
    subnets = list(NODE_NETWORKS.subnets(new_prefix=24))
    taken = list(taken)
    start = int(tag, 16) % len(subnets)
    for i in range(len(subnets)):
        candidate = subnets[(start + i) % len(subnets)]
        if not any(candidate.overlaps(t) for t in taken):
            return candidate
    raise ClusterError(f"every /24 of {NODE_NETWORKS} is in use on this machine: `ip -4 route` says which")


def networks_in_use() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks of this machine's addresses and routes (``ip -4 -o addr``, ``ip -4 route``)."""
    words = run("ip", "-4", "-o", "addr", "show").stdout.split() + [
        line.split()[0] for line in run("ip", "-4", "route", "show").stdout.splitlines() if line.strip()]
    nets = []
    for w in words:
        if "/" in w or w[:1].isdigit():
            try:
                nets.append(ipaddress.IPv4Network(w, strict=False))
            except ValueError:
                pass
    return nets
