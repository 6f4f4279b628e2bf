"""``pidispatch doctor`` at the edge: what the filesystem and the cluster say, gathered for the checks.

The checks themselves are pure (``diagnose.py``); this module reads the store's directory and asks the
apiserver through the project's one API client (``kubeapi.Api``), then runs and prints the checks.
"""

from __future__ import annotations

import argparse
import os
import ssl
import stat
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from pidispatch.api.crds import GROUP, VERSION
from pidispatch.doctor.check import (
    Check,
    Status,
    exit_code,
    render_json,
    render_text,
)
from pidispatch.doctor.cluster import (
    CRD_NAMES,
    REQUIRED_ACCESS,
    Access,
    ClusterFacts,
)
from pidispatch.doctor.diagnose import (
    BOUND_VARIABLES,
    StoreFacts,
    diagnose,
)
from pidispatch.doctor.gateway import GatewayFacts
from pidispatch.settings import OperatorSettings
from pidispatch.settings.gateway import Gateway


def explicit_bounds(env: Mapping[str, str]) -> frozenset[str]:
    """The bound variables that are set (pidispatch.settings has already refused an empty or malformed value)."""
    return frozenset(v for v in BOUND_VARIABLES if env.get(v) is not None)


def inspect_store(path: str) -> StoreFacts:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return StoreFacts(path, exists=False)
    except OSError as exc:
        return StoreFacts(path, exists=False, error=exc.strerror or type(exc).__name__)
    is_dir = stat.S_ISDIR(st.st_mode)
    return StoreFacts(path, exists=True, is_dir=is_dir, mode=stat.S_IMODE(st.st_mode),
                      writable=is_dir and os.access(path, os.W_OK | os.X_OK), uid=os.getuid())


class ClusterUnreachable(Exception):
    """No answer from the apiserver, or no way to ask one: the report says so in one line."""

    def __init__(self, message: str, fix: str = "kubectl get --raw /readyz") -> None:
        super().__init__(message)
        self.fix = fix


def _connect() -> Any:
    """The project's API client (in-cluster inside a Pod, else the kubeconfig), asking each thing once."""
    from kubernetes.config.config_exception import ConfigException

    from pidispatch.kubeapi import Api

    try:
        return Api.from_environment(timeout=10, retries=0)
    except (ConfigException, OSError, ValueError) as exc:
        raise ClusterUnreachable(f"no cluster to ask: not in a Pod, and no usable kubeconfig ({exc})",
                                 "pidispatch doctor --offline") from None


def _denial(exc: Any) -> str:
    known = {401: "401 Unauthorized (credentials refused)", 403: "forbidden", 404: "not found"}
    return known.get(exc.status, f"HTTP {exc.status} {exc.message[:80]}".rstrip())


