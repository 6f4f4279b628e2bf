"""What a process can take of another's environment through ``/proc`` and ptrace: the agent's view of the runner.

Run as pi (``PI_BIN`` pointing at a script that execs this file): ``--version`` prints ``VERSION``; any other
call probes the parent (the runner) and, from a child of its own (what pi's bash tool runs), the runner again and
pi itself, then writes the findings as JSON to ``$PROBE_OUT``. Each route is tried as an attacker would: read
``environ``, ``cmdline``, every readable region of ``mem`` (located through ``maps``), and ``PTRACE_SEIZE``.
A value found is what follows the ``NAME=`` the probe looks for, as an attacker would cut it out.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import subprocess
import sys
from typing import Any

VERSION = "9.8.7"
NAME = "PI_TRANSFER_" + "TOKEN"  # built, so this file's own text in a probed memory is not a false find
PTRACE_SEIZE = 0x4206
MEM_CAP = 512 * 1024 * 1024


def _refused(error: OSError) -> str:
    return f"refused ({errno.errorcode.get(error.errno or 0, error.errno)})"


def values_in(data: bytes, name: str = NAME) -> list[str]:
    """Each value that follows ``name=`` in ``data``, up to a NUL or a newline."""
    needle, found, at = f"{name}=".encode(), [], 0
    while (at := data.find(needle, at)) >= 0:
        at += len(needle)
        end = min((i for i in (data.find(b"\0", at), data.find(b"\n", at)) if i >= 0), default=len(data))
        found.append(data[at:min(end, at + 256)].decode("utf-8", "replace"))
    return found


def read_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as source:
            data = source.read()
    except OSError as error:
        return {"status": _refused(error), "found": []}
    return {"status": "read", "found": values_in(data)}


def read_mem(pid: int) -> dict[str, Any]:
    """Every readable mapping of ``pid`` read through ``/proc/<pid>/mem``."""
    try:
        mem = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError as error:
        return {"status": _refused(error), "found": []}
    found: list[str] = []
    try:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
                regions = maps.read().splitlines()
        except OSError as error:
            return {"status": f"opened, maps {_refused(error)}", "found": []}
        total = 0
        for line in regions:
            fields = line.split()
            if not fields[1].startswith("r") or fields[-1] in ("[vvar]", "[vsyscall]", "[vvar_vclock]"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if total + end - start > MEM_CAP:
                continue
            try:
                data = os.pread(mem, end - start, start)
            except OSError:
                continue
            total += len(data)
            found += values_in(data)
    finally:
        os.close(mem)
    return {"status": "read", "found": found}


def seize(pid: int) -> dict[str, Any]:
    """``PTRACE_SEIZE``: attached means every byte of ``pid`` is ours. No stop is sent, and the tracee is
    detached when this process exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(PTRACE_SEIZE, pid, None, None) == 0:
        return {"status": "attached", "found": []}
    return {"status": _refused(OSError(ctypes.get_errno(), "")), "found": []}


def probe(pid: int) -> dict[str, Any]:
    """Every route to ``pid``'s environment, as this process."""
    return {"environ": read_file(f"/proc/{pid}/environ"), "cmdline": read_file(f"/proc/{pid}/cmdline"),
            "mem": read_mem(pid), "ptrace": seize(pid)}


def main(argv: list[str]) -> int:
    if "--version" in argv:
        print(VERSION)
        return 0
    if argv[:1] == ["--child"]:  # what pi's bash tool runs: the runner's grandchild
        runner = int(argv[1])
        print(json.dumps({"uid": os.getuid(), "self": read_file("/proc/self/environ"), "runner": probe(runner),
                          "pi": probe(os.getppid())}))
        return 0
    runner = os.getppid()
    report: dict[str, Any] = {"uid": os.getuid(), "runner_pid": runner, "self": read_file("/proc/self/environ"),
                              "runner": probe(runner)}
    child = subprocess.run([sys.executable, __file__, "--child", str(runner)], stdout=subprocess.PIPE,
                           check=True, text=True)
    report["child"] = json.loads(child.stdout)
    with open(os.environ["PROBE_OUT"], "w", encoding="utf-8") as sink:
        json.dump(report, sink, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
