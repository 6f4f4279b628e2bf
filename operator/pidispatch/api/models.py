"""The Trigger, Job and SessionKey specs and statuses as pydantic models: the API's one source.

The CRDs' OpenAPI schemas are generated from these (``crds.py``, through ``schema.py``), CEL rules
included, and the operator validates what it reads with them (``jobflow/admit.py``,
``jobflow/trigger.py``), so a field, a limit or an enum is written once.

Conventions the schema generator relies on:

* ``X | None = None`` is an *optional* field (it may be left out); the CRD does not accept ``null``
  for it. :data:`NULLABLE` marks the fields whose value may be ``null`` (what the operator writes).
* ``Field(json_schema_extra=...)`` carries what pydantic has no words for: ``format``,
  ``x-kubernetes-*`` keys, a CRD ``description``.
* Models allow extra fields (a newer operator's status is not an error to an older one); pruning of
  unknown fields is the apiserver's job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from pidispatch.api import serves
from pidispatch.api.vocabulary import (
    AUTH_SOURCES,
    AUTHOR_ASSOCIATIONS,
    COMMENT_MAX,
    DEFAULT_AUTHOR_ASSOCIATIONS,
    DELIVERY_MAX,
    JOB_FORGES,
    JOB_PHASES,
    REPOSITORY_MAX,
    SENDER_MAX,
    SESSIONKEY_FORGES,
    TOKEN_FIELDS,
    TRIGGER_EVENTS,
    TRIGGER_RULES,
)
from pidispatch.contract import ENV_AGENT_DIR, FORGE_TOKEN_NAMES, credential_name_problem
from pidispatch.record import SESSION_REASONS, JobReason

NULLABLE: dict[str, Any] = {"nullable": True}
DATE_TIME: dict[str, Any] = {"format": "date-time"}
INT64: dict[str, Any] = {"format": "int64"}


def _one_of(values: tuple[str, ...] | list[str]) -> Any:
    return Literal.__getitem__(tuple(values))  # a Literal built from the vocabulary's tuple


# The closed lists as Literal types, built from the vocabulary's tuples (one source). mypy cannot follow
# a Literal built at run time, so it reads them as the strings they are.
if TYPE_CHECKING:
    TriggerEvent: TypeAlias = str
    AuthorAssociation: TypeAlias = str
    AuthSource: TypeAlias = str
    JobForge: TypeAlias = str
    JobPhase: TypeAlias = str
    JobReasonValue: TypeAlias = str
    SessionKeyForge: TypeAlias = str
    SessionReasonValue: TypeAlias = str
else:
    TriggerEvent = _one_of(TRIGGER_EVENTS)
    AuthorAssociation = _one_of(AUTHOR_ASSOCIATIONS)
    AuthSource = _one_of(AUTH_SOURCES)
    JobForge = _one_of(JOB_FORGES)
    JobPhase = _one_of(JOB_PHASES)
    JobReasonValue = _one_of([r.value for r in JobReason])
    SessionKeyForge = _one_of(SESSIONKEY_FORGES)
    SessionReasonValue = _one_of(SESSION_REASONS)


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


# ---- metav1.Condition -------------------------------------------------------------------------------

CONDITION_TYPE = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(_Model):
    """``metav1.Condition`` as the Kubernetes API conventions define it."""

    type: Annotated[str, Field(max_length=316, pattern=CONDITION_TYPE)]
    status: Literal["True", "False", "Unknown"]
    observedGeneration: Annotated[int | None, Field(ge=0, json_schema_extra=INT64)] = None
    lastTransitionTime: Annotated[str, Field(json_schema_extra=DATE_TIME)]
    reason: Annotated[str, Field(max_length=1024, min_length=1, pattern=CONDITION_REASON)]
    message: Annotated[str, Field(max_length=32768)]


Conditions = Annotated[list[Condition], Field(max_length=16, json_schema_extra={
    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})]
SessionReason = Annotated[SessionReasonValue | None, Field(json_schema_extra=NULLABLE)]


# ---- Trigger ----------------------------------------------------------------------------------------

class TriggerOn(_Model):
    event: TriggerEvent
    label: Annotated[str, Field(max_length=253)] | None = None
    phrase: Annotated[str, Field(max_length=200)] | None = None
    repository: Annotated[str, Field(max_length=200, pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")] | None = None
    schedule: Annotated[str, Field(max_length=100)] | None = None
    authorAssociations: Annotated[list[AuthorAssociation] | None, Field(
        max_length=len(AUTHOR_ASSOCIATIONS),
        description="Who may start a job with a comment or a review, by their GitHub author association. "
                    "Unset: " + ", ".join(DEFAULT_AUTHOR_ASSOCIATIONS) + ".")] = None
    repositories: Annotated[list[Annotated[str, Field(max_length=200, pattern=serves.PATTERN)]] | None, Field(
        min_length=1, max_length=serves.PATTERNS_MAX,
        description="The repositories this Trigger serves, as OWNER/NAME where each half is a shell-style glob "
                    "(*, ?, [abc]) matched without regard to case: [\"acme/*\", \"acme-labs/api-*\"]. Deliveries "
                    "from any other repository create nothing, and resume is armed only on a Trigger that names "
                    "its repositories (here or in on.repository). Unset, with on.repository unset too: every "
                    "repository, and run.resume stays off.")] = None

    def served(self) -> tuple[str, ...]:
        """What this Trigger names as the repositories it serves (``api/serves.py``); empty: every repository."""
        return serves.entries(self.repository, self.repositories)


Quantities = Annotated[dict[str, Annotated[str, Field(max_length=64)]] | None, Field(max_length=16)]


class Resources(_Model):
    """The job container's ``resources``, as Kubernetes takes them (quantities as strings: ``500m``, ``2Gi``)."""

    requests: Quantities = None
    limits: Quantities = None


DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class SecretKey(_Model):
    """One key of a Secret in the Trigger's namespace: the job container reads it by ``secretKeyRef``."""

    secretName: Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN)]
    key: Annotated[str, Field(max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]


_CREDENTIAL_NAMES_RULE = (
    "self.all(k, k.matches('^[A-Za-z_][A-Za-z0-9_]*$') && !(k in " + str(list(FORGE_TOKEN_NAMES)).replace('"', "'")
    + ") && !k.startsWith('PI_SESSION') && k != '" + ENV_AGENT_DIR + "')")
Credentials = Annotated[dict[str, SecretKey] | None, Field(
    max_length=32, json_schema_extra={"x-kubernetes-validations": [{
        "rule": _CREDENTIAL_NAMES_RULE,
        "message": "credentials are named by environment variable, and may not be the forge token "
                   "(GH_TOKEN, GITHUB_TOKEN, ...: it comes from the github.* values) or the operator's "
                   "PI_SESSION* and PI_CODING_AGENT_DIR"}]},
    description="The model's credentials: environment variable name -> a Secret's key (e.g. OPENAI_API_KEY: "
                "{secretName: model-keys, key: openai}), merged over the deployment's job.credentials. Never "
                "a plain value.")]


# A label key: an optional DNS-subdomain prefix and a slash, then the name.
LABEL_KEY = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
             r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
# Keys are checked by TriggerRun's validator, not in the schema: a CRD's structural schema takes no
# propertyNames or patternProperties (the apiserver refuses the CRD), so the apiserver checks values only.
NodeSelector = Annotated[dict[str, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]] | None, Field(
    max_length=16, description="Node labels the job Pods must run on (a node pool), laid over the deployment's "
                               "job.nodeSelector: this Trigger's value wins for a key both name.")]


class Toleration(_Model):
    """A Kubernetes toleration, as the Pod spec takes it."""

    key: Annotated[str, Field(max_length=316)] | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: Annotated[str, Field(max_length=63)] | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: Annotated[int | None, Field(json_schema_extra=INT64)] = None


