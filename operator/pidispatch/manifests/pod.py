"""The job Pod (docs/architecture.md#pod): deterministic, owned by its Job, restricted, token-free.

A job without a resolved session gets exactly the Pod it would have had without the resume
feature: the ``/session`` mount and ``PI_SESSION_FILE`` are the only difference, and only when a
key was resolved. Nothing derived from the key crosses into the Pod. In transfer mode ``/session`` is an
emptyDir the runner fills over HTTPS (``PI_TRANSFER_*``; the token by ``secretKeyRef`` from the Job's own
``pij-<job>-transfer-<uid>`` Secret, the CA from a ConfigMap): no claim, so no co-location either.

The GitHub token reaches the job as ``GH_TOKEN`` by ``secretKeyRef`` only (the per-job Secret of an
App installation token, or the deployment's pat/gh Secret): its value is never in the Pod manifest.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pidispatch.contract import (
    AGENT_DIR,
    CA_BUNDLE_DIR,
    CA_BUNDLE_KEY,
    CONTAINER,
    ENV_AGENT_DIR,
    ENV_CHECKOUT,
    ENV_HOST_RESUME,
    ENV_PREVIOUS_COMMIT,
    ENV_RETHREAD,
    ENV_RETHREAD_PCT,
    ENV_RUN_SECRETS,
    ENV_RUN_SECRETS_DIR,
    ENV_SECRET_NAMES,
    ENV_SESSION_FILE,
    ENV_SUBJECT,
    ENV_WORKSPACE_LIMIT,
    FORGE_TOKEN_NAMES,
    JOB_LABEL,
    MANAGED_BY,
    MODELS_JSON,
    RELEASE_LABEL,
    RUN_SECRETS_DIR,
    SESSION_FILE,
    SESSION_MOUNT,
    TERMINATION_LOG,
    WORKSPACE,
    credential_name_problem,
    run_secret_problem,
)
from pidispatch.contract import gateway_wire as gateway_protocol
from pidispatch.contract.overrides import VOLUME_PREFIX, env_name_problem, mount_path_problem
from pidispatch.manifests.scheduling import scheduling_fields
from pidispatch.settings.scheduling import Scheduling
from pidispatch.transfer import protocol as transfer_protocol

GH_TOKEN = "GH_TOKEN"
TOKEN_SECRET_KEY = "token"
MAX_NAME = 63
MAX_LABEL_VALUE = 63
# A Kubernetes label value: empty, or alphanumeric at both ends with [-_.A-Za-z0-9] between.
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-_.A-Za-z0-9]*[A-Za-z0-9])?)?")


@dataclass(frozen=True)
class WorkspaceInputs:
    """What the job needs to clone and push: the checkout (no token), the identity, the forge's host and CA."""

    checkout: dict[str, Any] | None = None  # PI_CHECKOUT: {"url", "ref", "sha", "branch"}
    subject: dict[str, str] | None = None  # PI_SUBJECT: the issue's or pull request's title and body
    previous: dict[str, Any] | None = None  # PI_PREVIOUS_COMMIT: the head moved since the conversation
    git_name: str = "pi-dispatch[bot]"
    git_email: str = "pi-dispatch[bot]@users.noreply.github.com"
    gh_host: str | None = None  # GitHub Enterprise's host[:port] (GH_HOST); None on github.com
    ca_bundle_configmap: str | None = None  # a ConfigMap with ca.crt: trusted by git, gh and pi


def gh_host(web_url: str) -> str | None:
    """``GH_HOST`` for ``gh``: the web URL's host[:port] unless it is github.com (gh's default)."""
    host = urlsplit(web_url).netloc
    return None if host in ("github.com", "") else host


