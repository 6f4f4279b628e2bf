"""The receiver's pure core: a verified delivery → its event facts → the Triggers it matches → Job CRs.

No I/O here. The shell (``app``) calls, in this order: :func:`event_problem` on the ``X-GitHub-Event``
header, :func:`payload_of` on the verified body (JSON, or GitHub's form encoding), :func:`parse_delivery`
on the payload, :func:`sender_problem`, :func:`plan_jobs` with the namespace's Triggers.

A closed pull request or issue (``pull_request.closed``, ``issues.closed``) starts no Job: :func:`closed`
names the key it retires, :func:`retirement_problem` checks that a resume-armed Trigger serves the repository
and trusts whoever closed it, and the shell annotates that SessionKey (``pi-dispatch.dev/retire``) for the
operator to retire.

Matching rules, per Trigger (``spec.on``), in :data:`MISMATCHES` order:

* ``event`` equals ``<X-GitHub-Event>.<action>`` (cron Triggers never match a delivery);
* the Trigger serves the payload's ``repository.full_name`` (``api/serves.py``: ``on.repository`` exactly,
  ``on.repositories`` as OWNER/NAME globs, ignoring case as GitHub does; neither set: every repository). A
  delivery from a repository no Trigger serves is ignored before any matching (:func:`unserved`);
* ``issues.labeled``: ``label`` is required and equals the added label's name, ignoring case (GitHub
  label names are unique regardless of case);
* ``issue_comment.created`` and ``pull_request_review_comment.created``: ``phrase`` is required and
  occurs in the comment's body as a mention in visible prose (:func:`pidispatch.receiver.mention.mentions`:
  case-sensitive, not inside a longer word, an address or a path, not in a quote, code or an HTML
  comment); a Trigger without a phrase matches no comment, or every comment, the bot's own replies
  included, would start a job;
* ``pull_request_review.submitted``: when ``phrase`` is set it occurs in the review's body, as above.

* comments and reviews: the author's ``author_association`` is one of the Trigger's
  ``authorAssociations`` (unset: ``OWNER``, ``MEMBER``, ``COLLABORATOR``; ``receiver/trust.py``). On a public repository
  anyone can comment, and a job runs the agent with a token that can write to the repository, so a
  stranger's ``@pi`` starts nothing unless a Trigger says so. Adding a label needs triage rights on
  GitHub already, so labels are not checked.

Comments and reviews written by a bot (``sender.type == "Bot"``: the App's own, under ``app`` auth),
by one of the receiver's own logins (``PI_DISPATCH_RECEIVER_IGNORE_LOGINS``: the account a ``pat`` or
``gh`` token acts as, which is what the agent comments as), and the operator's own comments (they carry
a ``<!-- pi-dispatch:`` marker, whoever posted them), start nothing: a job's own comments must not be
able to start the next job. Labels added by automation do start jobs.

A Job's name is derived from its Trigger and the SHA-256 of the delivery's raw body, not from
``X-GitHub-Delivery``: GitHub's redelivery (the same body under the same id) and a replay (the same
signed body under a new id) both meet the Job the first delivery created (409), and a second comment
of the same text (another comment id and timestamp: another body) is a new Job. The API server holds
that memory, so it survives receiver restarts, holds across replicas, and costs the receiver nothing;
it lasts as long as the Job (the chart's ``jobs.ttlSecondsAfterFinished``, unset by default: for good).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from pidispatch.api import serves
from pidispatch.api.models import JobSpec
from pidispatch.api.views import TriggerView
from pidispatch.api.vocabulary import (
    COMMENT_MAX,
    DELIVERY_MAX,
    GROUP,
    SENDER_MAX,
    VERSION,
)
from pidispatch.forge.authsource import source_of
from pidispatch.receiver.closed import CLOSING, Closed, closed
from pidispatch.receiver.mention import mentions
from pidispatch.receiver.payload import (
    Ignored,
    Malformed,
    full_name_at,
    number_at,
    object_at,
    string_at,
)
from pidispatch.receiver.trust import association_refused

ISSUES_LABELED = "issues.labeled"
ISSUE_COMMENT_CREATED = "issue_comment.created"
REVIEW_SUBMITTED = "pull_request_review.submitted"
REVIEW_COMMENT_CREATED = "pull_request_review_comment.created"

# X-GitHub-Event → the one action of it a Trigger can match (the CRD's TRIGGER_EVENTS, less cron).
ACTIONS = {
    "issues": "labeled",
    "issue_comment": "created",
    "pull_request_review": "submitted",
    "pull_request_review_comment": "created",
}
TEXT_EVENTS = (ISSUE_COMMENT_CREATED, REVIEW_SUBMITTED, REVIEW_COMMENT_CREATED)
# Every X-GitHub-Event the receiver acts on, with its actions: a Trigger's (ACTIONS) and a closing one's (CLOSING,
# the retirement of a conversation). Any other event is ignored (:func:`event_problem`), so the GitHub App must
# subscribe to each of these and needs no other (examples/github-app.json, tests/receiver/test_app_manifest.py).
HANDLED: dict[str, tuple[str, ...]] = {
    event: tuple(action for action in (ACTIONS.get(event), CLOSING.get(event)) if action)
    for event in (*ACTIONS, *(e for e in CLOSING if e not in ACTIONS))}


_DELIVERY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
NAME_MAX = 63
_HASH_CHARS = 20
_BODY_HASH_CHARS = 32  # 128 bits of the body's digest: no two bodies meet by chance

CREATED_BY_LABEL = "app.kubernetes.io/created-by"
CREATED_BY = "pi-dispatch-receiver"


@dataclass(frozen=True)
class Event:
    """The facts of one delivery that matching and the Job need; nothing else of the payload is kept."""

    trigger_event: str
    repository: str
    sender: str
    sender_is_bot: bool
    issue: int | None = None
    pull_request: int | None = None
    text: str | None = None
    label: str | None = None
    fork: bool | None = None
    author_association: str | None = None  # of the comment or review; None when the payload has none


# -- headers -------------------------------------------------------------------------------------------------
def event_problem(event: str | None) -> Ignored | None:
    """``Ignored`` when ``X-GitHub-Event`` names an event the receiver does not act on (:data:`HANDLED`; ``ping``
    among them)."""
    if not event:
        return Ignored("no X-GitHub-Event header")
    if event not in HANDLED:
        return Ignored(f"event {event[:64]!r} is not one a Trigger can match")
    return None


def delivery_id_problem(delivery: str | None) -> str | None:
    """Why ``X-GitHub-Delivery`` cannot name a Job (missing, too long, odd characters), else ``None``."""
    if not delivery:
        return "no X-GitHub-Delivery header: a delivery id is needed to make redeliveries idempotent"
    if len(delivery) > DELIVERY_MAX or not _DELIVERY_ID.fullmatch(delivery):
        return f"X-GitHub-Delivery is not a delivery id (letters, digits and '-', at most {DELIVERY_MAX})"
    return None


def _fork(pull_request: dict[str, Any]) -> bool:
    """Whether the PR comes from another repository, as the payload claims it.

    Only a hint: the operator asks the forge API again before it derives any key. A deleted head
    repository (``head.repo: null``) counts as a fork, the safe side: no session.
    """
    head = object_at(pull_request, "head", "pull_request.")
    base = object_at(pull_request, "base", "pull_request.")
    base_name = full_name_at(object_at(base, "repo", "pull_request.base."), "pull_request.base.repo.")
    head_repo = head.get("repo")
    if head_repo is None:
        return True
    if not isinstance(head_repo, dict):
        raise Malformed("pull_request.head.repo is not an object")
    return full_name_at(head_repo, "pull_request.head.repo.").casefold() != base_name.casefold()


def parse_delivery(event: str, payload: Any) -> Event | Closed | Ignored:
    """The facts of a verified payload of ``event`` (already known to :data:`ACTIONS`).

    Returns ``Closed`` for a closed pull request or issue (:func:`closed`), ``Ignored`` for an action no
    Trigger can match; raises :class:`Malformed` when a field the
    event always carries is missing or of the wrong type.
    """
    if not isinstance(payload, dict):
        raise Malformed("the payload is not a JSON object")
    action = payload.get("action")
    if event in CLOSING and action == CLOSING[event]:
        return closed(event, payload)
    if action != ACTIONS.get(event):
        shown = action[:64] if isinstance(action, str) else action
        wanted = " or ".join(repr(a) for a in (ACTIONS.get(event), CLOSING.get(event)) if a)
        return Ignored(f"{event} action {shown!r} is not one a Trigger can match (only {wanted})")
    trigger_event = f"{event}.{action}"
    repository = full_name_at(object_at(payload, "repository", ""), "repository.")
    sender_obj = object_at(payload, "sender", "")
    sender = string_at(sender_obj, "login", "sender.")
    assert sender is not None
    if not sender or len(sender) > SENDER_MAX:
        raise Malformed(f"sender.login is empty or longer than {SENDER_MAX}")
    common: dict[str, Any] = {"trigger_event": trigger_event, "repository": repository, "sender": sender,
                              "sender_is_bot": sender_obj.get("type") == "Bot"}

    if trigger_event == ISSUES_LABELED:
        issue = object_at(payload, "issue", "")
        label = string_at(object_at(payload, "label", ""), "name", "label.")
        return Event(**common, issue=number_at(issue, "number", "issue."), label=label)
    if trigger_event == ISSUE_COMMENT_CREATED:
        issue = object_at(payload, "issue", "")
        number = number_at(issue, "number", "issue.")
        comment = object_at(payload, "comment", "")
        text = string_at(comment, "body", "comment.", nullable=True)
        written = {**common, "text": text, "author_association": _association(comment)}
        # A comment on a pull request arrives as an issue comment whose issue has `pull_request` set.
        if issue.get("pull_request") is not None:
            return Event(**written, pull_request=number)
        return Event(**written, issue=number)
    pull_request = object_at(payload, "pull_request", "")
    number = number_at(pull_request, "number", "pull_request.")
    writing = object_at(payload, "review" if trigger_event == REVIEW_SUBMITTED else "comment", "")
    text = string_at(writing, "body", "review." if trigger_event == REVIEW_SUBMITTED else "comment.", nullable=True)
    return Event(**common, pull_request=number, text=text, fork=_fork(pull_request),
                 author_association=_association(writing))


def _association(writing: dict[str, Any]) -> str | None:
    """The comment's or review's ``author_association``; anything but a short string reads as none."""
    value = writing.get("author_association")
    return value if isinstance(value, str) and 0 < len(value) <= 32 else None


# -- matching ------------------------------------------------------------------------------------------------
def event_differs(on: dict[str, Any], event: Event) -> str | None:
    return None if on.get("event") == event.trigger_event else "another event"


def repository_differs(on: dict[str, Any], event: Event) -> str | None:
    return None if serves.serves(serves.entries_of(on), event.repository) else "another repository"


def label_differs(on: dict[str, Any], event: Event) -> str | None:
    if event.trigger_event != ISSUES_LABELED:
        return None
    wanted = on.get("label")
    if not isinstance(wanted, str) or not wanted:
        return "the Trigger names no label"
    return None if event.label is not None and wanted.casefold() == event.label.casefold() else "another label"


def phrase_missing(on: dict[str, Any], event: Event) -> str | None:
    if event.trigger_event not in TEXT_EVENTS:
        return None
    phrase = on.get("phrase")
    if not isinstance(phrase, str) or not phrase:
        return None if event.trigger_event == REVIEW_SUBMITTED else "the Trigger names no phrase"
    if event.text is not None and mentions(event.text, phrase):
        return None
    return "the phrase is not mentioned in the text's visible prose"


def author_not_allowed(on: dict[str, Any], event: Event) -> str | None:
    if event.trigger_event not in TEXT_EVENTS:
        return None
    return association_refused(on, event.author_association)


# In this order: the first mismatch is the reason a Trigger was passed over.
MISMATCHES = (event_differs, repository_differs, label_differs, phrase_missing, author_not_allowed)


def mismatch(trigger: dict[str, Any], event: Event) -> str | None:
    """Why ``trigger`` does not match ``event``, or ``None`` when it does."""
    if (trigger.get("metadata") or {}).get("deletionTimestamp"):
        return "the Trigger is being deleted"
    on = (trigger.get("spec") or {}).get("on") or {}
    for check in MISMATCHES:
        why = check(on, event)
        if why is not None:
            return why
    return None


NOT_SERVED = "repository not served by any Trigger"


def unserved(triggers: list[dict[str, Any]], event: Event) -> Ignored | None:
    """``Ignored`` when no Trigger (being deleted or not: a repository is trusted by what the namespace's Triggers
    name) serves the delivery's repository (``api/serves.py``). A pull request's is its base repository, the
    payload's ``repository``, whoever owns its head."""
    for trigger in triggers:
        if TriggerView.of(trigger).serves(event.repository):
            return None
    return Ignored(NOT_SERVED)


