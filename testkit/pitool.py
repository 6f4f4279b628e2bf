"""The real pi CLI the tests run: installed by ``make pi`` from ``e2e/pi/package-lock.json``.

``pi_binary()`` is its path; ``run_pi`` runs it the way the tests must (docs/pi-behaviour.md#running-pi-in-tests):
stdin ``/dev/null`` (pi reads a non-TTY stdin to EOF, so an open pipe hangs it), and an isolated
``PI_CODING_AGENT_DIR`` and ``HOME`` with ``PI_OFFLINE=1``, so a developer's ``~/.pi`` and real API-key
variables never take part.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

PI_DIR = Path(__file__).resolve().parents[1] / "e2e" / "pi"
PACKAGE = "@mariozechner/pi-coding-agent"


def pinned_version() -> str:
    """The pi version ``e2e/pi/package.json`` pins."""
    return json.loads((PI_DIR / "package.json").read_text())["dependencies"][PACKAGE]


def installed_version() -> str | None:
    """The version of the installed package, read by file path (pi's ``exports`` map forbids ``require``)."""
    manifest = PI_DIR / "node_modules" / PACKAGE / "package.json"
    return json.loads(manifest.read_text())["version"] if manifest.exists() else None


def pi_binary() -> Path:
    """The path of the pinned pi; a clear error when it is missing or another version."""
    binary = PI_DIR / "node_modules" / ".bin" / "pi"
    want = pinned_version()
    if not os.access(binary, os.X_OK):
        raise FileNotFoundError(f"pi {want} is not installed at {binary}: run `make pi` "
                                "(npm ci of e2e/pi; needs Node.js >= 20.6)")
    got = installed_version()
    if got != want:
        raise RuntimeError(f"{binary} is pi {got}, but e2e/pi/package.json pins {want}: run `make pi`")
    return binary


def pi_env(agent_dir: str | os.PathLike[str], home: str | os.PathLike[str],
           extra: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for pi with its agent dir and HOME isolated, offline, and no provider keys inherited."""
    keep = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    Path(home).mkdir(parents=True, exist_ok=True)
    env.update({"PI_CODING_AGENT_DIR": str(agent_dir), "HOME": str(home), "PI_OFFLINE": "1"})
    env.update(extra or {})
    return env


def run_pi(*args: str, agent_dir: str | os.PathLike[str], home: str | os.PathLike[str],
           cwd: str | os.PathLike[str], timeout: float = 60.0,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``pi ARGS`` with stdin ``/dev/null`` in an isolated environment; output captured as text."""
    return subprocess.run([str(pi_binary()), *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          cwd=cwd, env=pi_env(agent_dir, home, env), timeout=timeout)