def workspace_env(w: WorkspaceInputs) -> dict[str, str]:
    """The workspace's environment: facts only, never a credential (the token comes by secretKeyRef)."""
    env = {"GIT_AUTHOR_NAME": w.git_name, "GIT_AUTHOR_EMAIL": w.git_email,
           "GIT_COMMITTER_NAME": w.git_name, "GIT_COMMITTER_EMAIL": w.git_email,
           "GIT_TERMINAL_PROMPT": "0", "GH_PROMPT_DISABLED": "1", "GH_NO_UPDATE_NOTIFIER": "1"}
    for name, value in ((ENV_CHECKOUT, w.checkout), (ENV_SUBJECT, w.subject), (ENV_PREVIOUS_COMMIT, w.previous)):
        if value is not None:
            env[name] = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if w.gh_host:
        env["GH_HOST"] = w.gh_host
    if w.ca_bundle_configmap:
        bundle = f"{CA_BUNDLE_DIR}/{CA_BUNDLE_KEY}"
        env.update({"SSL_CERT_FILE": bundle, "GIT_SSL_CAINFO": bundle, "NODE_EXTRA_CA_CERTS": bundle})
    return env


@dataclass(frozen=True)
class TransferInputs:
    """``sessions.staging.mode: transfer``: where this job fetches and hands back its copy, and with what."""

    url: str  # this Job's own session URL (transfer/protocol.py session_url)
    secret: str  # the per-job Secret its token comes from (transfer_secret_name)
    ca_configmap: str  # key ca.crt: the CA the runner verifies the operator with
    max_bytes: int


@dataclass(frozen=True)
class GatewayInputs:
    """The job reaches out only through the gateway (docs/gateway.md): its capability's Secret, where the
    gateway and its proxy are, and the CA it is verified with. With it, the Pod holds no model key and no
    forge token: ``GH_TOKEN`` and ``GH_ENTERPRISE_TOKEN`` (read by git's askpass and ``gh``) carry the capability."""

    url: str  # https://<service>.<namespace>.svc
    proxy: str  # http://<service>.<namespace>.svc:3128
    ca_configmap: str  # key ca.crt
    secret: str  # the Job's own Secret holding its capability (contract/gateway_wire.py secret_name)


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
    # The gates' verdict: the runner shapes the prompt by it (docs/store-contract.md#operator-side).
    host_resume: bool = False
    rethread: str | None = None  # the gate's lineage reason when a letter and the ledger are staged to unpack
    rethread_pct: int = 70  # the context use at which the runner packs a handoff (0: never)
    # The operator's uid (the chart's securityContext.runAsUser): the staged copy is created 0600 in a
    # 0700 directory by the operator, so the job must run as the same uid to read and rewrite it.
    run_as_user: int = 65532
    # GH_TOKEN by secretKeyRef: (Secret name, key); None gives the Pod no forge token.
    github_token: tuple[str, str] | None = None
    # The run timeout: the Pod's activeDeadlineSeconds (the kubelet stops it and fails it, DeadlineExceeded).
    active_deadline_seconds: int | None = None
    # The container's resources: {"requests": {...}, "limits": {...}} of quantity strings.
    resources: dict[str, dict[str, str]] = field(default_factory=dict)
    # Model credentials: env name -> (Secret name, key), by secretKeyRef (never a value in the spec).
    credentials: dict[str, tuple[str, str]] = field(default_factory=dict)
    # run.secrets: Secrets of the job's namespace, each mounted read-only at RUN_SECRETS_DIR/<name>/<key>.
    run_secrets: tuple[str, ...] = ()
    # A ConfigMap whose models.json is mounted read-only into pi's (writable) agent directory.
    models_configmap: str | None = None
    workspace: WorkspaceInputs = field(default_factory=WorkspaceInputs)
    # The workspace emptyDir's sizeLimit (a quantity) and the same in bytes (PI_WORKSPACE_LIMIT_BYTES: the
    # runner refuses a tree larger than this before checking it out); None: unbounded (tests only).
    workspace_size_limit: tuple[str, int] | None = None
    # The operator's Helm release (RELEASE_LABEL), so that its uninstall hook deletes its own Pods only.
    release: str | None = None
    # Where the Pod may run: the deployment's rules, the staging mode's co-location (scheduling.py).
    scheduling: Scheduling = field(default_factory=Scheduling)
    # The Trigger's own node pool: run.nodeSelector over the deployment's, run.tolerations added.
    trigger_node_selector: dict[str, str] = field(default_factory=dict)
    trigger_tolerations: tuple[dict[str, Any], ...] = ()
    # The Trigger's Pod overrides (docs/nodes.md#pod-overrides): plain env, an affinity that only narrows
    # the deployment's, a priority class, ConfigMaps mounted read-only under /mnt (name, ConfigMap, mount path).
    trigger_env: tuple[tuple[str, str], ...] = ()
    trigger_affinity: dict[str, Any] = field(default_factory=dict)
    trigger_priority_class: str | None = None
    trigger_volumes: tuple[tuple[str, str, str], ...] = ()
    # Staging by transfer: the session directory is an emptyDir the runner fills over HTTPS (no claim, no
    # co-location); None in mount mode and for a job without a session.
    transfer: TransferInputs | None = None
    # The gateway: set, the Pod's only credential is its capability (no github_token, no credentials).
    gateway: GatewayInputs | None = None


