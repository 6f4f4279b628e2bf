"""``pidispatch run``: a Job for an issue or a pull request, asked for by a person (docs/cli.md#pidispatch-run).

The person names the Trigger, so no event is matched: the label, the phrase and the author association say which
*event* starts a job, and here there is none. Everything else is the receiver's own decision code, so the two
cannot drift:

* the facts come from the forge, as the poller reads them (``poll/forge.py``'s :class:`ForgeReader`, with the
  person's token): the issue or pull request must exist, a pull request's fork is read from its head, and the
  sender is the login the token acts as (GitHub says who asked; the Kubernetes user cannot be known from here,
  and the Job has no other field for it);
* the Trigger must serve the repository (``api/serves.py``, as :func:`delivery.unserved` and the admission judge
  it), must not be being deleted, and must be ``Ready`` (else the admission would refuse its Job:
  ``TriggerNotReady``);
* the Jobs are planned by :func:`delivery.plan_trigger` (one, or ``run.replicas`` attempts), checked against the
  CRD's model before the create, and created as the receiver creates them (``cluster.ApiCluster``).

A run is never a duplicate of another: its digest is that of a fresh nonce, and its ``spec.deliveryId`` is
``run-<nonce>`` (the operator's comment marker reads it, ``forge/comments.py``).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any

from pidispatch.api.views import TriggerView
from pidispatch.api.vocabulary import SENDER_MAX
from pidispatch.receiver import delivery as core
from pidispatch.receiver.poll.forge import ForgeReader

CREATED_BY = "pidispatch-run"
TERMINAL = {"Succeeded": 0, "Failed": 1, "Refused": 3}  # a Job's end → `pidispatch run --wait`'s exit code


class Refused(Exception):
    """Why no Job is created: one line for the person, naming what to fix."""


@dataclass(frozen=True)
class Subject:
    """What the forge says of the issue or pull request the run is for."""

    repository: str  # OWNER/NAME as the forge spells it
    issue: int | None = None
    pull_request: int | None = None
    fork: bool | None = None


def read_subject(reader: ForgeReader, repository: str, *, issue: int | None = None,
                 pull_request: int | None = None) -> Subject:
    """The issue or pull request from the forge; :class:`Refused` when it does not exist or cannot be read."""
    if pull_request is not None:
        answer = reader.get("GET /repos/{owner}/{repo}/pulls/{pull_number}",
                            f"/repos/{repository}/pulls/{pull_request}", repository)
        body = _found(answer, f"pull request {repository}#{pull_request}")
        base = ((body.get("base") or {}).get("repo") or {}).get("full_name")
        head = (body.get("head") or {}).get("repo")
        if not isinstance(base, str):
            raise Refused(f"the forge's answer for pull request {repository}#{pull_request} names no base repository")
        # As the receiver reads a payload (delivery._fork): a deleted head repository counts as a fork.
        fork = not isinstance(head, dict) or str(head.get("full_name") or "").casefold() != base.casefold()
        return Subject(base, pull_request=pull_request, fork=fork)
    assert issue is not None
    answer = reader.get("GET /repos/{owner}/{repo}/issues/{issue_number}", f"/repos/{repository}/issues/{issue}",
                        repository)
    body = _found(answer, f"issue {repository}#{issue}")
    if body.get("pull_request") is not None:
        raise Refused(f"{repository}#{issue} is a pull request: run it with --pull-request {issue}")
    return Subject(_repository_of(body, repository), issue=issue)


def _found(answer: Any, what: str) -> dict[str, Any]:
    if answer.status == 404:
        raise Refused(f"{what} does not exist (or the token cannot see it)")
    if answer.status != 200 or not isinstance(answer.body, dict):
        raise Refused(f"cannot read {what} from the forge: {answer.why or answer.status}")
    return dict(answer.body)


def _repository_of(issue: dict[str, Any], asked: str) -> str:
    """The repository as the forge spells it (an issue's ``repository_url`` ends in OWNER/NAME), else as asked."""
    url = issue.get("repository_url")
    if isinstance(url, str) and url.count("/") >= 2:
        owner, name = url.rstrip("/").split("/")[-2:]
        if owner and name and f"{owner}/{name}".casefold() == asked.casefold():
            return f"{owner}/{name}"
    return asked


def requester(reader: ForgeReader, repository: str) -> str:
    """The login of the account the token acts as: the Job's ``spec.sender``."""
    answer = reader.get("GET /user", "/user", repository)
    login = answer.body.get("login") if answer.status == 200 and isinstance(answer.body, dict) else None
    if not isinstance(login, str) or not login:
        raise Refused(f"the forge does not say whom the token belongs to (GET /user: {answer.why or answer.status}); "
                      "pass a personal token (--token or GH_TOKEN), not an App's")
    return login[:SENDER_MAX]


def trigger_problem(trigger: TriggerView | None, name: str, repository: str, namespace: str) -> str | None:
    """Why Trigger ``name`` (``None``: not found) cannot run a job for ``repository``, or ``None``."""
    if trigger is None:
        return f"Trigger {name} does not exist in namespace {namespace} (kubectl get pitriggers -n {namespace})"
    if trigger.meta.deletion:
        return f"Trigger {name} is being deleted"
    if not trigger.serves(repository):
        return f"Trigger {name} does not serve {repository} (its on.repository / on.repositories)"
    ready = next((c for c in trigger.status.conditions or [] if c.type == "Ready"), None)
    if ready is None:
        return f"Trigger {name} is not Ready yet: the operator has not judged it (is the operator running?)"
    if ready.status != "True":
        return (f"Trigger {name} is not Ready ({ready.reason or 'no reason'}): {ready.message or ''}"
                .rstrip(": ") + f"; its Jobs would be refused (kubectl describe pitrigger {name} -n {namespace})")
    return None


def default_repository(trigger: TriggerView) -> str | None:
    """The one repository a Trigger names without a glob (its ``on.repository``, or a lone plain
    ``on.repositories`` entry): what a run is for when ``--repo`` is not given; ``None`` when that is not one."""
    named = trigger.named
    plain = [entry for entry in dict.fromkeys(named) if not any(c in entry for c in "*?[")]
    return plain[0] if len(plain) == 1 and len(named) == 1 else None


def plan(trigger: TriggerView, subject: Subject, sender: str, *, comment: str | None = None,
         nonce: str | None = None) -> list[core.PlannedJob]:
    """The Jobs ``trigger`` starts for ``subject``, as the receiver plans them (:func:`delivery.plan_trigger`).

    ``comment``: the text the job is given, as a comment's; ``nonce``: what names the run (fresh by default).
    The Job's ``spec.authSource`` is the Trigger's ``run.auth`` or none: the deployment's default is the operator's
    to apply, and a Job never asks for more than its Trigger gives."""
    nonce = nonce or uuid.uuid4().hex
    on_event = trigger.spec.on.event if trigger.spec is not None else ""
    event = core.Event(trigger_event=on_event, repository=subject.repository, sender=sender,
                       sender_is_bot=False, issue=subject.issue, pull_request=subject.pull_request,
                       text=comment, fork=subject.fork)
    digest = hashlib.sha256(f"pidispatch-run\0{nonce}".encode()).hexdigest()
    planned = core.plan_trigger(trigger.body, event, f"run-{nonce}", None, digest)
    for job in planned:
        if job.body is not None:
            job.body["metadata"]["labels"][core.CREATED_BY_LABEL] = CREATED_BY
    return planned
