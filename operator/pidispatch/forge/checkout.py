"""Which commit a job's workspace holds, resolved from the forge API (issue 14), never from the payload.

* an issue job: the tip of ``pi/issue-<n>`` when that branch exists, else the default branch's tip;
  the agent works on (and pushes to) ``pi/issue-<n>`` either way;
* a pull request from the same repository: its head commit, on its head branch;
* a fork's pull request: ``refs/pull/<n>/head`` of the base repository, read-only (``branch`` ``None``):
  the job's token cannot push to a fork;
* for a job that runs a flow, also the default branch's tip (:class:`FlowSource`): the flow is read from it,
  never from the commit above.

The pure part lives here (what the API's answers mean); :class:`pidispatch.forge.github.Forge` makes
the calls. A repository, pull request or issue the API says does not exist is :class:`Unresolvable`
(final: the Job fails and is not retried); an outage is a ``GitHubError`` the caller retries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pidispatch.contract import SUBJECT_BODY_LIMIT, SUBJECT_TITLE_LIMIT, is_commit
from pidispatch.forge.head import Head, head_from_pull
from pidispatch.settings import OperatorSettings


class Unresolvable(Exception):
    """The forge answered, and what the job names is not there (or its answer is not what GitHub sends)."""


@dataclass(frozen=True)
class Subject:
    """The issue's or pull request's title and body: text anyone who can open one wrote (untrusted)."""

    title: str
    body: str

    @classmethod
    def of(cls, payload: Any) -> Subject:
        title = payload.get("title") if isinstance(payload, dict) else None
        body = payload.get("body") if isinstance(payload, dict) else None
        return cls(_capped(title, SUBJECT_TITLE_LIMIT), _capped(body, SUBJECT_BODY_LIMIT))

    def as_json(self) -> dict[str, str]:
        return {"title": self.title, "body": self.body}


def _capped(text: Any, limit: int) -> str:
    if not isinstance(text, str):
        return ""
    return text if len(text) <= limit else text[:limit] + "\n[… cut: the text goes on]"


@dataclass(frozen=True)
class FlowSource:
    """Where a job's ``run.flow`` is read from: the default branch's tip, never the checked-out commit.

    A flow is the job's instructions; a pull request's head is its author's text, and ``pi/issue-<n>`` is what
    earlier jobs and anyone with push access pushed (docs/triggers.md#a-flow-the-repositorys-own-skill)."""

    ref: str
    sha: str


@dataclass(frozen=True)
class Checkout:
    """A resolved checkout. ``ref`` says where ``sha`` was read; ``branch`` is where the agent pushes."""

    ref: str
    sha: str
    branch: str | None
    subject: Subject | None  # None: a job with no issue and no pull request (a cron Trigger's)
    head: Head | None = None  # a pull request's head, as the same answer gave it (the session key uses it)
    flow: FlowSource | None = None  # a job with a run.flow: the commit the flow is read from

    def status(self) -> dict[str, str]:
        """``status.checkout`` of the Job."""
        return {"ref": self.ref, "sha": self.sha}

    def env(self, clone_url: str) -> dict[str, Any]:
        """What the runner is told (``PI_CHECKOUT``): no token, ever."""
        env: dict[str, Any] = {"url": clone_url, "ref": self.ref, "sha": self.sha, "branch": self.branch}
        if self.flow is not None:
            env["flow"] = {"ref": self.flow.ref, "sha": self.flow.sha}
        return env


def ref_commit(payload: Any, ref: str) -> str:
    """The commit of ``GET /repos/{o}/{r}/git/ref/{ref}``'s answer."""
    target = payload.get("object") if isinstance(payload, dict) else None
    sha = target.get("sha") if isinstance(target, dict) else None
    if not is_commit(sha) or (isinstance(payload, dict) and payload.get("ref") != ref):
        # GitHub answers a ref that matches nothing exactly with a list of refs it starts: not ours.
        raise Unresolvable(f"the forge's answer for {ref} names no commit")
    return str(sha)


def default_branch(payload: Any) -> str:
    name = payload.get("default_branch") if isinstance(payload, dict) else None
    if not isinstance(name, str) or not name:
        raise Unresolvable("the forge's answer for the repository names no default branch")
    return name


def from_pull(repository: str, number: int, payload: Any) -> Checkout:
    """A pull request's checkout: its head commit; a fork's is read-only through ``refs/pull/<n>/head``."""
    head = head_from_pull(payload)
    sha = ((payload.get("head") or {}) if isinstance(payload, dict) else {}).get("sha")
    if head.failure is not None or not is_commit(sha):
        raise Unresolvable(f"the forge's answer for pull request #{number} names no head commit")
    subject = Subject.of(payload)
    if head.repository == repository and head.ref:
        return Checkout(f"refs/heads/{head.ref}", str(sha), head.ref, subject, head)
    return Checkout(f"refs/pull/{number}/head", str(sha), None, subject, head)


@dataclass(frozen=True)
class Moved:
    """How the workspace's commit relates to the one the conversation last saw (``GET …/compare``)."""

    previous: str
    ahead_by: int | None  # commits in the new checkout that the old one lacks
    behind_by: int | None  # commits of the old one the new checkout lacks (a rebase, a force-push)
    status: str  # GitHub's: ahead, behind, diverged, identical; "unknown" when the forge does not know it

    def as_json(self) -> dict[str, Any]:
        return {"sha": self.previous, "aheadBy": self.ahead_by, "behindBy": self.behind_by, "status": self.status}


def moved(previous: str, payload: Any) -> Moved:
    """The compare answer; anything malformed is ``unknown`` (the envelope then says only old → new)."""
    if not isinstance(payload, dict):
        return Moved(previous, None, None, "unknown")

    def count(name: str) -> int | None:
        value = payload.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    status = payload.get("status")
    return Moved(previous, count("ahead_by"), count("behind_by"),
                 status if status in ("ahead", "behind", "diverged", "identical") else "unknown")


def clone_url(settings: OperatorSettings, repository: str) -> str:
    """``<web URL>/<owner>/<name>.git``: what git fetches from. It never carries a credential. Behind the gateway
    the job fetches and pushes through it (docs/gateway.md#the-wire), so the URL is the gateway's."""
    owner, _, name = repository.partition("/")
    base = settings.gateway.url if settings.gateway is not None else settings.github.web_url
    return f"{base}/{quote(owner, safe='')}/{quote(name, safe='')}.git"