def pod_name(job_name: str) -> str:
    """``pij-<job>``, shortened with a hash when the Job's name is long, always the same for a Job."""
    return _shortened(job_name, "pij-", MAX_NAME)


def token_secret_name(job_name: str, job_uid: str) -> str:
    """The per-job Secret of a minted forge token: ``<the Pod's name>-token-<the Job's uid>``."""
    return _job_secret_name(job_name, job_uid, "token")


def transfer_secret_name(job_name: str, job_uid: str) -> str:
    """The per-job Secret of the transfer token (transfer mode): ``<the Pod's name>-transfer-<the Job's uid>``."""
    return _job_secret_name(job_name, job_uid, "transfer")


def gateway_secret_name(job_name: str, job_uid: str) -> str:
    """The per-job Secret holding the Job's gateway capability, named after its Pod and uid."""
    return _job_secret_name(job_name, job_uid, "gateway")


def _job_secret_name(job_name: str, job_uid: str, purpose: str) -> str:
    """A per-job Secret's name: the Job's Pod's name, what it holds, the Job's uid.

    By uid, so a Job re-created under the same name never finds an old one. By the Pod's name, so the chart's
    Pod policy can let a Pod read only the Secrets named after itself: a Pod's name is unique among the
    namespace's Pods, its ownerReference's uid is whatever its maker wrote
    (docs/security.md#the-operators-pods-and-secrets).
    """
    return f"{pod_name(job_name)}-{purpose}-{job_uid}"


def _shortened(text: str, prefix: str, limit: int) -> str:
    """``prefix + text`` when it fits in ``limit``, else its head and a hash of ``text`` (stable, distinct)."""
    name = prefix + text
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{name[:limit - 11].rstrip('-._')}-{digest}"