OWN_COMMENT_MARKER = "<!-- pi-dispatch:"  # forge/comments.py marks every comment the operator posts


def sender_problem(event: Event, own_logins: Collection[str] = ()) -> Ignored | None:
    """Bots' comments and reviews, those of ``own_logins`` (casefolded: the accounts the jobs' own
    tokens act as), and the operator's own comments start nothing (a job's own replies must not start
    the next job; a refusal comment must not start the job it refuses again)."""
    if event.trigger_event not in TEXT_EVENTS:
        return None
    if event.sender_is_bot:
        return Ignored("comments and reviews by bots start no job")
    if event.sender.casefold() in own_logins:
        return Ignored("comments and reviews by the jobs' own login start no job")
    if event.text is not None and OWN_COMMENT_MARKER in event.text:
        return Ignored("the operator's own comments start no job")
    return None


# -- Jobs ----------------------------------------------------------------------------------------------------
def body_digest(body: bytes) -> str:
    """The SHA-256 of a delivery's raw body (hex): what a redelivery and a replay share."""
    return hashlib.sha256(body).hexdigest()


def job_name(digest: str, trigger: str) -> str:
    """The Job's name for ``trigger`` and a body of SHA-256 ``digest`` (:func:`body_digest`): the same
    for a redelivery or a replay of that body, different for any other body or Trigger.

    ``<trigger>-<first 32 hex of the digest>`` when that is a DNS-1123 label of at most 63 characters
    (the digest part has a fixed length, so the pair can be read back and no two pairs share a name);
    otherwise ``<trigger prefix>-<20 hex of SHA-256 over trigger NUL digest>``.
    """
    digest = digest.lower()
    readable = f"{trigger}-{digest[:_BODY_HASH_CHARS]}"
    if _SHA256.fullmatch(digest) and len(readable) <= NAME_MAX and _DNS_LABEL.fullmatch(trigger):
        return readable
    hashed = hashlib.sha256(f"{trigger}\0{digest}".encode()).hexdigest()[:_HASH_CHARS]
    prefix = re.sub(r"[^a-z0-9-]+", "-", trigger.lower())[:NAME_MAX - _HASH_CHARS - 1].strip("-")
    return f"{prefix or 'delivery'}-{hashed}"