class TriggerRun(_Model):
    kind: Literal["forge", "local"] | None = None
    # command, flow and replicas stay in the v1alpha1 schema (removing a field is not additive:
    # docs/crd-policy.md) but nothing acts on them yet, so a Trigger that sets one is refused (api/trigger.py).
    flow: Annotated[str | None, Field(max_length=253, description=(
        "Not implemented yet: a Trigger that sets it is not Ready (FieldNotImplemented). In pi-dispatch, the "
        "repository's .pi/skills/<flow> the job runs."))] = None
    # Typed boolean: CEL cannot see a field without a type, so a non-boolean value is refused by the
    # apiserver's own type check ("spec.run.resume ... must be of type boolean").
    resume: Annotated[bool | None, Field(
        description="Continue the previous job's conversation on the same branch.")] = None
    command: Annotated[str | None, Field(max_length=4096, description=(
        "Not implemented yet: a Trigger that sets it is not Ready (FieldNotImplemented). In pi-dispatch, the "
        "'/<command> args' a job gets as its whole prompt. With run.resume it is refused."))] = None
    replicas: Annotated[int | None, Field(ge=2, le=3, description=(
        "Not implemented yet: a Trigger that sets it is not Ready (FieldNotImplemented). In pi-dispatch, 2 or 3 "
        "independent attempts per delivery, each on its own branch. With run.resume it is refused."))] = None
    secrets: Annotated[list[Annotated[str, Field(max_length=253)]] | None, Field(max_length=32, description=(
        "Secrets of the Trigger's namespace, by name, delivered to every job of this Trigger: each is mounted "
        "read-only at /var/run/pi-dispatch/secrets/<name>/<key> (PI_RUN_SECRETS_DIR), a file per key, never "
        "an environment value. Never stored: the scan before the promotion redacts a value the job echoed. "
        "Refused with run.resume. The job Pod policy admits only the Secrets named in "
        "jobPodPolicy.credentialSecrets."))] = None
    model: Annotated[str, Field(max_length=128)] | None = None
    image: Annotated[str, Field(max_length=512)] | None = None
    piVersion: Annotated[str, Field(max_length=64)] | None = None
    auth: AuthSource | None = None
    forks: Annotated[bool | None, Field(description=(
        "Run jobs on pull requests from forks although their token cannot be narrowed (auth source pat or gh): "
        "the fork's code then runs with the deployment's token and its write access. Unset or false: such a job "
        "is refused (fork-not-allowed). With the GitHub App (auth source app) a fork's job always runs, with a "
        "token that is read-only on contents, and this field changes nothing."))] = None
    timeoutSeconds: Annotated[int | None, Field(ge=1, le=604800, description=(
        "The job's run timeout (its Pod's activeDeadlineSeconds): past it the job is stopped, ends Failed "
        "(DeadlineExceeded) and nothing is promoted. Unset: the deployment's job.timeoutSeconds."))] = None
    resources: Annotated[Resources | None, Field(description=(
        "The job container's resources. Unset: the deployment's job.resources."))] = None
    credentials: Credentials = None
    nodeSelector: NodeSelector = None
    tolerations: Annotated[list[Toleration] | None, Field(
        max_length=16, description="Taints the job Pods tolerate (a node pool's, a GPU's), added to the "
                                   "deployment's job.tolerations.")] = None

    @field_validator("nodeSelector")
    @classmethod
    def _node_selector_keys(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        import re

        for key in value or {}:
            if len(key) > 316 or not re.fullmatch(LABEL_KEY, key):
                raise ValueError(f"run.nodeSelector: {key[:80]!r} is not a label key")
        return value

    @field_validator("credentials")
    @classmethod
    def _credential_names(cls, value: dict[str, SecretKey] | None) -> dict[str, SecretKey] | None:
        for name in value or {}:
            why = credential_name_problem(name)
            if why is not None:
                raise ValueError(why)
        return value


class TriggerSpec(_Model):
    """``spec`` of a Trigger. The load-time refusals (spec §10.3) are CEL rules on it."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": list(TRIGGER_RULES)})  # type: ignore[arg-type]

    on: TriggerOn
    run: TriggerRun


class Bounds(_Model):
    ttlDays: int | None = None
    maxBytes: int | None = None
    maxAgeDays: int | None = None
    maxResumeChain: int | None = None
    maxContextPct: Annotated[int | None, Field(json_schema_extra=NULLABLE)] = None


class CronStatus(_Model):
    """A cron Trigger's firing record (``jobflow/cron.py``): written, with the Trigger's resourceVersion, before
    the slot's Job is created, so that no slot fires twice across a restart or a change of leader."""

    lastSlot: Annotated[str | None, Field(json_schema_extra=DATE_TIME, description=(
        "The last slot (a UTC minute of on.schedule) this Trigger fired, or claimed and is creating the Job "
        "of."))] = None
    lastJob: Annotated[str | None, Field(max_length=253, description=(
        "The Job created for lastSlot (unset while it is being created: the operator creates it again, by its "
        "deterministic name, after a restart)."))] = None
    missed: Annotated[int | None, Field(ge=0, json_schema_extra=INT64, description=(
        "Slots that came due while the operator was not running (or not leading) and were skipped: only the "
        "latest slot due is fired, once, the others are counted here."))] = None
    nextSlot: Annotated[str | None, Field(json_schema_extra=DATE_TIME, description=(
        "The next slot this Trigger fires at (UTC)."))] = None


class TriggerStatus(_Model):
    observedGeneration: Annotated[int | None, Field(json_schema_extra=INT64)] = None
    conditions: Conditions | None = None
    bounds: Bounds | None = None
    schedule: CronStatus | None = None


# ---- Job --------------------------------------------------------------------------------------------

Number = Annotated[int, Field(ge=1)]


class Resolved(_Model):
    headRef: Annotated[str, Field(max_length=255)] | None = None
    headRepository: Annotated[str, Field(max_length=200)] | None = None


class JobSpec(_Model):
    """``spec`` of a Job: the event facts of one delivery, fixed once the Job exists."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": "a Job's event facts cannot change once it exists"}]})

    trigger: Annotated[str, Field(max_length=253)]
    forge: JobForge
    repository: Annotated[str, Field(max_length=REPOSITORY_MAX)]
    issue: Number | None = None
    pullRequest: Number | None = None
    comment: Annotated[str, Field(max_length=COMMENT_MAX)] | None = None
    sender: Annotated[str, Field(max_length=SENDER_MAX)] | None = None
    fork: bool | None = None
    authSource: AuthSource | None = None
    deliveryId: Annotated[str, Field(max_length=DELIVERY_MAX)] | None = None
    resolved: Resolved | None = None


class JobSession(_Model):
    resumed: bool | None = None
    reason: SessionReason = None
    bytes: Annotated[int | None, Field(ge=0, json_schema_extra=NULLABLE)] = None
    rethreaded: Annotated[bool | None, Field(
        description="The gates refused the resume for a lineage reason (the reason above) and the job started a "
                    "new session from the stored letter and ledger instead of a cold start.")] = None
    redacted: Annotated[int | None, Field(
        ge=0, json_schema_extra=NULLABLE,
        description="How many credentials (tokens, keys, private-key blocks, Authorization values, the job's own "
                    "secrets) the scan before the promotion replaced with [REDACTED:<kind>] in the stored "
                    "transcript and handoff. Only the count: a value never appears in a status.")] = None


HandoffWriter = Literal["agent", "summary"]
HandoffStatus = Literal["landed", "partial", "blocked"]


class JobHandoff(_Model):
    """The handoff this job packed at its end (its context use reached PI_SESSION_RETHREAD_PCT), as promoted."""

    writer: Annotated[HandoffWriter | None, Field(
        description="agent: the agent wrote it through its handoff tool; summary: the runner's side call wrote "
                    "it from the transcript, because the agent did not.")] = None
    status: HandoffStatus | None = None
    entries: Annotated[int | None, Field(ge=0, description="The ledger's entries after this one.")] = None


JobTokens = create_model("JobTokens", __base__=_Model, **{  # type: ignore[call-overload]
    name: (Annotated[float | None, Field(json_schema_extra=NULLABLE)], None) for name in TOKEN_FIELDS})

# A SessionKey's counters for one way its jobs started: how many jobs, and the sums of their tokens.
StartUsage = create_model("StartUsage", __base__=_Model, jobs=(Annotated[int | None, Field(ge=0)], None), **{
    name: (Annotated[float | None, Field(ge=0)], None) for name in TOKEN_FIELDS})  # type: ignore[call-overload]


Commit = Annotated[str, Field(pattern=r"^([0-9a-f]{40}|[0-9a-f]{64})$")]


class JobCheckout(_Model):
    """The commit the job's workspace was cloned at, as the forge API gave it (never the webhook payload)."""

    ref: Annotated[str, Field(max_length=300, description="Where the commit was read: refs/heads/<branch>, or "
                                                          "refs/pull/<n>/head for a fork's pull request.")]
    sha: Commit


class JobWorkspace(_Model):
    """Where the job left its workspace: the runner's report."""

    head: Annotated[Commit | None, Field(json_schema_extra=NULLABLE)] = None
    pushed: Annotated[Commit | None, Field(json_schema_extra=NULLABLE, description="The commit the job pushed to "
                                                                                   "its branch; null: none.")] = None


class JobStatus(_Model):
    observedGeneration: Annotated[int | None, Field(json_schema_extra=INT64)] = None
    phase: JobPhase | None = None
    reason: Annotated[JobReasonValue | None, Field(json_schema_extra=NULLABLE)] = None
    conditions: Conditions | None = None
    podName: Annotated[str, Field(max_length=253)] | None = None
    session: Annotated[JobSession | None, Field(json_schema_extra=NULLABLE)] = None
    tokens: Annotated[JobTokens | None, Field(json_schema_extra=NULLABLE)] = None  # type: ignore[valid-type]
    queuedAt: Annotated[str | None, Field(json_schema_extra=DATE_TIME)] = None
    startedAt: Annotated[str | None, Field(json_schema_extra=DATE_TIME)] = None
    completedAt: Annotated[str | None, Field(json_schema_extra=DATE_TIME)] = None
    checkout: JobCheckout | None = None
    workspace: JobWorkspace | None = None
    handoff: JobHandoff | None = None


# ---- SessionKey -------------------------------------------------------------------------------------

class SessionKeySpec(_Model):
    """``spec`` of a SessionKey: what the key names (its name is the key itself)."""

    forge: SessionKeyForge
    repository: Annotated[str, Field(max_length=200)]
    branch: Annotated[str, Field(max_length=255)]


class ContextReading(_Model):
    tokens: int | None = None
    window: int | None = None
    model: Annotated[Annotated[str, Field(max_length=128)] | None, Field(json_schema_extra=NULLABLE)] = None


class JudgedWith(_Model):
    piVersion: Annotated[Annotated[str, Field(max_length=64)] | None, Field(json_schema_extra=NULLABLE)] = None
    model: Annotated[Annotated[str, Field(max_length=128)] | None, Field(json_schema_extra=NULLABLE)] = None


class LastCommit(_Model):
    sha: Commit
    pushed: bool | None = None


class WaitingLetter(_Model):
    job: Annotated[str, Field(max_length=253)] | None = None
    writer: HandoffWriter | None = None
    written: Annotated[str, Field(max_length=40)] | None = None


class LedgerView(_Model):
    entries: Annotated[int | None, Field(ge=0, description="How many entries the ledger has held (folded ones "
                                                           "included).")] = None
    letter: Annotated[WaitingLetter | None, Field(
        json_schema_extra=NULLABLE, description="The letter that waits for the next lineage refusal: written by "
                                                "the last job, for the transcript stored now.")] = None


class RethreadedBy(_Model):
    job: Annotated[str, Field(max_length=253)] | None = None
    reason: SessionReason = None


class Retired(_Model):
    """The key was retired (``jobflow/retire.py``): its pull request or issue closed, or a person asked."""

    reason: Annotated[str, Field(max_length=64, description="pull-request-merged, pull-request-closed, "
                                                            "issue-closed or requested.")]
    at: Annotated[str | None, Field(json_schema_extra=DATE_TIME)] = None
    archive: Annotated[str | None, Field(
        max_length=128, json_schema_extra=NULLABLE,
        description="The store root's entry the key directory was archived as (sessions.retire: archive).")] = None


class FailedResumes(_Model):
    """Resumed jobs in a row that ended Failed on this key (``jobflow/lifecycle.py``)."""

    count: Annotated[int, Field(ge=0)]
    jobs: Annotated[list[Annotated[str, Field(max_length=253)]], Field(max_length=10)] = []
    quarantinedAt: Annotated[str | None, Field(
        json_schema_extra={**DATE_TIME, **NULLABLE},
        description="When the count reached sessions.quarantineAfter: the transcript is quarantined.")] = None


class KeyUsage(_Model):
    """The jobs that ended on a key and their tokens, by how they started (``jobflow/cost.py``)."""

    resumed: StartUsage | None = None  # type: ignore[valid-type]
    rethreaded: StartUsage | None = None  # type: ignore[valid-type]
    cold: StartUsage | None = None  # type: ignore[valid-type]
    recentJobs: Annotated[list[Annotated[str, Field(max_length=253)]] | None, Field(
        max_length=16, description="The last jobs counted, so a job's end written twice (a restart between the "
                                   "SessionKey and the Job) counts once.")] = None


class SessionKeyStatus(_Model):
    observedGeneration: Annotated[int | None, Field(json_schema_extra=INT64)] = None
    conditions: Conditions | None = None
    bytes: Annotated[int | None, Field(json_schema_extra=NULLABLE)] = None
    venue: Annotated[Annotated[str, Field(max_length=253)] | None, Field(json_schema_extra=NULLABLE)] = None
    piVersion: Annotated[Annotated[str, Field(max_length=64)] | None, Field(json_schema_extra=NULLABLE)] = None
    resumeChain: Annotated[int | None, Field(ge=0)] = None
    context: Annotated[ContextReading | None, Field(json_schema_extra=NULLABLE)] = None
    next: SessionReason = None
    lastJob: Annotated[str, Field(max_length=253)] | None = None
    lastReason: SessionReason = None
    lastPromotedAt: Annotated[str | None, Field(json_schema_extra=DATE_TIME)] = None
    lastCommit: Annotated[LastCommit | None, Field(
        description="The workspace's HEAD when the stored conversation last ended: a job that resumes on "
                    "another commit is told how the branch moved.")] = None
    judgedWith: Annotated[JudgedWith | None, Field(
        description="The pi version and model of the last job on this key: Resumable judges the next delivery "
                    "as if it ran the same.")] = None
    ledger: LedgerView | None = None
    rethreadedBy: Annotated[RethreadedBy | None, Field(
        json_schema_extra=NULLABLE, description="The job that started the stored conversation from a letter and "
                                                "ledger, and the refusal it carried the work across.")] = None
    retired: Annotated[Retired | None, Field(
        json_schema_extra=NULLABLE, description="Set while the key is retired; the next delivery on the branch "
                                                "starts cold (retired).")] = None
    failedResumes: Annotated[FailedResumes | None, Field(
        json_schema_extra=NULLABLE, description="Resumed jobs in a row that ended Failed; at "
                                                "sessions.quarantineAfter the transcript is quarantined.")] = None
    usage: Annotated[KeyUsage | None, Field(
        description="Jobs ended on this key and the tokens of their own replies, by how they started: resumed, "
                    "rethreaded (from the letter and ledger) or cold. cost sums the priced jobs; unpriced counts "
                    "the replies no price was known for.")] = None


M = TypeVar("M", bound=BaseModel)


def parsed(model: type[M], data: Any) -> tuple[M | None, str | None]:
    """``data`` as ``model`` (strictly: ``"true"`` is not a boolean, as for the apiserver), or ``None`` and
    the first way it breaks the model, as one line naming the field."""
    try:
        return model.model_validate(data, strict=True), None
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "spec"
        return None, f"{where}: {first['msg']}"


def problem(model: type[BaseModel], data: Any) -> str | None:
    """The first way ``data`` breaks ``model`` (:func:`parsed`); ``None`` when it is valid."""
    return parsed(model, data)[1]
