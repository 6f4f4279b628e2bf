"""Least-privilege job tokens (issue 15, item 2), against the local fake GitHub API, no cluster.

What is proven: every App installation token is asked for one repository and explicit permissions
(the job's from ``PI_DISPATCH_JOB_TOKEN_PERMISSIONS``, strictly parsed; the operator's own, read-mostly);
the fake answers like GitHub (422 for a permission the installation lacks or a higher level, the
narrowed permissions otherwise); a token GitHub grants more than asked is revoked, never handed out; and
an App-token job's run is capped below its token's life (the token is not refreshed), with an Event
that says so, while a pat/gh job keeps its timeout.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.models import TriggerSpec
from pidispatch.api.views import JobView
from pidispatch.forge.appauth import broader_than
from pidispatch.forge.credentials import JobToken, fork_permissions
from pidispatch.forge.github import OPERATOR_TOKEN_PERMISSIONS, Forge, GitHubError
from pidispatch.jobflow import jobtoken
from pidispatch.jobflow import pod as pod_step
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.jobtoken import TOKEN_MARGIN_SECONDS, token_capped_deadline
from pidispatch.settings import (
    DEFAULT_JOB_TOKEN_PERMISSIONS,
    GITHUB_REPOSITORY_PERMISSIONS,
    ConfigError,
    GitHubSettings,
    OperatorSettings,
    job_token_permissions,
    permission_levels,
)
from testkit.chart import env_values, operator_container, render, template
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.gitforge import GIT_ENV, Repos
from testkit.github_contract import description
from testkit.memoryapi import MemoryApi

ROOT = Path(__file__).resolve().parents[2]

REPO = "acme/widgets"
APP_ID, INSTALLATION = 4242, 77
ACCESS_TOKENS = f"/app/installations/{INSTALLATION}/access_tokens"
JOB_DEFAULT = {"contents": "write", "issues": "write", "metadata": "read", "pull_requests": "write"}


@pytest.fixture
def fake(app_key: tuple[Path, Any]):
    with FakeGitHubAPI(app_id=APP_ID, public_key=app_key[1], installation_id=INSTALLATION,
                       installation_repos=(REPO, "acme/gadgets")) as api:
        yield api


def forge_for(fake: FakeGitHubAPI, key: Path, permissions: str | None = None) -> Forge:
    env = {"GITHUB_AUTH_SOURCE": "app", "GITHUB_API_URL": fake.url, "GITHUB_APP_ID": str(APP_ID),
           "GITHUB_APP_INSTALLATION_ID": str(INSTALLATION), "GITHUB_APP_PRIVATE_KEY_FILE": str(key)}
    if permissions is not None:
        env["PI_DISPATCH_JOB_TOKEN_PERMISSIONS"] = permissions
    return Forge(GitHubSettings.from_env(env, "app"), "app")


# ---- the setting -----------------------------------------------------------------------------------------------

def test_unset_means_contents_pull_requests_and_issues_write_and_metadata_read() -> None:
    assert dict(job_token_permissions(None)) == JOB_DEFAULT
    assert dict(GitHubSettings().job_token_permissions) == JOB_DEFAULT
    assert dict(OperatorSettings.from_env({}).github.job_token_permissions) == JOB_DEFAULT


def test_a_narrower_set_is_taken_as_given() -> None:
    assert job_token_permissions('{"metadata":"read","contents":"read"}') == (("contents", "read"),
                                                                              ("metadata", "read"))


@pytest.mark.parametrize("raw", [
    "", " ", "{}", "[]", '"contents"', "not json", '{"contents":"write"', '{"contents":"admin"}',
    '{"contents":true}', '{"contents":"WRITE"}', '{"metadata":"write"}', '{"members":"read"}',
    '{"content":"write"}', '{"administration ":"read"}', '{"contents":null}', '{"workflows":"read"}',
], ids=["empty", "blank", "empty object", "an array", "a string", "not JSON", "truncated", "admin",
        "a boolean", "upper case", "metadata write", "an organisation permission", "a misspelt name",
        "a padded name", "null", "workflows read (GitHub has no such level)"])
def test_anything_else_is_a_configuration_error_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        job_token_permissions(raw)
    assert err.value.variable == "PI_DISPATCH_JOB_TOKEN_PERMISSIONS"
    with pytest.raises(ConfigError):
        OperatorSettings.from_env({"PI_DISPATCH_JOB_TOKEN_PERMISSIONS": raw})


# ---- what is asked for, and what the fake (like GitHub) answers ---------------------------------------------

def test_a_job_token_asks_for_one_repository_and_the_configured_permissions(fake: FakeGitHubAPI,
                                                                           app_key: tuple[Path, Any]) -> None:
    token = forge_for(fake, app_key[0]).mint_job_token(REPO)
    [call] = fake.calls("POST", ACCESS_TOKENS)
    assert call.body == {"repositories": ["widgets"], "permissions": JOB_DEFAULT}
    [(_, issued)] = fake.issued()
    assert issued.repositories == (REPO,) and issued.permissions == JOB_DEFAULT
    assert dict(token.permissions) == JOB_DEFAULT


def test_a_narrower_setting_gives_a_narrower_token(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    token = forge_for(fake, app_key[0], '{"contents":"read","metadata":"read"}').mint_job_token(REPO)
    assert dict(token.permissions) == {"contents": "read", "metadata": "read"}
    [(_, issued)] = fake.issued()
    assert issued.permissions == {"contents": "read", "metadata": "read"}, "the App's issues/PR write are not in it"


@pytest.mark.parametrize(("installation", "asked"), [
    ({"contents": "read", "metadata": "read"}, '{"contents":"write"}'),
    ({"contents": "write", "metadata": "read"}, '{"contents":"write","issues":"write"}'),
    ({"contents": "write", "metadata": "read"}, '{"workflows":"write"}'),
], ids=["a higher level than the installation's", "a permission the installation lacks", "workflows"])
def test_asking_for_more_than_the_installation_has_is_a_422(fake: FakeGitHubAPI, app_key: tuple[Path, Any],
                                                            installation: dict[str, str], asked: str) -> None:
    fake.permissions = installation
    with pytest.raises(GitHubError) as err:
        forge_for(fake, app_key[0], asked).mint_job_token(REPO)
    assert err.value.status == 422 and "not granted" in str(err.value)
    assert fake.issued() == [], "nothing minted"


def test_the_operators_own_token_is_read_mostly(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    forge = forge_for(fake, app_key[0])
    fake.set_pull(REPO, 1)
    assert forge.pull_head(REPO, 1).failure is None
    [call] = fake.calls("POST", ACCESS_TOKENS)
    assert call.body["permissions"] == OPERATOR_TOKEN_PERMISSIONS
    assert OPERATOR_TOKEN_PERMISSIONS == {"contents": "read", "issues": "write", "metadata": "read",
                                          "pull_requests": "read"}
    [(_, issued)] = fake.issued()
    assert issued.permissions == OPERATOR_TOKEN_PERMISSIONS


def test_a_token_granting_more_than_asked_is_revoked_not_returned(fake: FakeGitHubAPI,
                                                                  app_key: tuple[Path, Any]) -> None:
    route = fake._route

    def generous(*args: Any) -> Any:  # a forge that ignores `permissions` and hands out everything
        status, payload, headers, delay = route(*args)
        if status == 201 and isinstance(payload, dict) and "permissions" in payload:
            payload["permissions"]["administration"] = "write"
        return status, payload, headers, delay

    fake._route = generous  # type: ignore[method-assign]
    with pytest.raises(GitHubError) as err:
        forge_for(fake, app_key[0]).mint_job_token(REPO)
    assert "more than was asked" in str(err.value) and "administration" in str(err.value)
    [(_, issued)] = fake.issued()
    assert issued.revoked


@pytest.mark.parametrize(("granted", "asked", "beyond"), [
    (JOB_DEFAULT, JOB_DEFAULT, []),
    ({"contents": "read"}, {"contents": "write"}, []),
    ({"contents": "write"}, {"contents": "read"}, ["contents"]),
    ({"contents": "read", "actions": "read"}, {"contents": "read"}, ["actions"]),
    ({"contents": "superuser"}, {"contents": "write"}, ["contents"]),
], ids=["the same", "lower", "a higher level", "a name not asked for", "an unknown level"])
def test_broader_than(granted: dict[str, str], asked: dict[str, str], beyond: list[str]) -> None:
    assert broader_than(granted, asked) == beyond


# ---- the run is capped below the token's life ----------------------------------------------------------------

NOW = 1_800_000_000.0
HOUR = 3600
START = 600  # job.startTimeoutSeconds' default
CAP = HOUR - TOKEN_MARGIN_SECONDS - START  # 45 minutes


@pytest.mark.parametrize(("requested", "expires_in", "deadline", "capped"), [
    (1800, HOUR, 1800, False),
    (CAP, HOUR, CAP, False),
    (CAP + 1, HOUR, CAP, True),
    (HOUR, HOUR, CAP, True),
    (HOUR, HOUR - 0.4, CAP - 60, True),
    (HOUR, HOUR - 59.6, CAP - 60, True),
    (7 * 24 * HOUR, HOUR, CAP, True),
    (None, HOUR, CAP, True),
    (1800, 200, 60, True),
    (7 * 24 * HOUR, None, 7 * 24 * HOUR, False),
    (None, None, None, False),
], ids=["a short run is kept", "exactly the token's life less the margin and the start", "one second more is cut",
        "the default hour is cut", "a Pod created a moment after the mint", "a minute after: the same deadline",
        "a week is cut", "no timeout gets one", "an almost expired token", "a pat or gh job keeps a week",
        "a pat or gh job keeps no timeout"])
def test_the_run_timeout_is_capped_below_the_tokens_life(requested: int | None, expires_in: float | None,
                                                         deadline: int | None, capped: bool) -> None:
    got, why = token_capped_deadline(requested, None if expires_in is None else NOW + expires_in, NOW, START)
    assert got == deadline
    assert (why is not None) == capped
    if why is not None:
        assert f"capped at {deadline} s" in why and "not refreshed" in why and "45 minutes" in why


def test_a_pod_that_starts_as_late_as_allowed_still_ends_before_its_token() -> None:
    for requested in (None, 600, HOUR, 7 * 24 * HOUR):
        for elapsed in (0.0, 0.5, 30.0, 59.9):  # from the mint to the Pod's create
            deadline, _ = token_capped_deadline(requested, NOW + HOUR, NOW + elapsed, START)
            assert deadline is not None
            latest_end = NOW + elapsed + START + deadline  # created, started at the last allowed second, ran out
            assert latest_end <= NOW + HOUR - TOKEN_MARGIN_SECONDS


def app_settings(fake: FakeGitHubAPI, key: Path, **extra: str) -> OperatorSettings:
    return OperatorSettings.from_env({
        "GITHUB_AUTH_SOURCE": "app", "GITHUB_API_URL": fake.url, "GITHUB_APP_ID": str(APP_ID),
        "GITHUB_APP_INSTALLATION_ID": str(INSTALLATION), "GITHUB_APP_PRIVATE_KEY_FILE": str(key),
        "PI_DISPATCH_JOB_CHECKOUT": "false", **extra})


JOB = {"metadata": {"name": "fix-1", "uid": "u-1"},
       "spec": {"trigger": "fix", "forge": "github", "repository": REPO, "issue": 1}}


# The steps take the typed views the dispatcher builds (api/views.py); a Trigger spec needs its ``on``.
def _trigger(trigger: dict[str, Any]) -> TriggerSpec:
    return TriggerSpec.model_validate({"on": {"event": "issue_comment.created"}, "run": {},
                                       **(trigger.get("spec") or {})})


def job_token(settings: OperatorSettings, cluster: Cluster, forge: Forge | None, job: dict[str, Any],
              trigger: dict[str, Any], fork: bool = False) -> JobToken | None:
    return jobtoken.job_token(settings, cluster, forge, JobView.of(job), _trigger(trigger), fork)


def create_pod(settings: OperatorSettings, cluster: Cluster, job: dict[str, Any], trigger: dict[str, Any],
               host: Any, token: JobToken | None) -> dict[str, Any]:
    """The job's Pod as the operator created it (the manifest, read back from the API)."""
    made = pod_step.create_pod(settings, cluster, JobView.of(job), _trigger(trigger), host, token)
    return cluster.api.get(cluster.pods(made.name))