class _Reader:
    """The few reads the checks need, each answering plain dicts; 403/404 are answers, not errors."""

    def __init__(self, api: Any) -> None:
        self.api = api

    def user(self) -> str | None:
        from pidispatch.kubeapi import ApiError

        try:
            review = self.api.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", {
                "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        except ApiError as exc:
            if exc.status in (0, 401):
                raise
            return None
        return ((review.get("status") or {}).get("userInfo") or {}).get("username")

    def crd(self, name: str) -> Mapping[str, Any] | None:
        # list, not get: kopf's CRD scanning needs list and watch, so that is what a Role grants
        items = self.api.list("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                              fieldSelector=f"metadata.name={name}")
        return items[0] if items else None

    def served(self) -> frozenset[str]:
        """Resource names of our group-version per API discovery (open to every identity)."""
        resources = self.api.get_or_none(f"/apis/{GROUP}/{VERSION}") or {}
        return frozenset(r.get("name") for r in resources.get("resources") or ())

    def triggers(self, namespace: str) -> list[Mapping[str, Any]]:
        return list(self.api.list(f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/triggers"))

    def pvc(self, name: str, namespace: str) -> Mapping[str, Any]:
        return dict(self.api.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"))

    def allowed(self, access: Access, namespace: str) -> bool:
        attributes = {"namespace": namespace, "verb": access.verb, "group": access.group,
                      "resource": access.resource}
        if access.subresource:
            attributes["subresource"] = access.subresource
        review = self.api.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}})
        return bool((review.get("status") or {}).get("allowed"))


def gather_claims(api: Any, settings: OperatorSettings, namespace: str
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The PVCs this deployment mounts (the staging claim, and every claim of this process's own Pod:
    the operator's or the ``helm test`` Pod, which mount the same), and, when one of them is being
    deleted, the namespace's Pods (to name those holding it). Missing objects are skipped."""
    names = {settings.staging_claim} if settings.staging_claim else set()
    if settings.pod_name:
        own = api.get_or_none(f"/api/v1/namespaces/{namespace}/pods/{settings.pod_name}") or {}
        names |= {str(v["persistentVolumeClaim"].get("claimName")) for v in (own.get("spec") or {}).get("volumes")
                  or [] if v.get("persistentVolumeClaim")}
    pvcs = [pvc for name in sorted(names)
            if (pvc := api.get_or_none(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"))]
    terminating = any(pvc["metadata"].get("deletionTimestamp") for pvc in pvcs)
    return pvcs, list(api.list(f"/api/v1/namespaces/{namespace}/pods")) if terminating else []


GATEWAY_CA_KEY = "ca.crt"
PROBE_SECONDS = 5


def gather_gateway(api: Any, gateway: Gateway, namespace: str) -> GatewayFacts:
    """Read the key, the CA ConfigMap and the gateway's answer. ``api`` is the project's client; an apiserver
    failure other than 403/404 propagates (doctor's cluster line reports it)."""
    from pidispatch.gateway.capability import CapabilityError, load_key
    from pidispatch.kubeapi import ApiError

    key_error = None
    try:
        load_key(gateway.key_file)
    except CapabilityError as exc:
        key_error = str(exc)
    try:
        found = api.get_or_none(f"/api/v1/namespaces/{namespace}/configmaps/{gateway.ca_configmap}")
    except ApiError as exc:
        if exc.status != 403:
            raise
        return GatewayFacts(key_error, f"ConfigMap {gateway.ca_configmap} cannot be read (forbidden)")
    ca = ((found or {}).get("data") or {}).get(GATEWAY_CA_KEY)
    if not ca:
        what = "has no ca.crt" if found else "is missing"
        return GatewayFacts(key_error, f"ConfigMap {gateway.ca_configmap} {what}")
    status, error = probe(gateway.url, ca)
    return GatewayFacts(key_error, None, status, error)


def probe(url: str, ca_pem: str) -> tuple[int | None, str | None]:
    """``GET <url>/`` verified with ``ca_pem`` only: (its status, None) when it answered, else (None, why)."""
    try:
        context = ssl.create_default_context(cadata=ca_pem)
    except (ssl.SSLError, ValueError) as exc:
        return None, f"its CA is not a PEM certificate ({type(exc).__name__})"
    request = urllib.request.Request(url + "/", method="GET")
    # No proxy from doctor's own environment: the gateway is reached as job Pods reach it.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=PROBE_SECONDS) as response:
            return int(response.status), None
    except urllib.error.HTTPError as exc:
        return exc.code, None  # an answer: the gateway refuses a request without a capability
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ssl.SSLCertVerificationError):
            return None, f"its certificate does not verify with the CA job Pods mount: {reason.verify_message}"
        return None, str(reason)[:160]
    except (TimeoutError, OSError) as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"


def gather_cluster(settings: OperatorSettings, env: Mapping[str, str]) -> ClusterFacts:
    """Everything the Kubernetes checks read; raises :class:`ClusterUnreachable` when nothing answers."""
    from pidispatch.kubeapi import ApiError

    api = _connect()
    ns = settings.namespace or api.namespace or "default"
    read = _Reader(api)
    facts: dict[str, Any] = {"namespace": ns}
    try:
        facts["user"] = read.user()
        try:
            facts["crds"] = {name: read.crd(name) for name in CRD_NAMES}
        except ApiError as exc:
            if exc.status != 403:
                raise
            facts["crds"], facts["served"] = None, read.served()
        try:
            facts["triggers"] = read.triggers(ns)
        except ApiError as exc:
            # 404: the CRD is missing, so no Trigger can exist (the crd line says so)
            if exc.status == 0:
                raise
            if exc.status != 404:
                facts["triggers"], facts["triggers_error"] = None, _denial(exc)
        if settings.store.sessions_dir is not None and settings.staging_claim is not None:
            try:
                facts["staging_pvc"] = read.pvc(settings.staging_claim, ns)
            except ApiError as exc:
                if exc.status == 0:
                    raise
                if exc.status != 404:
                    facts["staging_pvc_error"] = _denial(exc)
        try:
            facts["claims"], facts["claim_pods"] = gather_claims(api, settings, ns)
        except ApiError as exc:
            if exc.status in (0, 401):
                raise  # 403: the staging line already says what cannot be read
        if settings.gateway is not None:
            facts["gateway"] = gather_gateway(api, settings.gateway, ns)
        try:
            facts["access"] = [(a, read.allowed(a, ns)) for a in REQUIRED_ACCESS]
        except ApiError as exc:
            if exc.status in (0, 401):
                raise
            facts["access_error"] = _denial(exc)
    except ApiError as exc:
        if exc.status == 0:
            # urllib3 prefixes the connection object's repr ("<...HTTPSConnection object at 0x...>: Failed to ...")
            reason = exc.message.rsplit(">: ", 1)[-1]
            raise ClusterUnreachable(f"cannot reach the apiserver at {api.server}: {reason[:160]}") from None
        # Only the status: never the request or the response headers.
        raise ClusterUnreachable(f"the apiserver at {api.server} answered {_denial(exc)}") from None
    return ClusterFacts(**facts)


def main(args: argparse.Namespace) -> int:
    """Run the checks and print them; 1 when any fails, 0 otherwise. A malformed setting raises
    ``ConfigError`` (the command line turns it into exit 2)."""
    env = os.environ
    settings = OperatorSettings.from_env(env)
    store = inspect_store(settings.store.sessions_dir) if settings.store.sessions_dir else None
    cluster: ClusterFacts | Check | None = None
    if not args.offline:
        try:
            cluster = gather_cluster(settings, env)
        except ClusterUnreachable as exc:
            cluster = Check("cluster", Status.FAIL, str(exc), exc.fix)
    checks = diagnose(settings, store, cluster, explicit_bounds(env))
    sys.stdout.write(render_json(checks) if args.json else render_text(checks))
    return exit_code(checks)
