"""Staging by transfer wired into the operator (issue 33 item 2): its settings, the job Pod, the per-job Secret
and the completion.

The settings are read by the operator's own parser; the job flow runs through the dispatcher against the
in-memory apiserver (``testkit.jobflow``) with a real store and staging on disk. What a Pod is given is read
from the manifest the operator created; the upload's commit is the marker the real server writes
(``tests/transfer/test_transfer_runner.py`` runs the runner against that server).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.crds import GROUP, VERSION
from pidispatch.contract import SESSION_FILE, SESSION_MOUNT
from pidispatch.jobflow.dispatcher import Dispatcher
from pidispatch.jobflow.slots import Slots
from pidispatch.manifests.pod import PodInputs, TransferInputs, job_pod, transfer_secret_name
from pidispatch.settings import ConfigError, OperatorSettings, Settings
from pidispatch.settings.scheduling import Scheduling
from pidispatch.settings.staging import Staging, Transfer, TransferLimits
from pidispatch.transfer import protocol
from pidispatch.transfer.token import job_token
from testkit.jobflow import Clock, condition, phase, pump
from testkit.memoryapi import JOBS, NS, PODS, TRIGGERS, MemoryApi

KEY = b"transfer-key-" + b"x" * 40
UID = "0b3c2a9e-5d1f-4c6e-9a7b-1e2d3c4b5a69"
BASE = "https://rel-pi-dispatch-transfer.pi-ns.svc:8443"
TRANSFER_ENV = {
    "PI_DISPATCH_STAGING_MODE": "transfer",
    "PI_DISPATCH_TRANSFER_URL": BASE,
    "PI_DISPATCH_TRANSFER_CERT_FILE": "/etc/pi-dispatch/transfer-tls/tls.crt",
    "PI_DISPATCH_TRANSFER_KEY_FILE": "/etc/pi-dispatch/transfer-tls/tls.key",
    "PI_DISPATCH_TRANSFER_TOKEN_KEY_FILE": "/etc/pi-dispatch/transfer-key/key",
    "PI_DISPATCH_TRANSFER_CA_CONFIGMAP": "rel-pi-dispatch-transfer-ca",
}


# -- settings ---------------------------------------------------------------------------------------------------
def test_mount_is_the_default_and_needs_none_of_the_transfer_settings() -> None:
    staging = OperatorSettings.from_env({}).staging
    assert (staging.mode, staging.transfer) == ("mount", None)


def test_transfer_mode_reads_every_server_setting() -> None:
    transfer = OperatorSettings.from_env({**TRANSFER_ENV, "PI_DISPATCH_TRANSFER_PORT": "9443",
                                          "PI_DISPATCH_TRANSFER_MAX_BYTES": "1048576"}).staging.transfer
    assert transfer == Transfer(base_url=BASE, port=9443, cert_file="/etc/pi-dispatch/transfer-tls/tls.crt",
                                key_file="/etc/pi-dispatch/transfer-tls/tls.key",
                                token_key_file="/etc/pi-dispatch/transfer-key/key",
                                ca_configmap="rel-pi-dispatch-transfer-ca", max_bytes=1048576)
    assert transfer.limits == TransferLimits(max_connections=256, head_seconds=10, idle_seconds=15, body_seconds=300)


def test_the_servers_limits_are_read_from_their_variables() -> None:
    transfer = OperatorSettings.from_env({**TRANSFER_ENV, "PI_DISPATCH_TRANSFER_MAX_CONNECTIONS": "64",
                                          "PI_DISPATCH_TRANSFER_HEAD_SECONDS": "5",
                                          "PI_DISPATCH_TRANSFER_IDLE_SECONDS": "30",
                                          "PI_DISPATCH_TRANSFER_BODY_SECONDS": "600"}).staging.transfer
    assert transfer is not None
    assert transfer.limits == TransferLimits(max_connections=64, head_seconds=5, idle_seconds=30, body_seconds=600)


REFUSED = [
    ("a mode of its own", {"PI_DISPATCH_STAGING_MODE": "copy"}, "PI_DISPATCH_STAGING_MODE", "mount or transfer"),
    ("plain HTTP", {"PI_DISPATCH_TRANSFER_URL": "http://x.svc:8443"}, "PI_DISPATCH_TRANSFER_URL", "TLS is never off"),
    ("a URL with a path", {"PI_DISPATCH_TRANSFER_URL": BASE + "/v1"}, "PI_DISPATCH_TRANSFER_URL", "no path"),
    ("a relative certificate", {"PI_DISPATCH_TRANSFER_CERT_FILE": "tls.crt"}, "PI_DISPATCH_TRANSFER_CERT_FILE",
     "absolute path"),
    ("port 0", {"PI_DISPATCH_TRANSFER_PORT": "0"}, "PI_DISPATCH_TRANSFER_PORT", "from 1 to 65535"),
    ("a cap below a KiB", {"PI_DISPATCH_TRANSFER_MAX_BYTES": "100"}, "PI_DISPATCH_TRANSFER_MAX_BYTES", "from 1024"),
    ("no connection at all", {"PI_DISPATCH_TRANSFER_MAX_CONNECTIONS": "0"}, "PI_DISPATCH_TRANSFER_MAX_CONNECTIONS",
     "from 1 to 16384"),
    ("no head deadline", {"PI_DISPATCH_TRANSFER_HEAD_SECONDS": "0"}, "PI_DISPATCH_TRANSFER_HEAD_SECONDS",
     "whole number of seconds from 1"),
    ("a fractional idle bound", {"PI_DISPATCH_TRANSFER_IDLE_SECONDS": "1.5"}, "PI_DISPATCH_TRANSFER_IDLE_SECONDS",
     "whole number of seconds"),
    ("a body deadline past a day", {"PI_DISPATCH_TRANSFER_BODY_SECONDS": "86401"},
     "PI_DISPATCH_TRANSFER_BODY_SECONDS", "to 86400"),
    ("a ConfigMap name out of shape", {"PI_DISPATCH_TRANSFER_CA_CONFIGMAP": "Not_A_Name"},
     "PI_DISPATCH_TRANSFER_CA_CONFIGMAP", "name"),
] + [(f"no {name}", {name: None}, name, "required with PI_DISPATCH_STAGING_MODE=transfer")
     for name in TRANSFER_ENV if name != "PI_DISPATCH_STAGING_MODE"]


@pytest.mark.parametrize(("change", "variable", "words"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_a_transfer_setting_that_cannot_work_is_refused_naming_it(change: dict[str, str | None], variable: str,
                                                                   words: str) -> None:
    env = {k: v for k, v in {**TRANSFER_ENV, **change}.items() if v is not None}
    with pytest.raises(ConfigError) as refused:
        OperatorSettings.from_env(env)
    assert refused.value.variable == variable and words in str(refused.value), str(refused.value)


# -- the job Pod -------------------------------------------------------------------------------------------------
TRANSFER_POD = TransferInputs(url=protocol.session_url(BASE, UID), secret=transfer_secret_name("delivery-1", UID),
                              ca_configmap="rel-pi-dispatch-transfer-ca", max_bytes=1 << 20)


def transfer_pod(**changes: Any) -> dict[str, Any]:
    inputs = dict(job_name="delivery-1", job_uid=UID, namespace=NS, image="job:1", command=["pidispatch", "runner"],
                  scheduling=Scheduling(colocate_with={"app": "pi-dispatch"}), transfer=TRANSFER_POD)
    return job_pod(PodInputs(**{**inputs, **changes}))


def env_of(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}


def test_a_transfer_pod_mounts_no_claim_and_is_not_co_located() -> None:
    pod = transfer_pod()
    assert not [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert "affinity" not in pod["spec"], "a ReadWriteOnce claim's co-location is for Pods that mount it"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert volumes[mounts[SESSION_MOUNT]["name"]] == {"name": "session", "emptyDir": {}}
    ca = mounts[protocol.CA_DIR]
    assert ca["readOnly"] is True
    assert volumes[ca["name"]]["configMap"] == {"name": "rel-pi-dispatch-transfer-ca", "items": [
        {"key": "ca.crt", "path": "ca.crt"}]}
    mount_mode = transfer_pod(transfer=None, staging_claim="staging", session_subpath=f"{UID}/session")
    assert mount_mode["spec"]["affinity"]["podAffinity"], "the same rules co-locate a Pod that mounts the claim"


def test_the_runner_is_told_its_own_url_and_reads_its_token_from_its_own_secret() -> None:
    env = env_of(transfer_pod(env={protocol.ENV_TOKEN: "planted", protocol.ENV_URL: "https://elsewhere"}))
    assert env[protocol.ENV_URL]["value"] == f"{BASE}/v1/jobs/{UID}/session"
    assert env[protocol.ENV_TOKEN] == {"name": protocol.ENV_TOKEN, "valueFrom": {"secretKeyRef": {
        "name": f"pij-delivery-1-transfer-{UID}", "key": "token"}}}
    assert env[protocol.ENV_CA_FILE]["value"] == f"{protocol.CA_DIR}/ca.crt"
    assert env[protocol.ENV_MAX_BYTES]["value"] == str(1 << 20)
    assert env["PI_SESSION_FILE"]["value"] == SESSION_FILE


def test_a_session_is_mounted_or_transferred_never_both() -> None:
    with pytest.raises(ValueError, match="never both"):
        transfer_pod(staging_claim="staging", session_subpath=f"{UID}/session")


# -- the job flow: the per-job Secret, the Pod, the completion ---------------------------------------------------
@pytest.fixture
def world(tmp_path: Path) -> dict[str, Any]:
    key_file = tmp_path / "transfer.key"
    key_file.write_bytes(KEY)
    sessions, staging = tmp_path / "sessions", tmp_path / "jobs"
    sessions.mkdir()
    staging.mkdir()
    settings = OperatorSettings(
        store=Settings(sessions_dir=str(sessions), allow_gh_source=True), staging_dir=str(staging),
        staging_claim="rel-pi-dispatch-staging", max_concurrent_jobs=4,
        job_scheduling=Scheduling(colocate_with={"app": "pi-dispatch"}),
        staging=Staging("transfer", Transfer(base_url=BASE, port=8443, cert_file="/x/tls.crt", key_file="/x/tls.key",
                                             token_key_file=str(key_file), ca_configmap="ca", max_bytes=1 << 20)))
    api = MemoryApi(kubernetes_uids=True)
    api.create(TRIGGERS, {"metadata": {"name": "armed"}, "spec": {
        "on": {"event": "issue_comment.created", "phrase": "@pi", "repositories": ["acme/*"]},
        "run": {"model": "fake/fake-model", "piVersion": "0.73.1", "resume": True}}})
    c = Dispatcher(settings, api, NS)  # type: ignore[arg-type]
    c.slots = Slots(4, clock=Clock())
    return {"api": api, "c": c, "staging": staging, "sessions": sessions, "settings": settings}


def start_job(world: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    api, c = world["api"], world["c"]
    job = api.create(JOBS, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job", "metadata": {"name": name},
                            "spec": {"trigger": "armed", "forge": "github", "repository": "acme/widgets",
                                     "comment": "@pi go", "issue": 3}})
    c.on_job("ADDED", job)
    pump(c)
    assert phase(api, name) == "Running", api.job(name).get("status")
    [pod] = [p for p in api.pods() if p["metadata"]["ownerReferences"][0]["name"] == name]
    return api.job(name), pod


def end_pod(world: dict[str, Any], pod: dict[str, Any], outcome: str = "Succeeded") -> None:
    path = f"{PODS}/{pod['metadata']['name']}"
    world["api"].patch(path + "/status", {"status": {"phase": outcome}})
    world["c"].on_pod(world["api"].get(path))


def hand_back(world: dict[str, Any], uid: str, transcript: bytes) -> None:
    """What the server's commit leaves (transfer/server.py): the new session/, then the marker, last."""
    job_dir = world["staging"] / uid
    (job_dir / "session" / "current.jsonl").write_bytes(transcript)
    (job_dir / protocol.MARKER).write_text(json.dumps({"digest": "0" * 64, "bytes": len(transcript)}))


