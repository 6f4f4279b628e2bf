"""Which GitHub token a job Pod gets, decided from the settings and the job's auth source (no I/O).

* ``app``: the operator mints an installation token scoped to the job's repository and puts it in a
  per-job Secret owned by the Job (the garbage collector removes it with the Job); a fork's pull request
  gets it read-only on contents (:func:`fork_permissions`);
* ``pat`` / ``gh``: the job Pod references the existing Secret ``GITHUB_TOKEN_SECRET`` (name/key); the
  operator never reads it;
* anything not configured: no ``GH_TOKEN`` at all, as before this feature.

The job Pod receives the token only as ``GH_TOKEN`` through ``secretKeyRef``: its value is never in the
Pod manifest, the Job's status, an Event or a log line.
"""

from __future__ import annotations

from dataclasses import dataclass

from pidispatch.contract.digests import SecretDigest
from pidispatch.settings import GitHubSettings, permission_levels


@dataclass(frozen=True)
class SecretRef:
    """A key of a Secret in the release namespace."""

    name: str
    key: str


@dataclass(frozen=True)
class Mint:
    """Mint an App installation token for ``repository`` and store it in the per-job Secret; ``fork``: for a
    fork's pull request, narrowed by :func:`fork_permissions`."""

    repository: str
    fork: bool = False


JobCredential = SecretRef | Mint


@dataclass(frozen=True)
class JobToken:
    """The Secret key a job Pod's ``GH_TOKEN`` comes from; ``expires_at`` (epoch seconds) when the token is
    an App installation token minted for this job (it bounds the run), ``None`` for a pat/gh Secret."""

    secret: str
    key: str
    expires_at: float | None = None
    # The minted token's digest (``contract/digests.py``): the operator keeps no value, yet can find it in a transcript.
    digest: SecretDigest | None = None


def job_credential(source: str, repository: str, github: GitHubSettings, fork: bool = False) -> JobCredential | None:
    """What the job Pod's ``GH_TOKEN`` comes from, or ``None`` when this deployment has no such credential."""
    if source == "app":
        return Mint(repository, fork) if github.app_configured else None
    if source in ("pat", "gh") and github.token_secret is not None:
        return SecretRef(*github.token_secret)
    return None


# What a fork's job may still write. Its answer is a comment on the pull request, and GitHub's "Create an
# issue comment" (POST /repos/{o}/{r}/issues/{n}/comments, what `gh pr comment` calls) takes "Issues" write
# *or* "Pull requests" write; on a pull request the latter is enough. So pull_requests keeps its level and
# issues does not: the fork's code can comment on and edit pull requests, never push, write a file,
# change an issue, a status or a workflow of the base repository.
FORK_KEEPS = frozenset({"pull_requests"})


def fork_permissions(configured: dict[str, str]) -> dict[str, str]:
    """A fork job's token permissions: the configured ones, each capped at ``read`` except :data:`FORK_KEEPS`;
    one GitHub has no read level for (``workflows``) is left out, since GitHub refuses a token asked for
    ``workflows: read`` (422) and the fork's job would then get no token at all.

    A fork's pull request is code its author chose, run in the job with the token in its environment
    (a test, a build script, a prompt injection): the token must not be able to write the base repository.
    """
    return {name: level if name in FORK_KEEPS else "read" for name, level in configured.items()
            if name in FORK_KEEPS or "read" in permission_levels(name)}


def repository_name(repository: str) -> str:
    """``owner/name`` → ``name``: what ``repositories`` of an installation-token request takes."""
    return repository.rpartition("/")[2]
