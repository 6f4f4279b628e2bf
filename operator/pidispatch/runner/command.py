"""``run.command``: a command of the job image's own pi extensions, run as the job's whole prompt.

pi-dispatch's meaning: the job's prompt is exactly ``/<command> args`` as the Trigger wrote it (the event's
text never retargets it), the command is one a pi extension registers (``pi.registerCommand``), and the
event reaches the command's handler only as data, in a file the handler reads itself.

Where the extensions come from: never the repository. The runner always starts pi with ``--no-extensions``
and the checkout leaves ``.pi`` out of the working tree; the job image declares a directory of trusted
extensions (``PI_COMMAND_EXTENSIONS_DIR``, the "commands capability"), and the runner names each file there
to pi with ``-e`` (explicit paths load beside ``--no-extensions``). An image without the declaration is
refused by ``load_config`` before anything runs.

What pi 0.73.1 does with it (measured, see ``tests/runner/test_command_runner.py``): in print mode a prompt that
starts with ``/`` is first offered to the extensions' commands (``AgentSession.prompt``); a registered one
runs its handler with the text after the first space as ``args`` and pi exits when the handler returns,
with status 0 even when the handler threw (it prints ``Extension error (command:<name>): ...``, which the
runner watches for and fails the job on).
An unregistered ``/name`` goes to the model as plain text, so the runner asks pi, before the run, which
commands these extensions register (``--mode rpc``, ``get_commands``: the same loader, no model call) and
refuses a command none of them registers. That also refuses a name two extensions register: pi then
knows them only as ``name:1`` and ``name:2``.

The event file is JSON, written 0600 in a private 0700 directory outside the workspace (pi-dispatch uses a
fixed ``/job/event.json``; here its path is in ``PI_EVENT_FILE``), removed after the run. Its text (title,
body, comment) is whoever wrote the issue, comment or pull request: data for the handler, never the prompt.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pidispatch.contract import ENV_COMMAND_EXTENSIONS_DIR, ENV_EVENT_FILE, split_command
from pidispatch.events import emit
from pidispatch.runner.config import Event, RunnerConfig

EXTENSION_SUFFIXES = (".ts", ".js", ".mjs", ".cjs")  # the files pi loads as an extension by themselves
LIST_TIMEOUT_S = 60.0
EVENT_FILE = "event.json"


class CommandError(Exception):
    """The command cannot be run: the message names the directory or command and what to change."""


@dataclass(frozen=True)
class Command:
    """A command ready for pi: its text, the extension files that register it, the event file it reads."""

    text: str
    extensions: tuple[str, ...]
    event_file: str

    @property
    def name(self) -> str:
        return split_command(self.text)[0]

    @property
    def failure(self) -> str:
        """What pi 0.73.1 starts a stderr line with when the handler threw; it still exits 0 (measured)."""
        return f"Extension error (command:{self.name}): "


def extension_files(directory: str, workspace: str) -> tuple[str, ...]:
    """The extension files of the image's directory (regular files with an extension pi loads, sorted): the
    directory must exist outside the workspace and hold at least one."""
    what = f"{ENV_COMMAND_EXTENSIONS_DIR}={directory}"
    real = os.path.realpath(directory)
    root = os.path.realpath(workspace)
    if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
        raise CommandError(f"{what} is inside the workspace {workspace}: the repository's files are never loaded "
                           "as extensions; point it at a directory of the job image")
    try:
        names = sorted(os.listdir(real))
    except OSError as error:
        raise CommandError(f"{what} cannot be read ({error.strerror or error}): the job image declares it runs "
                           "commands but has no such directory; add the extensions to the image there") from None
    files = []
    for name in names:
        path = os.path.join(real, name)
        if name.endswith(EXTENSION_SUFFIXES) and not os.path.islink(path) and os.path.isfile(path):
            files.append(path)
    if not files:
        raise CommandError(f"{what} holds no extension file ({', '.join(EXTENSION_SUFFIXES)}): add the pi extension "
                           "that registers the command to the job image there")
    return tuple(files)


def _response(stdout: str) -> dict[str, Any] | None:
    for line in stdout.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("type") == "response" and data.get("command") == "get_commands":
            return data
    return None


def registered_commands(pi_bin: str, extensions: tuple[str, ...], env: Mapping[str, str], cwd: str) -> set[str]:
    """The command names (as pi invokes them) these extension files register, asked of pi itself: pi loads
    them as the run will and answers ``get_commands`` in RPC mode, without a model call."""
    argv = [pi_bin, "--mode", "rpc", "--no-extensions", "--no-session", "--no-skills", "--no-prompt-templates",
            "--no-context-files"]
    for path in extensions:
        argv += ["-e", path]
    try:
        done = subprocess.run(argv, input='{"id":"commands","type":"get_commands"}\n', capture_output=True,
                              text=True, errors="replace", cwd=cwd, env=dict(env), timeout=LIST_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError) as error:
        raise CommandError(f"pi could not list the commands of {ENV_COMMAND_EXTENSIONS_DIR}'s extensions: "
                           f"{error}") from None
    answer = _response(done.stdout)
    if done.returncode != 0 or answer is None or not answer.get("success"):
        said = (done.stderr.strip().splitlines() or [str((answer or {}).get("error") or "no answer")])[-1][:300]
        raise CommandError(f"pi did not load the extensions of {ENV_COMMAND_EXTENSIONS_DIR} (exit "
                           f"{done.returncode}): {said}; fix the extension in the job image")
    ours = {os.path.realpath(path) for path in extensions}
    names = set()
    for entry in (answer.get("data") or {}).get("commands") or ():
        source = entry.get("sourceInfo") or {}
        if entry.get("source") == "extension" and os.path.realpath(str(source.get("path"))) in ours:
            names.add(str(entry.get("name")))
    return names


def event_document(event: Event, command: str) -> dict[str, Any]:
    """The event as the command's handler reads it: the forge's facts and text (untrusted), and the command."""
    name, args = split_command(command)
    checkout = event.checkout
    return {
        "repository": event.repository,
        "issue": event.issue,
        "pullRequest": event.pull_request,
        "fork": event.fork,  # a fork's pull request: its text and its commit are anyone's
        "sender": event.sender,
        "comment": event.comment,
        "title": event.title,
        "body": event.body,
        "checkout": None if checkout is None else {"ref": checkout.ref, "sha": checkout.sha,
                                                   "branch": checkout.branch},
        "command": {"name": name, "args": args},
    }


def write_event(directory: str, document: Mapping[str, Any]) -> str:
    """Write the event file (0600, never over an existing file or through a link); return its path."""
    path = os.path.join(directory, EVENT_FILE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(document, out, ensure_ascii=False, indent=2)
    return path


@contextmanager
def command_of(config: RunnerConfig, env: Mapping[str, str]) -> Iterator[Command | None]:
    """The Trigger's command, checked against what the image's extensions register, with its event file in a
    private directory (removed after the run); ``None`` without ``PI_COMMAND``. Raises :class:`CommandError`
    (the runner refuses: exit 2, pi never runs the job)."""
    if config.command is None:
        yield None
        return
    # load_config refused a command in a form pi would not run, or without the image's directory
    assert config.command_extensions_dir is not None
    extensions = extension_files(config.command_extensions_dir, config.workspace)
    directory = tempfile.mkdtemp(prefix="pi-event-")  # mode 0700, outside the workspace
    try:
        name = split_command(config.command)[0]
        began = time.monotonic()
        known = registered_commands(config.pi_bin, extensions, env, directory)
        listed_in = round(time.monotonic() - began, 3)
        if name not in known:
            listed = ", ".join(f"/{n}" for n in sorted(known)) or "none"
            raise CommandError(f"no extension in {ENV_COMMAND_EXTENSIONS_DIR}={config.command_extensions_dir} "
                               f"registers the command /{name} (they register: {listed}); pi would send "
                               f"'/{name}' to the model as text. Add the extension to the job image, or change "
                               "the Trigger's run.command")
        path = write_event(directory, event_document(config.event, config.command))
        emit("command_loaded", job=config.job_name, command=name, extensions=len(extensions),
             fork=config.event.fork, listSeconds=listed_in)
        yield Command(config.command, extensions, path)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def command_env(env: Mapping[str, str], command: Command | None) -> dict[str, str]:
    """pi's environment with the event file's path for the command's handler (``PI_EVENT_FILE``)."""
    out = dict(env)
    if command is not None:
        out[ENV_EVENT_FILE] = command.event_file
    return out
