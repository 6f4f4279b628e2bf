"""``run.flow``: the repository's ``.pi/skills/<flow>`` the job runs, read from the default branch's commit.

pi-dispatch's meaning: a flow names a pi skill committed in the target repository (``.pi/skills/<flow>/
SKILL.md``), and the job's prompt is that skill with the event's text as its arguments. pi expands
``/skill:<name> args`` into the skill's body followed by the arguments (docs/pi-behaviour.md#extensions-and-skills), so
the runner starts pi with ``--skill <dir>`` and the prompt ``/skill:<flow> <briefing>``.

A flow is the job's instructions, so it is read from the commit the operator names for it (``PI_CHECKOUT``'s
``flow``): the default branch's tip as the forge API reported it, never the commit the job checked out. A
same-repository pull request's head is its author's text, and ``pi/issue-<n>`` is what earlier jobs (an
agent a comment could have steered) and anyone with push access pushed; neither may rewrite what a
maintainer's Trigger runs (docs/triggers.md#a-flow-the-repositorys-own-skill). When that commit is the
checked-out one (an issue with no branch of its own yet) it is read from the workspace's git; otherwise it
is fetched, by the checkout's hardened fetch, into a private bare repository outside the workspace
(``checkout.fetch_commit``) and never checked out. An operator that names no such commit gets a refusal,
not a fall-back to the head.

The checkout leaves the whole ``.pi`` out of the working tree (``startpaths``: pi would run what it finds
there), so the skill is not read from the workspace's files either. The runner reads the flow's directory
from git's object database at that commit, and writes it to a private directory outside the workspace
(mode 0700), refusing what could make the copy reach anything else:

* a symbolic link or a submodule anywhere in the flow's directory (a link is never followed, never copied);
* more than :data:`MAX_FILES` files or :data:`MAX_BYTES` bytes (a skill is instructions and a few scripts);
* a ``SKILL.md`` that pi would not load as this skill: no frontmatter ``description`` (pi drops such a
  skill, and ``/skill:<flow>`` would reach the model as bare text), or a frontmatter ``name`` other than
  the flow's (pi would register it under that other name).

A fork's pull request never runs a flow: its commit is anyone's text, and a skill is the job's instructions
(the operator refuses such a Job before any Pod; this is the runner's own check of the same rule).
Each refusal is a :class:`FlowError`: the runner exits 2 and pi is never started.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from pidispatch.contract import flow_problem
from pidispatch.runner.checkout import GIT_TIMEOUT_SECONDS, git_argv, git_env

SKILLS_DIR = ".pi/skills"
SKILL_FILE = "SKILL.md"
MAX_FILES = 256
MAX_BYTES = 1024 * 1024
_REGULAR = {"100644": 0o600, "100755": 0o700}


class FlowError(Exception):
    """The flow cannot be run: the message says which file, at which commit, and what to change."""


@dataclass(frozen=True)
class Flow:
    """A flow ready for pi: ``directory`` holds its ``SKILL.md`` (outside the workspace)."""

    name: str
    directory: str

    def prompt(self, briefing: str) -> str:
        """pi's skill invocation: the skill's body, then the briefing as its arguments."""
        return f"/skill:{self.name} {briefing}"


def _git(workspace: str, env: Mapping[str, str], *args: str) -> bytes:
    done = subprocess.run([*git_argv(workspace), *args], env=git_env(env, None), capture_output=True,
                          timeout=GIT_TIMEOUT_SECONDS, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        words = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        raise FlowError(f"git {args[0]} failed: {(words or ['no message'])[-1][:300]}")
    return done.stdout


def _entries(workspace: str, env: Mapping[str, str], sha: str, flow: str) -> list[tuple[str, str, int, str]]:
    """``(mode, object, size, path inside the flow)`` of every entry under the flow's directory at ``sha``."""
    prefix = f"{SKILLS_DIR}/{flow}/"
    listing = _git(workspace, env, "ls-tree", "-r", "-l", "-z", "--full-tree", sha, "--", prefix)
    entries = []
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _, raw_path = record.partition(b"\t")
        mode, _kind, oid, size = meta.decode("ascii").split()
        path = raw_path.decode("utf-8", errors="replace")
        entries.append((mode, oid, int(size) if size.isdigit() else 0, path[len(prefix):]))
    return entries


