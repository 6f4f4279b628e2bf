"""Starting pi: the command line (pure), its environment, its version, and the run itself.

pi is run non-interactively (`-p`) with stdin on /dev/null: in `-p` mode pi reads a non-TTY stdin to
EOF before it starts, so an inherited open pipe would hang it forever (docs/pi-behaviour.md#running-pi-in-tests). Its
stdout and stderr both go to the runner's stderr, so the runner's stdout carries only the report.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType
from typing import IO

from pidispatch.runner.pipackage import package_version
from pidispatch.runner.startpaths import UNTRUSTED_FLAGS
from pidispatch.runner.undumpable import RUNNER_ONLY
from pidispatch.runner.version import VersionError, parse_version_output

VERSION_TIMEOUT_S = 60.0
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RELAY_GRACE_S = 5.0


def pi_command(pi_bin: str, session_file: str | None, model: str | None, prompt: str, *,
               untrusted_workspace: bool = False, skills: tuple[str, ...] = (),
               extensions: tuple[str, ...] = ()) -> list[str]:
    """`pi -p --no-extensions [-e FILE]... [fork flags] [--skill DIR]... (--session FILE | --no-session)
    [--model provider/model] PROMPT`.

    The prompt is the last argument, the message pi answers. The session path is absolute (pi reads
    a name without a slash as a session-id prefix). ``skills``: directories pi loads a skill from explicitly
    (a flow's, copied out of git by ``runner/flow.py``), which pi loads even beside ``--no-skills``.
    ``extensions``: the job image's extension files a command runs from (``runner/command.py``), never the
    repository's.
    """
    # --no-extensions: pi would run extensions it discovers in the working directory's .pi/, which a
    # repository provides (the checkout also leaves .pi out); explicit -e paths would still load.
    command = [pi_bin, "-p", "--no-extensions"]
    for extension in extensions:
        command += ["-e", extension]
    if untrusted_workspace:
        # A fork's pull request: the checkout leaves out every path pi reads at start (startpaths), and pi
        # is told to read none of them too: its AGENTS.md would enter the system prompt as trusted context
        # and its skills as the agent's own, though anyone can write them. The prompt fences the fork's text.
        command += UNTRUSTED_FLAGS
    for skill in skills:
        command += ["--skill", skill]
    command += ["--session", session_file] if session_file is not None else ["--no-session"]
    if model is not None:
        command += ["--model", model]
    command.append(prompt)
    return command


def pi_env(base: Mapping[str, str]) -> dict[str, str]:
    """The environment pi runs with: ours, offline (no version check or telemetry;
    docs/pi-behaviour.md#running-pi-in-tests)."""
    env = dict(base)
    env["PI_OFFLINE"] = "1"
    # The transfer token is the runner's, to hand the session back; pi and what it runs never need it (nor
    # read it out of the runner through /proc: runner/undumpable.py).
    for name in RUNNER_ONLY:
        env.pop(name, None)
    return env


def read_pi_version(pi_bin: str, env: Mapping[str, str]) -> str | None:
    """pi's version: read from its package where pi reads it (``pipackage``: no Node start-up), else by
    running `pi --version` and parsing what it printed; None when that fails or prints no version.

    Raises `VersionError` when the executable cannot be started at all.
    """
    known = package_version(pi_bin, env)
    if known is not None:
        return known
    try:
        done = subprocess.run([pi_bin, "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, env=dict(env), timeout=VERSION_TIMEOUT_S, check=False)
    except FileNotFoundError as error:
        raise VersionError(f"pi not found (PI_BIN={pi_bin}): install pi in the job image or point PI_BIN "
                           "at its executable") from error
    except (OSError, subprocess.SubprocessError) as error:
        raise VersionError(f"cannot run `{pi_bin} --version` (PI_BIN={pi_bin}): {error}") from error
    if done.returncode != 0:
        return None
    return parse_version_output(done.stdout.decode("utf-8", errors="replace"))


@dataclass(frozen=True)
class PiRun:
    """How pi ended: its exit status (128 + n when killed by signal n) and a signal we forwarded, if any."""

    exit_code: int
    signalled: int | None = None
    said: bool = False  # pi wrote a line starting with the watched words to its stderr (``run_pi``'s ``watch``)


def _relay(stream: IO[bytes], watch: bytes, said: list[bool]) -> None:
    """Copy pi's stderr to ours line by line, noting a line that starts with ``watch``."""
    for line in iter(stream.readline, b""):
        os.write(sys.stderr.fileno(), line)
        if line.startswith(watch):
            said.append(True)
    stream.close()


def run_pi(command: list[str], cwd: str, env: Mapping[str, str], *, watch: str | None = None) -> PiRun:
    """Run pi to the end, forwarding SIGTERM/SIGINT to it (the kubelet signals only the runner).

    ``watch``: words pi starts a stderr line with for a failure it does not exit non-zero for (a command's
    handler that threw: ``runner/command.py``); its stderr is then relayed through the runner, and
    ``PiRun.said`` tells whether such a line came."""
    received: list[int] = []
    said: list[bool] = []
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(),
                               stderr=sys.stderr.fileno() if watch is None else subprocess.PIPE, cwd=cwd,
                               env=dict(env))
    relay = None
    if watch is not None:
        assert process.stderr is not None
        relay = threading.Thread(target=_relay, args=(process.stderr, watch.encode(), said), daemon=True)
        relay.start()

    def forward(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        process.send_signal(signum)

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS} if in_main_thread else {}
    try:
        code = process.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if relay is not None:  # a process pi left behind may hold the pipe open: wait for it a little only
        relay.join(RELAY_GRACE_S)
    return PiRun(128 - code if code < 0 else code, received[0] if received else None, bool(said))
