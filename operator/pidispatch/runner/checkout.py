"""The workspace: the job's repository cloned at the operator's commit, before pi starts (issue 14).

The clone runs no repository code and the token never leaves the environment:

* what pi reads from its working directory at start is kept from the checkout (``startpaths``): the
  repository's own ``.pi`` (whatever git object it is) for every job, and for a fork's pull request also
  ``.agents`` and the context files; the tree is checked with ``lstat`` after the checkout, and a job whose
  tree still holds one fails before pi starts (``forbidden-path``), as does a same-repository context file
  that resolves outside the workspace;
* a tree larger than the workspace's limit (``PI_WORKSPACE_LIMIT_BYTES``) is not checked out
  (``too-large``): its blob sizes are summed from the fetched tree before a file is written, so a small
  pack that inflates to gigabytes (one zero blob at many paths) cannot fill the node's disk;
* git's hooks are off (``core.hooksPath=/dev/null``), and so are fsmonitor, the ``ext::`` and ``file::``
  transports and submodules; the system and global git configuration are not read for the fetch;
* one commit is fetched, shallow (``--depth=1``), by its id: the commit the operator resolved from the
  forge API, never a branch name that could have moved since;
* the token reaches git only through ``GIT_ASKPASS`` (a script that prints ``$GH_TOKEN`` when git asks),
  never in argv, the remote URL, ``.git/config``, a log line or the report; the same holds for the
  agent's own ``git push`` (a credential helper in ``.git/config`` that reads the variable, not its value),
  and that helper is keyed to the forge's own origin (``credential.<scheme://host[:port]>.helper``): a
  fetch from any other host, or from the forge's host over another scheme, is given no credential.

A commit the forge no longer has (a force-push between the resolution and the fetch) is
``commit-gone``: not retried. A refused token is ``auth-failed``. ``forbidden-path`` and ``too-large`` are
not retried either. Anything else (a network fault, a 5xx) is retried with back-off, then ``failed`` with
git's own last words.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from pidispatch.contract import GIT_USERNAME, is_commit
from pidispatch.runner.startpaths import sparse_patterns, start_path_problem

TOKEN_VARIABLE = "GH_TOKEN"
ATTEMPTS = 4
FIRST_BACKOFF_SECONDS = 2.0
GIT_TIMEOUT_SECONDS = 300
DETAIL_LIMIT = 300

# Set on every git command of the clone (`-c`) and kept in the workspace's .git/config for the agent's.
HARDENED = {
    "core.hooksPath": "/dev/null",
    "core.fsmonitor": "false",
    "protocol.ext.allow": "never",
    "protocol.file.allow": "never",
    "submodule.recurse": "false",
    "fetch.recurseSubmodules": "false",
    "transfer.fsckObjects": "true",
    "advice.detachedHead": "false",
}
# git's words for a commit the server does not have (upload-pack's "not our ref", a missing object).
GONE = ("not our ref", "couldn't find remote ref", "unadvertised object", "no such remote ref",
        "remote error: upload-pack: not our ref", "did not send all necessary objects")
AUTH = ("authentication failed", "invalid username or password", "http basic: access denied",
        "the requested url returned error: 401", "the requested url returned error: 403")
# The agent's push reads the token when git asks, as the clone did: the helper names the variable only.
CREDENTIAL_HELPER = ("!f() { test \"$1\" = get || exit 0; echo username=" + GIT_USERNAME +
                     "; echo \"password=${" + TOKEN_VARIABLE + "}\"; }; f")
ASKPASS = ("#!/bin/sh\n# pi-dispatch: git asks for the user name, then the password; the token stays in the "
           "environment.\ncase \"$1\" in\n  Username*) echo " + GIT_USERNAME + " ;;\n  *) printf '%s\\n' \"${"
           + TOKEN_VARIABLE + "}\" ;;\nesac\n")


class CheckoutError(Exception):
    """The clone did not happen. ``failure`` is the report's closed word; the message is git's own, cut."""

    def __init__(self, failure: str, detail: str) -> None:
        super().__init__(detail)
        self.failure = failure
        self.detail = detail[:DETAIL_LIMIT]


@dataclass(frozen=True)
class FlowCommit:
    """Where a ``run.flow`` is read from: the default branch's tip as the forge API reported it to the operator
    (docs/triggers.md#a-flow-the-repositorys-own-skill), never the commit the job checked out."""

    ref: str
    sha: str


@dataclass(frozen=True)
class CheckoutSpec:
    """``PI_CHECKOUT``: where to clone from, the ref it was read at, the commit, the branch to push to, and for a
    job that runs a flow, the commit the flow is read from."""

    url: str
    ref: str
    sha: str
    branch: str | None  # None: read-only (a fork's pull request): the agent has nowhere to push
    flow: FlowCommit | None = None  # None: the operator named none (a job without a flow)

    @classmethod
    def parse(cls, raw: str) -> CheckoutSpec:
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object with url, ref, sha and branch")
        url, ref, sha, branch = (data.get(k) for k in ("url", "ref", "sha", "branch"))
        if not isinstance(url, str) or not url.startswith(("https://", "http://")) or "@" in url.split("/")[2]:
            raise ValueError("url must be an http(s) URL without credentials")
        if not isinstance(ref, str) or not ref.startswith("refs/"):
            raise ValueError("ref must be a full ref (refs/...)")
        if not is_commit(sha):
            raise ValueError("sha must be a full commit id")
        if branch is not None and not (isinstance(branch, str) and branch and _branch_ok(branch)):
            raise ValueError("branch must be a branch name or null")
        return cls(url, ref, sha, branch, _flow_commit(data.get("flow")))


def _flow_commit(data: object) -> FlowCommit | None:
    if data is None:
        return None
    ref = data.get("ref") if isinstance(data, dict) else None
    sha = data.get("sha") if isinstance(data, dict) else None
    if not isinstance(ref, str) or not ref.startswith("refs/heads/") or not _branch_ok(ref[len("refs/heads/"):]):
        raise ValueError("flow.ref must be a branch's full ref (refs/heads/...)")
    if not is_commit(sha):
        raise ValueError("flow.sha must be a full commit id")
    return FlowCommit(ref, str(sha))


def _branch_ok(name: str) -> bool:
    return (not name.startswith(("-", "/")) and ".." not in name and not name.endswith((".lock", "/", "."))
            and all(c.isprintable() and c not in " ~^:?*[\\" for c in name))


@dataclass(frozen=True)
class Result:
    head: str
    branch: str | None


Run = Callable[[list[str], Mapping[str, str]], subprocess.CompletedProcess[str]]


def _run(argv: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=GIT_TIMEOUT_SECONDS,
                          stdin=subprocess.DEVNULL, check=False)


def agent_git_env(env: Mapping[str, str], workspace: str) -> dict[str, str]:
    """The agent's git (pi's bash tool) trusts the workspace the runner cloned, as the clone's commands do.

    Environment configuration counts as command-line configuration for git, so ``safe.directory`` is
    honoured; entries the Pod's own ``GIT_CONFIG_COUNT`` declares are kept, ours is added after them.
    """
    out = dict(env)
    try:
        n = max(0, int(out.get("GIT_CONFIG_COUNT") or 0))
    except ValueError:
        n = 0
    out.update({"GIT_CONFIG_COUNT": str(n + 1), f"GIT_CONFIG_KEY_{n}": "safe.directory",
                f"GIT_CONFIG_VALUE_{n}": workspace})
    return out


def git_env(env: Mapping[str, str], askpass: str | None) -> dict[str, str]:
    """The environment of the clone's git commands: no prompts, no system or global configuration."""
    out = {k: v for k, v in env.items() if not k.startswith("GIT_CONFIG")}
    out.update({"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_PROTOCOL_FROM_USER": "0", "GIT_ALLOW_PROTOCOL": "https:http"})
    if askpass is not None:
        out["GIT_ASKPASS"] = askpass
    return out


def _hardened_args(workspace: str) -> list[str]:
    # The workspace is an emptyDir the kubelet made (root-owned, the Pod's group), the .git in it ours:
    # git's ownership check would ignore the repository ("not in a git directory") on a real node.
    # safe.directory is honoured only from protected configuration, the command line among it.
    args: list[str] = ["-c", f"safe.directory={workspace}"]
    for key, value in HARDENED.items():
        args += ["-c", f"{key}={value}"]
    return args


def git_argv(workspace: str) -> list[str]:
    """``git`` with the clone's hardening, run in ``workspace`` (for reads of the checkout after the clone)."""
    return ["git", *_hardened_args(workspace), "-C", workspace]


def _classify(stderr: str) -> str | None:
    low = stderr.lower()
    if any(word in low for word in GONE):
        return "commit-gone"
    if any(word in low for word in AUTH):
        return "auth-failed"
    return None


def _last_words(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return " / ".join(lines[-3:])[:DETAIL_LIMIT] if lines else "no message"


def check_out(spec: CheckoutSpec, workspace: str, env: Mapping[str, str], *, run: Run = _run,
              sleep: Callable[[float], None] = time.sleep, attempts: int = ATTEMPTS,
              size_limit: int | None = None, fork: bool = False) -> Result:
    """Clone ``spec`` into ``workspace`` (empty or missing). Raises :class:`CheckoutError`.

    ``size_limit``: the most bytes the checked-out files may take (``None``: no limit). ``fork``: the tree is
    anyone's text (a fork's pull request), as a read-only checkout always is.
    """
    untrusted = fork or spec.branch is None
    os.makedirs(workspace, exist_ok=True)
    if os.listdir(workspace):
        raise CheckoutError("failed", f"the workspace {workspace} is not empty")
    with tempfile.TemporaryDirectory(prefix="pidispatch-git-") as private:
        genv = git_env(env, _askpass(private))
        git = ["git", *_hardened_args(workspace), "-C", workspace]

        def must(*args: str) -> str:
            done = run([*git, *args], genv)
            if done.returncode != 0:
                raise CheckoutError("failed", f"git {args[0]}: {_last_words(done.stderr)}")
            return done.stdout

        must("init", "--quiet")
        for key, value in _workspace_config(spec).items():
            must("config", key, value)
        # What pi reads at start is repository code or trusted text (startpaths): left out of the tree.
        # git counts a left-out path as intentionally absent, so the agent's commits do not delete it.
        must("sparse-checkout", "set", "--no-cone", *sparse_patterns(untrusted))
        _fetch(git, genv, spec.sha, run=run, sleep=sleep, attempts=attempts)
        if size_limit is not None:
            _refuse_a_tree_over(size_limit, must("ls-tree", "-r", "-l", "-z", spec.sha))
        if spec.branch is not None:
            must("checkout", "--quiet", "-B", spec.branch, spec.sha)
        else:
            must("checkout", "--quiet", "--detach", spec.sha)
        head = must("rev-parse", "HEAD").strip()
    if head != spec.sha:
        raise CheckoutError("failed", f"HEAD is {head}, not the resolved commit")
    problem = start_path_problem(workspace, untrusted)
    if problem is not None:
        raise CheckoutError("forbidden-path", problem)
    return Result(head, spec.branch)


def _askpass(private: str) -> str:
    """The ``GIT_ASKPASS`` script in ``private`` (a directory of ours): it prints the token's variable."""
    askpass = os.path.join(private, "askpass")
    with open(askpass, "w", encoding="utf-8") as script:
        script.write(ASKPASS)
    os.chmod(askpass, stat.S_IRWXU)
    return askpass


def _fetch(git: list[str], genv: Mapping[str, str], sha: str, *, run: Run, sleep: Callable[[float], None],
           attempts: int) -> None:
    """One commit, shallow, by its id; a passing fault is retried with back-off. Raises :class:`CheckoutError`."""
    delay = FIRST_BACKOFF_SECONDS
    for attempt in range(1, attempts + 1):
        done = run([*git, "fetch", "--quiet", "--no-tags", "--no-recurse-submodules", "--depth=1", "origin", sha],
                   genv)
        if done.returncode == 0:
            return
        failure = _classify(done.stderr)
        if failure is not None or attempt == attempts:
            raise CheckoutError(failure or "failed", _last_words(done.stderr))
        sleep(delay)
        delay *= 2


def fetch_commit(url: str, sha: str, directory: str, env: Mapping[str, str], *, run: Run = _run,
                 sleep: Callable[[float], None] = time.sleep, attempts: int = ATTEMPTS) -> None:
    """Fetch ``sha`` from ``url`` into a bare repository at ``directory`` (empty or missing), for reading only.

    The flow's commit (``runner/flow.py``): the same hardening, token handling and retries as the workspace's
    fetch, but nothing is checked out and the workspace's own git is not touched. Raises :class:`CheckoutError`.
    """
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if os.listdir(directory):
        raise CheckoutError("failed", f"{directory} is not empty")
    with tempfile.TemporaryDirectory(prefix="pidispatch-git-") as private:
        genv = git_env(env, _askpass(private))
        git = ["git", *_hardened_args(directory), "-C", directory]
        for args in (("init", "--quiet", "--bare"), ("config", "remote.origin.url", url)):
            done = run([*git, *args], genv)
            if done.returncode != 0:
                raise CheckoutError("failed", f"git {args[0]}: {_last_words(done.stderr)}")
        _fetch(git, genv, sha, run=run, sleep=sleep, attempts=attempts)


def tree_bytes(listing: str) -> int:
    """The bytes a checkout of a tree writes: the sum of its blobs' sizes (``git ls-tree -r -l -z``).

    Every path counts, each time it appears: git writes one file per path, so a blob repeated at many paths
    costs its size at each of them. Links are counted by their target's length; submodules are not written.
    """
    total = 0
    for record in listing.split("\0"):
        meta, _, _path = record.partition("\t")
        fields = meta.split()
        if len(fields) == 4 and fields[1] == "blob" and fields[3].isdigit():
            total += int(fields[3])
    return total


def _refuse_a_tree_over(limit: int, listing: str) -> None:
    size = tree_bytes(listing)
    if size > limit:
        raise CheckoutError("too-large", f"the commit's files take {size} bytes, over the workspace's limit of "
                                         f"{limit} bytes")


def _workspace_config(spec: CheckoutSpec) -> dict[str, str]:
    """The workspace's .git/config: the hardening, the remote (no credentials), the branch's upstream."""
    config = dict(HARDENED)
    config["remote.origin.url"] = spec.url
    config[f"credential.{forge_origin(spec.url)}.helper"] = CREDENTIAL_HELPER
    if spec.branch is not None:
        config["remote.origin.fetch"] = f"+refs/heads/{spec.branch}:refs/remotes/origin/{spec.branch}"
        config[f"branch.{spec.branch}.remote"] = "origin"
        config[f"branch.{spec.branch}.merge"] = f"refs/heads/{spec.branch}"
        config["push.default"] = "upstream"
    else:
        # A fork's pull request: the token cannot push there, and nothing may be pushed to the base by mistake.
        config["remote.origin.pushurl"] = "read-only:a-fork-pull-request-cannot-be-pushed-to"
    return config


def forge_origin(url: str) -> str:
    """``scheme://host[:port]`` of the forge's clone URL: the only place git may send the token to.

    git matches ``credential.<url>.*`` on scheme and host (and port), so ``http://`` of the same host, or any
    other host a prompt-injected ``git fetch`` names, gets nothing.
    """
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def final_state(workspace: str, branch: str | None, env: Mapping[str, str], *, run: Run = _run
                ) -> tuple[str | None, str | None]:
    """(HEAD, the commit pushed to the branch during the run or None), read from the workspace only."""
    genv = git_env(env, None)
    git = ["git", *_hardened_args(workspace), "-C", workspace]
    done = run([*git, "rev-parse", "--verify", "--quiet", "HEAD"], genv)
    head = done.stdout.strip() if done.returncode == 0 and is_commit(done.stdout.strip()) else None
    pushed = None
    if branch is not None:
        # The remote-tracking ref is written only by a push (the clone fetched a commit id, not the branch).
        done = run([*git, "rev-parse", "--verify", "--quiet", f"refs/remotes/origin/{branch}"], genv)
        if done.returncode == 0 and is_commit(done.stdout.strip()):
            pushed = done.stdout.strip()
    return head, pushed