def test_an_app_token_job_pod_is_stopped_before_its_token_expires(fake: FakeGitHubAPI,
                                                                  app_key: tuple[Path, Any]) -> None:
    settings = app_settings(fake, app_key[0])
    api = MemoryApi()
    cluster = Cluster(api, "ns")  # type: ignore[arg-type]
    forge = Forge(settings.github, "app")
    trigger = {"spec": {"run": {"timeoutSeconds": 7200}}}
    token = job_token(settings, cluster, forge, JOB, trigger)
    assert isinstance(token, JobToken) and token.expires_at is not None
    pod = create_pod(settings, cluster, JOB, trigger, None, token)
    deadline = pod["spec"]["activeDeadlineSeconds"]
    assert deadline + settings.job_start_timeout_seconds <= token.expires_at - time.time() - TOKEN_MARGIN_SECONDS
    assert deadline == CAP - 60, "a whole minute below: the token's expiry is in whole seconds, just under an hour"
    [event] = [o for p, o in api.objects.items() if p.startswith("/api/v1/namespaces/ns/events/")]
    assert event["reason"] == "TimeoutCapped" and "asked for: 7200 s" in event["message"]


def test_a_pat_job_keeps_its_timeout_and_posts_no_event(tmp_path: Path) -> None:
    settings = OperatorSettings.from_env({"GITHUB_AUTH_SOURCE": "pat", "GITHUB_TOKEN_SECRET": "gh-token/token"})
    api = MemoryApi()
    cluster = Cluster(api, "ns")  # type: ignore[arg-type]
    trigger = {"spec": {"run": {"timeoutSeconds": 7200}}}
    token = job_token(settings, cluster, None, JOB, trigger)
    assert token == JobToken("gh-token", "token")
    pod = create_pod(settings, cluster, JOB, trigger, None, token)
    assert pod["spec"]["activeDeadlineSeconds"] == 7200
    assert not any(p.startswith("/api/v1/namespaces/ns/events/") for p in api.objects)


