"""The job's forge token: minted for an App into a per-job Secret, or the deployment's Secret by reference
(docs/architecture.md#pod).

The token reaches the Pod only by ``secretKeyRef``. An App installation token lives an hour and is not refreshed
inside the Pod (git and gh read ``GH_TOKEN`` once, from the environment). So the run of an App-token job is capped
below the token's life (:func:`token_capped_deadline`): the kubelet stops it before git or gh would meet a 401,
and an Event on the Job says the timeout was cut and why (``pod.py``).
"""

from __future__ import annotations

import time

from pidispatch.api.models import TriggerSpec
from pidispatch.api.views import JobView
from pidispatch.contract.digests import digest_of
from pidispatch.events import emit
from pidispatch.forge.authsource import trigger_auth_source
from pidispatch.forge.credentials import JobToken, Mint, SecretRef, job_credential
from pidispatch.forge.github import Forge, GitHubError
from pidispatch.jobflow.cluster import Cluster
from pidispatch.kubeapi import ApiError
from pidispatch.manifests.pod import TOKEN_SECRET_KEY, job_token_secret, token_secret_name
from pidispatch.settings import OperatorSettings

TOKEN_MARGIN_SECONDS = 300  # the run ends this long before its App token expires (a push in flight, clock skew)


def token_capped_deadline(requested: int | None, token_expires_at: float | None, now: float,
                          start_allowance: int = 0, margin: int = TOKEN_MARGIN_SECONDS
                          ) -> tuple[int | None, str | None]:
    """The Pod's ``activeDeadlineSeconds`` and, when the run timeout had to be cut, the reason in our words.

    ``requested``: ``run.timeoutSeconds`` or the deployment's ``job.timeoutSeconds`` (``None``: no
    timeout). A job with an App token (``token_expires_at``) gets at most the token's remaining life
    less ``margin`` and less ``start_allowance`` (``job.startTimeoutSeconds``: the kubelet counts the
    deadline from the Pod's start, which may come that long after its creation, or the Pod is failed as
    never started), in whole minutes, so the Pods of one deployment get the same deadline whatever the
    second they were created in. Any other job keeps ``requested``.
    """
    if token_expires_at is None:
        return requested, None
    life = max(60, int(token_expires_at - now - margin - start_allowance) // 60 * 60)
    if requested is not None and 0 < requested <= life:
        return requested, None
    asked = f"{requested} s" if requested else "no timeout"
    return life, (f"The run timeout was capped at {life} s (asked for: {asked}): the job's GitHub App installation "
                  f"token expires in {int(token_expires_at - now)} s and is not refreshed, so the run must end "
                  f"{margin} s before it, counting up to {start_allowance} s for the Pod to start "
                  "(job.startTimeoutSeconds). With the App source a run timeout above about 45 minutes (the "
                  "default startTimeoutSeconds) is cut like this; use a pat or gh token for longer runs.")


def job_token(settings: OperatorSettings, cluster: Cluster, forge: Forge | None, job: JobView,
              trigger: TriggerSpec, fork: bool = False) -> JobToken | None:
    """The Secret key the job Pod's ``GH_TOKEN`` comes from; mints and stores one for ``app`` (for a fork's
    pull request, ``fork``, read-only on contents: ``forge/credentials.fork_permissions``).

    The minted token goes only into the per-job Secret (owned by the Job). The operator may create and
    delete Secrets but not read them, so a Secret already there (a restart after creating it, before any
    Pod: ``start.launch`` looks for the Pod first) is replaced by the token just minted: its own token's
    age is unknown, and the run is capped by the expiry of the token the Pod will hold. Raises
    ``GitHubError`` when GitHub refuses or cannot be reached (the caller tells a 4xx, final, from an
    outage, retried).
    """
    source = trigger_auth_source(trigger, settings.store)
    credential = job_credential(source, job.spec.repository if job.spec is not None else "", settings.github, fork)
    if isinstance(credential, SecretRef):
        return JobToken(credential.name, credential.key)
    if not isinstance(credential, Mint):
        return None
    if forge is None:  # unreachable: a Mint needs the App, and the App makes a Forge
        raise GitHubError("POST", "/app/installations/{id}/access_tokens", 400, "no GitHub App client")
    token = forge.mint_job_token(credential.repository, credential.fork)
    name = token_secret_name(job.name, job.uid)
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(token.expires_at))
    secret = job_token_secret(job.name, job.uid, cluster.ns, name, token.value, expires)
    try:
        try:
            cluster.api.create(cluster.secrets(), secret)
        except ApiError as exc:
            if exc.status != 409:
                raise
            cluster.api.delete(f"{cluster.secrets()}/{name}")
            cluster.api.create(cluster.secrets(), secret)
    except ApiError:
        forge.revoke(token)  # not stored
        raise
    emit("job_token_minted", job=job.name, expiresAt=expires, fork=credential.fork)
    return JobToken(name, TOKEN_SECRET_KEY, token.expires_at, digest_of(token.value))
