"""pi's version read from its package (``runner/pipackage.py``) only where it is the answer `pi --version` gives.

The installations are real files: an npm-shaped prefix (``bin/pi`` linking to the package's ``dist/cli.js``)
whose ``node`` is a stand-in that prints another version, so every case shows which path answered: the
package's version means nothing was started, the stand-in's means `pi --version` ran.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pidispatch.runner.pi import read_pi_version
from pidispatch.runner.pipackage import PI_PACKAGE, package_version
from testkit.pitool import pi_binary

STARTED = "1.0.0"  # what the stand-in node prints: `pi --version` ran
NODE_SCRIPT = b"#!/usr/bin/env node\nconsole.log('pi')\n"


def install(prefix: Path, *, name: str = PI_PACKAGE, version: str = "9.9.9", script: bytes = NODE_SCRIPT,
            node: bool = True) -> dict[str, str]:
    """An npm-shaped pi under ``prefix``; the environment whose PATH finds it (and the stand-in node)."""
    package = prefix / "lib" / "node_modules" / name
    (package / "dist").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": name, "version": version}))
    cli = package / "dist" / "cli.js"
    cli.write_bytes(script)
    cli.chmod(0o755)
    (prefix / "bin").mkdir()
    (prefix / "bin" / "pi").symlink_to(os.path.relpath(cli, prefix / "bin"))
    if node:
        stand_in = prefix / "bin" / "node"
        stand_in.write_text(f"#!/bin/sh\necho {STARTED}\n")
        stand_in.chmod(0o755)
    return {"PATH": f"{prefix / 'bin'}:/bin:/usr/bin" if node else str(prefix / "bin")}


def test_the_known_shape_is_read_from_its_package_without_starting_node(tmp_path: Path) -> None:
    env = install(tmp_path)
    assert package_version("pi", env) == "9.9.9"
    assert read_pi_version("pi", env) == "9.9.9", "the stand-in node would have printed 1.0.0"


@pytest.mark.parametrize(("shape", "extra_env"), [
    ({"name": "@someone/other-agent"}, {}),
    ({"version": "latest"}, {}),
    ({"script": b"#!/bin/sh\necho 1.0.0\n"}, {}),
    ({}, {"PI_PACKAGE_DIR": "/elsewhere"}),
], ids=["another package's manifest", "a version of another shape", "a script that is not run by node",
        "PI_PACKAGE_DIR points pi at another manifest"])
def test_any_other_shape_runs_pi_version(tmp_path: Path, shape: dict[str, object], extra_env: dict[str, str]) -> None:
    env = {**install(tmp_path, **shape), **extra_env}  # type: ignore[arg-type]
    assert package_version("pi", env) is None
    assert read_pi_version("pi", env) == STARTED


def test_a_pi_whose_node_is_missing_is_still_found_before_anything_is_spent(tmp_path: Path) -> None:
    env = install(tmp_path, node=False)
    assert package_version("pi", env) is None
    assert read_pi_version("pi", env) is None, "`pi --version` cannot start: the runner refuses (exit 2)"


def test_a_pi_bin_not_found_is_left_to_pi_version(tmp_path: Path) -> None:
    assert package_version(str(tmp_path / "nowhere" / "pi"), {"PATH": "/usr/bin"}) is None


@pytest.mark.pi
def test_the_real_pi_reads_the_version_pi_version_prints(tmp_path: Path) -> None:
    binary = pi_binary()
    env = {"PATH": f"{binary.parent}:{os.environ['PATH']}", "HOME": str(tmp_path), "PI_OFFLINE": "1"}
    printed = subprocess.run([str(binary), "--version"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             env=env, check=True)
    assert package_version(str(binary), env) == (printed.stdout + printed.stderr).strip().removeprefix("v")