def test_an_earlier_attempts_secret_is_replaced_so_the_cap_matches_the_pods_token(
        fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    settings = app_settings(fake, app_key[0])
    api = MemoryApi()
    cluster = Cluster(api, "ns")  # type: ignore[arg-type]
    forge = Forge(settings.github, "app")
    job_token(settings, cluster, forge, JOB, {})
    second = job_token(settings, cluster, forge, JOB, {})  # a restart after the Secret, before the Pod
    secret = api.objects["/api/v1/namespaces/ns/secrets/pij-fix-1-token-u-1"]
    assert second is not None and second.expires_at is not None
    assert secret["metadata"]["annotations"]["pi-dispatch.dev/expires-at"] == time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(second.expires_at))
    [_, (_, latest)] = fake.issued()
    assert secret["stringData"]["token"] == next(t for t, i in fake.tokens.items() if i is latest), \
        "the Pod will hold the token whose expiry caps its run"
    assert not latest.revoked
    assert "/api/v1/namespaces/ns/secrets/pij-fix-1-token-u-1" in api.deletes


# ---- the chart's github.app.jobPermissions -------------------------------------------------------------------

CHART_APP = {"github.authSource": "app", "github.app.id": 1234, "github.app.installationId": 5678,
             "github.app.privateKeySecret.name": "gh-app"}


