"""What the workspace tests share: a served repository on the fake forge and a job's git environment.

Real git over smart HTTP (``testkit/gitforge.py`` behind ``testkit/fakegithub_api.py``) with one repository,
``acme/widgets``, whose ``main`` holds ``README.md``; the forge accepts one personal access token.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testkit.fakegithub_api import FakeGitHubAPI
from testkit.gitforge import Repos

REPO = "acme/widgets"
PAT = "github_pat_checkout_0123456789"


@contextmanager
def served_forge(tmp_path: Path) -> Iterator[FakeGitHubAPI]:
    """The fake forge serving :data:`REPO`, accepting :data:`PAT`."""
    repos = Repos(tmp_path / "forge")
    repos.create(REPO, {"README.md": "hello\n"})
    with FakeGitHubAPI(pats={PAT}, repos=repos) as api:
        yield api


def job_env(tmp_path: Path, token: str = PAT) -> dict[str, str]:
    """A job's environment for git: PATH, its own HOME (no user configuration), the token, an author."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ["PATH"], "HOME": str(home), "GH_TOKEN": token,
            "GIT_AUTHOR_NAME": "pi", "GIT_AUTHOR_EMAIL": "pi@example.invalid",
            "GIT_COMMITTER_NAME": "pi", "GIT_COMMITTER_EMAIL": "pi@example.invalid"}
