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

One module per resource (``trigger``, ``job``, ``sessionkey``) and what they share (``base``); every name is
importable from here, as before the split.
"""

from __future__ import annotations

from pidispatch.api.models.base import (
    CONDITION_REASON,
    CONDITION_TYPE,
    DATE_TIME,
    INT64,
    NULLABLE,
    AuthorAssociation,
    AuthSource,
    Condition,
    Conditions,
    JobForge,
    JobPhase,
    JobReasonValue,
    M,
    SessionKeyForge,
    SessionReason,
    SessionReasonValue,
    TriggerEvent,
    parsed,
    problem,
)
from pidispatch.api.models.job import (
    Commit,
    HandoffStatus,
    HandoffWriter,
    JobCheckout,
    JobGateway,
    JobHandoff,
    JobOutputs,
    JobPullRequest,
    JobSession,
    JobSpec,
    JobStatus,
    JobTokens,
    JobWorkspace,
    Number,
    Resolved,
    StartUsage,
)
from pidispatch.api.models.sessionkey import (
    ContextReading,
    FailedResumes,
    JudgedWith,
    KeyUsage,
    LastCommit,
    LedgerView,
    RethreadedBy,
    Retired,
    SessionKeySpec,
    SessionKeyStatus,
    WaitingLetter,
)
from pidispatch.api.models.trigger import (
    DNS_SUBDOMAIN,
    LABEL_KEY,
    LABEL_VALUE,
    Bounds,
    Credentials,
    CronStatus,
    NodeSelector,
    Quantities,
    Resources,
    SecretKey,
    Toleration,
    TriggerOn,
    TriggerRun,
    TriggerSpec,
    TriggerStatus,
)

__all__ = [
    "AuthSource",
    "AuthorAssociation",
    "Bounds",
    "CONDITION_REASON",
    "CONDITION_TYPE",
    "Commit",
    "Condition",
    "Conditions",
    "ContextReading",
    "Credentials",
    "CronStatus",
    "DATE_TIME",
    "DNS_SUBDOMAIN",
    "FailedResumes",
    "HandoffStatus",
    "HandoffWriter",
    "INT64",
    "JobCheckout",
    "JobForge",
    "JobGateway",
    "JobHandoff",
    "JobOutputs",
    "JobPullRequest",
    "JobPhase",
    "JobReasonValue",
    "JobSession",
    "JobSpec",
    "JobStatus",
    "JobTokens",
    "JobWorkspace",
    "JudgedWith",
    "KeyUsage",
    "LABEL_KEY",
    "LABEL_VALUE",
    "LastCommit",
    "LedgerView",
    "M",
    "NULLABLE",
    "NodeSelector",
    "Number",
    "Quantities",
    "Resolved",
    "Resources",
    "RethreadedBy",
    "Retired",
    "SecretKey",
    "SessionKeyForge",
    "SessionKeySpec",
    "SessionKeyStatus",
    "SessionReason",
    "SessionReasonValue",
    "StartUsage",
    "Toleration",
    "TriggerEvent",
    "TriggerOn",
    "TriggerRun",
    "TriggerSpec",
    "TriggerStatus",
    "WaitingLetter",
    "parsed",
    "problem",
]