def job_spec(trigger: dict[str, Any], event: Event, delivery: str, auth_source: str | None,
             replica: tuple[int, int] | None = None) -> JobSpec | str:
    """The Job's spec (the event facts, the comment cut to the CRD's length), or why the API server would
    refuse it for good (:func:`spec_problem`). ``replica``: (i, n), the i-th of the Trigger's n replicas."""
    auth = source_of(((trigger.get("spec") or {}).get("run") or {}).get("auth"), auth_source)
    return parse_spec({"trigger": trigger["metadata"]["name"], "forge": "github", "repository": event.repository,
                       "issue": event.issue, "pullRequest": event.pull_request,
                       "comment": event.text[:COMMENT_MAX] if event.text is not None else None,
                       "sender": event.sender, "fork": event.fork, "authSource": auth or None,
                       "deliveryId": delivery, "replica": replica[0] if replica else None,
                       "replicas": replica[1] if replica else None})


def replicas_of(trigger: dict[str, Any]) -> int | None:
    """The Trigger's ``run.replicas`` (2 or 3), else ``None``: one Job per delivery."""
    value = ((trigger.get("spec") or {}).get("run") or {}).get("replicas")
    return value if isinstance(value, int) and not isinstance(value, bool) and 2 <= value <= 3 else None


def replica_job_name(name: str, replica: int) -> str:
    """``<name>-r<i>``, the name's end cut to keep a DNS label (its hash part: the replicas stay apart by the
    suffix, and a redelivery still meets each replica's own name)."""
    suffix = f"-r{replica}"
    return f"{name[:NAME_MAX - len(suffix)].rstrip('-')}{suffix}"


