"""Helpers for tests that run Pods on the test kubelet."""

from __future__ import annotations

from typing import Any

from e2e.framework.kube import Kube
from testkit.wait import wait_until


def pod_path(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")


def wait_pod_phase(kube: Kube, namespace: str, name: str, phases: str | tuple[str, ...],
                   timeout: float = 60) -> dict:
    """Wait until the Pod's ``status.phase`` is one of ``phases``; return the Pod."""
    phases = (phases,) if isinstance(phases, str) else phases

    def check() -> Any:
        pod = kube.get(pod_path(namespace, name))
        return pod if pod.get("status", {}).get("phase") in phases else None

    return wait_until(f"Pod {namespace}/{name} phase in {phases}", check, timeout=timeout)


def wait_pod_gone(kube: Kube, namespace: str, name: str, timeout: float = 60) -> None:
    wait_until(f"Pod {namespace}/{name} to be deleted",
               lambda: kube.get_or_none(pod_path(namespace, name)) is None, timeout=timeout)


def container_status(pod: dict, container: str) -> dict:
    for s in pod.get("status", {}).get("containerStatuses") or []:
        if s["name"] == container:
            return s
    raise KeyError(f"no status for container {container!r} in {pod['metadata']['name']}")


def restricted_security_context() -> dict:
    """A restricted-profile container securityContext (the test kubelet ignores it when running)."""
    return {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 1000,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
