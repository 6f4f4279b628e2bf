"""Our CRDs on the real apiserver: structural schemas accepted, the Trigger's load-time refusals
rejected by CEL with our messages, printer columns served, and the committed files current."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.framework.kube import ApiError, Kube
from pidispatch.api import crds
from pidispatch.kubeapi import Api
from pidispatch.receiver.cluster import ApiCluster, JobRefused
from pidispatch.receiver.delivery import job_body, job_problem
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
TRIGGERS = f"/apis/{crds.GROUP}/{crds.VERSION}/namespaces/{{ns}}/triggers"


def test_committed_crds_are_generated_from_the_source() -> None:
    for name in crds.ALL:
        path = ROOT / "crds" / f"{crds.GROUP}_{name}.yaml"
        assert path.read_text() == crds.render(name), f"{path} is stale: run python -m pidispatch.api.crds --write crds"


@pytest.fixture(scope="module")
def installed(kube: Kube) -> Kube:
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        existing = kube.get_or_none(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        if existing is None:
            kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body)
        else:
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            kube.replace(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", body)

        def established(name: str = name) -> bool:
            crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            return any(c["type"] == "Established" and c["status"] == "True"
                       for c in crd.get("status", {}).get("conditions", []))

        wait_until(f"CRD {name} Established", established, timeout=60)
    wait_until("pi-dispatch.dev served", lambda: kube.get_or_none(f"/apis/{crds.GROUP}/{crds.VERSION}"), timeout=60)
    return kube


def trigger(run: dict, event: str = "issue_comment.created") -> dict:
    return {"apiVersion": f"{crds.GROUP}/{crds.VERSION}", "kind": "Trigger", "metadata": {"name": "t"},
            "spec": {"on": {"event": event, "phrase": "@pi"}, "run": run}}


REFUSED = [
    ("resume with command", {"resume": True, "command": "make fix"}, "issue_comment.created", 0),
    ("command is reported before a local job", {"resume": True, "command": "x", "kind": "local"}, "cron", 0),
    ("resume on a local job", {"resume": True, "kind": "local"}, "cron", 1),
    ("resume with replicas on a cron Trigger", {"resume": True, "replicas": 2}, "cron", 2),
    ("resume with replicas", {"resume": True, "replicas": 2}, "issue_comment.created", 2),
    ("replicas is reported before secrets", {"resume": True, "replicas": 2, "secrets": ["s"]},
     "issue_comment.created", 2),
    ("resume with secrets", {"resume": True, "secrets": ["TOKEN"]}, "issue_comment.created", 3),
]


@pytest.mark.parametrize(("run", "event", "rule"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refused_trigger_shapes(installed: Kube, namespace: str, run: dict, event: str, rule: int) -> None:
    with pytest.raises(ApiError) as err:
        installed.create(TRIGGERS.format(ns=namespace), trigger(run, event), dryRun="All")
    assert err.value.status == 422
    message = err.value.message
    assert crds.TRIGGER_RULES[rule]["message"] in message
    others = [r["message"] for i, r in enumerate(crds.TRIGGER_RULES) if i != rule]
    assert not any(m in message for m in others), "only the first conflict is reported"


@pytest.mark.parametrize("value", ["yes", "true", 1], ids=["yes", "string true", "number"])  # null is pruned: off
def test_non_boolean_resume_is_refused(installed: Kube, namespace: str, value: object) -> None:
    with pytest.raises(ApiError) as err:
        installed.create(TRIGGERS.format(ns=namespace), trigger({"resume": value}), dryRun="All")
    assert err.value.status == 422
    assert "spec.run.resume" in err.value.message and "boolean" in err.value.message


def test_author_associations_are_github_s_values(installed: Kube, namespace: str) -> None:
    body = trigger({"resume": True})
    body["spec"]["on"]["authorAssociations"] = ["COLLABORATOR", "CONTRIBUTOR"]
    created = installed.create(TRIGGERS.format(ns=namespace), body, dryRun="All")
    assert created["spec"]["on"]["authorAssociations"] == ["COLLABORATOR", "CONTRIBUTOR"], "kept, not pruned"
    body["spec"]["on"]["authorAssociations"] = ["EVERYONE"]
    with pytest.raises(ApiError) as err:
        installed.create(TRIGGERS.format(ns=namespace), body, dryRun="All")
    assert err.value.status == 422 and "authorAssociations" in err.value.message


REPOSITORIES = [
    ("owner globs", ["acme/*", "acme-labs/api-*"], None),
    ("a character class", ["acme/[aw]*"], None),
    ("an empty list", [], "spec.on.repositories"),
    ("no slash", ["acme"], "spec.on.repositories[0]"),
    ("a second slash", ["acme/*", "acme/api/x"], "spec.on.repositories[1]"),
]


@pytest.mark.parametrize(("entries", "refused"), [r[1:] for r in REPOSITORIES], ids=[r[0] for r in REPOSITORIES])
def test_each_repository_entry_is_owner_slash_name(installed: Kube, namespace: str, entries: list[str],
                                                   refused: str | None) -> None:
    body = trigger({"resume": True})
    body["spec"]["on"]["repositories"] = entries
    if refused is None:
        created = installed.create(TRIGGERS.format(ns=namespace), body, dryRun="All")
        assert created["spec"]["on"]["repositories"] == entries, "kept, not pruned"
        return
    with pytest.raises(ApiError) as err:
        installed.create(TRIGGERS.format(ns=namespace), body, dryRun="All")
    assert err.value.status == 422 and refused in err.value.message, err.value.message


ACCEPTED = [
    ("resume alone", {"resume": True}, "issue_comment.created"),
    ("resume false with everything", {"resume": False, "command": "x", "replicas": 2, "secrets": ["s"]},
     "issue_comment.created"),
    ("no resume on cron", {"kind": "local", "command": "x"}, "cron"),
    ("resume on a cron Trigger: it continues its own conversation", {"resume": True}, "cron"),
]


@pytest.mark.parametrize(("run", "event"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_accepted_trigger_shapes(installed: Kube, namespace: str, run: dict, event: str) -> None:
    installed.create(TRIGGERS.format(ns=namespace), trigger(run, event), dryRun="All")


def test_printer_columns_and_status_subresource(installed: Kube, namespace: str) -> None:
    path = f"/apis/{crds.GROUP}/{crds.VERSION}/namespaces/{namespace}/sessionkeys"
    key = "7a5b816df58a1c8345ced1323e654287"
    installed.create(path, {"apiVersion": f"{crds.GROUP}/{crds.VERSION}", "kind": "SessionKey",
                            "metadata": {"name": key},
                            "spec": {"forge": "github", "repository": "octo/repo", "branch": "pi/issue-7"},
                            "status": {"next": "resumed"}})
    assert "status" not in installed.get(f"{path}/{key}") or not installed.get(f"{path}/{key}")["status"], \
        "status is a subresource: a create cannot set it"
    installed.patch(f"{path}/{key}/status", {"status": {"next": "expired", "resumeChain": 2}})
    with pytest.raises(ApiError) as err:
        installed.patch(f"{path}/{key}/status", {"status": {"next": "/etc/passwd"}})
    assert err.value.status == 422, "the session reason is a closed enum"
    response = installed.session.get(installed.server + f"{path}/{key}", timeout=30,
                                     headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert response.status_code == 200, response.text
    table = response.json()
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[:6] == ["Name", "Repository", "Branch", "Stored", "Resumable", "Next"]
    assert table["rows"][0]["cells"][5] == "expired"


@pytest.mark.parametrize(("spec", "field"), [
    ({"authSource": "token"}, "spec.authSource"), ({"issue": 2**63}, "spec.issue"),
    ({"comment": "x" * 65537}, "spec.comment")],
    ids=["an unknown auth source", "an issue over int64", "a comment too long"])
def test_the_receivers_client_reads_a_refusal_for_good_and_its_own_check_agrees(
        installed: Kube, namespace: str, cluster: Any, spec: dict, field: str) -> None:
    """The real API server's 422 and 403 ``Status`` answers, as the receiver's cluster client reads them: a
    :class:`JobRefused` naming the status, the reason and the field, never the value; and the receiver's own
    check (``job_problem``) refuses each body the API server refuses, so such a create is never sent."""
    body = job_body("refused-x", {"trigger": "t", "forge": "github", "repository": "acme/widgets", **spec})
    assert job_problem(body) is not None and field in (job_problem(body) or "")
    admin = Api(cluster.server, ca_file=str(cluster.ca_file), cert_file=str(cluster.pki / "admin.crt"),
                key_file=str(cluster.pki / "admin.key"), retries=0)
    with pytest.raises(JobRefused) as refused:
        asyncio.run(ApiCluster(admin, namespace).create_job(body))
    assert (refused.value.status, refused.value.reason) == (422, "Invalid"), refused.value
    assert field in refused.value.fields and "token" not in str(refused.value)
    nobody = Api(cluster.server, ca_file=str(cluster.ca_file), retries=0,
                 token=cluster.service_account_token(namespace, "nobody"))
    allowed = job_body("refused-y", {"trigger": "t", "forge": "github", "repository": "acme/widgets"})
    with pytest.raises(JobRefused) as forbidden:
        asyncio.run(ApiCluster(nobody, namespace).create_job(allowed))
    assert (forbidden.value.status, forbidden.value.reason) == (403, "Forbidden"), forbidden.value
