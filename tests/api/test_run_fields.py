"""Every field of a Trigger's ``run`` acts or is refused (issue 34 item 6).

``run.secrets`` acts: each named Secret is mounted read-only into the job container, the runner reports a
digest of every value (the scan before the promotion redacts an echo), and the job Pod policy admits exactly
the Secrets a person listed. ``run.flow`` acts: it reaches the runner as ``PI_FLOW`` (the runner's side is
``tests/runner/test_flow_runner.py``). ``run.command`` acts: it reaches the runner as ``PI_COMMAND``, its form checked
at load (``tests/runner/test_command_runner.py``: the runner's side). ``run.replicas`` acts
(``tests/api/test_replicas.py``).
No field of ``run`` is left that nothing acts on; with ``run.resume`` each keeps the store contract's refusal.
The SessionKey's ``forge`` names only what a Job may.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from pidispatch.api.models import JobSpec, SessionKeySpec, TriggerSpec, problem
from pidispatch.api.trigger import first_refusal
from pidispatch.api.views import JobView, TriggerView
from pidispatch.api.vocabulary import JOB_FORGES, TRIGGER_RULES
from pidispatch.contract import ENV_RUN_SECRETS, ENV_RUN_SECRETS_DIR, RUN_SECRETS_DIR, command_problem
from pidispatch.contract.digests import digest_of
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.pod import create_pod, pod_env
from pidispatch.jobflow.summarize_trigger import trigger_status
from pidispatch.manifests.pod import PodInputs, job_pod
from pidispatch.runner.main import own_secrets
from pidispatch.settings import OperatorSettings, Settings
from testkit.chart import POD_POLICY, one, render
from testkit.memoryapi import MemoryApi

ROOT = Path(__file__).resolve().parents[2]
BASE = PodInputs(job_name="delivery-1", job_uid="u-1", namespace="ns", image="job:1", command=["pidispatch", "runner"])
VALUE = "deploy_" + "k" * 33  # a value the scan can look for (contract/digests.py digest_of)
OTHER = "stripe_" + "s" * 33


def spec(run: dict[str, Any], event: str = "issue_comment.created") -> dict[str, Any]:
    fires = {"issue_comment.created": {"phrase": "@pi"}, "issues.labeled": {"label": "pi"}}.get(event, {})
    return {"on": {"event": event, **fires}, "run": run}


def container(pod: dict[str, Any]) -> dict[str, Any]:
    [only] = pod["spec"]["containers"]
    return only


# ---- run.secrets: the Pod ----------------------------------------------------------------------------

def test_each_named_secret_is_mounted_read_only_as_files_and_never_as_an_env_value() -> None:
    pod = job_pod(replace(BASE, run_secrets=("deploy-keys", "stripe.keys", "deploy-keys")))
    mounts = {m["mountPath"]: m for m in container(pod)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert mounts[f"{RUN_SECRETS_DIR}/deploy-keys"]["readOnly"] is True
    assert mounts[f"{RUN_SECRETS_DIR}/stripe.keys"]["readOnly"] is True
    named = [volumes[m["name"]]["secret"] for m in container(pod)["volumeMounts"] if m["name"].startswith("run-secret")]
    assert named == [{"secretName": "deploy-keys", "defaultMode": 0o440},
                     {"secretName": "stripe.keys", "defaultMode": 0o440}], "each Secret once, group-readable only"
    env = {e["name"]: e for e in container(pod)["env"]}
    assert env[ENV_RUN_SECRETS_DIR]["value"] == RUN_SECRETS_DIR
    assert env[ENV_RUN_SECRETS]["value"] == "deploy-keys,stripe.keys"
    assert not any("deploy-keys" in str(e.get("valueFrom")) for e in env.values()), "files only, no secretKeyRef"
    assert "envFrom" not in container(pod)


def test_a_job_without_run_secrets_mounts_none_and_says_none() -> None:
    pod = job_pod(BASE)
    assert not [v for v in pod["spec"]["volumes"] if "secret" in v]
    assert not {ENV_RUN_SECRETS, ENV_RUN_SECRETS_DIR} & {e["name"] for e in container(pod)["env"]}


def test_a_name_that_is_not_a_secrets_is_never_built_into_a_pod() -> None:
    with pytest.raises(ValueError, match="run.secrets: '../etc' is not a Secret's name"):
        job_pod(replace(BASE, run_secrets=("../etc",)))


def test_the_operator_mounts_the_triggers_secrets_into_the_jobs_pod() -> None:
    settings = OperatorSettings.from_env({"PI_DISPATCH_JOB_CHECKOUT": "false"})
    trigger = TriggerSpec.model_validate(spec({"secrets": ["deploy-keys"]}))
    job = JobView.of({"metadata": {"name": "fix-1", "uid": "u-1"},
                      "spec": {"trigger": "fix", "forge": "github", "repository": "acme/widgets", "issue": 1}})
    api = MemoryApi()
    made = create_pod(settings, Cluster(api, "ns"), job, trigger, None, None)  # type: ignore[arg-type]
    pod = api.get(f"/api/v1/namespaces/ns/pods/{made.name}")
    assert {"name": "run-secret-0", "secret": {"secretName": "deploy-keys", "defaultMode": 0o440}} in pod["spec"][
        "volumes"]
    assert {"name": ENV_RUN_SECRETS, "value": "deploy-keys"} in container(pod)["env"]


# ---- run.secrets: the runner's digests (the kubelet's Secret volume layout, for real) ------------------

def kubelet_secret_volume(root: Path, name: str, data: dict[str, str]) -> None:
    """A Secret volume as the kubelet writes it: ``<key> -> ..data/<key>``, ``..data -> ..<timestamp>``."""
    mount = root / name
    stamp = mount / "..2026_12_04_18_00_00.1"
    stamp.mkdir(parents=True)
    for key, value in data.items():
        (stamp / key).write_text(value)
    os.symlink(stamp.name, mount / "..data")
    for key in data:
        os.symlink(f"..data/{key}", mount / key)


def test_the_runner_reports_a_digest_of_every_mounted_value_and_nothing_outside_the_mount(tmp_path: Path) -> None:
    root = tmp_path / "secrets"
    kubelet_secret_volume(root, "deploy-keys", {"token": VALUE + "\n", "short": "abc"})
    kubelet_secret_volume(root, "stripe", {"api-key": OTHER})
    outside = tmp_path / "outside"
    outside.write_text("outside_" + "o" * 40)
    os.symlink(outside, root / "stripe" / "escape")  # a link out of its own mount is never followed
    env = {ENV_RUN_SECRETS_DIR: str(root), ENV_RUN_SECRETS: "deploy-keys,stripe,missing"}
    reported = own_secrets(env)
    assert digest_of(VALUE) in reported, "the value as an echo prints it (no trailing newline)"
    assert digest_of(OTHER) in reported
    assert digest_of("outside_" + "o" * 40) not in reported
    assert all(d is not None for d in reported)
    assert own_secrets({}) == (), "no run.secrets: nothing read"


def test_the_digests_go_with_the_forge_token_and_model_keys(tmp_path: Path) -> None:
    root = tmp_path / "secrets"
    kubelet_secret_volume(root, "deploy-keys", {"token": VALUE})
    gh = "ghs_" + "g" * 36
    env = {"GH_TOKEN": gh, ENV_RUN_SECRETS_DIR: str(root), ENV_RUN_SECRETS: "deploy-keys"}
    assert own_secrets(env) == (digest_of(gh), digest_of(VALUE))


# ---- run.secrets: load time ----------------------------------------------------------------------------

@pytest.mark.parametrize(("run", "message"), [
    ({"secrets": ["deploy-keys"]}, None),
    ({"resume": True, "secrets": ["deploy-keys"]}, TRIGGER_RULES[3]["message"]),
    ({"secrets": ["Deploy_Keys"]}, "run.secrets: 'Deploy_Keys' is not a Secret's name"),
], ids=["acts", "still refused with resume", "a name that cannot be a Secret's"])
def test_run_secrets_at_load(run: dict[str, Any], message: str | None) -> None:
    refusal = first_refusal(spec(run))
    assert refusal == message if message is None else refusal is not None and refusal.message.startswith(message)


# ---- the chart's job Pod policy admits exactly the listed Secrets as volumes --------------------------------

def test_the_policy_admits_secret_volumes_of_the_listed_secrets_only(helm: Any) -> None:
    docs = render(helm, {"github.authSource": "pat", "github.token.secretName": "gh-token",
                         "jobPodPolicy.credentialSecrets": ["deploy-keys"]})
    policy = one(docs, "ValidatingAdmissionPolicy", POD_POLICY)
    [volumes] = [v for v in policy["spec"]["validations"] if "has(v.secret)" in v["expression"]]
    assert 'v.secret.secretName in ["deploy-keys"]' in volumes["expression"], volumes["expression"]
    assert "gh-token" not in volumes["expression"], "the forge token's Secret is never mounted whole"
    assert "deploy-keys" in volumes["message"]
    none = one(render(helm), "ValidatingAdmissionPolicy", POD_POLICY)
    [closed] = [v for v in none["spec"]["validations"] if "has(v.secret)" in v["expression"]]
    assert "v.secret.secretName in []" in closed["expression"]


# ---- command, flow, replicas: every field of run acts --------------------------------------------------------

def test_no_field_of_run_says_it_is_not_implemented() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "pi-dispatch.dev_triggers.yaml").read_text())
    run = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["run"]
    assert [f for f, p in run["properties"].items() if "Not implemented" in p.get("description", "")] == []


@pytest.mark.parametrize(("run", "message"), [
    ({"resume": True, "command": "/review"}, TRIGGER_RULES[0]["message"]),
    ({"resume": True, "command": "review"}, TRIGGER_RULES[0]["message"]),
    ({"resume": True, "replicas": 3}, TRIGGER_RULES[2]["message"]),
], ids=["resume with command keeps its message", "resume with an ill-formed command keeps it too",
        "resume with replicas keeps its message"])
def test_a_trigger_setting_one_is_not_ready_and_says_which(run: dict[str, Any], message: str) -> None:
    view = TriggerView.of({"metadata": {"name": "t"}, "spec": spec(run)})
    status = trigger_status(view, Settings(), 1, None).to_patch()
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "False" and ready["message"] == message
    assert ready["reason"] == "ResumeConflict"


def test_a_flow_reaches_the_runner_and_the_trigger_is_ready() -> None:
    job = JobSpec.model_validate({"trigger": "t", "forge": "github", "repository": "octo/repo", "issue": 7})
    trigger = spec({"flow": "triage"})
    assert pod_env("d", job, TriggerSpec.model_validate(trigger))["PI_FLOW"] == "triage"
    assert "PI_FLOW" not in pod_env("d", job, TriggerSpec.model_validate(spec({})))
    status = trigger_status(TriggerView.of({"metadata": {"name": "t"}, "spec": trigger}), Settings(), 1,
                            None).to_patch()
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "True", ready


@pytest.mark.parametrize("flow", ["Fix", "fix_it", "-fix", "fix-", "fix--it", "a" * 65, "../x", "fix it"])
def test_a_flow_that_cannot_name_a_pi_skill_is_refused_at_load_not_by_the_schema(flow: str) -> None:
    """The CRD takes any string, as it did before the field acted (docs/crd-policy.md: no narrower pattern
    within a version); the Trigger is not Ready, and says why."""
    assert problem(TriggerSpec, spec({"flow": flow})) is None
    view = TriggerView.of({"metadata": {"name": "t"}, "spec": spec({"flow": flow})})
    status = trigger_status(view, Settings(), 1, None).to_patch()
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidFlow")
    assert ready["message"].startswith("run.flow: ") and "is not a flow's name" in ready["message"]


def test_a_command_reaches_the_runner_and_the_trigger_is_ready() -> None:
    job = JobSpec.model_validate({"trigger": "t", "forge": "github", "repository": "octo/repo", "issue": 7,
                                  "comment": "/other please"})
    trigger = spec({"command": "/review focus on tests"})
    env = pod_env("d", job, TriggerSpec.model_validate(trigger))
    assert env["PI_COMMAND"] == "/review focus on tests" and "PI_FLOW" not in env
    assert "PI_COMMAND" not in pod_env("d", job, TriggerSpec.model_validate(spec({})))
    status = trigger_status(TriggerView.of({"metadata": {"name": "t"}, "spec": trigger}), Settings(), 1,
                            None).to_patch()
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "True", ready


@pytest.mark.parametrize(("command", "says"), [
    ("review", "is not a command: it starts with '/'"),
    ("/", "does not start with a command's name"),
    ("/ review", "does not start with a command's name"),
    ("/-review", "does not start with a command's name"),
    ("/re\tview", "does not start with a command's name"),
    ("/" + "r" * 65, "does not start with a command's name"),
    ("/skill:triage now", "invokes a skill, not a command: a skill is run.flow's (run.flow: triage)"),
    ("/review first line\nsecond line", "has a line break or another control character"),
], ids=["no slash", "a slash alone", "a space before the name", "a name starting with '-'", "a tab in the name",
        "a name too long", "a skill", "a line break in the arguments"])
def test_a_command_pi_would_not_run_is_refused_at_load_not_by_the_schema(command: str, says: str) -> None:
    assert problem(TriggerSpec, spec({"command": command})) is None
    view = TriggerView.of({"metadata": {"name": "t"}, "spec": spec({"command": command})})
    status = trigger_status(view, Settings(), 1, None).to_patch()
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidCommand")
    assert ready["message"].startswith("run.command: ") and says in ready["message"], ready["message"]


@pytest.mark.parametrize("command", ["/review", "/review focus on tests", "/fix-ci:2 now", "/a.b_c", "/r " + "x" * 900],
                         ids=["a name", "a name and arguments", "pi's name:2", "dots and underscores",
                              "long arguments"])
def test_a_command_pi_runs_loads(command: str) -> None:
    assert command_problem(command) is None
    assert first_refusal(spec({"command": command})) is None


def test_flow_and_command_together_are_refused_at_load() -> None:
    view = TriggerView.of({"metadata": {"name": "t"}, "spec": spec({"flow": "triage", "command": "/review"})})
    status = trigger_status(view, Settings(), 1, None).to_patch()
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidCommand")
    assert "sets both run.flow" in ready["message"] and "Keep one of the two" in ready["message"]


def test_the_job_image_declares_the_commands_capability() -> None:
    """The job target names its extensions directory and makes it (read-only to the job, owned by root)."""
    job = (ROOT / "Dockerfile").read_text().split("FROM runtime AS job", 1)[1]
    lines = [line.strip() for line in job.splitlines()]
    assert "ENV PI_COMMAND_EXTENSIONS_DIR=/opt/pi-dispatch/extensions" in lines
    assert "RUN install -d -m 0755 /opt/pi-dispatch/extensions" in lines


# ---- the SessionKey's forge ------------------------------------------------------------------------------

def test_a_sessionkey_names_only_the_forges_a_job_may() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "pi-dispatch.dev_sessionkeys.yaml").read_text())
    forge = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["forge"]
    assert forge["enum"] == list(JOB_FORGES) == ["github"]
    assert problem(SessionKeySpec, {"forge": "gitlab", "repository": "o/r", "branch": "b"}) is not None
    assert problem(SessionKeySpec, {"forge": "github", "repository": "o/r", "branch": "b"}) is None


def test_a_flow_on_a_forks_pull_request_is_refused_before_any_pod() -> None:
    """The payload says fork: no Pod (the runner refuses a fork only the forge API reveals, runner/flow.py)."""
    from pidispatch.jobflow import admit

    trigger = TriggerView.of({"metadata": {"name": "t"}, "spec": spec({"flow": "review", "forks": True})})
    job = JobView.of({"metadata": {"name": "j", "uid": "u"}, "spec": {
        "trigger": "t", "forge": "github", "repository": "octo/repo", "pullRequest": 9, "fork": True}})
    refused = admit.refusal(job, trigger, Settings(), None)
    assert refused is not None and (refused.phase, refused.reason, refused.condition_reason) == (
        "Refused", "flow-on-fork", "FlowOnFork"), refused
    assert "comes from a fork" in refused.message and "flow review" in refused.message
    same_repo = JobView.of({**job.body, "spec": {**job.body["spec"], "fork": False}})
    assert admit.refusal(same_repo, trigger, Settings(), None) is None