def job_label(job_name: str) -> str:
    """The ``pi-dispatch.dev/job`` label value of a Job's Pod and Secret: a valid label value for any Job name.

    A Job name may have up to 253 characters (a DNS subdomain) but a label value only 63: the name
    itself when it is a valid label value, else a stable short form (its head and a hash), which is
    what a selector for that Job's Pods must use. The Job a Pod belongs to is read from the Pod's
    controller ownerReference, never from this label.
    """
    if len(job_name) <= MAX_LABEL_VALUE and _LABEL_VALUE.fullmatch(job_name):
        return job_name
    return _shortened(job_name, "", MAX_LABEL_VALUE)


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
    if mounted and p.transfer is not None:
        raise ValueError("a job's session is mounted or transferred, never both")
    staged = mounted or p.transfer is not None
    if p.gateway is not None and (p.github_token is not None or p.credentials):
        raise ValueError("a job behind the gateway holds no forge token and no model key")
    for name in p.credentials:
        why = credential_name_problem(name)
        if why is not None:
            raise ValueError(f"credential {why}")
    env = {k: v for k, v in p.env.items() if not ((p.github_token or p.gateway) and k in FORGE_TOKEN_NAMES)
           and k not in p.credentials and k not in transfer_protocol.ENVS and k not in gateway_protocol.ENVS}
    env.update(workspace_env(p.workspace))
    env.update(_trigger_env(p.trigger_env, reserved=set(env) | set(p.credentials)))
    for secret in p.run_secrets:
        why = run_secret_problem(secret)
        if why is not None:
            raise ValueError(f"run.secrets: {why}")
    if p.run_secrets:
        env[ENV_RUN_SECRETS_DIR] = RUN_SECRETS_DIR
        env[ENV_RUN_SECRETS] = ",".join(dict.fromkeys(p.run_secrets))
    if p.credentials:
        env[ENV_SECRET_NAMES] = ",".join(sorted(p.credentials))
    if p.models_configmap or p.gateway is not None:
        env[ENV_AGENT_DIR] = AGENT_DIR
    if p.workspace_size_limit is not None:
        env[ENV_WORKSPACE_LIMIT] = str(p.workspace_size_limit[1])
    if staged:
        env[ENV_SESSION_FILE] = SESSION_FILE
        env[ENV_HOST_RESUME] = "true" if p.host_resume else "false"
        env[ENV_RETHREAD_PCT] = str(p.rethread_pct)
        if p.rethread:
            env[ENV_RETHREAD] = p.rethread
    secret_env = dict(p.credentials)
    if p.transfer is not None:
        env[transfer_protocol.ENV_URL] = p.transfer.url
        env[transfer_protocol.ENV_CA_FILE] = f"{transfer_protocol.CA_DIR}/{transfer_protocol.CA_KEY}"
        env[transfer_protocol.ENV_MAX_BYTES] = str(p.transfer.max_bytes)
        secret_env[transfer_protocol.ENV_TOKEN] = (p.transfer.secret, transfer_protocol.SECRET_KEY)
    if p.gateway is not None:
        env.update(gateway_env(p.gateway, models=p.models_configmap is not None))
        for name in (gateway_protocol.ENV_TOKEN, GH_TOKEN, "GH_ENTERPRISE_TOKEN"):
            secret_env[name] = (p.gateway.secret, gateway_protocol.SECRET_KEY)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": p.image,
        "command": list(p.command),
        "workingDir": WORKSPACE,
        "env": _env_list(env, p.github_token, secret_env, enterprise=p.workspace.gh_host is not None),
        "securityContext": {**restricted_security_context(p.run_as_user),
                            "runAsGroup": p.scheduling.pod_security_context.get("runAsGroup", p.run_as_user)},
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
        "volumeMounts": [{"name": "workspace", "mountPath": WORKSPACE}],
    }
    if p.gateway is not None:
        # pi's agent directory is the runner's to write (the routed models.json); the deployment's models.json
        # is read from beside it; the gateway's CA is public.
        container["volumeMounts"] += [
            {"name": "agent", "mountPath": AGENT_DIR},
            {"name": "gateway-ca", "mountPath": gateway_protocol.CA_DIR, "readOnly": True}]
        if p.models_configmap:
            container["volumeMounts"].append({"name": "models", "mountPath": gateway_protocol.MODELS_DIR,
                                              "readOnly": True})
    elif p.models_configmap:
        container["volumeMounts"] += [
            {"name": "agent", "mountPath": AGENT_DIR},
            {"name": "models", "mountPath": f"{AGENT_DIR}/{MODELS_JSON}", "subPath": MODELS_JSON, "readOnly": True}]
    if p.resources:
        container["resources"] = {part: dict(quantities) for part, quantities in p.resources.items() if quantities}
    workspace: dict[str, Any] = {"sizeLimit": p.workspace_size_limit[0]} if p.workspace_size_limit else {}
    volumes: list[dict[str, Any]] = [{"name": "workspace", "emptyDir": workspace}]
    if p.workspace.ca_bundle_configmap:
        container["volumeMounts"].append({"name": "ca-bundle", "mountPath": CA_BUNDLE_DIR, "readOnly": True})
        volumes.append({"name": "ca-bundle", "configMap": {"name": p.workspace.ca_bundle_configmap,
                                                           "items": [{"key": CA_BUNDLE_KEY, "path": CA_BUNDLE_KEY}]}})
    if p.models_configmap or p.gateway is not None:
        volumes.append({"name": "agent", "emptyDir": {}})
    if p.models_configmap:
        volumes.append({"name": "models", "configMap": {"name": p.models_configmap,
                                                        "items": [{"key": MODELS_JSON, "path": MODELS_JSON}]}})
    if p.gateway is not None:
        volumes.append({"name": "gateway-ca", "configMap": {"name": p.gateway.ca_configmap, "items": [
            {"key": gateway_protocol.CA_KEY, "path": gateway_protocol.CA_KEY}]}})
    for index, secret in enumerate(dict.fromkeys(p.run_secrets)):
        # Files, not env values: a file per key, readable by the job's group only (the Pod's fsGroup).
        container["volumeMounts"].append({"name": f"run-secret-{index}", "mountPath": f"{RUN_SECRETS_DIR}/{secret}",
                                          "readOnly": True})
        volumes.append({"name": f"run-secret-{index}", "secret": {"secretName": secret, "defaultMode": 0o440}})
    for name, configmap, path in p.trigger_volumes:
        why = mount_path_problem(path)
        if why is not None:
            raise ValueError(f"run.volumes[{name}].mountPath: {why}")
        container["volumeMounts"].append({"name": VOLUME_PREFIX + name, "mountPath": path, "readOnly": True})
        volumes.append({"name": VOLUME_PREFIX + name, "configMap": {"name": configmap, "defaultMode": 0o444}})
    if mounted:
        container["volumeMounts"].append({"name": "session", "mountPath": SESSION_MOUNT,
                                          "subPath": p.session_subpath})
        volumes.append({"name": "session", "persistentVolumeClaim": {"claimName": p.staging_claim}})
    if p.transfer is not None:
        # Where the mount would have put the copy; the runner fills it before pi starts. The CA is public.
        container["volumeMounts"] += [
            {"name": "session", "mountPath": SESSION_MOUNT},
            {"name": "transfer-ca", "mountPath": transfer_protocol.CA_DIR, "readOnly": True}]
        volumes += [{"name": "session", "emptyDir": {}},
                    {"name": "transfer-ca", "configMap": {"name": p.transfer.ca_configmap, "items": [
                        {"key": transfer_protocol.CA_KEY, "path": transfer_protocol.CA_KEY}]}}]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # The groups may be the cluster's (scheduling.pod_security_context); the user is always the
        # operator's, which owns the staged copy.
        "securityContext": {"runAsGroup": p.run_as_user, "fsGroup": p.run_as_user,
                            **p.scheduling.pod_security_context, "runAsNonRoot": True,
                            "runAsUser": p.run_as_user, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": volumes,
        **scheduling_fields(p.scheduling, mounts_staging=mounted, trigger_node_selector=p.trigger_node_selector,
                            trigger_tolerations=p.trigger_tolerations, trigger_affinity=p.trigger_affinity,
                            trigger_priority_class=p.trigger_priority_class),
    }
    if p.active_deadline_seconds:
        spec["activeDeadlineSeconds"] = p.active_deadline_seconds
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(p.job_name),
            "namespace": p.namespace,
            "labels": {JOB_LABEL: job_label(p.job_name), **MANAGED_BY,
                       **({RELEASE_LABEL: p.release} if p.release else {})},
            "ownerReferences": [_owner(p.job_name, p.job_uid)],
        },
        "spec": spec,
    }


