"""The job Pod (ARCHITECTURE §4.6): deterministic, owned by its Job, restricted, token-free.

A job without a resolved session gets exactly the Pod it would have had without the resume
feature: the ``/session`` mount and ``PI_SESSION_FILE`` are the only difference, and only when a
key was resolved. Nothing derived from the key crosses into the Pod.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

JOB_LABEL = "pi-dispatch.dev/job"
SESSION_MOUNT = "/session"
SESSION_FILE = f"{SESSION_MOUNT}/current.jsonl"
WORKSPACE = "/workspace"
TERMINATION_LOG = "/dev/termination-log"
MAX_NAME = 63


@dataclass(frozen=True)
class PodInputs:
    """Everything the Pod is built from, already decided elsewhere."""

    job_name: str
    job_uid: str
    namespace: str
    image: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    staging_claim: str | None = None  # the staging PVC; only used when a session is mounted
    session_subpath: str | None = None  # "<job-uid>/session" when a key was resolved
    host_resume: bool = False  # the gates' verdict: the runner shapes the prompt by it (spec §4.1)
    # The operator's uid (the chart's securityContext.runAsUser): the staged copy is created 0600 in a
    # 0700 directory by the operator, so the job must run as the same uid to read and rewrite it.
    run_as_user: int = 65532


def pod_name(job_name: str) -> str:
    """``pij-<job>``, shortened with a hash when the Job's name is long, always the same for a Job."""
    name = f"pij-{job_name}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:10]
    return f"{name[:MAX_NAME - 11].rstrip('-.')}-{digest}"


def restricted_security_context(uid: int) -> dict[str, Any]:
    """What the ``restricted`` Pod Security Standard asks of a container."""
    return {
        "runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid,
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": False,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
    }


def job_pod(p: PodInputs) -> dict[str, Any]:
    """The Pod manifest for one Job."""
    mounted = p.session_subpath is not None
    if mounted and not p.staging_claim:
        raise ValueError("a session mount needs the staging claim")
    env = dict(p.env)
    if mounted:
        env["PI_SESSION_FILE"] = SESSION_FILE
        env["PI_SESSION_HOST_RESUME"] = "true" if p.host_resume else "false"
    container: dict[str, Any] = {
        "name": "pi",
        "image": p.image,
        "command": list(p.command),
        "workingDir": WORKSPACE,
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "securityContext": restricted_security_context(p.run_as_user),
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
        "volumeMounts": [{"name": "workspace", "mountPath": WORKSPACE}],
    }
    volumes: list[dict[str, Any]] = [{"name": "workspace", "emptyDir": {}}]
    if mounted:
        container["volumeMounts"].append({"name": "session", "mountPath": SESSION_MOUNT,
                                          "subPath": p.session_subpath})
        volumes.append({"name": "session", "persistentVolumeClaim": {"claimName": p.staging_claim}})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(p.job_name),
            "namespace": p.namespace,
            "labels": {JOB_LABEL: p.job_name, "app.kubernetes.io/managed-by": "pi-dispatch"},
            "ownerReferences": [{"apiVersion": "pi-dispatch.dev/v1alpha1", "kind": "Job", "name": p.job_name,
                                 "uid": p.job_uid, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": p.run_as_user, "runAsGroup": p.run_as_user,
                                "fsGroup": p.run_as_user, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
            "volumes": volumes,
        },
    }
