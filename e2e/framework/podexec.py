"""Exec helper of the test kubelet: run *inside* a private mount namespace.

The kubelet starts ``unshare --mount --propagation private -- python -m e2e.framework.podexec SPEC.json``.
This module bind-mounts every volume at its container path (creating the mount point if needed),
remounts read-only mounts, changes to the working directory (created if missing) and ``exec``s the
container's command with exactly the Pod's environment. The mounts vanish with the process.

SPEC.json: ``{"argv": [...], "env": {...}, "workingDir": "/x",
              "mounts": [{"source": "/host/dir", "target": "/session", "readOnly": false}, ...]}``
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path


def _mount(*args: str, fds: tuple[int, ...] = ()) -> None:
    r = subprocess.run(["mount", *args], capture_output=True, text=True, pass_fds=fds)
    if r.returncode != 0:
        raise SystemExit(f"podexec: mount {' '.join(args)} failed: {r.stderr.strip()}")


def apply_mounts(mounts: list[dict]) -> None:
    # parents before children; read-only remounts after every mount point exists
    ordered = sorted(mounts, key=lambda m: len(Path(m["target"]).parts))
    # Pin every source first: a volume mounted at /tmp would otherwise hide sources that live under
    # /tmp on the host (the kubelet's data directory often does). Mounting /proc/self/fd/N binds what
    # the descriptor holds, whatever now covers its old path.
    pinned = [os.open(m["source"], os.O_PATH | os.O_CLOEXEC) for m in ordered]
    code = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in shadowable_code()}
    try:
        for m, fd in zip(ordered, pinned, strict=True):
            dst = Path(m["target"])
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                dst.mkdir(parents=True, exist_ok=True)
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                if not dst.exists():
                    dst.touch()
            _mount("--no-canonicalize", "--bind", f"/proc/self/fd/{fd}", str(dst), fds=(fd,))
        for m in ordered:
            if m.get("readOnly"):
                _mount("-o", "remount,bind,ro", m["target"])
        restore_shadowed_code(code, [m["target"] for m in ordered])
    finally:
        for fd in [*pinned, *code.values()]:
            os.close(fd)


def shadowable_code() -> list[str]:
    """The project checkout and the interpreter's prefix (the venv), which the process must still see."""
    return sorted({str(Path(__file__).resolve().parents[2]), sys.prefix})


def restore_shadowed_code(code: dict[str, int], targets: list[str]) -> None:
    """Bind the project and its interpreter back where a volume covered them.

    Pods here are host processes, so a volume at ``/tmp`` would hide a checkout under ``/tmp`` (and
    the venv in it) from the very process meant to run it. That is an artefact of this kubelet, not
    of the Pod: the code is re-bound at its own path on top of the volume, and everything else the
    Pod writes under the volume still lands in the volume.
    """
    for path, fd in code.items():
        if any(Path(path).is_relative_to(t) and Path(path) != Path(t) for t in targets):
            Path(path).mkdir(parents=True, exist_ok=True)
            _mount("--no-canonicalize", "--bind", f"/proc/self/fd/{fd}", path, fds=(fd,))


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    apply_mounts(spec.get("mounts") or [])
    wd = spec.get("workingDir") or "/"
    os.makedirs(wd, exist_ok=True)
    os.chdir(wd)
    env = spec["env"]
    argv = spec["argv"]
    exe = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if not exe:
        sys.stderr.write(f"podexec: executable not found in $PATH: {argv[0]!r}\n")
        sys.exit(127)
    try:
        os.execve(exe, argv, env)
    except OSError as e:
        sys.stderr.write(f"podexec: cannot exec {exe}: {e}\n")
        sys.exit(126)


if __name__ == "__main__":
    main()
