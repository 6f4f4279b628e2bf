"""The rethread prompts: the Markdown templates beside this package, or a repository's own override.

A repository overrides them by ``.pi/rethread/{pack,unpack,summary}.md`` in the checked-out commit: read from git
by object id (a regular blob, at most 16 KiB, UTF-8), never from the working tree and never executed.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from importlib import resources

from pidispatch.events import emit
from pidispatch.runner.checkout import git_argv, git_env

TEMPLATES = ("pack", "unpack", "summary")
TEMPLATE_MAX_BYTES = 16 * 1024
_PLACEHOLDER = re.compile(r"\{\{([a-z]+)\}\}")
_OVERRIDE_MODES = ("100644", "100755")


def default_template(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.md").read_text(encoding="utf-8")


def repository_template(name: str, workspace: str, commit: str | None, env: Mapping[str, str]) -> str | None:
    """``.pi/rethread/<name>.md`` of ``commit``, read by object id; ``None`` when absent or not a plain file."""
    if commit is None:
        return None
    git = git_argv(workspace)
    genv = git_env(env, None)
    try:
        listed = subprocess.run([*git, "ls-tree", "-z", commit, "--", f".pi/rethread/{name}.md"], env=genv,
                                capture_output=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
        if listed.returncode != 0 or not listed.stdout:
            return None
        meta, _, _path = listed.stdout.rstrip(b"\0").partition(b"\t")
        mode, kind, oid = meta.decode("ascii", "replace").split(" ")
        if kind != "blob" or mode not in _OVERRIDE_MODES or not re.fullmatch(r"[0-9a-f]{40,64}", oid):
            emit("rethread_template_refused", template=name, mode=mode, kind=kind)
            return None  # a link or a submodule is never read
        blob = subprocess.run([*git, "cat-file", "blob", oid], env=genv, capture_output=True, timeout=60,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if blob.returncode != 0 or len(blob.stdout) > TEMPLATE_MAX_BYTES:
        emit("rethread_template_refused", template=name, reason="unreadable or larger than 16 KiB")
        return None
    try:
        text = blob.stdout.decode("utf-8")
    except UnicodeDecodeError:
        return None
    emit("rethread_template_overridden", template=name, blob=oid)
    return text


def template(name: str, workspace: str, commit: str | None, env: Mapping[str, str]) -> str:
    return repository_template(name, workspace, commit, env) or default_template(name)


def fill(text: str, values: Mapping[str, str]) -> str:
    """Each ``{{name}}`` with its value, in one pass (a value is never expanded again); unknown ones stay."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)
