"""``pidispatch runner`` as a process, the way the job image runs it, with the real pi and the scripted model.

``real_pi_job(tmp)`` gives a ``Job``: the scripted model on loopback, pi's agent dir pointed at it, the
staged ``/session`` and the workspace under ``tmp``; ``Job.run(...)`` starts the runner with only its
environment as input and returns its ``Result`` (exit code, output, termination message). A missing pi
fails the test (it never skips) and says to run ``make pi``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testkit.pitool import pi_binary, pi_env, pinned_version
from testkit.scripted_model import ScriptedModel, write_agent_dir

RUN_TIMEOUT_S = 90


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    termination: str | None

    @property
    def report(self) -> dict[str, Any]:
        assert self.termination is not None, f"no termination message; stderr:\n{self.stderr}"
        return json.loads(self.termination)

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in self.stderr.splitlines():
            if line.startswith("{"):
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict) and event.get("event") == name:
                    found.append(event)
        return found


@dataclass
class Job:
    """One job Pod's world: the scripted model, pi's agent dir, the staged /session and the workspace."""

    model: ScriptedModel
    pi: Path
    tmp: Path

    @property
    def agent(self) -> Path:
        return self.tmp / "agent"

    @property
    def session_file(self) -> Path:
        return self.tmp / "session" / "current.jsonl"

    @property
    def workspace(self) -> Path:
        return self.tmp / "workspace"

    def stage(self, data: bytes) -> Path:
        self.session_file.parent.mkdir(mode=0o700, exist_ok=True)
        self.session_file.write_bytes(data)
        self.session_file.chmod(0o600)
        return self.session_file

    @property
    def termination(self) -> Path:
        return self.tmp / "termination-log"

    def start(self, *, session: bool = True, host_resume: bool | None = None, comment: str = "please fix it",
              extra: dict[str, str] | None = None, stdin: int | None = subprocess.DEVNULL) -> subprocess.Popen[str]:
        termination = self.termination
        termination.unlink(missing_ok=True)
        spec = {"trigger": "fix", "forge": "github", "repository": "octo/repo", "issue": 7, "comment": comment,
                "sender": "alice"}
        env = {"PI_BIN": str(self.pi), "PI_WORKSPACE": str(self.workspace), "PI_TERMINATION_LOG": str(termination),
               "PI_JOB_NAME": "job-1", "PI_JOB_SPEC": json.dumps(spec), "PI_REPOSITORY": "octo/repo",
               "PI_ISSUE": "7", "PI_MODEL": "fake/fake-model", "PI_VERSION": pinned_version()}
        if session:
            env["PI_SESSION_FILE"] = str(self.session_file)
        if host_resume is not None:
            env["PI_SESSION_HOST_RESUME"] = "true" if host_resume else "false"
        env.update(extra or {})
        env = {k: v for k, v in env.items() if v is not None}  # extra={"X": None} unsets X
        return subprocess.Popen([sys.executable, "-m", "pidispatch", "runner"], stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=pi_env(self.agent, self.tmp / "home", env), cwd=self.tmp)

    def finish(self, process: subprocess.Popen[str]) -> Result:
        try:
            out, err = process.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if process.poll() is None:
                process.kill()
        termination = self.termination
        return Result(process.returncode, out, err, termination.read_text() if termination.exists() else None)

    def run(self, **options: Any) -> Result:
        return self.finish(self.start(**options))


@contextmanager
def real_pi_job(tmp_path: Path) -> Iterator[Job]:
    """A ``Job`` under ``tmp_path`` with the pinned pi and a running scripted model; fails without pi."""
    try:
        pi = pi_binary()
    except (FileNotFoundError, RuntimeError) as error:
        pytest.fail(f"{error} — the runner's integration tests need the real pi", pytrace=False)
    with ScriptedModel() as model:
        write_agent_dir(tmp_path / "agent", model.base_url)
        yield Job(model, pi, tmp_path)
