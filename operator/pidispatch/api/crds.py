"""The CRD manifests, generated from the API's models (``models/``), the API's one source.

``python -m pidispatch.api.crds --write crds/`` writes ``crds/*.yaml``; a test proves the committed
files equal this output, and that the Helm chart ships the same files. The schemas come from the
pydantic models through ``schema.structural``; this module adds what is not a schema: names, printer
columns, descriptions. The Trigger CRD carries the load-time refusals of the session store
(docs/store-contract.md#trigger-admission) as CEL rules (``vocabulary.TRIGGER_RULES``, attached to
``models.TriggerSpec``), so ``kubectl apply`` rejects a Trigger that could never resume safely, with a
message that names the conflict and says why.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pidispatch.api import models
from pidispatch.api.schema import structural
from pidispatch.api.vocabulary import (  # noqa: F401 (the vocabulary, importable from here as before)
    AUTH_SOURCES,
    AUTHOR_ASSOCIATIONS,
    CATEGORY,
    DEFAULT_AUTHOR_ASSOCIATIONS,
    GROUP,
    JOB_PHASES,
    TOKEN_FIELDS,
    TRIGGER_EVENTS,
    TRIGGER_RULES,
    VERSION,
)

AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _crd(kind: str, plural: str, short_names: list[str], spec: type[BaseModel], status: type[BaseModel],
         columns: list[dict[str, Any]], description: str) -> dict[str, Any]:
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
                    "properties": {"spec": {"type": "object", **structural(spec)},
                                   "status": {"type": "object", **structural(status)}},
                }},
            }],
        },
    }


def _condition_column(name: str, condition: str, priority: int = 0) -> dict[str, Any]:
    column = {"name": name, "type": "string", "jsonPath": f'.status.conditions[?(@.type=="{condition}")].status'}
    return {**column, "priority": priority} if priority else column


def trigger_crd() -> dict[str, Any]:
    return _crd(
        "Trigger", "triggers", ["pitrigger", "pitriggers", "pit"], models.TriggerSpec, models.TriggerStatus,
        columns=[
            {"name": "Event", "type": "string", "jsonPath": ".spec.on.event"},
            _condition_column("Ready", "Ready"),
            _condition_column("Resume", "ResumeArmed"),
            _condition_column("Store", "SessionStore", priority=1),
            {"name": "Next", "type": "string", "jsonPath": ".status.schedule.nextSlot"},  # a cron Trigger's next slot
        ],
        description="One trigger: which forge event starts a pi job, and how that job runs.",
    )


def job_crd() -> dict[str, Any]:
    return _crd(
        "Job", "jobs", ["pijob", "pijobs", "pij"], models.JobSpec, models.JobStatus,
        columns=[
            {"name": "Trigger", "type": "string", "jsonPath": ".spec.trigger"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Resumed", "type": "boolean", "jsonPath": ".status.session.resumed"},
            {"name": "Session", "type": "string", "jsonPath": ".status.session.reason"},
            {"name": "Rethreaded", "type": "boolean", "jsonPath": ".status.session.rethreaded"},
            {"name": "PR", "type": "integer", "jsonPath": ".status.outputs.pullRequest.number"},
            {"name": "Pushed", "type": "string", "jsonPath": ".status.outputs.branch", "priority": 1},
            {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": 1},
            {"name": "Pod", "type": "string", "jsonPath": ".status.podName", "priority": 1},
        ],
        description="One delivery of a forge event to one Trigger, and what its job did.",
    )


def sessionkey_crd() -> dict[str, Any]:
    return _crd(
        "SessionKey", "sessionkeys", ["pisession", "pisessions", "psk"], models.SessionKeySpec,
        models.SessionKeyStatus,
        columns=[
            {"name": "Repository", "type": "string", "jsonPath": ".spec.repository"},
            {"name": "Branch", "type": "string", "jsonPath": ".spec.branch"},
            _condition_column("Stored", "Stored"),
            _condition_column("Resumable", "Resumable"),
            {"name": "Next", "type": "string", "jsonPath": ".status.next"},
            {"name": "Ledger", "type": "integer", "jsonPath": ".status.ledger.entries"},
            {"name": "PR", "type": "integer", "jsonPath": ".status.lastPullRequest.number"},
            _condition_column("Rethreaded", "Rethreaded", priority=1),
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
