"""The workspace's credential helper hands the token to the forge only (issue 31, item 3).

What git sends is watched on the wire: a second HTTP server on loopback answers every request 401 with a
Basic challenge, as a host fishing for credentials would, and records the ``Authorization`` headers it got.
Before the fix the helper was unscoped (``credential.helper``), so a prompt-injected ``git fetch`` of any
host, over plain ``http://`` too, was answered with ``x-access-token:<GH_TOKEN>``.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pidispatch.runner.checkout import CheckoutSpec, _workspace_config, agent_git_env, check_out, forge_origin
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.gitforge import git
from testkit.workspace import PAT, REPO, served_forge


class Fisher:
    """An HTTP server that challenges every request for Basic credentials and keeps what it was sent."""

    def __init__(self) -> None:
        self.authorizations: list[str | None] = []
        self.paths: list[str] = []
        fisher = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                fisher.paths.append(self.path)
                fisher.authorizations.append(self.headers.get("Authorization"))
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_GET  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fisher() -> Iterator[Fisher]:
    served = Fisher()
    yield served
    served.close()


@pytest.fixture
def forge(tmp_path: Path) -> Iterator[FakeGitHubAPI]:
    with served_forge(tmp_path) as api:
        yield api


def agent_env(tmp_path: Path, workspace: Path) -> dict[str, str]:
    """The environment pi's bash tool gives the agent's git: the job's token is in it."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return agent_git_env({"PATH": os.environ["PATH"], "HOME": str(home), "GH_TOKEN": PAT,
                          "GIT_TERMINAL_PROMPT": "0"}, str(workspace))


def agents_git(workspace: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(workspace), *args], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60, check=False)


def test_a_fetch_from_another_host_is_sent_no_credential(forge: FakeGitHubAPI, fisher: Fisher,
                                                         tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    check_out(CheckoutSpec(f"{forge.web_url}/{REPO}.git", "refs/heads/main", forge.repos.tip(REPO, "main"),
                           "pi/issue-7"), str(ws), {**agent_env(tmp_path, ws)}, sleep=lambda s: None)
    env = agent_env(tmp_path, ws)
    for args in (["fetch", f"http://127.0.0.1:{fisher.port}/upstream/widgets.git"],
                 ["ls-remote", f"http://localhost:{fisher.port}/upstream/widgets.git"],
                 ["pull", f"http://127.0.0.1:{fisher.port}/upstream/widgets.git", "main"]):
        done = agents_git(ws, env, *args)
        assert done.returncode != 0, f"git {args[0]} against a host that only says 401 succeeded?"
    assert fisher.paths, "git did not reach the other host at all: the test would prove nothing"
    assert fisher.authorizations == [None] * len(fisher.paths), "git sent a credential to another host"
    # ... while the forge itself still gets the token: the agent's push lands.
    (ws / "work.txt").write_text("agent's work\n")
    git("add", "work.txt", cwd=ws)
    git("commit", "-qm", "agent", cwd=ws)
    pushed = agents_git(ws, env, "push", "--quiet")
    assert pushed.returncode == 0, pushed.stderr
    assert forge.repos.tip(REPO, "pi/issue-7") == git("rev-parse", "HEAD", cwd=ws)


def test_an_https_forges_host_over_plain_http_is_sent_no_credential(fisher: Fisher, tmp_path: Path) -> None:
    """The forge is https://HOST:PORT; a fetch of http://HOST:PORT (a downgrade) gets nothing."""
    ws = tmp_path / "ws"
    ws.mkdir()
    git("init", "-q", cwd=ws)
    spec = CheckoutSpec(f"https://127.0.0.1:{fisher.port}/{REPO}.git", "refs/heads/main", "a" * 40, "pi/issue-7")
    for key, value in _workspace_config(spec).items():
        git("config", key, value, cwd=ws)
    done = agents_git(ws, agent_env(tmp_path, ws), "fetch", f"http://127.0.0.1:{fisher.port}/{REPO}.git")
    assert done.returncode != 0 and fisher.paths
    assert fisher.authorizations == [None] * len(fisher.paths)


@pytest.mark.parametrize("url,origin", [
    ("https://github.com/acme/widgets.git", "https://github.com"),
    ("https://ghe.example.com:8443/acme/widgets.git", "https://ghe.example.com:8443"),
    ("http://127.0.0.1:3000/acme/widgets.git", "http://127.0.0.1:3000"),
])
def test_the_helper_is_keyed_to_the_forges_origin(url: str, origin: str) -> None:
    assert forge_origin(url) == origin
    config = _workspace_config(CheckoutSpec(url, "refs/heads/main", "a" * 40, "b"))
    assert [k for k in config if k.startswith("credential.")] == [f"credential.{origin}.helper"]