def test_the_charts_default_is_the_operators_default(helm: Any) -> None:
    env = env_values(operator_container(render(helm, CHART_APP)))
    assert "PI_DISPATCH_JOB_TOKEN_PERMISSIONS" not in env, "{} leaves the operator's default"
    assert OperatorSettings.from_env(env).github.job_token_permissions == DEFAULT_JOB_TOKEN_PERMISSIONS


def test_the_charts_permissions_reach_the_operator_as_given(helm: Any) -> None:
    values = {**CHART_APP, "github.app.jobPermissions": {"contents": "read", "metadata": "read"}}
    env = env_values(operator_container(render(helm, values)))
    assert json.loads(env["PI_DISPATCH_JOB_TOKEN_PERMISSIONS"]) == {"contents": "read", "metadata": "read"}, \
        "a map given replaces the default whole (no merge with issues/pull_requests write)"
    assert OperatorSettings.from_env(env).github.job_token_permissions == (("contents", "read"),
                                                                           ("metadata", "read"))


@pytest.mark.parametrize("permissions", [
    {"contents": "admin"}, {"members": "read"}, {"metadata": "write"}, {"contents": True}, {"workflows": "read"},
], ids=["admin", "an organisation permission", "metadata write", "a boolean", "workflows read"])
def test_the_chart_schema_refuses_what_the_operator_would(helm: Any, permissions: dict[str, Any]) -> None:
    result = template(helm, {**CHART_APP, "github.app.jobPermissions": permissions})
    # (helm names the schema's rule, not always the field: the words of the rule are checked)
    assert result.returncode != 0 and "schema" in result.stderr, result.stderr
    with pytest.raises(ConfigError):
        job_token_permissions(json.dumps(permissions))