def _trigger_env(given: tuple[tuple[str, str], ...], reserved: set[str]) -> dict[str, str]:
    """A Trigger's ``run.env``, refused whole when one name is the contract's or one the Pod already sets (a
    model credential, a ``job.env`` entry, the workspace's): an override never replaces what the operator sets."""
    for name, _ in given:
        why = env_name_problem(name)
        if why is None and name in reserved:
            why = f"{name} is already set for the job (job.env, a credential, or the operator's own)"
        if why is not None:
            raise ValueError(f"run.env: {why}")
    return dict(given)


def _owner(job_name: str, job_uid: str) -> dict[str, Any]:
    return {"apiVersion": "pi-dispatch.dev/v1alpha1", "kind": "Job", "name": job_name, "uid": job_uid,
            "controller": True, "blockOwnerDeletion": True}


def _env_list(env: dict[str, str], github_token: tuple[str, str] | None,
              credentials: dict[str, tuple[str, str]], *, enterprise: bool = False) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    entries += [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
                for name, (secret, key) in credentials.items()]
    if github_token is not None:
        name, key = github_token
        entries.append({"name": GH_TOKEN, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}})
        if enterprise:  # gh sends only GH_ENTERPRISE_TOKEN to a host other than github.com
            entries.append({"name": "GH_ENTERPRISE_TOKEN", "valueFrom": {"secretKeyRef": {"name": name, "key": key}}})
    return sorted(entries, key=lambda e: e["name"])