def job_body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The Job object the API server is sent, around a spec as JSON."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job",
            "metadata": {"name": name, "labels": {CREATED_BY_LABEL: CREATED_BY}}, "spec": spec}


# The API server reads an integer field as an int64, whatever the schema says (the model has no upper bound).
INT64_MAX = 2**63 - 1
_NUMBERS = ("issue", "pullRequest")


def parse_spec(fields: dict[str, Any]) -> JobSpec | str:
    """``fields`` (``None``: left out) as a :class:`JobSpec`, or why the API server would refuse them for good:
    each field against the model the CRD is generated from (strictly: a bool is no number, as for the API
    server), the int64 range, and no field the CRD lacks. The answer names the field and the bound, never the
    value."""
    for key in fields:
        if key not in JobSpec.model_fields:
            return f"spec.{key} is not a field of the Job CRD"
    try:
        spec = JobSpec.model_validate(fields, strict=True)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        return f"spec.{'.'.join(str(part) for part in first['loc'])}: {first['msg']}"
    for key in _NUMBERS:
        value = getattr(spec, key)
        if value is not None and value > INT64_MAX:
            return f"spec.{key} is not a whole number from 1 to {INT64_MAX}"
    return spec


def name_problem(name: Any) -> str | None:
    """Why the API server would refuse ``name`` for a Job, or ``None``."""
    if not (isinstance(name, str) and len(name) <= NAME_MAX and _DNS_LABEL.fullmatch(name)):
        return f"the Job's name is not a DNS label of at most {NAME_MAX} characters"
    return None