def test_the_chart_and_the_operator_know_the_same_permission_names() -> None:
    schema = json.loads((ROOT / "charts" / "pi-dispatch" / "values.schema.json").read_text())
    names = schema["properties"]["github"]["properties"]["app"]["properties"]["jobPermissions"]["propertyNames"]
    assert set(names["enum"]) == GITHUB_REPOSITORY_PERMISSIONS


def test_every_permission_and_level_the_operator_asks_for_is_one_githubs_description_takes() -> None:
    """GitHub's own description of "Create an installation access token" (its ``app-permissions`` schema,
    docs/github-contracts.md) names each permission and its levels: the operator asks for no other."""
    schema = description().document["components"]["schemas"]["app-permissions"]["properties"]
    for name in GITHUB_REPOSITORY_PERMISSIONS:
        assert name in schema, f"{name} is not a permission GitHub's description knows"
        assert set(permission_levels(name)) <= set(schema[name]["enum"]), (name, schema[name]["enum"])
    for name, level in OPERATOR_TOKEN_PERMISSIONS.items():
        assert level in schema[name]["enum"], name


# ---- a fork's job: read-only on contents, proven against the forge (issue 31, item 2) -------------------------

FORK_DEFAULT = {"contents": "read", "issues": "read", "metadata": "read", "pull_requests": "write"}


@pytest.mark.parametrize(("configured", "fork"), [
    (JOB_DEFAULT, FORK_DEFAULT),
    ({"contents": "write", "workflows": "write", "statuses": "write", "metadata": "read"},
     {"contents": "read", "statuses": "read", "metadata": "read"}),
    ({"contents": "read", "pull_requests": "read"}, {"contents": "read", "pull_requests": "read"}),
], ids=["the default keeps only pull_requests write (the comment)",
        "every other write is capped at read, workflows (no read level on GitHub) left out", "nothing is raised"])
def test_a_fork_token_is_the_configured_one_capped_at_read_but_for_commenting(configured: dict[str, str],
                                                                               fork: dict[str, str]) -> None:
    assert fork_permissions(configured) == fork


def test_a_fork_token_is_one_github_grants_when_workflows_is_configured(fake: FakeGitHubAPI,
                                                                        app_key: tuple[Path, Any]) -> None:
    """GitHub takes ``workflows`` at ``write`` only: a fork's token capped it at ``read``, which GitHub refuses
    (the fake, held to GitHub's description, answered that request 500 and the test failed); now it is left out."""
    fake.permissions = {**fake.permissions, "workflows": "write"}
    forge = forge_for(fake, app_key[0], '{"contents":"write","workflows":"write","metadata":"read"}')
    assert dict(forge.mint_job_token(REPO).permissions) == {"contents": "write", "workflows": "write",
                                                              "metadata": "read"}
    token = forge.mint_job_token(REPO, fork=True)
    assert dict(token.permissions) == {"contents": "read", "metadata": "read"}
    assert fake.calls("POST", ACCESS_TOKENS)[-1].body["permissions"] == {"contents": "read", "metadata": "read"}


