"""A Job's spec (one delivery) and status (its session, checkout, workspace, handoff, tokens)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, create_model

from pidispatch.api.models.base import (
    DATE_TIME,
    INT64,
    NULLABLE,
    ApiModel,
    AuthSource,
    Conditions,
    JobForge,
    JobPhase,
    JobReasonValue,
    SessionReason,
)
from pidispatch.api.vocabulary import (
    COMMENT_MAX,
    DELIVERY_MAX,
    REPOSITORY_MAX,
    SENDER_MAX,
    TOKEN_FIELDS,
)

# ---- Job --------------------------------------------------------------------------------------------

Number = Annotated[int, Field(ge=1)]


class Resolved(ApiModel):
    headRef: Annotated[str, Field(max_length=255)] | None = None
    headRepository: Annotated[str, Field(max_length=200)] | None = None


class JobSpec(ApiModel):
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
    replica: Annotated[int | None, Field(ge=1, le=3, description=(
        "Which of its Trigger's run.replicas independent attempts this Job is (1-based); an issue's replica i "
        "works on the branch pi/issue-<n>-r<i>. Set by the receiver with replicas; the operator refuses a Job "
        "whose replica and replicas its Trigger does not give."))] = None
    replicas: Annotated[int | None, Field(ge=2, le=3, description=(
        "How many attempts the delivery started (its Trigger's run.replicas), set with replica."))] = None
    resolved: Resolved | None = None


class JobSession(ApiModel):
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


class JobHandoff(ApiModel):
    """The handoff this job packed at its end (its context use reached PI_SESSION_RETHREAD_PCT), as promoted."""

    writer: Annotated[HandoffWriter | None, Field(
        description="agent: the agent wrote it through its handoff tool; summary: the runner's side call wrote "
                    "it from the transcript, because the agent did not.")] = None
    status: HandoffStatus | None = None
    entries: Annotated[int | None, Field(ge=0, description="The ledger's entries after this one.")] = None


JobTokens = create_model("JobTokens", __base__=ApiModel, **{  # type: ignore[call-overload]
    name: (Annotated[float | None, Field(json_schema_extra=NULLABLE)], None) for name in TOKEN_FIELDS})

# A SessionKey's counters for one way its jobs started: how many jobs, and the sums of their tokens.
StartUsage = create_model("StartUsage", __base__=ApiModel, jobs=(Annotated[int | None, Field(ge=0)], None), **{
    name: (Annotated[float | None, Field(ge=0)], None) for name in TOKEN_FIELDS})  # type: ignore[call-overload]


Commit = Annotated[str, Field(pattern=r"^([0-9a-f]{40}|[0-9a-f]{64})$")]


class JobCheckout(ApiModel):
    """The commit the job's workspace was cloned at, as the forge API gave it (never the webhook payload)."""

    ref: Annotated[str, Field(max_length=300, description="Where the commit was read: refs/heads/<branch>, or "
                                                          "refs/pull/<n>/head for a fork's pull request.")]
    sha: Commit
    branch: Annotated[str | None, Field(max_length=255, description=(
        "The branch the job may push to (null: none, a fork's pull request). What status.outputs looks up on the "
        "forge at the job's end."))] = None


class JobWorkspace(ApiModel):
    """Where the job left its workspace: the runner's report."""

    head: Annotated[Commit | None, Field(json_schema_extra=NULLABLE)] = None
    pushed: Annotated[Commit | None, Field(json_schema_extra=NULLABLE, description="The commit the job pushed to "
                                                                                   "its branch; null: none.")] = None


class JobGateway(ApiModel):
    """What the gateway saw of the job (docs/gateway.md#the-ledger): ``status.tokens`` is the gateway's count
    behind it, and the agent's own figures stay here only as its claim."""

    requests: Annotated[int | None, Field(ge=0, description="Model requests the gateway forwarded.")] = None
    refusals: Annotated[dict[str, Annotated[int, Field(ge=0)]] | None, Field(
        max_length=21, description="Requests the gateway refused, by reason (token-budget, other-repository, "
                                   "fork-read-only, ...) or host-not-allowed:<host>; the 20 most frequent, the "
                                   "rest under other.")] = None
    claimedTokens: Annotated[JobTokens | None, Field(  # type: ignore[valid-type]
        json_schema_extra=NULLABLE, description="The tokens the runner's report claims (from the transcript, "
                                                "which the agent can write); a difference from status.tokens is "
                                                "a TokensDisagree Event.")] = None


class JobPullRequest(ApiModel):
    """A pull request as the forge answered for it: never the agent's words."""

    number: Annotated[int, Field(ge=1)]
    url: Annotated[str, Field(max_length=500, description="Its web page (the forge's html_url).")]


class JobOutputs(ApiModel):
    """What the job left on the forge (docs/workspace.md#what-a-job-records), read back at its end with the operator's
    own credential: the runner's report only says which branch and commit to look for."""

    branch: Annotated[str | None, Field(max_length=255, description=(
        "The branch the job pushed, whose tip on the forge was the commit below at the job's end."))] = None
    commit: Annotated[Commit | None, Field(description=(
        "The commit the job pushed, confirmed as the branch's tip on the forge (the job's commits end here)."))] = None
    pullRequest: Annotated[JobPullRequest | None, Field(description=(
        "The forge's pull request whose head is the branch (opened or updated by the job, or the one it ran "
        "on); absent: none."))] = None
    unconfirmed: Annotated[str | None, Field(max_length=300, description=(
        "Why the forge did not confirm the push the runner reported (the branch moved on, the lookup failed): "
        "the fields above are then absent."))] = None


class JobStatus(ApiModel):
    observedGeneration: Annotated[int | None, Field(json_schema_extra=INT64)] = None
    phase: JobPhase | None = None
    reason: Annotated[JobReasonValue | None, Field(json_schema_extra=NULLABLE)] = None
    conditions: Conditions | None = None
    podName: Annotated[str, Field(max_length=253)] | None = None
    session: Annotated[JobSession | None, Field(json_schema_extra=NULLABLE)] = None
    tokens: Annotated[JobTokens | None, Field(json_schema_extra=NULLABLE)] = None  # type: ignore[valid-type]
    gateway: Annotated[JobGateway | None, Field(json_schema_extra=NULLABLE)] = None
    queuedAt: Annotated[str | None, Field(json_schema_extra=DATE_TIME)] = None
    startedAt: Annotated[str | None, Field(json_schema_extra=DATE_TIME)] = None
    completedAt: Annotated[str | None, Field(json_schema_extra=DATE_TIME)] = None
    checkout: JobCheckout | None = None
    workspace: JobWorkspace | None = None
    handoff: JobHandoff | None = None
    outputs: Annotated[JobOutputs | None, Field(description=(
        "What the job pushed and the pull request on its branch, as the forge confirmed them at its end; absent "
        "when it pushed nothing or the operator has no forge credential of its own."))] = None


