"""The gateway's forge path with real git (docs/gateway.md#git): clone, fetch and push over TLS through the gateway,
the capability given by ``GIT_ASKPASS``, the job's token added only on the way to the local forge."""

from __future__ import annotations

import http.client
import json
import logging
import os
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.fakegithub_api import fingerprint
from testkit.gateway_forge import OTHER, REPO, TOKEN, ForgeWorld, forge_world, run
from testkit.gitforge import git


@pytest.fixture
def world(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[ForgeWorld]:
    caplog.set_level(logging.DEBUG)
    w = forge_world(tmp_path)
    try:
        yield w
    finally:
        w.stop()


def secrets_absent(world: ForgeWorld, capability: str, *outputs: str, logs: str = "") -> None:
    """The forge never saw the capability, and the job (its git's output, its traces) never saw the token;
    neither is in the gateway's logs."""
    for headers in world.api.headers_seen:
        assert capability not in json.dumps(headers)
    assert capability not in json.dumps(world.api.graphql)
    for output in outputs:
        assert TOKEN not in output
    assert TOKEN not in logs and capability not in logs
    assert all(r.token_sha256 in (None, fingerprint(TOKEN)) for r in world.api.requests)


def test_clone_fetch_and_push_go_through_with_the_jobs_token(world: ForgeWorld, tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    capability = world.capability()
    env = world.env(capability)
    trace = {"GIT_TRACE_CURL": "1", "GIT_TRACE_CURL_NO_DATA": "1"}  # every header git sent and was sent
    work = tmp_path / "work"
    cloned = run(env, "git", "clone", f"{world.gateway.url}/{REPO}.git", str(work), extra=trace)
    assert cloned.returncode == 0, cloned.stderr
    assert (work / "README.md").read_text() == "# widgets\n"
    world.repos.commit(REPO, "main", {"later.txt": "someone pushed\n"}, "Later")
    fetched = run(env, "git", "fetch", "origin", cwd=work, extra=trace)
    assert fetched.returncode == 0, fetched.stderr
    assert run(env, "git", "rev-parse", "origin/main", cwd=work).stdout.strip() == world.repos.tip(REPO, "main")
    (work / "fix.txt").write_text("fixed\n")
    run(env, "git", "add", "fix.txt", cwd=work)
    run(env, "git", "commit", "-qm", "Fix", cwd=work)
    pushed = run(env, "git", "push", "origin", "HEAD:refs/heads/pi/issue-7", cwd=work, extra=trace)
    assert pushed.returncode == 0, pushed.stderr
    assert world.repos.tip(REPO, "pi/issue-7") == run(env, "git", "rev-parse", "HEAD", cwd=work).stdout.strip()
    git_calls = [r for r in world.api.requests if r.auth.startswith("git-")]
    assert {r.auth for r in git_calls} == {"git-pat"} and len(git_calls) >= 5
    secrets_absent(world, capability, cloned.stderr, fetched.stderr, pushed.stderr, logs=caplog.text)


def test_the_same_path_without_dot_git_and_in_another_case_is_the_jobs_repository(world: ForgeWorld,
                                                                                  tmp_path: Path) -> None:
    env = world.env(world.capability())
    cloned = run(env, "git", "clone", f"{world.gateway.url}/ACME/Widgets", str(tmp_path / "w"))
    assert cloned.returncode == 0, cloned.stderr
    assert (tmp_path / "w" / "README.md").is_file()


def test_a_push_of_a_large_pack_streams_through(world: ForgeWorld, tmp_path: Path) -> None:
    """A pack of 24 MiB of incompressible data (git sends it chunked) arrives whole."""
    env = world.env(world.capability())
    work = tmp_path / "w"
    assert run(env, "git", "clone", "-q", f"{world.gateway.url}/{REPO}.git", str(work)).returncode == 0
    (work / "blob.bin").write_bytes(os.urandom(24 * 1024 * 1024))
    run(env, "git", "add", "blob.bin", cwd=work)
    run(env, "git", "commit", "-qm", "Big", cwd=work)
    pushed = run(env, "git", "push", "-q", "origin", "HEAD:refs/heads/big", cwd=work, timeout=300)
    assert pushed.returncode == 0, pushed.stderr
    bare = world.repos.path(REPO)
    assert git("cat-file", "-s", "refs/heads/big:blob.bin", cwd=bare) == str(24 * 1024 * 1024)


def test_a_fork_jobs_push_is_refused_and_git_says_why(world: ForgeWorld, tmp_path: Path) -> None:
    capability = world.capability(fork=True, subject=8)
    env = world.env(capability)
    work = tmp_path / "w"
    cloned = run(env, "git", "clone", f"{world.gateway.url}/{REPO}.git", str(work))
    assert cloned.returncode == 0, cloned.stderr  # a fork's job reads
    (work / "x.txt").write_text("x\n")
    run(env, "git", "add", "x.txt", cwd=work)
    run(env, "git", "commit", "-qm", "X", cwd=work)
    before = list(world.api.requests)
    pushed = run(env, "git", "push", "origin", "HEAD:refs/heads/pi/pr-8", cwd=work)
    assert pushed.returncode != 0
    assert "remote: pi-dispatch gateway: fork-read-only" in pushed.stderr
    assert world.repos.tip(REPO, "pi/pr-8") is None
    assert [r for r in world.api.requests if r not in before and "receive-pack" in r.path] == []
    assert world.gateway.ledger.figures["uid-forge-1"].refusals["fork-read-only"] >= 1


def _post(world: ForgeWorld, path: str, capability: str, body: bytes, query: str = "") -> http.client.HTTPResponse:
    import base64
    context = ssl.create_default_context(cafile=str(world.gateway.ca))
    conn = http.client.HTTPSConnection("127.0.0.1", world.gateway.port, context=context, timeout=30)
    auth = base64.b64encode(f"x:{capability}".encode()).decode()
    conn.request("POST" if body else "GET", path + query, body=body or None,
                 headers={"Authorization": f"Basic {auth}",
                          "Content-Type": "application/x-git-receive-pack-request"})
    return conn.getresponse()


def test_a_fork_jobs_receive_pack_post_is_refused_without_the_advertisement(world: ForgeWorld) -> None:
    """git asks for the advertisement first; a client that skips it and posts a pack is refused all the same."""
    capability = world.capability(fork=True, subject=8)
    answer = _post(world, f"/{REPO}.git/git-receive-pack", capability, b"0000")
    assert answer.status == 403 and answer.getheader("X-Pi-Gateway-Refusal") == "fork-read-only"
    answer = _post(world, f"/{REPO}.git/info/refs", capability, b"", "?service=git-receive-pack")
    assert answer.status == 403 and answer.getheader("X-Pi-Gateway-Refusal") == "fork-read-only"
    assert not [r for r in world.api.requests if "receive-pack" in r.path]


def test_another_repository_is_refused(world: ForgeWorld, tmp_path: Path) -> None:
    env = world.env(world.capability())
    cloned = run(env, "git", "clone", f"{world.gateway.url}/{OTHER}.git", str(tmp_path / "o"))
    assert cloned.returncode != 0
    assert "remote: pi-dispatch gateway: other-repository" in cloned.stderr
    assert not [r for r in world.api.requests if OTHER in r.path]


def test_no_or_a_forged_capability_gets_nothing(world: ForgeWorld, tmp_path: Path) -> None:
    env = world.env(world.capability())
    forged = run({**env, "PI_GATEWAY_TOKEN": world.capability()[:-4] + "AAAA"}, "git", "clone",
                 f"{world.gateway.url}/{REPO}.git", str(tmp_path / "f"))
    assert forged.returncode != 0
    answer = _post(world, f"/{REPO}.git/info/refs", "", b"", "?service=git-upload-pack")
    assert answer.status == 401 and answer.getheader("WWW-Authenticate", "").startswith("Basic")
    assert not [r for r in world.api.requests if r.auth.startswith("git-")]


def test_dumb_http_and_other_services_are_not_forwarded(world: ForgeWorld) -> None:
    capability = world.capability()
    answer = _post(world, f"/{REPO}.git/info/refs", capability, b"", "?service=git-upload-archive")
    assert answer.status == 403 and answer.getheader("X-Pi-Gateway-Refusal") == "unchecked-request"
    answer = _post(world, f"/{REPO}.git/info/refs", capability, b"")
    assert answer.status == 403
    assert not world.api.requests
