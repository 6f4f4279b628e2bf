"""The API's vocabulary: group and version, the closed lists the CRDs and the code share, the CEL rules.

Plain constants, cheap to import (no pydantic): the receiver's parsing and the command line use them;
the models (``models/``) and the CRDs (``crds.py``) are built from them.
"""

from __future__ import annotations

# The token fields of `status.tokens` are the ones a runner's report may carry: defined with the container
# contract (which the runner may import, and this package it may not), named here with the rest.
from pidispatch.contract import TOKEN_FIELDS as TOKEN_FIELDS

GROUP = "pi-dispatch.dev"
VERSION = "v1alpha1"
CATEGORY = "pi"

JOB_PHASES = ("Pending", "Refused", "Queued", "Running", "Succeeded", "Failed")
TRIGGER_EVENTS = ("issues.labeled", "issue_comment.created", "pull_request_review.submitted",
                  "pull_request_review_comment.created", "cron")
AUTH_SOURCES = ("app", "pat", "gh")
# GitHub's `author_association` of a comment or review. Who may start a job by writing one: by default
# people with a role in the repository (a stranger's `@pi` on a public repository starts nothing).
AUTHOR_ASSOCIATIONS = ("OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER",
                       "MANNEQUIN", "NONE")
DEFAULT_AUTHOR_ASSOCIATIONS = ("OWNER", "MEMBER", "COLLABORATOR")

# `resume` is typed boolean in the schema: CEL cannot see a field without a type, so a non-boolean
# value is refused by the apiserver's own type check ("spec.run.resume ... must be of type boolean").
_ARMED = "has(self.run.resume) && self.run.resume"
_COMMAND = "has(self.run.command)"
# A cron Trigger's jobs are forge jobs on its on.repository, and resume with a key of their own (jobflow/cron.py);
# only a local job (no forge, no repository) still has no session to continue.
_LOCAL = "(has(self.run.kind) && self.run.kind == 'local')"
_REPLICAS = "has(self.run.replicas)"

# In the documented order (docs/store-contract.md#trigger-admission). Each rule excuses the conflicts reported before
# it, so a Trigger with several conflicts is told about the first one only.
TRIGGER_RULES: list[dict[str, str]] = [
    {
        "rule": f"!({_ARMED} && {_COMMAND})",
        "fieldPath": ".run.resume",
        "reason": "FieldValueForbidden",
        "message": "run.resume cannot be combined with run.command yet: there is no design for how a resumed "
                   "conversation should treat a command dispatched again. This is a known gap that will be "
                   "closed, not a permanent limit; drop run.resume or run.command for now.",
    },
    {
        "rule": f"!({_ARMED} && {_LOCAL}) || {_COMMAND}",
        "fieldPath": ".run.resume",
        "reason": "FieldValueForbidden",
        "message": "run.resume is not supported on local jobs (run.kind: local) yet: sessions are wired into forge "
                   "jobs only, so a local job would run without a session while appearing to use one. This is a "
                   "known gap that will be closed, not a permanent limit; drop run.resume or run.kind: local (a "
                   "cron Trigger's forge jobs do resume).",
    },
    {
        "rule": f"!({_ARMED} && {_REPLICAS}) || {_COMMAND} || {_LOCAL}",
        "fieldPath": ".run.resume",
        "reason": "FieldValueForbidden",
        "message": "run.resume cannot be combined with run.replicas: replicas exist to produce independent "
                   "attempts while resume continues one conversation, and all replicas would share one key and "
                   "overwrite one transcript. This is a lasting limit; choose one of the two.",
    },
    {
        "rule": f"!({_ARMED} && has(self.run.secrets) && size(self.run.secrets) > 0) || {_COMMAND} || {_LOCAL} "
                f"|| {_REPLICAS}",
        "fieldPath": ".run.resume",
        "reason": "FieldValueForbidden",
        "message": "run.resume cannot be combined with run.secrets: transcripts are stored and replayed, so a "
                   "secret that showed up in any command output would be kept and handed to every later job on "
                   "that branch. This is a lasting limit with no escape hatch; drop one of the two.",
    },
]

JOB_FORGES = ("github",)
# A SessionKey is made by the operator from a Job, so it names only the forges a Job may: the key derivation
# still knows gitlab, forgejo and azure (store/keys.py, so keys stay pi-dispatch's), no path here serves them.
SESSIONKEY_FORGES = JOB_FORGES
# Lengths the receiver must keep to when it writes a Job (the Job CRD refuses longer ones).
COMMENT_MAX = 65536
REPOSITORY_MAX = 200
SENDER_MAX = 100
DELIVERY_MAX = 100
# The lifecycle's requests, as annotations on a SessionKey (jobflow/lifecycle.py): the receiver sets the first
# when a pull request or issue closes (the value: one of RETIRE_REASONS), a person may set either by hand.
RETIRE_ANNOTATION = "pi-dispatch.dev/retire"
# With a pull request's close, beside the reason: the pull request's number. The operator retires a head branch
# only when the job system owns it (jobflow/lifecycle.py ``pull_request_refusal``).
RETIRE_PULL_REQUEST_ANNOTATION = "pi-dispatch.dev/retire-pull-request"
RELEASE_ANNOTATION = "pi-dispatch.dev/release-quarantine"
RETIRE_REASONS = ("pull-request-merged", "pull-request-closed", "issue-closed")