@pytest.fixture
def forge_repos(tmp_path: Path, app_key: tuple[Path, Any]):
    repos = Repos(tmp_path / "forge")
    repos.create(REPO)
    with FakeGitHubAPI(app_id=APP_ID, public_key=app_key[1], installation_id=INSTALLATION,
                       installation_repos=(REPO,), repos=repos) as api:
        api.set_pull(REPO, 5, head_ref="feature", head_repo="mallory/widgets")
        api.set_issue(REPO, 6, "an issue")
        yield api, repos


def push(api: FakeGitHubAPI, token: str, work: Path) -> subprocess.CompletedProcess[str]:
    """Clone the repository with ``token`` as git's password, commit, push to ``pi/issue-1``: what a job's git does."""
    url = api.web_url.replace("://", f"://x-access-token:{token}@") + f"/{REPO}.git"
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "clone", "--quiet", url, str(work)], env=env, check=True, capture_output=True)
    (work / "planted.txt").write_text("from the job\n")
    subprocess.run(["git", "add", "planted.txt"], cwd=work, env=env, check=True)
    subprocess.run(["git", "commit", "--quiet", "-m", "planted"], cwd=work, env=env, check=True)
    return subprocess.run(["git", "push", "origin", "HEAD:refs/heads/pi/issue-1"], cwd=work, env=env, text=True,
                          capture_output=True, check=False)


def rest(api: FakeGitHubAPI, method: str, path: str, token: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(api.url + path, method=method, data=json.dumps(body).encode(), headers={
        "Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.mark.parametrize("fork", [False, True], ids=["a same-repository job", "a fork's job"])
def test_a_fork_job_token_cannot_push_or_write_contents_and_a_same_repository_one_can(
        forge_repos: tuple[FakeGitHubAPI, Repos], app_key: tuple[Path, Any], tmp_path: Path, fork: bool) -> None:
    api, repos = forge_repos
    token = forge_for(api, app_key[0]).mint_job_token(REPO, fork=fork).value
    [call] = api.calls("POST", ACCESS_TOKENS)
    assert call.body["permissions"] == (FORK_DEFAULT if fork else JOB_DEFAULT)

    pushed = push(api, token, tmp_path / "work")
    put = rest(api, "PUT", f"/repos/{REPO}/contents/docs/planted.md", token,
               {"message": "planted", "content": base64.b64encode(b"from the job\n").decode()})
    on_pr = rest(api, "POST", f"/repos/{REPO}/issues/5/comments", token, {"body": "a review"})
    on_issue = rest(api, "POST", f"/repos/{REPO}/issues/6/comments", token, {"body": "an issue comment"})
    if fork:
        assert pushed.returncode != 0
        assert f"remote: Permission to {REPO}.git denied to pi-dispatch[bot]." in pushed.stderr, pushed.stderr
        assert "403" in pushed.stderr, pushed.stderr
        assert repos.tip(REPO, "pi/issue-1") is None, "nothing reached the base repository"
        assert put[0] == 403 and put[1]["message"] == "Resource not accessible by integration", put
        assert "docs/planted.md" not in repos.log(REPO, "main")[0] and len(repos.log(REPO, "main")) == 1
        assert on_issue[0] == 403, "issues is read-only: only the pull request can be answered"
    else:
        assert pushed.returncode == 0, pushed.stderr
        assert repos.tip(REPO, "pi/issue-1") is not None
        assert put[0] == 201 and put[1]["commit"]["sha"] == repos.tip(REPO, "main"), put
        assert on_issue[0] == 201
    assert on_pr[0] == 201, "either way the job can answer on its pull request (pull_requests: write)"


def test_a_fork_job_pod_gets_the_read_only_token(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    settings = app_settings(fake, app_key[0])
    cluster = Cluster(MemoryApi(), "ns")  # type: ignore[arg-type]
    token = job_token(settings, cluster, Forge(settings.github, "app"), JOB, {}, fork=True)
    assert token is not None
    [(_, issued)] = fake.issued()
    assert issued.permissions == FORK_DEFAULT