def _check(entries: list[tuple[str, str, int, str]], flow: str, at: str) -> None:
    where = f"{SKILLS_DIR}/{flow}/"
    if not any(path == SKILL_FILE for _mode, _oid, _size, path in entries):
        raise FlowError(f"the repository has no {where}{SKILL_FILE} at {at}: commit the flow's skill to the "
                        f"repository's default branch (a flow is never read from the branch the job works on), or "
                        f"change the Trigger's run.flow")
    if len(entries) > MAX_FILES:
        raise FlowError(f"{where} holds {len(entries)} files at {at}, more than {MAX_FILES}: a flow is a skill "
                        "(instructions and a few scripts)")
    total = 0
    for mode, _oid, size, path in entries:
        if mode not in _REGULAR:
            what = "a symbolic link" if mode == "120000" else "a submodule" if mode == "160000" else f"mode {mode}"
            raise FlowError(f"{where}{path} is {what} at {at}: a flow's files are copied out of git and never "
                            "followed; make it a regular file")
        if any(part in ("", ".", "..") for part in path.split("/")):
            raise FlowError(f"{where}{path!r} is not a plain relative path at {at}")
        total += size
    if total > MAX_BYTES:
        raise FlowError(f"{where} takes {total} bytes at {at}, more than {MAX_BYTES}")


def _frontmatter_problem(text: str, flow: str) -> str | None:
    """Why pi would not load ``text`` as the skill ``flow``, or ``None``."""
    lines = text.replace("\r\n", "\n").split("\n")
    if not lines or lines[0].strip() != "---" or "---" not in (line.strip() for line in lines[1:]):
        return "it has no frontmatter (a '---' block with name and description)"
    end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    try:
        meta = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as error:
        return f"its frontmatter is not YAML ({str(error).splitlines()[0]})"
    if not isinstance(meta, dict):
        return "its frontmatter is not a mapping"
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        return ("its frontmatter has no description: pi loads no skill without one, and /skill:"
                f"{flow} would reach the model as bare text")
    name = meta.get("name")
    if name is not None and name != flow:
        return f"its frontmatter names the skill {name!r}: a flow's skill is named as its directory ({flow!r})"
    return None


def materialise(workspace: str, sha: str, flow: str, dest: str, env: Mapping[str, str], ref: str | None = None
                ) -> Flow:
    """Copy ``.pi/skills/<flow>`` at ``sha`` out of the git repository at ``workspace`` (the workspace, or the
    private bare repository the flow's commit was fetched into) into ``dest/<flow>``. ``ref``: where ``sha`` was
    read, for the messages. Raises FlowError."""
    problem = flow_problem(flow)
    if problem is not None:
        raise FlowError(problem)
    at = f"{ref} (commit {sha[:12]})" if ref else f"commit {sha[:12]}"
    entries = _entries(workspace, env, sha, flow)
    _check(entries, flow, at)
    root = os.path.join(dest, flow)
    os.makedirs(root, mode=0o700)
    for mode, oid, _size, path in entries:
        data = _git(workspace, env, "cat-file", "blob", oid)
        target = os.path.join(root, *path.split("/"))
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, _REGULAR[mode])
        with os.fdopen(fd, "wb") as out:
            out.write(data)
    with open(os.path.join(root, SKILL_FILE), encoding="utf-8", errors="replace") as skill:
        problem = _frontmatter_problem(skill.read(), flow)
    if problem is not None:
        raise FlowError(f"{SKILLS_DIR}/{flow}/{SKILL_FILE} at {at} is not a skill pi would run: {problem}")
    return Flow(flow, root)
