"""The runner's own secrets are out of the agent's reach through ``/proc`` and ptrace
(docs/security.md#the-runners-own-secrets).

The real runner process (``python -m pidispatch runner``) in transfer mode, against the real transfer server over
TLS on loopback, with ``PI_BIN`` a probe (``testkit/procprobe.py``) that runs as pi would: the runner's child, the
same uid. The probe and a child of its own (what pi's bash tool runs) try the runner's ``environ``, ``cmdline``,
``mem`` and ``PTRACE_SEIZE``; none may yield the transfer token. The tests run as root, who passes every one of
these checks, so the runner is started as an unprivileged uid (as in the Pod, where runner and pi share the job's
uid), and the probe inherits it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

import pidispatch
from pidispatch.runner import undumpable
from pidispatch.transfer import protocol
from pidispatch.transfer.token import job_token
from testkit import procprobe
from testkit.transferkit import Server, make_pki

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")

NOBODY = 65534
KEY = b"proc-secrets-key-" + b"k" * 32
CAP = 1024 * 1024
RUN_TIMEOUT_S = 90


@pytest.fixture
def world() -> Iterator[Path]:
    """A directory the unprivileged uid owns (pytest's tmp_path sits under a root-only 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="proc-secrets-", dir="/tmp"))
    path.chmod(0o755)
    if os.getuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def as_job_uid() -> dict[str, Any]:
    """Popen's options that run the child as the job's uid: unprivileged, as in the Pod."""
    if os.getuid() != 0:
        return {}  # already unprivileged: runner and probe share this uid
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def job_python(world: Path) -> tuple[str, dict[str, str]]:
    """An interpreter of this Python version the job's uid can run, and the PYTHONPATH that finds pidispatch and
    the testkit with it: this venv's when it can (a pyenv build under root's 0700 home it cannot), else the
    system's of the same version with this venv's packages."""
    path = os.pathsep.join([str(Path(pidispatch.__file__).parents[1]), str(Path(__file__).parents[2]),
                            sysconfig.get_paths()["purelib"]])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in dict.fromkeys([sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"]):
        try:
            subprocess.run([candidate, "-c", "import pidispatch.runner.main, testkit.procprobe"], check=True,
                           env={"PYTHONPATH": path}, cwd=world, capture_output=True, timeout=60, **as_job_uid())
        except (OSError, subprocess.SubprocessError):
            continue
        return candidate, {"PYTHONPATH": path}
    unavailable(f"no {version} interpreter the unprivileged uid {NOBODY} can run (this one is {sys.executable})")


def unavailable(why: str) -> NoReturn:
    """Skip where this machine cannot run the runner as an unprivileged uid, except under CI (``CI=true``), where
    the machine can, and a skip would hide the test."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI=true: this test must run)")
    pytest.skip(why)


def run_runner(world: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    python, path = job_python(world)
    pi = world / "pi"
    pi.write_text(f"#!/bin/sh\nexec {python} {procprobe.__file__} \"$@\"\n")
    pi.chmod(0o755)
    spec = {"trigger": "fix", "forge": "github", "repository": "octo/repo", "issue": 7, "comment": "fix it",
            "sender": "alice"}
    base = {"PATH": os.environ["PATH"], "HOME": str(world / "home"), "PI_BIN": str(pi),
            "PI_WORKSPACE": str(world / "workspace"), "PI_TERMINATION_LOG": str(world / "termination-log"),
            "PI_JOB_NAME": "job-1", "PI_JOB_SPEC": json.dumps(spec), "PI_REPOSITORY": "octo/repo", "PI_ISSUE": "7",
            "PI_MODEL": "fake/fake-model", "PI_VERSION": procprobe.VERSION, "PROBE_OUT": str(world / "probe.json"),
            "PI_SESSION_FILE": str(world / "session" / "current.jsonl"), "PI_SESSION_HOST_RESUME": "false"}
    try:
        return subprocess.run([python, "-m", "pidispatch", "runner"], env={**base, **path, **env},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=world,
                              timeout=RUN_TIMEOUT_S, **as_job_uid())
    except PermissionError as error:  # root without CAP_SETUID (a restricted container)
        unavailable(f"cannot start the runner as uid {NOBODY}: {error}")


def test_the_agent_cannot_read_the_transfer_token_out_of_the_runner(world: Path) -> None:
    staging = world / "staging"  # the operator's side: root's, as the operator's uid is not the job's
    (staging / (uid := str(uuid.uuid4())) / "session").mkdir(parents=True)
    (staging / uid / "session" / "current.jsonl").write_bytes(b"")
    pki = make_pki(world / "pki", "transfer")
    token = job_token(KEY, uid)
    server = Server(staging, pki, CAP, KEY)
    try:
        done = run_runner(world, {protocol.ENV_URL: server.url(uid), protocol.ENV_TOKEN: token,
                                  protocol.ENV_CA_FILE: str(pki.ca), protocol.ENV_MAX_BYTES: str(CAP)})
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    assert (staging / uid / protocol.MARKER).exists(), "the runner still fetched and handed the session back"
    report = json.loads((world / "probe.json").read_text())
    assert report["uid"] == os.getuid() or report["uid"] == NOBODY
    assert report["uid"] != 0, "the probe must run unprivileged: root passes every check probed here"
    child = report["child"]

    assert token not in json.dumps(report), f"the agent read the transfer token: {json.dumps(report, indent=1)}"
    for who, findings in (("pi", report["runner"]), ("pi's child", child["runner"])):
        # Not only no token: no route into the runner's memory at all (its environ block, its heap).
        for route in ("environ", "mem"):
            assert findings[route]["status"].startswith("refused"), (who, route, findings[route]["status"])
        assert findings["ptrace"]["status"].startswith("refused"), (who, findings["ptrace"])
        assert findings["cmdline"]["status"] == "read"  # world-readable, and holds no secret
    # pi and what it runs hold no copy of their own: not in their environment, nor in pi's memory.
    assert report["self"]["found"] == [] and child["self"]["found"] == []
    assert child["pi"]["environ"]["status"] == "read", "pi itself stays dumpable (execve resets the flag)"
    assert token not in child["pi"]["mem"]["found"]


# --- when prctl cannot be used -------------------------------------------------------------------------


def failing(result: int) -> undumpable.Prctl:
    def prctl(option: int, *_args: int) -> int:
        return result if option == undumpable.PR_SET_DUMPABLE else 1
    return prctl


def test_a_runner_holding_the_transfer_token_refuses_when_it_cannot_become_undumpable() -> None:
    held = {protocol.ENV_TOKEN: "t" * 64}
    refusal = undumpable.protect(held, failing(-1))
    assert refusal is not None and protocol.ENV_TOKEN in refusal and "t" * 64 not in refusal
    assert undumpable.protect(held, failing(0)) is not None, "a flag that did not hold is a failure too"
    assert undumpable.protect({"GH_TOKEN": "pi's own"}, failing(-1)) is None, "nothing runner-only: run on"


def test_the_runner_refuses_before_anything_when_prctl_is_missing(world: Path) -> None:
    """The real entry point in a process of its own (it configures logging), with libc's prctl taken away."""
    termination = world / "termination-log"
    started = world / "pi-started"
    pi = world / "pi"
    pi.write_text(f"#!/bin/sh\ntouch {started}\necho {procprobe.VERSION}\n")
    pi.chmod(0o755)
    missing = ("import sys; import pidispatch.runner.undumpable as u; u._libc_prctl = lambda: None; "
               "from pidispatch.runner.main import main; sys.exit(main())")
    done = subprocess.run([sys.executable, "-c", missing], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          env={"PATH": os.environ["PATH"], protocol.ENV_TOKEN: "t" * 64, "PI_REPOSITORY": "octo/repo",
                               "PI_ISSUE": "7", "PI_TERMINATION_LOG": str(termination),
                               "PI_BIN": str(pi), "PI_VERSION": procprobe.VERSION})
    assert done.returncode == 2, done.stderr
    assert "cannot keep PI_TRANSFER_TOKEN from the agent" in done.stderr and "t" * 64 not in done.stderr + done.stdout
    assert json.loads(termination.read_text())["outcome"] == "refused"
    assert not started.exists()
