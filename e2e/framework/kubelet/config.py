"""What a container is configured from: its env and ``envFrom`` (ConfigMaps, Secrets, ``fieldRef``), as a real
kubelet resolves them. A missing ConfigMap or Secret makes the container wait (``Waiting``), as there."""

from __future__ import annotations

import base64
import os
import re
import sys
from typing import Any

from e2e.framework.kube import Kube
from e2e.framework.kubelet.base import PodFailed, Waiting, expand


class PodConfig:
    """The objects one Pod's containers read, through the apiserver: ConfigMaps, Secrets, its own fields."""

    def __init__(self, kube: Kube, pod: dict, kubelet: Any) -> None:
        md = pod["metadata"]
        self.kube, self.pod, self.kl = kube, pod, kubelet
        self.ns, self.name = md["namespace"], md["name"]

    def env(self, c: dict) -> dict[str, str]:
        """Container ``c``'s environment: PATH and HOME of the kubelet, the ``kubernetes`` Service, ``envFrom``
        then ``env`` (``$(VAR)`` expanded)."""
        env: dict[str, str] = {
            # the kubelet's own interpreter dir first: `python -m pidispatch ...` finds the project's venv
            "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)]),
            "HOSTNAME": self.pod["spec"].get("hostname") or self.name,
        }
        if os.environ.get("HOME"):
            env["HOME"] = os.environ["HOME"]
        if self.kl.server_port:
            env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(self.kl.server_port),
                       KUBERNETES_SERVICE_PORT_HTTPS=str(self.kl.server_port))
        for ef in c.get("envFrom") or []:
            prefix = ef.get("prefix", "")
            if "configMapRef" in ef:
                data = self.configmap(ef["configMapRef"]["name"], ef["configMapRef"].get("optional"))
            else:
                data = {k: base64.b64decode(v).decode() for k, v in
                        self.secret(ef["secretRef"]["name"], ef["secretRef"].get("optional")).items()}
            env.update({prefix + k: v for k, v in data.items()})
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            elif "valueFrom" in e:
                v = self.value_from(e["valueFrom"], c)
                if v is not None:
                    env[e["name"]] = v
            else:
                env[e["name"]] = ""
        return env

    def value_from(self, vf: dict, c: dict) -> str | None:
        if "fieldRef" in vf:
            return self.field(vf["fieldRef"]["fieldPath"])
        if "configMapKeyRef" in vf:
            r = vf["configMapKeyRef"]
            data = self.configmap(r["name"], r.get("optional"))
            if r["key"] not in data and not r.get("optional"):
                raise PodFailed("CreateContainerConfigError", f"key {r['key']} not found in ConfigMap {r['name']}")
            return data.get(r["key"])
        if "secretKeyRef" in vf:
            r = vf["secretKeyRef"]
            data = self.secret(r["name"], r.get("optional"))
            if r["key"] not in data and not r.get("optional"):
                raise PodFailed("CreateContainerConfigError", f"key {r['key']} not found in Secret {r['name']}")
            return base64.b64decode(data[r["key"]]).decode() if r["key"] in data else None
        if "resourceFieldRef" in vf:
            return "0"
        return None

    def field(self, path: str) -> str:
        md = self.pod["metadata"]
        simple = {"metadata.name": md["name"], "metadata.namespace": md["namespace"], "metadata.uid": md["uid"],
                  "spec.nodeName": self.kl.node_name,
                  "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", "default"),
                  "status.hostIP": "127.0.0.1", "status.podIP": "127.0.0.1", "status.hostIPs": "127.0.0.1",
                  "status.podIPs": "127.0.0.1"}
        if path in simple:
            return simple[path]
        m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            return (md.get(m.group(1)) or {}).get(m.group(2), "")
        if path in ("metadata.labels", "metadata.annotations"):
            d = md.get(path.split(".")[1]) or {}
            return "\n".join(f'{k}="{v}"' for k, v in sorted(d.items()))
        raise PodFailed("CreateContainerConfigError", f"unsupported fieldRef {path}")

    def configmap(self, name: str, optional: bool | None) -> dict[str, str]:
        cm = self.kube.get_or_none(f"/api/v1/namespaces/{self.ns}/configmaps/{name}")
        if cm is None:
            if optional:
                return {}
            raise Waiting(f"configmap {name!r} not found")
        return cm.get("data") or {}

    def secret(self, name: str, optional: bool | None) -> dict[str, str]:
        s = self.kube.get_or_none(f"/api/v1/namespaces/{self.ns}/secrets/{name}")
        if s is None:
            if optional:
                return {}
            raise Waiting(f"secret {name!r} not found")
        return s.get("data") or {}
