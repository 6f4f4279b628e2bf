"""What pi reads from its working directory when it starts, and how a checkout is kept from feeding it (issue 31).

Established from pi 0.73.1's own source (``dist/core/resource-loader.js``, ``settings-manager.js``,
``package-manager.js``, ``skills.js``, ``prompt-templates.js``, ``extensions/loader.js``, ``migrations.js``)
and held by experiment with real pi (``tests/runner/test_workspace_startpaths.py``). At start pi reads, relative to
its working directory:

* ``.pi/`` — ``settings.json`` (``shellPath`` and ``shellCommandPrefix``: a shell of the repository's choosing
  around every bash command the agent runs; ``packages`` pi installs from npm or git), ``SYSTEM.md`` and
  ``APPEND_SYSTEM.md`` (the system prompt itself), ``extensions/`` (code pi runs), ``skills/``, ``prompts/``,
  ``themes/``, ``npm/`` and ``git/`` (installed packages), ``commands/`` (renamed at start by a migration);
* ``.agents/skills/`` — skills, in the working directory and every ancestor up to the git root;
* ``AGENTS.md``, ``AGENTS.MD``, ``CLAUDE.md``, ``CLAUDE.MD`` — context files pi puts into the system prompt as
  trusted text, in the working directory and every ancestor up to ``/`` (the ancestors of ``/workspace`` are
  the image's, not the checkout's).

Not a start path, checked and left alone: ``utils/photon.js`` falls back to ``./photon_rs_bg.wasm`` in the
working directory, but only when pi's own copy under ``node_modules`` is missing (never in an npm install or
the job image), and only when an image is resized.

pi follows symbolic links in all of them (``existsSync``/``readFileSync``), so leaving a *directory* out of
the checkout is not enough: a ``.pi`` that is a link, a file or a submodule is left out the same way, by
sparse-checkout patterns without a trailing slash (which match every kind of entry), and the tree is checked
with ``lstat`` after the checkout.

* ``.pi/`` is never checked out, for any job: nothing in it can be turned off by a flag (``settings.json``
  and the system-prompt files are read whatever the command line says).
* A fork's pull request is anyone's text: none of the paths above is checked out, and pi also gets the flags
  that turn each source off (:data:`UNTRUSTED_FLAGS`).
* A same-repository job keeps its ``AGENTS.md`` and ``.agents/skills`` (they were written by people with
  write access, and they are how a team briefs the agent), but none of them may resolve outside the
  workspace: ``AGENTS.md`` as a link to ``/proc/self/environ`` would put the job's environment, its token
  among it, into the system prompt sent to the model provider.
"""

from __future__ import annotations

import os
import stat

PI_CONFIG_DIR = ".pi"
AGENTS_DIR = ".agents"
CONTEXT_FILES = ("AGENTS.md", "AGENTS.MD", "CLAUDE.md", "CLAUDE.MD")
# What a fork's checkout leaves out: every path pi reads at start.
UNTRUSTED_PATHS = (PI_CONFIG_DIR, AGENTS_DIR, *CONTEXT_FILES)
# pi's flags for each source a fork could still reach: extensions, skills, context files, prompt templates,
# themes. --no-extensions goes to every job (pi-dispatch's own jobs load no extension from the workspace).
UNTRUSTED_FLAGS = ("--no-skills", "--no-context-files", "--no-prompt-templates", "--no-themes")
# How many entries of .agents/ a same-repository check walks before it gives up and refuses.
WALK_LIMIT = 10_000


def left_out(untrusted: bool) -> tuple[str, ...]:
    """The top-level paths the checkout leaves out of the working tree."""
    return UNTRUSTED_PATHS if untrusted else (PI_CONFIG_DIR,)


def sparse_patterns(untrusted: bool) -> tuple[str, ...]:
    """Non-cone sparse-checkout patterns: everything but :func:`left_out`, whatever git object each is.

    No trailing slash: ``!/.pi/`` matches only a directory, so a ``.pi`` symlink was checked out and pi
    followed it; ``!/.pi`` matches the directory, the link, the file and the submodule alike.
    """
    return ("/*", *(f"!/{name}" for name in left_out(untrusted)))


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a file"


def left_out_problem(workspace: str, untrusted: bool) -> str | None:
    """Which path pi reads at start is still in the tree after the checkout left it out, or ``None``."""
    for name in left_out(untrusted):
        try:
            mode = os.lstat(os.path.join(workspace, name)).st_mode
        except FileNotFoundError:
            continue
        return (f"the checkout still holds {name} ({_kind(mode)}), which pi would read at start; "
                "it must be left out of the working tree")
    return None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def escape_problem(workspace: str) -> str | None:
    """Which context file or ``.agents`` entry resolves outside the workspace, or ``None``.

    Links that stay inside the workspace are kept (``CLAUDE.md -> AGENTS.md`` is common). The ``.agents``
    walk follows links that stay inside, so a link to an inside directory that itself links out is found.
    """
    root = os.path.realpath(workspace)
    for name in CONTEXT_FILES:
        path = os.path.join(root, name)
        if os.path.islink(path) and not _inside(os.path.realpath(path), root):
            return f"{name} is a symbolic link that resolves outside the workspace; pi would read it at start"
    start = os.path.join(root, AGENTS_DIR)
    if not os.path.lexists(start):
        return None
    pending, seen, walked = [AGENTS_DIR], set(), 0
    while pending:
        relative = pending.pop()
        real = os.path.realpath(os.path.join(root, relative))
        if not _inside(real, root):
            return f"{relative} resolves outside the workspace; pi would read it at start"
        walked += 1
        if walked > WALK_LIMIT:
            return f"{AGENTS_DIR} holds more than {WALK_LIMIT} entries; pi's skills are not checked that deep"
        if real in seen or not os.path.isdir(real):
            continue
        seen.add(real)
        try:
            names = os.listdir(real)
        except OSError as error:
            return f"{relative} cannot be read ({error.strerror or error})"
        pending.extend(os.path.join(relative, child) for child in names)
    return None


def start_path_problem(workspace: str, untrusted: bool) -> str | None:
    """Why pi may not start in ``workspace`` as checked out, or ``None`` (the checks after the checkout)."""
    problem = left_out_problem(workspace, untrusted)
    if problem is None and not untrusted:
        problem = escape_problem(workspace)
    return problem
