"""Which GitHub credential a job gets: the Trigger's ``run.auth``, else the deployment's source.

Shared by the admission (a Job may not ask for more than its Trigger gives, a resume-armed Trigger may
not hand out the gh login), the start (a fork's token) and the Pod (which Secret it mounts): one
answer, read one way. The receiver (the ``spec.authSource`` it writes) and doctor (its gh checks) read Triggers as
dicts and ask the same two rules, :func:`source_of` and :func:`is_gh_login`, so a Job the receiver made is never
``beyond-trigger`` and doctor never counts a gh Trigger the admission would not refuse.
"""

from __future__ import annotations

from pidispatch.api.models import TriggerSpec
from pidispatch.settings import Settings


def source_of(run_auth: str | None, deployment: str | None) -> str | None:
    """The rule: the Trigger's ``run.auth`` when it names one, else the deployment's source (``None``: the receiver
    was given none, and the Job names none)."""
    return run_auth or deployment


def is_gh_login(source: str | None, deployment: str | None) -> bool:
    """Whether a job under ``source`` gets the deployment's gh login: ``gh``, or ``pat`` on a ``gh`` deployment."""
    return source == "gh" or (source == "pat" and deployment == "gh")


def trigger_auth_source(trigger_spec: TriggerSpec, settings: Settings) -> str:
    """The job's GitHub credential source: the Trigger's ``run.auth``, else the deployment's.

    Never the Job's own ``spec.authSource``: a Job that names another source is refused
    (``jobflow.admit.auth_beyond_trigger``), and one that names the same changes nothing.
    """
    return str(source_of(trigger_spec.run.auth, settings.github_auth_source))


def gets_gh_login(trigger_spec: TriggerSpec, settings: Settings) -> bool:
    """Would this job's Pod get the deployment's gh login (the full-scope credential of
    docs/store-contract.md#gh-auth-source)?

    ``pat`` and ``gh`` both hand the Pod the one Secret ``GITHUB_TOKEN_SECRET``, and what that Secret
    holds is the deployment's source: on a ``gh`` deployment, a Trigger that says ``pat`` still
    gets the gh login, so it is refused the same way (the name of the source is not what counts).
    """
    return is_gh_login(trigger_auth_source(trigger_spec, settings), settings.github_auth_source)
