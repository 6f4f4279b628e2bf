"""Step 2b, checkout: the commit the job's workspace holds, and what changed since its conversation (issue 14).

The operator resolves the commit from the forge API (``forge/checkout.py``), never from the webhook
payload, and hands the runner the clone URL (no credentials in it), the ref, the commit and the branch
to push to, and for a Trigger with ``run.flow`` the default branch's tip the flow is read from; the runner
clones before pi starts. ``status.checkout`` records ``{ref, sha}``. When the
job resumes a conversation whose last commit is not the one checked out (someone else pushed, a
rebase), the runner is told how the two relate, so the envelope can say so.

Without the operator's GitHub client (or with ``job.checkout`` off) there is no checkout: the
workspace stays empty, as before this step existed.
"""

from __future__ import annotations

import json
import logging

from pidispatch.api.models import JobCheckout, JobSpec
from pidispatch.contract import is_commit
from pidispatch.forge.checkout import Checkout, Moved
from pidispatch.forge.github import Forge, GitHubError
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.podview import PodView
from pidispatch.settings import OperatorSettings
from pidispatch.store.keys import issue_branch
from pidispatch.store.staging import HostRecord

log = logging.getLogger("pidispatch.operator")


def wanted(settings: OperatorSettings, forge: Forge | None) -> bool:
    return forge is not None and settings.job_checkout


def resolve(forge: Forge, job_spec: JobSpec, branch: str | None = None, *, flow: bool = False) -> Checkout:
    """The job's checkout (``branch``: a cron Trigger's, for a Job with no issue and no pull request; an issue
    replica's is ``pi/issue-<n>-r<i>``). ``flow``: the Trigger runs a flow, read from the default branch's tip
    (docs/triggers.md#a-flow-the-repositorys-own-skill). Raises ``Unresolvable`` (final) or ``GitHubError`` (an
    outage: retried)."""
    if job_spec.issue is not None and job_spec.replica is not None:
        branch = issue_branch(job_spec.issue, job_spec.replica)
    return forge.checkout(job_spec.repository, job_spec.issue, job_spec.pullRequest, branch, flow=flow)


def previous_commit(cluster: Cluster, forge: Forge, host: HostRecord | None, checkout: Checkout) -> Moved | None:
    """How the checkout relates to the last commit the staged conversation saw, when they differ.

    Only for a job that resumes: a cold start has no memory of the files to correct. A lookup that
    fails leaves the envelope without the counts (``unknown``), never the job without its run.
    """
    if host is None or not host.resume:
        return None
    sk = cluster.sessionkey(host.key)
    last = sk.status.lastCommit.sha if sk is not None and sk.status.lastCommit is not None else None
    if last is None or not is_commit(last) or last == checkout.sha:
        return None
    try:
        return forge.moved(host.repository, last, checkout.sha)
    except GitHubError as exc:
        log.warning("comparing the last commit of SessionKey %s with the checkout failed: %s", host.key, exc)
        return Moved(last, None, None, "unknown")


def checkout_of(pod: PodView | None) -> JobCheckout | None:
    """``status.checkout`` read back from a Pod's ``PI_CHECKOUT`` (a restarted operator finds its Pod)."""
    for value in pod.checkout if pod is not None else ():
        try:
            data = json.loads(value)
        except ValueError:
            return None
        if isinstance(data, dict) and isinstance(data.get("ref"), str) and is_commit(data.get("sha")):
            branch = data.get("branch")
            return JobCheckout(ref=data["ref"], sha=data["sha"],
                               **({"branch": branch} if isinstance(branch, str) and branch else {}))
    return None
