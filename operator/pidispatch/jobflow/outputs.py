"""``status.outputs``: what a job left on the forge, read back at its end (docs/workspace.md#what-a-job-records).

The runner's report names the commit the job pushed (``workspace.pushed``) and the Pod's ``PI_CHECKOUT`` the
branch it may push to; the agent controls the Pod, so both are only where to look, never what is recorded.
With the operator's own credential, one GET lists the pull requests whose head is that branch of the repository;
when the newest one's head is the pushed commit, that answer confirms the branch's tip as well, otherwise a second
GET reads the branch's ref. So at most two GETs per ended job, none when it pushed nothing, and none without a
forge client (no credentials of the operator's own): then the Job has no outputs, rather than the agent's word.
Nothing here writes: the outputs ride the Job's one end-of-job status write (``summarize.Ended``).
"""

from __future__ import annotations

import logging
from typing import Any

from pidispatch.api.models import JobOutputs, JobPullRequest
from pidispatch.contract import is_commit
from pidispatch.forge.checkout import Unresolvable, ref_commit
from pidispatch.forge.github import Forge, GitHubError

log = logging.getLogger("pidispatch.operator")

UNCONFIRMED_LIMIT = 300


def read_outputs(forge: Forge | None, repository: str | None, branch: str | None,
                 pushed: str | None) -> JobOutputs | None:
    """The job's outputs as the forge confirms them; ``None`` (no outputs) without a forge client, a branch or a
    reported push. A push the forge does not confirm is ``unconfirmed`` with why, and nothing else."""
    if forge is None or repository is None or not branch or not is_commit(pushed):
        return None
    try:
        auth = forge.authorization(repository)
        pull = own_pull(forge.client.pulls_with_head(repository, branch, auth), repository, branch, pushed)
        tip = pull_head(pull)
        if tip != pushed:
            ref = f"refs/heads/{branch}"
            tip = ref_commit(forge.client.git_ref(repository, f"heads/{branch}", auth), ref)
    except GitHubError as exc:
        if exc.status == 404:
            return JobOutputs(unconfirmed=f"The branch {branch} is not on the forge (deleted since the push?)."
                              [:UNCONFIRMED_LIMIT])
        log.warning("reading a job's outputs from the forge failed: %s", exc)
        return JobOutputs(unconfirmed=f"The forge could not be read: {exc}"[:UNCONFIRMED_LIMIT])
    except Unresolvable as exc:
        return JobOutputs(unconfirmed=f"The forge's answer was not understood: {exc}"[:UNCONFIRMED_LIMIT])
    if tip != pushed:
        return JobOutputs(unconfirmed=f"The tip of {branch} on the forge is another commit than the one the job "
                                      "reported pushing (the branch moved on since, or the report is wrong)."
                          [:UNCONFIRMED_LIMIT])
    return JobOutputs(branch=branch, commit=pushed, pullRequest=pull_view(pull))


def own_pull(payload: Any, repository: str, branch: str, pushed: str) -> dict[str, Any] | None:
    """The pull request from ``branch`` of ``repository`` in a listing (newest first): the open one, else a closed
    one only when its head is the pushed commit (a pull request merged or closed before this push is not this
    job's). The head's repository is checked, not trusted to the query: a fork's branch of the same name is not it."""
    mine = [p for p in payload if isinstance(p, dict) and _head(p).get("ref") == branch
            and isinstance(_head(p).get("repo"), dict) and _head(p)["repo"].get("full_name") == repository] \
        if isinstance(payload, list) else []
    return next((p for p in mine if p.get("state") == "open"),
                next((p for p in mine if pull_head(p) == pushed), None))


def _head(pull: dict[str, Any]) -> dict[str, Any]:
    head = pull.get("head")
    return head if isinstance(head, dict) else {}


def pull_head(pull: dict[str, Any] | None) -> str | None:
    sha = _head(pull).get("sha") if pull is not None else None
    return sha if is_commit(sha) else None


def pull_view(pull: dict[str, Any] | None) -> JobPullRequest | None:
    """``outputs.pullRequest`` from the forge's answer (number and web page), ``None`` for none or a malformed one."""
    if pull is None:
        return None
    number, url = pull.get("number"), pull.get("html_url")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1 or not isinstance(url, str) \
            or not url.startswith(("https://", "http://")) or len(url) > 500:
        return None
    return JobPullRequest(number=number, url=url)
