"""A SessionKey's spec (the key's forge, repository, branch) and status (what the store holds and will do)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from pidispatch.api.models.base import (
    DATE_TIME,
    INT64,
    NULLABLE,
    ApiModel,
    AuthorAssociation,
    Conditions,
    SessionKeyForge,
    SessionReason,
)
from pidispatch.api.models.job import Commit, HandoffWriter, JobPullRequest, StartUsage
from pidispatch.api.vocabulary import AUTHOR_ASSOCIATIONS

# ---- SessionKey -------------------------------------------------------------------------------------

class SessionKeySpec(ApiModel):
    """``spec`` of a SessionKey: what the key names (its name is the key itself)."""

    forge: SessionKeyForge
    repository: Annotated[str, Field(max_length=200)]
    branch: Annotated[str, Field(max_length=255)]


class ContextReading(ApiModel):
    tokens: int | None = None
    window: int | None = None
    model: Annotated[Annotated[str, Field(max_length=128)] | None, Field(json_schema_extra=NULLABLE)] = None


Population = Annotated[list[AuthorAssociation] | None, Field(max_length=len(AUTHOR_ASSOCIATIONS),
                                                           json_schema_extra=NULLABLE)]


class JudgedWith(ApiModel):
    piVersion: Annotated[Annotated[str, Field(max_length=64)] | None, Field(json_schema_extra=NULLABLE)] = None
    model: Annotated[Annotated[str, Field(max_length=128)] | None, Field(json_schema_extra=NULLABLE)] = None
    population: Annotated[Population, Field(description=(
        "The author associations the last job's Trigger admits (null: a job of an older operator)."))] = None


class LastCommit(ApiModel):
    sha: Commit
    pushed: bool | None = None


class WaitingLetter(ApiModel):
    job: Annotated[str, Field(max_length=253)] | None = None
    writer: HandoffWriter | None = None
    written: Annotated[str, Field(max_length=40)] | None = None


class LedgerView(ApiModel):
    entries: Annotated[int | None, Field(ge=0, description="How many entries the ledger has held (folded ones "
                                                           "included).")] = None
    letter: Annotated[WaitingLetter | None, Field(
        json_schema_extra=NULLABLE, description="The letter that waits for the next lineage refusal: written by "
                                                "the last job, for the transcript stored now.")] = None


class RethreadedBy(ApiModel):
    job: Annotated[str, Field(max_length=253)] | None = None
    reason: SessionReason = None


class Retired(ApiModel):
    """The key was retired (``jobflow/retire.py``): its pull request or issue closed, or a person asked."""

    reason: Annotated[str, Field(max_length=64, description="pull-request-merged, pull-request-closed, "
                                                            "issue-closed or requested.")]
    at: Annotated[str | None, Field(json_schema_extra=DATE_TIME)] = None
    archive: Annotated[str | None, Field(
        max_length=128, json_schema_extra=NULLABLE,
        description="The store root's entry the key directory was archived as (sessions.retire: archive).")] = None


class FailedResumes(ApiModel):
    """Resumed jobs in a row that ended Failed on this key (``jobflow/lifecycle.py``)."""

    count: Annotated[int, Field(ge=0)]
    jobs: Annotated[list[Annotated[str, Field(max_length=253)]], Field(max_length=10)] = []
    quarantinedAt: Annotated[str | None, Field(
        json_schema_extra={**DATE_TIME, **NULLABLE},
        description="When the count reached sessions.quarantineAfter: the transcript is quarantined.")] = None


class KeyUsage(ApiModel):
    """The jobs that ended on a key and their tokens, by how they started (``jobflow/cost.py``)."""

    resumed: StartUsage | None = None
    rethreaded: StartUsage | None = None
    cold: StartUsage | None = None
    recentJobs: Annotated[list[Annotated[str, Field(max_length=253)]] | None, Field(
        max_length=16, description="The last jobs counted, so a job's end written twice (a restart between the "
                                   "SessionKey and the Job) counts once.")] = None


class SessionKeyStatus(ApiModel):
    observedGeneration: Annotated[int | None, Field(json_schema_extra=INT64)] = None
    conditions: Conditions | None = None
    bytes: Annotated[int | None, Field(json_schema_extra=NULLABLE)] = None
    venue: Annotated[Annotated[str, Field(max_length=253)] | None, Field(json_schema_extra=NULLABLE)] = None
    piVersion: Annotated[Annotated[str, Field(max_length=64)] | None, Field(json_schema_extra=NULLABLE)] = None
    population: Annotated[Population, Field(description=(
        "Who may resume the stored conversation: the author associations the Trigger of the job that stored it "
        "admits. A job whose Trigger admits anyone else starts cold (population-widened). Null: unknown (stored "
        "before the stamp, or by the store commands), which no job resumes."))] = None
    resumeChain: Annotated[int | None, Field(ge=0)] = None
    context: Annotated[ContextReading | None, Field(json_schema_extra=NULLABLE)] = None
    next: SessionReason = None
    lastJob: Annotated[str, Field(max_length=253)] | None = None
    lastReason: SessionReason = None
    lastPromotedAt: Annotated[str | None, Field(json_schema_extra=DATE_TIME)] = None
    lastPullRequest: Annotated[JobPullRequest | None, Field(
        description="The pull request the last job on this key that found one on its branch had, as the forge "
                    "confirmed it at that job's end (its status.outputs.pullRequest).")] = None
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


