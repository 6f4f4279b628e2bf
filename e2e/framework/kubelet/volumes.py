"""Volumes as local directories and files: a PVC is its bound PV's hostPath, an emptyDir a directory of the
Pod's, a hostPath itself; ConfigMaps, Secrets, the downward API and projected ServiceAccount tokens (from the
TokenRequest API) are written out as files. ``subPath``/``subPathExpr`` and ``readOnly`` are honoured."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from e2e.framework.kube import Kube
from e2e.framework.kubelet.attach import MultiAttach, attach, record_failed_attach
from e2e.framework.kubelet.base import DEFAULT_TERMINATION_PATH, PodFailed, Waiting, expand
from e2e.framework.kubelet.config import PodConfig


class PodVolumes:
    """One Pod's volumes: ``volumes`` (name -> host path) and ``read_only`` fill in as ``prepare`` succeeds."""

    def __init__(self, kube: Kube, pod: dict, pod_dir: Path, config: PodConfig) -> None:
        md = pod["metadata"]
        self.kube, self.pod, self.dir, self.config = kube, pod, pod_dir, config
        self.ns, self.name, self.uid = md["namespace"], md["name"], md["uid"]
        self.volumes: dict[str, Path] = {}
        self.read_only: dict[str, bool] = {}
        self.failed_attach: set[str] = set()  # PVs whose Multi-Attach error has an Event already

    def mounts(self, c: dict, env: dict[str, str], term_file: Path) -> list[dict]:
        """Container ``c``'s bind mounts (``source``, ``target``, ``readOnly``), the termination message file
        last."""
        mounts = []
        for vm in c.get("volumeMounts") or []:
            src = self.volumes.get(vm["name"])
            if src is None:
                raise PodFailed("VolumeNotFound", f"volumeMount {vm['name']!r} has no volume")
            sub = vm.get("subPath") or (expand(vm["subPathExpr"], env) if vm.get("subPathExpr") else "")
            if sub:
                if Path(sub).is_absolute() or ".." in Path(sub).parts:
                    raise PodFailed("InvalidSubPath", f"subPath {sub!r} must be relative without '..'")
                src = src / sub
                if not src.exists():
                    src.mkdir(parents=True, exist_ok=True)
            mounts.append({"source": str(src), "target": vm["mountPath"],
                           "readOnly": bool(vm.get("readOnly") or self.read_only.get(vm["name"]))})
        mounts.append({"source": str(term_file),
                       "target": c.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH, "readOnly": False})
        return mounts

    def prepare(self) -> None:
        """Every volume not prepared yet; ``Waiting`` while a PVC is unbound or a ConfigMap or Secret missing."""
        for v in self.pod["spec"].get("volumes") or []:
            name = v["name"]
            if name in self.volumes:
                continue
            vdir = self.dir / "volumes" / name
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                pvc = self.kube.get_or_none(f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims/{claim}")
                if pvc is None:
                    raise Waiting(f"persistentvolumeclaim {claim!r} not found")
                if pvc.get("status", {}).get("phase") != "Bound":
                    raise Waiting(f"persistentvolumeclaim {claim!r} is not bound")
                pv = self.kube.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
                src = pv["spec"].get("hostPath") or pv["spec"].get("local")
                if not src:
                    raise PodFailed("UnsupportedVolume", f"PV {pv['metadata']['name']} is not hostPath/local")
                # (a kubelet without the option, e.g. a test's stand-in, mounts as the single node always did)
                if getattr(self.config.kl, "exclusive_attach", False):
                    self.attach(pv["metadata"]["name"], claim)
                path = Path(src["path"])
                path.mkdir(parents=True, exist_ok=True)
                self.volumes[name] = path
                self.read_only[name] = bool(v["persistentVolumeClaim"].get("readOnly"))
            elif "emptyDir" in v:
                vdir.mkdir(parents=True, exist_ok=True)
                vdir.chmod(0o777)
                self.volumes[name] = vdir
            elif "hostPath" in v:
                path = Path(v["hostPath"]["path"])
                if v["hostPath"].get("type") in ("DirectoryOrCreate",):
                    path.mkdir(parents=True, exist_ok=True)
                self.volumes[name] = path
            elif "configMap" in v or "secret" in v or "downwardAPI" in v or "projected" in v:
                files = self.files(v)
                vdir.mkdir(parents=True, exist_ok=True)
                for rel, (data, mode) in files.items():
                    f = vdir / rel
                    f.parent.mkdir(parents=True, exist_ok=True)
                    f.write_bytes(data)
                    f.chmod(mode)
                self.volumes[name] = vdir
                self.read_only[name] = True
            else:
                kind = next((k for k in v if k != "name"), "?")
                raise PodFailed("UnsupportedVolume", f"volume {name!r}: type {kind} is not supported by the "
                                                     "test kubelet")

    def attach(self, pv: str, claim: str) -> None:
        """Attach ``pv`` to this node (``e2e/framework/kubelet/attach.py``); the first Multi-Attach error is recorded as
        an Event, then the Pod waits as a real one does."""
        try:
            attach(self.kube, pv, self.config.kl.node_name, self.ns, claim)
        except MultiAttach as e:
            if pv not in self.failed_attach:
                self.failed_attach.add(pv)
                record_failed_attach(self.kube, self.pod, str(e))
            raise

    def files(self, v: dict) -> dict[str, tuple[bytes, int]]:
        out: dict[str, tuple[bytes, int]] = {}
        sources: list[dict] = []
        default_mode = 0o644
        if "projected" in v:
            sources = v["projected"].get("sources") or []
            default_mode = v["projected"].get("defaultMode", 0o644)
        else:
            key = next(k for k in ("configMap", "secret", "downwardAPI") if k in v)
            sources = [{key: v[key]}]
            default_mode = v[key].get("defaultMode", 0o644)

        def add(data: dict[str, bytes], items: list[dict] | None, optional: bool | None, what: str) -> None:
            if items:
                for it in items:
                    if it["key"] not in data:
                        if optional:
                            continue
                        raise Waiting(f"key {it['key']!r} not found in {what}")
                    out[it["path"]] = (data[it["key"]], it.get("mode", default_mode))
            else:
                for k, b in data.items():
                    out[k] = (b, default_mode)

        for s in sources:
            if "configMap" in s:
                r = s["configMap"]
                data = {k: x.encode() for k, x in self.config.configmap(r["name"], r.get("optional")).items()}
                add(data, r.get("items"), r.get("optional"), f"configmap {r['name']}")
            elif "secret" in s:
                r = s["secret"]
                name = r.get("secretName") or r.get("name")
                data = {k: base64.b64decode(x) for k, x in self.config.secret(name, r.get("optional")).items()}
                add(data, r.get("items"), r.get("optional"), f"secret {name}")
            elif "downwardAPI" in s:
                for it in s["downwardAPI"].get("items") or []:
                    if "fieldRef" in it:
                        out[it["path"]] = (self.config.field(it["fieldRef"]["fieldPath"]).encode(),
                                           it.get("mode", default_mode))
            elif "serviceAccountToken" in s:
                r = s["serviceAccountToken"]
                sa = self.pod["spec"].get("serviceAccountName") or "default"
                spec: dict[str, Any] = {"expirationSeconds": max(int(r.get("expirationSeconds", 3607)), 600),
                                        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.name,
                                                           "uid": self.uid}}
                if r.get("audience"):
                    spec["audiences"] = [r["audience"]]
                tr = self.kube.create(f"/api/v1/namespaces/{self.ns}/serviceaccounts/{sa}/token",
                                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                       "spec": spec})
                out[r["path"]] = (tr["status"]["token"].encode(), 0o600)
            else:
                raise PodFailed("UnsupportedVolume", f"projected source {list(s)} is not supported")
        return out

