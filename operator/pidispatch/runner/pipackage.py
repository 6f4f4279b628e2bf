"""pi's version read where pi itself reads it: its package's ``package.json``, without starting Node.

`pi --version` costs a whole Node.js start-up (about 2.2 s of a delivery's 5 on the test machine,
docs/benchmarks.md "where a delivery's seconds go") to print one field of a file. pi takes its version
from the first ``package.json`` found walking up from its own script's directory (``dist/config.js``:
``getPackageDir``, unless ``PI_PACKAGE_DIR`` overrides it), so reading that file gives the same answer.

The fast path is taken only when the installation is the one shape we know, and the answer is then the
one `pi --version` would print; anything else returns ``None`` and the caller runs `pi --version`:

* ``PI_BIN`` resolves (PATH, symlinks: npm's ``bin/pi`` links to the package's ``dist/cli.js``) to a
  ``.js`` script whose first line is ``#!/usr/bin/env node``, and ``node`` is on the PATH pi will get
  (so a pi that could not start is still found by `pi --version` before anything is spent);
* ``PI_PACKAGE_DIR`` is unset (pi would read another file);
* the ``package.json`` found is pi's (its ``name``), small, and its ``version`` has the shape we accept.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping

from pidispatch.runner.version import VERSION_SHAPE

PI_PACKAGE = "@mariozechner/pi-coding-agent"
NODE_SHEBANG = b"#!/usr/bin/env node"
PACKAGE_JSON_LIMIT = 1024 * 1024
# pi's script sits in dist/ of its package; a few levels up is plenty, and the walk stays bounded.
MAX_LEVELS = 6


def package_version(pi_bin: str, env: Mapping[str, str]) -> str | None:
    """pi's version from its ``package.json`` when the installation has the known shape, else ``None``."""
    if env.get("PI_PACKAGE_DIR"):
        return None
    search = env.get("PATH")
    found = shutil.which(pi_bin, path=search)
    if found is None:
        return None
    script = os.path.realpath(found)
    if not script.endswith(".js") or not _runs_on_node(script) or shutil.which("node", path=search) is None:
        return None
    package = _package_json(os.path.dirname(script))
    if package is None or package.get("name") != PI_PACKAGE:
        return None
    version = package.get("version")
    return version if isinstance(version, str) and VERSION_SHAPE.fullmatch(version) else None


def _runs_on_node(script: str) -> bool:
    try:
        with open(script, "rb") as f:
            first = f.readline(len(NODE_SHEBANG) + 2)
    except OSError:
        return False
    return first.rstrip(b"\r\n") == NODE_SHEBANG


def _package_json(start: str) -> dict[str, object] | None:
    """The first ``package.json`` walking up from ``start``, as pi's ``getPackageDir`` finds it, parsed."""
    directory = start
    for _ in range(MAX_LEVELS):
        path = os.path.join(directory, "package.json")
        if os.path.exists(path):
            try:
                with open(path, "rb") as f:
                    data = f.read(PACKAGE_JSON_LIMIT + 1)
                parsed = json.loads(data) if len(data) <= PACKAGE_JSON_LIMIT else None
            except (OSError, ValueError):
                return None
            return parsed if isinstance(parsed, dict) else None
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent
    return None
