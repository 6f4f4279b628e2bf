"""An environment for a process of ours that must find no cluster: no kubeconfig, no in-cluster variables."""

from __future__ import annotations

import os
from pathlib import Path


def clean_env(tmp_path: Path, **env: str) -> dict[str, str]:
    """No cluster to find: no kubeconfig, no in-cluster service variables, a HOME with nothing in it."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            "KUBECONFIG": str(tmp_path / "no-kubeconfig"), **env}
