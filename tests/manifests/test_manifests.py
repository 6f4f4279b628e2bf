"""Pure builders: the job Pod and conditions."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from pidispatch.api.conditions import reason_to_camel, set_condition
from pidispatch.manifests.pod import JOB_LABEL, PodInputs, job_label, job_pod, job_token_secret, pod_name

BASE = PodInputs(job_name="delivery-1234", job_uid="u-1", namespace="ns", image="pi-job:0.73.1",
                 command=["pidispatch", "runner"], env={"PI_MODEL": "fake/fake-model"}, staging_claim="staging")


def test_pod_without_session_is_the_pod_without_the_feature() -> None:
    """No key → no mount, no PI_SESSION_FILE, and nothing else differs (the staging claim is unused)."""
    without_feature = job_pod(replace(BASE, staging_claim=None))
    assert job_pod(BASE) == without_feature
    assert "PI_SESSION_FILE" not in str(without_feature)
    assert [v["name"] for v in without_feature["spec"]["volumes"]] == ["workspace"]


def test_pod_with_session_adds_only_the_mount_and_the_env() -> None:
    plain, mounted = job_pod(BASE), job_pod(replace(BASE, session_subpath="u-1/session"))
    c = mounted["spec"]["containers"][0]
    assert {"name": "session", "mountPath": "/session", "subPath": "u-1/session"} in c["volumeMounts"]
    assert {"name": "PI_SESSION_FILE", "value": "/session/current.jsonl"} in c["env"]
    assert {"name": "PI_SESSION_HOST_RESUME", "value": "false"} in c["env"]
    assert {"name": "PI_SESSION_RETHREAD_PCT", "value": "70"} in c["env"]
    assert "PI_SESSION_RETHREAD" not in {e["name"] for e in c["env"]}, "no letter staged: nothing to unpack"
    assert {"name": "session", "persistentVolumeClaim": {"claimName": "staging"}} in mounted["spec"]["volumes"]
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "session"]
    c["env"] = [e for e in c["env"] if e["name"] not in ("PI_SESSION_FILE", "PI_SESSION_HOST_RESUME",
                                                          "PI_SESSION_RETHREAD_PCT")]
    mounted["spec"]["volumes"] = [v for v in mounted["spec"]["volumes"] if v["name"] != "session"]
    assert mounted == plain


def test_host_resume_reaches_the_runner_only_with_a_mount() -> None:
    resumed = job_pod(replace(BASE, session_subpath="u-1/session", host_resume=True))
    assert {"name": "PI_SESSION_HOST_RESUME", "value": "true"} in resumed["spec"]["containers"][0]["env"]
    unmounted = job_pod(replace(BASE, host_resume=True))
    assert "PI_SESSION_HOST_RESUME" not in {e["name"] for e in unmounted["spec"]["containers"][0]["env"]}


def test_pod_is_restricted_owned_and_token_free() -> None:
    pod = job_pod(BASE)
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    sc = spec["containers"][0]["securityContext"]
    assert sc["runAsNonRoot"] and not sc["allowPrivilegeEscalation"] and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Job", "u-1", True)


@pytest.mark.parametrize("name", ["a", "delivery-" + "x" * 80, "x" * 59])
def test_pod_names_are_deterministic_and_valid(name: str) -> None:
    assert pod_name(name) == pod_name(name)
    assert len(pod_name(name)) <= 63 and pod_name(name)[-1].isalnum()
    assert pod_name(name) != pod_name(name + "y")


LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-_.A-Za-z0-9]*[A-Za-z0-9])?)?")  # the apiserver's rule
NAMES = [("short", "delivery-1234"), ("63 characters", "d" * 63), ("64 characters", "d" * 64),
         ("70 characters", "delivery-" + "x" * 61), ("253 characters (the CRD's limit)", "a" + "b.c-" * 62 + "bcde"),
         ("dots where the cut falls", "a" * 51 + "." * 5 + "b" * 20)]


@pytest.mark.parametrize("name", [n[1] for n in NAMES], ids=[n[0] for n in NAMES])
def test_the_job_label_is_a_valid_label_value_for_any_job_name(name: str) -> None:
    pod = job_pod(replace(BASE, job_name=name))
    secret = job_token_secret(name, "u-1", "ns", "s", "t", "2030-01-01T00:00:00Z")
    for value in (pod["metadata"]["labels"][JOB_LABEL], secret["metadata"]["labels"][JOB_LABEL]):
        assert len(value) <= 63 and LABEL_VALUE.fullmatch(value), value
        assert value == job_label(name) == job_label(name)
    assert pod["metadata"]["ownerReferences"][0]["name"] == name, "the full name is kept in the owner reference"


def test_the_job_label_is_the_name_when_it_fits_and_distinct_when_shortened() -> None:
    assert job_label("delivery-1234") == "delivery-1234"
    long = "delivery-" + "x" * 61
    assert job_label(long) != job_label(long + "y")
    assert job_label(long).startswith("delivery-xxx")


def test_session_mount_needs_a_claim() -> None:
    with pytest.raises(ValueError):
        job_pod(replace(BASE, staging_claim=None, session_subpath="u/session"))


def test_condition_transition_time_moves_only_on_status_change() -> None:
    first = set_condition(None, "Stored", True, "Promoted", "stored", 1, now="2026-01-01T00:00:00Z")
    same = set_condition(first, "Stored", True, "Promoted", "again", 2, now="2026-02-02T00:00:00Z")
    assert same[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z" and same[0]["observedGeneration"] == 2
    flipped = set_condition(same, "Stored", False, "Reaped", "gone", 2, now="2026-03-03T00:00:00Z")
    assert flipped[0]["lastTransitionTime"] == "2026-03-03T00:00:00Z"
    both = set_condition(flipped, "Locked", None, "Unknown", "", 2, now="2026-03-03T00:00:00Z")
    assert [c["type"] for c in both] == ["Stored", "Locked"] and both[1]["status"] == "Unknown"


@pytest.mark.parametrize(("token", "camel"), [("context-too-full", "ContextTooFull"), ("resumed", "Resumed"),
                                              ("pi-version-changed", "PiVersionChanged")])
def test_reason_to_camel(token: str, camel: str) -> None:
    assert reason_to_camel(token) == camel


def test_a_staged_letter_tells_the_runner_the_lineage_reason() -> None:
    pod = job_pod(replace(BASE, session_subpath="u-1/session", rethread="context-too-full", rethread_pct=60))
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["PI_SESSION_RETHREAD"] == "context-too-full" and env["PI_SESSION_RETHREAD_PCT"] == "60"
    unmounted = job_pod(replace(BASE, rethread="context-too-full"))
    assert not {"PI_SESSION_RETHREAD", "PI_SESSION_RETHREAD_PCT"} & {
        e["name"] for e in unmounted["spec"]["containers"][0]["env"]}, "without /session there is nothing to rethread"
