"""A Trigger whose resumed jobs could never land on the operator's node (ReadWriteOnce staging, mount mode) is
not Ready and its Jobs are refused at admission, naming the conflict and every way out (``api/placement.py``),
instead of a job Pod stuck Pending or ContainerCreating until the start timeout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.crds import GROUP, VERSION
from pidispatch.api.placement import OperatorNode, placement_conflict, tolerates
from pidispatch.api.views import TriggerView
from pidispatch.jobflow.dispatcher import Dispatcher
from pidispatch.jobflow.slots import Slots
from pidispatch.kubeapi import ApiError
from pidispatch.settings import OperatorSettings, Settings
from pidispatch.settings.scheduling import Scheduling
from testkit.jobflow import Clock, pump
from testkit.memoryapi import JOBS, NS, TRIGGERS, MemoryApi

HOST = "kubernetes.io/hostname"
OPERATOR = {"app.kubernetes.io/name": "pi-dispatch", "app.kubernetes.io/component": "operator"}
COLOCATED = Scheduling(colocate_with=OPERATOR)
NODE = OperatorNode("node-a", {HOST: "node-a", "pool": "general"})
AGENTS_TAINT = {"key": "dedicated", "value": "agents", "effect": "NoSchedule"}
TOLERATE_AGENTS = {"key": "dedicated", "operator": "Equal", "value": "agents", "effect": "NoSchedule"}


def spec(**run: Any) -> TriggerView:
    return TriggerView.of({"metadata": {"name": "t"}, "spec": {
        "on": {"event": "issue_comment.created", "repositories": ["acme/*"]},
        "run": {"model": "fake/fake-model", "resume": True, **run}}})


def tainted(*taints: dict[str, Any]) -> OperatorNode:
    return OperatorNode(NODE.name, NODE.labels, taints)


CONFLICTS = [
    ("a trigger selector for another node", spec(nodeSelector={HOST: "node-b"}), COLOCATED, NODE,
     ["run.nodeSelector asks for kubernetes.io/hostname=node-b and that node has kubernetes.io/hostname=node-a"]),
    ("a trigger selector for a label the node lacks", spec(nodeSelector={"gpu": "a100"}), COLOCATED, NODE,
     ["run.nodeSelector asks for gpu=a100 and that node has no label gpu"]),
    ("the deployment's selector", spec(), Scheduling(node_selector={"pool": "agents"}, colocate_with=OPERATOR), NODE,
     ["the deployment's job.nodeSelector asks for pool=agents and that node has pool=general"]),
    ("the trigger's value wins over the deployment's and is named", spec(nodeSelector={"pool": "gpu"}),
     Scheduling(node_selector={"pool": "general"}, colocate_with=OPERATOR), NODE,
     ["run.nodeSelector asks for pool=gpu"]),
    ("a taint of the operator's node not tolerated", spec(), COLOCATED, tainted(AGENTS_TAINT),
     ["that node has the taint dedicated=agents:NoSchedule and the job Pods do not tolerate it"]),
    ("a NoExecute taint not tolerated", spec(), COLOCATED, tainted({"key": "spot", "effect": "NoExecute"}),
     ["the taint spot:NoExecute"]),
    ("the deployment's required node affinity", spec(), Scheduling(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["agents"]}]}]}}},
        colocate_with=OPERATOR), NODE, ["the deployment's job.affinity (its required node affinity) excludes"]),
    ("two conflicts, both named", spec(nodeSelector={HOST: "node-c"}), COLOCATED, tainted(AGENTS_TAINT),
     ["kubernetes.io/hostname=node-c", "dedicated=agents:NoSchedule"]),
]


@pytest.mark.parametrize(("trigger", "rules", "node", "said"), [c[1:] for c in CONFLICTS],
                         ids=[c[0] for c in CONFLICTS])
def test_a_rule_that_excludes_the_operator_s_node_is_a_conflict_naming_it_and_every_way_out(
        trigger: TriggerView, rules: Scheduling, node: OperatorNode, said: list[str]) -> None:
    message = placement_conflict(trigger, rules, node)
    assert message is not None
    assert f"the operator's node {node.name}" in message
    for words in said:
        assert words in message
    for way_out in ("sessions.staging.accessModes=[ReadWriteMany]", "sessions.staging.mode=transfer",
                    "remove run.resume", "change the rule named above"):
        assert way_out in message


NO_CONFLICT = [
    ("a selector the operator's node has", spec(nodeSelector={HOST: "node-a", "pool": "general"}), COLOCATED, NODE),
    ("resume off: the jobs mount no staging", spec(resume=None, nodeSelector={HOST: "node-b"}), COLOCATED, NODE),
    ("readwritemany staging: no co-location", spec(nodeSelector={HOST: "node-b"}), Scheduling(), NODE),
    ("the node unknown: nothing guessed", spec(nodeSelector={HOST: "node-b"}), COLOCATED, None),
    ("a taint the trigger tolerates", spec(tolerations=[TOLERATE_AGENTS]), COLOCATED, tainted(AGENTS_TAINT)),
    ("a taint the deployment tolerates", spec(), Scheduling(tolerations=({"operator": "Exists"},),
                                                             colocate_with=OPERATOR), tainted(AGENTS_TAINT)),
    ("a PreferNoSchedule taint only discourages", spec(), COLOCATED,
     tainted({"key": "busy", "effect": "PreferNoSchedule"})),
    ("a node not ready for a moment is a state, not a rule", spec(), COLOCATED,
     tainted({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
             {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"})),
    ("a cordoned or uninitialised node is a state, not a rule", spec(), COLOCATED,
     tainted({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
             {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"})),
    ("a required node affinity the node meets by name", spec(), Scheduling(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["agents"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}}},
        colocate_with=OPERATOR), NODE),
]


@pytest.mark.parametrize(("trigger", "rules", "node"), [c[1:] for c in NO_CONFLICT], ids=[c[0] for c in NO_CONFLICT])
def test_no_conflict(trigger: TriggerView, rules: Scheduling, node: OperatorNode | None) -> None:
    assert placement_conflict(trigger, rules, node) is None


@pytest.mark.parametrize(("toleration", "taint", "tolerated"), [
    ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, {"key": "k", "value": "v",
                                                                              "effect": "NoSchedule"}, True),
    ({"key": "k", "value": "v"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),
    ({"key": "k", "value": "w"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
    ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, {"key": "k", "effect": "NoSchedule"}, False),
    ({"operator": "Exists"}, {"key": "anything", "effect": "NoSchedule"}, True),
    ({"key": "other", "operator": "Exists"}, {"key": "k", "effect": "NoSchedule"}, False),
], ids=["equal", "equal by default, any effect", "another value", "exists", "another effect",
        "exists without a key tolerates all", "another key"])
def test_tolerations_match_taints_as_kubernetes_does(toleration: dict[str, Any], taint: dict[str, Any],
                                                     tolerated: bool) -> None:
    assert tolerates(toleration, taint) is tolerated


# ---- the dispatcher: Trigger status and admission -----------------------------------------------------------

NODES = "/api/v1/nodes"


class NoNodeGrant(MemoryApi):
    """An apiserver that refuses ``get nodes`` (a deployment whose ClusterRole lacks the grant)."""

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        if path.startswith(NODES + "/"):
            raise ApiError(403, "GET", path, 'nodes "node-a" is forbidden')
        return super().get_or_none(path)


def dispatcher(tmp_path: Path, api: MemoryApi) -> Dispatcher:
    settings = OperatorSettings(store=Settings(sessions_dir=str(tmp_path / "sessions"), github_auth_source="app"),
                                staging_dir=str(tmp_path / "jobs"), staging_claim="staging", max_concurrent_jobs=1,
                                job_scheduling=COLOCATED, node_name="node-a")
    c = Dispatcher(settings, api, NS)  # type: ignore[arg-type]
    c.slots = Slots(1, clock=Clock())
    return c


def node_body(labels: dict[str, str], taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "node-a", "labels": labels}, "spec": {"taints": taints} if taints else {}}


def add_trigger(api: MemoryApi, **run: Any) -> dict[str, Any]:
    return api.create(TRIGGERS, {"metadata": {"name": "elsewhere"}, "spec": {
        "on": {"event": "issue_comment.created", "phrase": "@pi", "repositories": ["acme/*"]},
        "run": {"model": "fake/fake-model", "piVersion": "0.73.1", "resume": True, **run}}})


def add_job(api: MemoryApi, name: str) -> dict[str, Any]:
    return api.create(JOBS, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job", "metadata": {"name": name},
                             "spec": {"trigger": "elsewhere", "forge": "github", "repository": "acme/widgets",
                                      "comment": "@pi go", "issue": 3}})


def ready(api: MemoryApi) -> dict[str, Any]:
    status = api.get(f"{TRIGGERS}/elsewhere").get("status") or {}
    return next(c for c in status.get("conditions") or [] if c["type"] == "Ready")


def test_a_trigger_selecting_another_node_is_not_ready_and_its_jobs_are_refused_before_any_pod(
        tmp_path: Path) -> None:
    api = MemoryApi()
    api.objects[f"{NODES}/node-a"] = node_body({HOST: "node-a"})
    add_trigger(api, nodeSelector={HOST: "node-b"})
    c = dispatcher(tmp_path, api)
    c.resync()
    condition = ready(api)
    assert (condition["status"], condition["reason"]) == ("False", "PlacementConflict")
    assert "kubernetes.io/hostname=node-b" in condition["message"] and "node-a" in condition["message"]
    armed = next(x for x in api.get(f"{TRIGGERS}/elsewhere")["status"]["conditions"] if x["type"] == "ResumeArmed")
    assert armed["status"] == "False"

    c.on_job("ADDED", add_job(api, "stuck"))
    pump(c)
    status = api.job("stuck")["status"]
    assert (status["phase"], status["reason"]) == ("Refused", "trigger-not-ready"), status
    refused = next(x for x in status["conditions"] if x["type"] == "Ready" or x.get("reason") == "TriggerNotReady")
    assert refused["reason"] == "TriggerNotReady", status
    assert "sessions.staging.mode=transfer" in refused["message"]
    assert api.pods() == [], "refused before any Pod"


def test_the_node_relabelled_the_next_resync_makes_the_trigger_ready(tmp_path: Path) -> None:
    api = MemoryApi()
    api.objects[f"{NODES}/node-a"] = node_body({HOST: "node-a"}, [AGENTS_TAINT])
    add_trigger(api, nodeSelector={"pool": "agents"}, tolerations=[TOLERATE_AGENTS])
    c = dispatcher(tmp_path, api)
    c.resync()
    assert ready(api)["reason"] == "PlacementConflict"
    assert "dedicated=agents:NoSchedule" not in ready(api)["message"], "the taint is tolerated"
    api.objects[f"{NODES}/node-a"] = node_body({HOST: "node-a", "pool": "agents"}, [AGENTS_TAINT])
    c.resync()
    assert (ready(api)["status"], ready(api)["reason"]) == ("True", "Loaded")


def test_without_the_node_grant_nothing_is_refused_ahead(tmp_path: Path, events) -> None:
    api = NoNodeGrant()
    add_trigger(api, nodeSelector={HOST: "node-b"})
    c = dispatcher(tmp_path, api)
    c.resync()
    c.resync()
    assert ready(api)["status"] == "True"
    logged = [e for e in events() if e["event"] == "placement_unchecked"]
    assert len(logged) == 1 and logged[0]["node"] == "node-a", "said once"
