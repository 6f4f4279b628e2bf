"""The CRD manifests, built from one source: the reason enum of ``record.py`` and the rules below.

``python -m pidispatch.api.crds --write crds/`` writes ``crds/*.yaml``; a test proves the committed
files equal this output, and that the Helm chart ships the same files. The Trigger CRD carries the
load-time refusals of the session-store spec (§10.3) as CEL rules, so ``kubectl apply`` rejects a
Trigger that could never resume safely, with a message that names the conflict and says why.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pidispatch.record import SESSION_REASONS, JobReason

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
TOKEN_FIELDS = ("input", "output", "total", "cost", "metered", "rootTotal", "otherTotal", "looseTotal", "sessions",
                "calls", "unresolved", "unpriced", "childTotal", "childProcesses", "unmeteredChildren",
                "costUnreported", "costCapMicros", "costRefused", "boundExceeded", "longContext", "costUnjudged",
                "costUnanswered", "modelRefused")

# `resume` is typed boolean in the schema: CEL cannot see a field without a type, so a non-boolean
# value is refused by the apiserver's own type check ("spec.run.resume ... must be of type boolean").
_ARMED = "has(self.run.resume) && self.run.resume"
_COMMAND = "has(self.run.command)"
_CRON = "(self.on.event == 'cron' || (has(self.run.kind) && self.run.kind == 'local'))"
_REPLICAS = "has(self.run.replicas)"

# In the spec's order (§10.3). Each rule excuses the conflicts reported before it, so a Trigger
# with several conflicts is told about the first one only.
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
        "rule": f"!({_ARMED} && {_CRON}) || {_COMMAND}",
        "fieldPath": ".run.resume",
        "reason": "FieldValueForbidden",
        "message": "run.resume is not supported on cron triggers yet: sessions are wired into forge jobs only, "
                   "so a cron job would run without a session while appearing to use one. This is a known gap "
                   "that will be closed, not a permanent limit; drop run.resume from this trigger.",
    },
    {
        "rule": f"!({_ARMED} && {_REPLICAS}) || {_COMMAND} || {_CRON}",
        "fieldPath": ".run.resume",
        "reason": "FieldValueForbidden",
        "message": "run.resume cannot be combined with run.replicas: replicas exist to produce independent "
                   "attempts while resume continues one conversation, and all replicas would share one key and "
                   "overwrite one transcript. This is a lasting limit; choose one of the two.",
    },
    {
        "rule": f"!({_ARMED} && has(self.run.secrets) && size(self.run.secrets) > 0) || {_COMMAND} || {_CRON} "
                f"|| {_REPLICAS}",
        "fieldPath": ".run.resume",
        "reason": "FieldValueForbidden",
        "message": "run.resume cannot be combined with run.secrets: transcripts are stored and replayed, so a "
                   "secret that showed up in any command output would be kept and handed to every later job on "
                   "that branch. This is a lasting limit with no escape hatch; drop one of the two.",
    },
]


AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _string(max_length: int = 253, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length, **extra}


def conditions_schema() -> dict[str, Any]:
    """``metav1.Condition`` as the Kubernetes API conventions define it."""
    return {
        "type": "array", "maxItems": 16,
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object", "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": _string(316, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                                             r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"),
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "reason": _string(1024, minLength=1, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"),
                "message": _string(32768),
            },
        },
    }


def session_reason_schema() -> dict[str, Any]:
    return {"type": "string", "enum": list(SESSION_REASONS), "nullable": True}


def _crd(kind: str, plural: str, short_names: list[str], spec: dict[str, Any], status: dict[str, Any],
         columns: list[dict[str, Any]], description: str, spec_rules: list[dict[str, str]] | None = None
         ) -> dict[str, Any]:
    spec_schema = {"type": "object", **spec}
    if spec_rules:
        spec_schema["x-kubernetes-validations"] = spec_rules
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/part-of": "pi-dispatch"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(),
                      "shortNames": short_names, "categories": [CATEGORY]},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [*columns, AGE_COLUMN],
                "schema": {"openAPIV3Schema": {
                    "type": "object", "description": description, "required": ["spec"],
                    "properties": {"spec": spec_schema, "status": {"type": "object", **status}},
                }},
            }],
        },
    }


def _condition_column(name: str, condition: str, priority: int = 0) -> dict[str, Any]:
    column = {"name": name, "type": "string", "jsonPath": f'.status.conditions[?(@.type=="{condition}")].status'}
    return {**column, "priority": priority} if priority else column


def trigger_crd() -> dict[str, Any]:
    return _crd(
        "Trigger", "triggers", ["pitrigger", "pitriggers", "pit"],
        spec={
            "required": ["on", "run"],
            "properties": {
                "on": {"type": "object", "required": ["event"], "properties": {
                    "event": {"type": "string", "enum": list(TRIGGER_EVENTS)},
                    "label": _string(), "phrase": _string(200),
                    "repository": _string(200, pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"),
                    "schedule": _string(100),
                    "authorAssociations": {
                        "type": "array", "maxItems": len(AUTHOR_ASSOCIATIONS),
                        "items": {"type": "string", "enum": list(AUTHOR_ASSOCIATIONS)},
                        "description": "Who may start a job with a comment or a review, by their GitHub author "
                                       "association. Unset: " + ", ".join(DEFAULT_AUTHOR_ASSOCIATIONS) + ".",
                    },
                }},
                "run": {"type": "object", "properties": {
                    "kind": {"type": "string", "enum": ["forge", "local"]},
                    "flow": _string(),
                    "resume": {"type": "boolean",
                               "description": "Continue the previous job's conversation on the same branch."},
                    "command": _string(4096),
                    "replicas": {"type": "integer", "minimum": 2, "maximum": 3},
                    "secrets": {"type": "array", "maxItems": 32, "items": _string()},
                    "model": _string(128), "image": _string(512), "piVersion": _string(64),
                    "auth": {"type": "string", "enum": list(AUTH_SOURCES)},
                }},
            },
        },
        status={"properties": {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "conditions": conditions_schema(),
            "bounds": {"type": "object", "properties": {
                "ttlDays": {"type": "integer"}, "maxBytes": {"type": "integer"},
                "maxAgeDays": {"type": "integer"}, "maxResumeChain": {"type": "integer"},
                "maxContextPct": {"type": "integer", "nullable": True},
            }},
        }},
        columns=[
            {"name": "Event", "type": "string", "jsonPath": ".spec.on.event"},
            _condition_column("Ready", "Ready"),
            _condition_column("Resume", "ResumeArmed"),
            _condition_column("Store", "SessionStore", priority=1),
        ],
        description="One trigger: which forge event starts a pi job, and how that job runs.",
        spec_rules=TRIGGER_RULES,
    )


def job_crd() -> dict[str, Any]:
    number = {"type": "integer", "minimum": 1}
    return _crd(
        "Job", "jobs", ["pijob", "pijobs", "pij"],
        spec={
            "required": ["trigger", "forge", "repository"],
            "properties": {
                "trigger": _string(), "forge": {"type": "string", "enum": ["github"]},
                "repository": _string(200), "issue": number, "pullRequest": number,
                "comment": _string(65536), "sender": _string(100), "fork": {"type": "boolean"},
                "authSource": {"type": "string", "enum": list(AUTH_SOURCES)},
                "deliveryId": _string(100),
                "resolved": {"type": "object", "properties": {"headRef": _string(255),
                                                               "headRepository": _string(200)}},
            },
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "a Job's event facts cannot change once it exists"},
            ],
        },
        status={"properties": {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "phase": {"type": "string", "enum": list(JOB_PHASES)},
            "reason": {"type": "string", "enum": [r.value for r in JobReason], "nullable": True},
            "conditions": conditions_schema(),
            "podName": _string(),
            "session": {"type": "object", "nullable": True, "properties": {
                "resumed": {"type": "boolean"}, "reason": session_reason_schema(),
                "bytes": {"type": "integer", "minimum": 0, "nullable": True},
            }},
            "tokens": {"type": "object", "nullable": True,
                       "properties": {name: {"type": "number", "nullable": True} for name in TOKEN_FIELDS}},
            "queuedAt": {"type": "string", "format": "date-time"},
            "startedAt": {"type": "string", "format": "date-time"},
            "completedAt": {"type": "string", "format": "date-time"},
        }},
        columns=[
            {"name": "Trigger", "type": "string", "jsonPath": ".spec.trigger"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Resumed", "type": "boolean", "jsonPath": ".status.session.resumed"},
            {"name": "Session", "type": "string", "jsonPath": ".status.session.reason"},
            {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": 1},
            {"name": "Pod", "type": "string", "jsonPath": ".status.podName", "priority": 1},
        ],
        description="One delivery of a forge event to one Trigger, and what its job did.",
    )


def sessionkey_crd() -> dict[str, Any]:
    return _crd(
        "SessionKey", "sessionkeys", ["pisession", "pisessions", "psk"],
        spec={
            "required": ["forge", "repository", "branch"],
            "properties": {"forge": {"type": "string", "enum": ["github", "gitlab", "forgejo", "azure"]},
                           "repository": _string(200), "branch": _string(255)},
        },
        status={"properties": {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "conditions": conditions_schema(),
            "bytes": {"type": "integer", "nullable": True}, "venue": _string(nullable=True),
            "piVersion": _string(64, nullable=True), "resumeChain": {"type": "integer", "minimum": 0},
            "context": {"type": "object", "nullable": True, "properties": {
                "tokens": {"type": "integer"}, "window": {"type": "integer"}, "model": _string(128, nullable=True)}},
            "next": session_reason_schema(),
            "lastJob": _string(), "lastReason": session_reason_schema(),
            "lastPromotedAt": {"type": "string", "format": "date-time"},
            "judgedWith": {"type": "object", "description": "The pi version and model of the last job on this key: "
                           "Resumable judges the next delivery as if it ran the same.", "properties": {
                               "piVersion": _string(64, nullable=True), "model": _string(128, nullable=True)}},
        }},
        columns=[
            {"name": "Repository", "type": "string", "jsonPath": ".spec.repository"},
            {"name": "Branch", "type": "string", "jsonPath": ".spec.branch"},
            _condition_column("Stored", "Stored"),
            _condition_column("Resumable", "Resumable"),
            {"name": "Next", "type": "string", "jsonPath": ".status.next"},
            {"name": "Bytes", "type": "integer", "jsonPath": ".status.bytes", "priority": 1},
            {"name": "Chain", "type": "integer", "jsonPath": ".status.resumeChain", "priority": 1},
            {"name": "Last Job", "type": "string", "jsonPath": ".status.lastJob", "priority": 1},
        ],
        description="One key of the session store (name: the 32-hex key); deleting it forgets that conversation.",
    )


ALL = {"triggers": trigger_crd, "jobs": job_crd, "sessionkeys": sessionkey_crd}


def render(name: str) -> str:
    import yaml

    header = "# Generated by `python -m pidispatch.api.crds --write crds/` from operator/pidispatch/api/crds.py.\n"
    return header + yaml.safe_dump(ALL[name](), sort_keys=False, width=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the CRD manifests.")
    parser.add_argument("--write", metavar="DIR", type=Path, required=True)
    args = parser.parse_args(argv)
    args.write.mkdir(parents=True, exist_ok=True)
    for name in ALL:
        (args.write / f"{GROUP}_{name}.yaml").write_text(render(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
