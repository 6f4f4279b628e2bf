"""The refusal log events (docs/store-contract.md#log-events, docs/store-contract.md#refusals), and the uid job
Pods run as, from the controller itself."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pidispatch.api.crds import GROUP, VERSION
from pidispatch.forge.github import Forge
from pidispatch.jobflow.pod import job_pod_uid
from pidispatch.manifests.pod import PodInputs
from pidispatch.settings import OperatorSettings, Settings
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.jobflow import Clock, pump
from testkit.memoryapi import JOBS, NS, TRIGGERS, MemoryApi

ROOT = Path(__file__).resolve().parents[2]

ARMED = {"model": "fake/fake-model", "piVersion": "0.73.1", "resume": True}


def armed_job(api: MemoryApi, name: str) -> dict:
    return api.create(JOBS, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job", "metadata": {"name": name},
                             "spec": {"trigger": "armed", "forge": "github", "repository": "acme/widgets",
                                      "comment": "@pi go", "issue": 3}})


@pytest.mark.parametrize(("store", "source", "event", "fields"), [
    (None, "app", "refused_sessions_dir_unset", {"kind": "github"}),
    ("/srv/sessions", "gh", "refused_config", {"kind": "github", "refunded": False}),
], ids=["no store", "gh source"])
def test_a_refusal_logs_the_spec_s_event(tmp_path: Path, events, store: str | None, source: str, event: str,
                                         fields: dict) -> None:
    api = MemoryApi()
    api.create(TRIGGERS, {"metadata": {"name": "armed"}, "spec": {
        "on": {"event": "issue_comment.created", "phrase": "@pi", "repositories": ["acme/*"]}, "run": ARMED}})
    settings = OperatorSettings(store=Settings(sessions_dir=store, github_auth_source=source),
                                staging_dir=str(tmp_path), max_concurrent_jobs=1)
    from pidispatch.jobflow.dispatcher import Dispatcher
    from pidispatch.jobflow.slots import Slots

    c = Dispatcher(settings, api, NS)  # type: ignore[arg-type]
    c.slots = Slots(1, clock=Clock())
    c.on_job("ADDED", armed_job(api, "refused"))
    pump(c)
    assert (api.job("refused").get("status") or {}).get("phase") == "Refused"
    assert api.pods() == [], "a refusal comes before any Pod"
    logged = [e for e in events() if e["event"] == event]
    assert logged == [{"event": event, **fields}]


def _uid_seen_as(uid: int) -> int:
    """``job_pod_uid()`` in a forked child running as ``uid`` (reported through a pipe)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(read_end)
            if uid != os.getuid():
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            os.write(write_end, str(job_pod_uid()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        seen = answer.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return int(seen)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uids needs root (CI runs as root)")
def test_job_pods_run_as_the_operator_s_uid_unless_it_is_root() -> None:
    """The staged copy is 0600 in a 0700 directory of the operator's uid: the Pod must run as that uid."""
    assert _uid_seen_as(1000) == 1000
    assert _uid_seen_as(0) == PodInputs.run_as_user, "root keeps the restricted profile's non-root default"


# ---- a Job is bounded by its Trigger (issue 31, item 9); a fork under a token that cannot be narrowed (item 2) -

PAT = "github_pat_refusals_0123456789"
REPO = "acme/widgets"


def pat_settings(tmp_path: Path, api_url: str = "http://127.0.0.1:9") -> OperatorSettings:
    token_file = tmp_path / "pat"
    token_file.write_text(PAT + "\n")
    settings = OperatorSettings.from_env({
        "GITHUB_AUTH_SOURCE": "pat", "GITHUB_TOKEN_SECRET": "gh-token/token", "GITHUB_TOKEN_FILE": str(token_file),
        "GITHUB_API_URL": api_url, "PI_DISPATCH_JOB_CHECKOUT": "false"})
    return dataclasses.replace(settings, staging_dir=str(tmp_path / "staging"), max_concurrent_jobs=1)


def dispatch(api: MemoryApi, settings: OperatorSettings, name: str, spec: dict, forge: Forge | None = None) -> dict:
    from pidispatch.jobflow.dispatcher import Dispatcher
    from pidispatch.jobflow.slots import Slots

    c = Dispatcher(settings, api, NS, forge)  # type: ignore[arg-type]
    c.slots = Slots(1, clock=Clock())
    c.on_job("ADDED", api.create(JOBS, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job",
                                        "metadata": {"name": name}, "spec": spec}))
    pump(c)
    return api.job(name)


def trigger_for(api: MemoryApi, run: dict, on: dict | None = None) -> None:
    api.create(TRIGGERS, {"metadata": {"name": "fix"}, "spec": {
        "on": {"event": "issue_comment.created", "phrase": "@pi", **(on or {})},
        "run": {"model": "fake/fake-model", "piVersion": "0.73.1", **run}}})


def secrets_created(api: MemoryApi) -> list[str]:
    return [p for p in api.objects if p.startswith(f"/api/v1/namespaces/{NS}/secrets/")]


ISSUE_SPEC = {"trigger": "fix", "forge": "github", "repository": REPO, "comment": "@pi go", "issue": 3}
BOUNDED = [
    ("a Job asking for gh where its Trigger says pat", {"auth": "pat"}, None, {"authSource": "gh"}, "gh token"),
    ("a Job asking for app where its Trigger says pat", {"auth": "pat"}, None, {"authSource": "app"}, "app token"),
    ("a Job asking for pat on an app Trigger", {"auth": "app"}, None, {"authSource": "pat"}, "pat token"),
    ("a Job for another repository than on.repository", {}, {"repository": REPO},
     {"repository": "mallory/widgets"}, "repository mallory/widgets"),
    ("a Job for another owner's repository of the same name", {}, {"repository": REPO},
     {"repository": "evil/widgets", "authSource": "pat"}, "serves only acme/widgets"),
    ("a Job for an owner on.repositories does not name", {}, {"repositories": ["acme/*", "acme-labs/api-*"]},
     {"repository": "acme-lab/api-x"}, "serves only acme/*, acme-labs/api-*"),
    ("a Job for a name the owner's glob does not match", {}, {"repositories": ["acme-labs/api-*"]},
     {"repository": "acme-labs/web"}, "repository acme-labs/web"),
]


@pytest.mark.parametrize(("run", "on", "job", "named"), [b[1:] for b in BOUNDED], ids=[b[0] for b in BOUNDED])
def test_a_job_asking_for_more_than_its_trigger_allows_is_refused_before_any_pod_or_token(
        tmp_path: Path, events, run: dict, on: dict | None, job: dict, named: str) -> None:
    api = MemoryApi()
    trigger_for(api, run, on)
    refused = dispatch(api, pat_settings(tmp_path), "greedy", {**ISSUE_SPEC, **job})
    status = refused["status"]
    assert (status["phase"], status["reason"]) == ("Refused", "beyond-trigger"), status
    started = next(c for c in status["conditions"] if c["type"] == "Started")
    assert started["reason"] == "BeyondTrigger" and named in started["message"], started
    assert "cannot ask for more than its Trigger allows" in started["message"]
    assert api.pods() == [] and secrets_created(api) == [], "no Pod and no token"
    assert not any(c["type"] == "Commented" for c in status["conditions"]), "a hand-made Job's refusal posts nothing"
    assert [e["reason"] for e in events() if e["event"] == "job_refused"] == ["beyond-trigger"]


RECEIVER_MADE = [
    ("the Trigger's run.auth", {"auth": "pat"}, None, {"authSource": "pat"}),
    ("the deployment's source, the Trigger naming none", {}, None, {"authSource": "pat"}),
    ("no authSource at all", {}, None, {}),
    ("on.repository matched without regard to case", {}, {"repository": "Acme/Widgets"}, {"authSource": "pat"}),
    ("on.repositories' owner glob matched without regard to case", {}, {"repositories": ["ACME/*"]}, {}),
]


@pytest.mark.parametrize(("run", "on", "job"), [r[1:] for r in RECEIVER_MADE], ids=[r[0] for r in RECEIVER_MADE])
def test_a_job_as_the_receiver_makes_it_runs(tmp_path: Path, run: dict, on: dict | None, job: dict) -> None:
    api = MemoryApi()
    trigger_for(api, run, on)
    ran = dispatch(api, pat_settings(tmp_path), "fair", {**ISSUE_SPEC, **job})
    assert ran["status"]["phase"] == "Running", ran["status"]
    [pod] = api.pods()
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["GH_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "gh-token", "key": "token"}}


@pytest.fixture
def github() -> Iterator[FakeGitHubAPI]:
    with FakeGitHubAPI(pats={PAT}) as api:
        api.set_pull(REPO, 5, head_ref="feature", head_repo="mallory/widgets")
        api.set_pull(REPO, 7, head_ref="feature-7")
        yield api


PR_SPEC = {"trigger": "fix", "forge": "github", "repository": REPO, "comment": "@pi review", "pullRequest": 5,
           "deliveryId": "d-5"}
FORKS = [
    ("the payload says fork", {"fork": True}),
    ("only the forge API says fork", {"fork": False}),
    ("the payload says nothing and the forge says fork", {}),
]


@pytest.mark.parametrize("flag", [f[1] for f in FORKS], ids=[f[0] for f in FORKS])
def test_a_fork_under_a_pat_is_refused_with_one_comment_before_any_pod(tmp_path: Path, github: FakeGitHubAPI,
                                                                        flag: dict) -> None:
    api = MemoryApi()
    trigger_for(api, {})
    settings = pat_settings(tmp_path, github.url)
    refused = dispatch(api, settings, "fork-pr", {**PR_SPEC, **flag}, Forge(settings.github, "pat"))
    status = refused["status"]
    assert (status["phase"], status["reason"]) == ("Refused", "fork-not-allowed"), status
    started = next(c for c in status["conditions"] if c["type"] == "Started")
    assert started["reason"] == "ForkNotAllowed" and "run.forks: true" in started["message"]
    assert "run.auth: app" in started["message"]
    assert api.pods() == [], "no Pod: the deployment's token was never referenced"
    [comment] = github.comments(REPO, 5)
    assert "comes from a fork" in comment["body"] and "run.forks: true" in comment["body"]
    assert "github.authSource=app" in comment["body"] and "<!-- pi-dispatch:delivery=d-5 -->" in comment["body"]


@pytest.mark.parametrize(("run", "pull", "flag"), [
    ({"forks": True}, 5, {"fork": True}),
    ({"forks": True}, 5, {}),
    ({}, 7, {}),
], ids=["a fork on a Trigger with run.forks", "a fork the forge revealed, on a Trigger with run.forks",
        "a same-repository pull request needs no run.forks"])
def test_a_pat_job_on_a_pull_request_runs_where_allowed(tmp_path: Path, github: FakeGitHubAPI, run: dict,
                                                        pull: int, flag: dict) -> None:
    api = MemoryApi()
    trigger_for(api, run)
    settings = pat_settings(tmp_path, github.url)
    ran = dispatch(api, settings, "pr", {**PR_SPEC, "pullRequest": pull, **flag}, Forge(settings.github, "pat"))
    assert ran["status"]["phase"] == "Running", ran["status"]
    [pod] = api.pods()
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert json.loads(env["PI_JOB_SPEC"]["value"]).get("fork") is (True if pull == 5 else flag.get("fork")), \
        "the runner is told the job is a fork's (its prompt says it cannot push)"
    assert github.comments(REPO, pull) == []


def test_a_pull_request_whose_head_could_not_be_read_for_a_passing_reason_is_retried_not_refused(
        tmp_path: Path) -> None:
    api = MemoryApi()
    trigger_for(api, {})
    settings = pat_settings(tmp_path)  # the API's address answers nothing: the lookup is "unreachable"
    job = dispatch(api, settings, "unread", {**PR_SPEC, "fork": False}, Forge(settings.github, "pat"))
    status = job.get("status") or {}
    assert status.get("phase") not in ("Refused", "Failed", "Running"), status
    started = next(c for c in status["conditions"] if c["type"] == "Started")
    assert "retried" in started["message"] and "lookup-unreachable" in started["message"], started
    assert api.pods() == []


@pytest.mark.parametrize(("pull", "flag", "fork"), [(5, {}, True), (5, {"fork": False}, True), (7, {}, False)],
                         ids=["a fork the forge revealed", "a fork the payload denied", "a same-repository pull"])
def test_behind_the_gateway_the_capability_says_fork_when_the_forge_does(tmp_path: Path, github: FakeGitHubAPI,
                                                                         pull: int, flag: dict, fork: bool) -> None:
    """The gateway keeps a fork's job read-only by its capability's claims: they must follow what the forge
    revealed, not the payload's word (the claims are minted after the head lookup)."""
    from pidispatch.contract import gateway_wire as protocol
    from pidispatch.gateway.capability import verify
    from pidispatch.manifests.pod import gateway_secret_name
    from pidispatch.settings.gateway import Gateway

    key = tmp_path / "gateway.key"
    key.write_bytes(b"k" * 48)
    api = MemoryApi()
    trigger_for(api, {"forks": True})
    settings = dataclasses.replace(pat_settings(tmp_path, github.url), gateway=Gateway(
        url="https://gw.ns.svc", proxy="http://gw.ns.svc:3128", ca_configmap="gw-ca", key_file=str(key)))
    ran = dispatch(api, settings, "pr", {**PR_SPEC, "pullRequest": pull, **flag}, Forge(settings.github, "pat"))
    assert ran["status"]["phase"] == "Running", ran["status"]
    name = gateway_secret_name(ran["metadata"]["name"], ran["metadata"]["uid"])
    secret = api.get(f"/api/v1/namespaces/{NS}/secrets/{name}")
    claims = verify(key.read_bytes(), secret["stringData"][protocol.SECRET_KEY])
    assert (claims.fork, claims.subject) == (fork, pull)
    assert claims.token is not None and claims.token.secret == "gh-token", "the gateway reads the deployment's pat"