def gateway_env(g: GatewayInputs, *, models: bool) -> dict[str, str]:
    """Where the job's gateway is (its capability comes by ``secretKeyRef``). ``GH_HOST`` is the gateway's
    host: ``gh`` sends its enterprise token there, and only there."""
    env = {gateway_protocol.ENV_URL: g.url, gateway_protocol.ENV_PROXY: g.proxy,
           gateway_protocol.ENV_CA_FILE: f"{gateway_protocol.CA_DIR}/{gateway_protocol.CA_KEY}",
           "GH_HOST": urlsplit(g.url).netloc}
    if models:
        env[gateway_protocol.ENV_MODELS_FILE] = f"{gateway_protocol.MODELS_DIR}/{MODELS_JSON}"
    return env


def job_gateway_secret(job_name: str, job_uid: str, namespace: str, capability: str) -> dict[str, Any]:
    """The per-job Secret holding the Job's gateway capability: owned by the Job, immutable, labelled like its
    Pod. A second attempt deletes it and creates it again with a capability of a later expiry."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "immutable": True,
        "metadata": {
            "name": gateway_secret_name(job_name, job_uid),
            "namespace": namespace,
            "labels": {JOB_LABEL: job_label(job_name), **MANAGED_BY},
            "ownerReferences": [_owner(job_name, job_uid)],
        },
        "stringData": {gateway_protocol.SECRET_KEY: capability},
    }


def job_transfer_secret(job_name: str, job_uid: str, namespace: str, token: str) -> dict[str, Any]:
    """The per-job Secret holding the Job's transfer token: owned by the Job (the garbage collector removes it
    with the Job; retention sooner), immutable, labelled like the Job's Pod. The token is the uid's HMAC
    (transfer/token.py), so a second create after a restart holds the same value and its 409 is harmless."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "immutable": True,
        "metadata": {
            "name": transfer_secret_name(job_name, job_uid),
            "namespace": namespace,
            "labels": {JOB_LABEL: job_label(job_name), **MANAGED_BY},
            "ownerReferences": [_owner(job_name, job_uid)],
        },
        "stringData": {transfer_protocol.SECRET_KEY: token},
    }


def job_token_secret(job_name: str, job_uid: str, namespace: str, secret_name: str, token: str,
                     expires_at: str) -> dict[str, Any]:
    """The per-job Secret holding an App installation token: owned by the Job (the garbage collector
    removes it with the Job), immutable, labelled like the Job's Pod."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "immutable": True,
        "metadata": {
            "name": secret_name,
            "namespace": namespace,
            "labels": {JOB_LABEL: job_label(job_name), **MANAGED_BY},
            "annotations": {"pi-dispatch.dev/expires-at": expires_at},
            "ownerReferences": [_owner(job_name, job_uid)],
        },
        "stringData": {TOKEN_SECRET_KEY: token},
    }