def job_problem(body: dict[str, Any]) -> str | None:
    """Why the API server would refuse ``body`` for good (422 Invalid), or ``None``: its name and its spec
    (:func:`parse_spec`). The same check :func:`plan_jobs` makes, for a body built by hand."""
    problem = name_problem(body["metadata"]["name"])
    if problem is not None:
        return problem
    spec = parse_spec(body["spec"])
    return spec if isinstance(spec, str) else None


@dataclass(frozen=True)
class PlannedJob:
    """One Job a delivery plans: its name, and its body to create or why the API server would refuse it."""

    name: str
    body: dict[str, Any] | None
    problem: str | None = None


def plan_job(trigger: dict[str, Any], event: Event, delivery: str, auth_source: str | None,
             digest: str, replica: tuple[int, int] | None = None) -> PlannedJob:
    """The Job ``trigger`` starts for ``event`` (``replica``: the i-th of n): checked before the create, so that
    a refusal for good never reaches the API server; the spec is dumped once, into the body."""
    name = job_name(digest, trigger["metadata"]["name"])
    if replica is not None:
        name = replica_job_name(name, replica[0])
    spec = job_spec(trigger, event, delivery, auth_source, replica)
    problem = name_problem(name) or (spec if isinstance(spec, str) else None)
    if problem is not None or isinstance(spec, str):
        return PlannedJob(name, None, problem)
    return PlannedJob(name, job_body(name, spec.model_dump(mode="json", exclude_none=True)))


def plan_jobs(triggers: list[dict[str, Any]], event: Event, delivery: str,
              auth_source: str | None, digest: str) -> list[PlannedJob]:
    """One Job per matching Trigger, in Trigger-name order (so a redelivery plans the same list), named for
    the Trigger and the body's ``digest`` (a replay under a new delivery id meets the same names); a Trigger
    with ``run.replicas`` n plans n Jobs, ``<name>-r1`` … ``<name>-r<n>``, independent attempts."""
    matching = sorted((t for t in triggers if mismatch(t, event) is None), key=lambda t: t["metadata"]["name"])
    planned: list[PlannedJob] = []
    for trigger in matching:
        planned += plan_trigger(trigger, event, delivery, auth_source, digest)
    return planned


def plan_trigger(trigger: dict[str, Any], event: Event, delivery: str, auth_source: str | None,
                 digest: str) -> list[PlannedJob]:
    """The Jobs one Trigger starts for ``event``: one, or its ``run.replicas`` n attempts. What :func:`plan_jobs`
    plans per matching Trigger, and what ``pidispatch run`` plans for the Trigger a person names
    (``receiver/adhoc.py``)."""
    n = replicas_of(trigger)
    if n is None:
        return [plan_job(trigger, event, delivery, auth_source, digest)]
    return [plan_job(trigger, event, delivery, auth_source, digest, (i, n)) for i in range(1, n + 1)]