TRANSCRIPT = (b'{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/workspace"}\n'
              b'{"type":"message","id":"m1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z",'
              b'"message":{"role":"user","content":[{"type":"text","text":"hello"}],"timestamp":1}}\n')


def stored(world: dict[str, Any]) -> list[Path]:
    return [p for p in world["sessions"].rglob("current.jsonl") if p.is_file()]


def test_the_job_gets_its_own_secret_owned_by_its_job_and_a_pod_without_the_claim(world: dict[str, Any]) -> None:
    job, pod = start_job(world, "delivery-1")
    uid = job["metadata"]["uid"]
    secret = world["api"].get(f"/api/v1/namespaces/{NS}/secrets/pij-delivery-1-transfer-{uid}")
    assert secret["stringData"] == {"token": job_token(KEY, uid)}
    assert secret["immutable"] is True
    assert secret["metadata"]["ownerReferences"] == [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job",
                                                     "name": "delivery-1", "uid": uid, "controller": True,
                                                     "blockOwnerDeletion": True}]
    assert job_token(KEY, uid) not in json.dumps(pod), "the token is never a literal in the Pod spec"
    assert not [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert "affinity" not in pod["spec"]
    assert env_of(pod)[protocol.ENV_URL]["value"] == protocol.session_url(BASE, uid)
    assert (world["staging"] / uid / "session" / "current.jsonl").exists(), "staged for the runner to fetch"


def test_a_pod_that_succeeded_without_a_committed_upload_fails_and_promotes_nothing(world: dict[str, Any]) -> None:
    job, pod = start_job(world, "delivery-1")
    uid = job["metadata"]["uid"]
    (world["staging"] / uid / "session" / "current.jsonl").write_bytes(TRANSCRIPT)  # half an upload, say
    end_pod(world, pod)
    assert phase(world["api"], "delivery-1") == "Failed"
    done = condition(world["api"], "delivery-1", "Completed")
    assert done["reason"] == "TransferIncomplete" and "Nothing was promoted" in done["message"], done
    assert stored(world) == [], "nothing reached the store"


def test_a_committed_upload_is_promoted_as_in_mount_mode(world: dict[str, Any]) -> None:
    job, pod = start_job(world, "delivery-1")
    hand_back(world, job["metadata"]["uid"], TRANSCRIPT)
    end_pod(world, pod)
    assert phase(world["api"], "delivery-1") == "Succeeded", world["api"].job("delivery-1")["status"]
    [promoted] = stored(world)
    assert promoted.read_bytes() == TRANSCRIPT


def test_a_failed_pod_promotes_nothing_even_with_a_marker(world: dict[str, Any]) -> None:
    job, pod = start_job(world, "delivery-1")
    hand_back(world, job["metadata"]["uid"], TRANSCRIPT)
    end_pod(world, pod, "Failed")
    assert condition(world["api"], "delivery-1", "Completed")["reason"] == "PodFailed"
    assert stored(world) == []


def test_retention_deletes_the_transfer_secret_with_the_token_secret(world: dict[str, Any]) -> None:
    from pidispatch.api.views import JobView
    from pidispatch.jobflow.retention import Kind, RetainedPod, due

    job, pod = start_job(world, "delivery-1")
    hand_back(world, job["metadata"]["uid"], TRANSCRIPT)
    end_pod(world, pod)
    ended = JobView.of(world["api"].job("delivery-1"))
    pods = [RetainedPod.of(world["api"].get(f"{PODS}/{pod['metadata']['name']}"))]
    secrets = [d.name for d in due(ended, pods, 10**10, world["settings"]) if d.kind is Kind.SECRET]
    assert f"pij-delivery-1-transfer-{job['metadata']['uid']}" in secrets

