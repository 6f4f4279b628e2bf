"""Where the pinned binaries are (kube-apiserver, etcd, helm, the dashboard check, ...): ``e2e/controlplane/build.sh``
builds them once into its cache. The chart tests run the pinned helm, the control-plane tests the rest.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "e2e" / "controlplane" / "build.sh"


def bin_dir(build: bool = True) -> Path:
    """Directory holding the pinned binaries; builds them (cached) when ``build`` is true."""
    if os.environ.get("PIDISPATCH_BIN_DIR"):
        return Path(os.environ["PIDISPATCH_BIN_DIR"])
    args = [str(BUILD_SCRIPT)] + ([] if build else ["--print-bin-dir"])
    out = subprocess.run(args, check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])
