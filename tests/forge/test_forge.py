"""The operator's GitHub side against a local fake of the GitHub REST API (``testkit/fakegithub_api.py``), no cluster.

What is proven here: the App's JWT is one GitHub accepts (and the fake refuses a bad one); installation
tokens are scoped to one repository; a pull request's head comes from the API and every way it can
fail gives no key with a closed reason; refusal comments are posted once per delivery (the marker,
found even pages down); tokens stay out of ``repr``, exceptions and the Pod manifest.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.models import JobSpec
from pidispatch.api.views import JobView, TriggerView
from pidispatch.forge.appauth import AppKeyError, InstallationToken, app_jwt, load_private_key
from pidispatch.forge.comments import has_marker, marker, posts_comment, refusal_comment
from pidispatch.forge.github import Forge, GitHubError, NoCredentials, _next_link
from pidispatch.forge.head import Head, NoHead, head_from_pull, no_key_reason
from pidispatch.jobflow import comment as comment_step
from pidispatch.jobflow import key as key_step
from pidispatch.jobflow.key import KeyRef
from pidispatch.manifests.pod import PodInputs, job_pod, job_token_secret, workspace_env
from pidispatch.record import JobReason
from pidispatch.settings import GitHubSettings
from pidispatch.store.keys import branch_key, issue_key
from testkit.fakegithub_api import FakeGitHubAPI, fingerprint, generate_app_key

ROOT = Path(__file__).resolve().parents[2]

REPO = "acme/widgets"
APP_ID, INSTALLATION = 4242, 77


@pytest.fixture
def fake(app_key: tuple[Path, Any]):
    with FakeGitHubAPI(app_id=APP_ID, public_key=app_key[1], installation_id=INSTALLATION,
                       installation_repos=(REPO, "acme/gadgets"), pats={"github_pat_example"}) as api:
        yield api


def app_forge(fake: FakeGitHubAPI, key: Path, timeout: int = 2, **kw: Any) -> Forge:
    settings = GitHubSettings(api_url=fake.url, app_id=kw.pop("app_id", APP_ID), app_installation_id=INSTALLATION,
                              app_private_key_file=str(key), timeout_seconds=timeout)
    return Forge(settings, "app", **kw)


def pat_forge(fake: FakeGitHubAPI, token_file: Path) -> Forge:
    return Forge(GitHubSettings(api_url=fake.url, token_file=str(token_file), timeout_seconds=2), "pat")


# ---- the App's JWT and installation tokens ---------------------------------------------------------------

def test_the_app_jwt_is_rs256_with_sane_claims(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    now = time.time()
    jwt = app_jwt(APP_ID, load_private_key(str(app_key[0])), now)
    header, claims = (json.loads(__import__("base64").urlsafe_b64decode(p + "=" * (-len(p) % 4)))
                      for p in jwt.split(".")[:2])
    assert header == {"alg": "RS256", "typ": "JWT"}
    assert claims["iss"] == str(APP_ID)
    assert claims["iat"] <= now and claims["exp"] - claims["iat"] <= 600 and claims["exp"] > now
    assert fake._verify_jwt(jwt) is None


def test_the_fake_refuses_jwts_github_would_refuse(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    key = load_private_key(str(app_key[0]))
    other, _ = generate_app_key()
    other_path = app_key[0].parent / "other.pem"
    other_path.write_bytes(other)
    assert fake._verify_jwt(app_jwt(APP_ID + 1, key)) == "iss is not the App id"
    assert fake._verify_jwt(app_jwt(APP_ID, key, time.time() - 3600)) == "expired"
    assert fake._verify_jwt(app_jwt(APP_ID, key, time.time() + 3600)) == "iat in the future"
    assert fake._verify_jwt(app_jwt(APP_ID, load_private_key(str(other_path)))) == "bad signature"


def test_a_job_token_is_scoped_to_the_jobs_repository(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    forge = app_forge(fake, app_key[0])
    token = forge.mint_job_token(REPO)
    assert token.repositories == ("widgets",) and token.fresh()
    [(sha, issued)] = fake.issued()
    assert sha == fingerprint(token.value)
    assert issued.repositories == (REPO,) and issued.installation_id == INSTALLATION
    [call] = fake.calls("POST", f"/app/installations/{INSTALLATION}/access_tokens")
    assert (call.auth, call.status, call.body) == ("jwt", 201, {"repositories": ["widgets"], "permissions": {
        "contents": "write", "issues": "write", "metadata": "read", "pull_requests": "write"}})
    # the token reads its own repository and nothing else of the installation
    fake.set_pull(REPO, 1)
    assert forge.client.pull(REPO, 1, f"Bearer {token.value}")["number"] == 1
    with pytest.raises(GitHubError) as err:
        forge.client.pull("acme/gadgets", 1, f"Bearer {token.value}")
    assert err.value.status == 404


def test_a_wrong_app_id_mints_nothing_and_lookups_degrade(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    forge = app_forge(fake, app_key[0], app_id=APP_ID + 1)
    with pytest.raises(GitHubError) as err:
        forge.mint_job_token(REPO)
    assert err.value.status == 401
    fake.set_pull(REPO, 3, head_ref="pi/issue-3")
    assert forge.pull_head(REPO, 3) == Head.failed(NoHead.NO_CREDENTIALS)
    assert fake.calls("GET", f"/repos/{REPO}/pulls") == [], "no call without a token"


def test_a_repository_outside_the_installation_cannot_be_minted_for(fake: FakeGitHubAPI,
                                                                    app_key: tuple[Path, Any]) -> None:
    with pytest.raises(GitHubError) as err:
        app_forge(fake, app_key[0]).mint_job_token("someone/else")
    assert err.value.status == 422


def test_the_operators_own_token_is_minted_once_per_repository(fake: FakeGitHubAPI,
                                                               app_key: tuple[Path, Any]) -> None:
    forge = app_forge(fake, app_key[0])
    fake.set_pull(REPO, 1, head_ref="a")
    fake.set_pull(REPO, 2, head_ref="b")
    fake.set_pull("acme/gadgets", 1, head_ref="c")
    assert [forge.pull_head(REPO, 1).ref, forge.pull_head(REPO, 2).ref, forge.pull_head("acme/gadgets", 1).ref] == [
        "a", "b", "c"]
    assert [i.repositories for _, i in fake.issued()] == [(REPO,), ("acme/gadgets",)]
    assert {c.auth for c in fake.calls("GET", "/repos/")} == {"installation"}


def test_an_expiring_operator_token_is_replaced(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    fake.token_ttl = 200  # below the five-minute margin: every use mints a new one
    forge = app_forge(fake, app_key[0])
    fake.set_pull(REPO, 1)
    forge.pull_head(REPO, 1)
    forge.pull_head(REPO, 1)
    assert len(fake.issued()) == 2


def test_revoking_a_token_withdraws_it(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    forge = app_forge(fake, app_key[0])
    token = forge.mint_job_token(REPO)
    forge.revoke(token)
    fake.set_pull(REPO, 1)
    with pytest.raises(GitHubError) as err:
        forge.client.pull(REPO, 1, f"Bearer {token.value}")
    assert err.value.status == 401


def _ec_key() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


@pytest.mark.parametrize("content", [b"", b"not a key", "ec"], ids=["empty", "garbage", "an EC key, not RSA"])
def test_an_unusable_key_file_is_a_configuration_error(tmp_path: Path, content: bytes | str) -> None:
    path = tmp_path / "key.pem"
    path.write_bytes(_ec_key() if content == "ec" else content)  # type: ignore[arg-type]
    with pytest.raises(AppKeyError) as err:
        load_private_key(str(path))
    assert "GITHUB_APP_PRIVATE_KEY_FILE" in str(err.value) and str(path) in str(err.value)


# ---- pull-request heads ------------------------------------------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


HEADS = [
    ("same repository", {"head_ref": "feature/x"}, Head("feature/x", REPO), None),
    ("a fork", {"head_ref": "feature/x", "head_repo": "mallory/widgets"}, Head("feature/x", "mallory/widgets"),
     NoHead.FORK),
    ("a fork that differs only by case", {"head_ref": "pi/issue-7", "head_repo": "Acme/widgets"},
     Head("pi/issue-7", "Acme/widgets"), NoHead.FORK),
    ("a deleted fork", {"head_ref": "feature/x", "head_repo": None}, Head("feature/x", None), NoHead.DELETED_FORK),
    ("404", {"status": 404}, Head.failed(NoHead.LOOKUP_HTTP_ERROR), NoHead.LOOKUP_HTTP_ERROR),
    ("500", {"status": 500}, Head.failed(NoHead.LOOKUP_HTTP_ERROR), NoHead.LOOKUP_HTTP_ERROR),
    ("slower than the timeout", {"delay": 3}, Head.failed(NoHead.LOOKUP_TIMEOUT), NoHead.LOOKUP_TIMEOUT),
]


@pytest.mark.parametrize(("pull", "head", "reason"), [h[1:] for h in HEADS], ids=[h[0] for h in HEADS])
def test_pull_request_heads(fake: FakeGitHubAPI, app_key: tuple[Path, Any], pull: dict, head: Head,
                            reason: NoHead | None) -> None:
    fake.set_pull(REPO, 9, **pull)
    found = app_forge(fake, app_key[0], timeout=1).pull_head(REPO, 9)
    assert found == head
    assert no_key_reason(REPO, found) == reason


def test_a_pull_request_github_does_not_know_is_a_404(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    assert app_forge(fake, app_key[0]).pull_head(REPO, 404) == Head.failed(NoHead.LOOKUP_HTTP_ERROR)


def test_an_unreachable_api_is_a_failed_lookup(app_key: tuple[Path, Any], tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("github_pat_example\n")
    forge = Forge(GitHubSettings(api_url=f"http://127.0.0.1:{_closed_port()}", token_file=str(token),
                                 timeout_seconds=1), "pat")
    assert forge.pull_head(REPO, 1) == Head.failed(NoHead.LOOKUP_UNREACHABLE)


@pytest.mark.parametrize(("payload", "head"), [
    ({}, Head.failed(NoHead.LOOKUP_MALFORMED)),
    ([], Head.failed(NoHead.LOOKUP_MALFORMED)),
    ({"head": {"ref": "x", "repo": {"name": "widgets"}}}, Head.failed(NoHead.LOOKUP_MALFORMED)),
    ({"head": {"ref": "x", "repo": None}}, Head("x", None)),
    ({"head": {"repo": {"full_name": REPO}}}, Head(None, REPO)),
], ids=["no head", "not an object", "repo without full_name", "deleted fork", "no ref"])
def test_head_from_odd_payloads(payload: Any, head: Head) -> None:
    assert head_from_pull(payload) == head


def test_no_ref_gives_no_key() -> None:
    assert no_key_reason(REPO, Head(None, REPO)) == NoHead.NO_HEAD_REF
    assert no_key_reason(REPO, Head("", REPO)) == NoHead.NO_HEAD_REF


def test_a_pat_is_sent_as_token_and_reread_from_its_file(fake: FakeGitHubAPI, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("github_pat_example\n")
    forge = pat_forge(fake, token)
    fake.set_pull(REPO, 5, head_ref="pi/issue-5")
    assert forge.pull_head(REPO, 5) == Head("pi/issue-5", REPO)
    [call] = fake.calls("GET", f"/repos/{REPO}/pulls/5")
    assert (call.auth, call.token_sha256) == ("pat", fingerprint("github_pat_example"))
    token.write_text("")
    assert forge.pull_head(REPO, 5).ref == "pi/issue-5", "read at most once a minute"


def test_a_wrong_pat_is_a_failed_lookup(fake: FakeGitHubAPI, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("github_pat_wrong")
    fake.set_pull(REPO, 5)
    assert pat_forge(fake, token).pull_head(REPO, 5) == Head.failed(NoHead.LOOKUP_HTTP_ERROR)
    assert fake.calls("GET", f"/repos/{REPO}/pulls/5")[0].status == 401


# ---- keys from heads (flow) ----------------------------------------------------------------------------------

ARMED = {"run": {"resume": True}}
PR = {"trigger": "t", "forge": "github", "repository": REPO, "pullRequest": 9}


# The steps take typed specs, and whether the Trigger arms resume (api/views.py builds both at the edge).
def requested(trigger: dict[str, Any]) -> bool:
    return TriggerView.of({"spec": trigger}).requested


def key_and_reason(job: dict[str, Any], trigger: dict[str, Any], head: Head | None) -> tuple[KeyRef | None, Any]:
    return key_step.key_and_reason(JobSpec.model_validate(job, strict=True), requested(trigger), head)


def job_key(job: dict[str, Any], trigger: dict[str, Any], head: Head | None) -> KeyRef | None:
    return key_step.job_key(JobSpec.model_validate(job, strict=True), requested(trigger), head)


def needs_head_lookup(job: dict[str, Any], trigger: dict[str, Any]) -> bool:
    return key_step.needs_head_lookup(JobSpec.model_validate(job, strict=True), requested(trigger))


def comment_pending(job: dict[str, Any]) -> bool:
    return comment_step.comment_pending(JobView.of(job))


def test_the_api_head_wins_over_the_jobs_resolved_field() -> None:
    """``spec.resolved`` is what a cluster user wrote; with a GitHub client only the API counts."""
    job = {**PR, "resolved": {"headRef": "pi/issue-7", "headRepository": REPO}}
    ref, why = key_and_reason(job, ARMED, Head("pi/issue-7", "mallory/widgets"))
    assert (ref, why) == (None, NoHead.FORK)
    ref, why = key_and_reason(job, ARMED, Head.failed(NoHead.LOOKUP_TIMEOUT))
    assert (ref, why) == (None, NoHead.LOOKUP_TIMEOUT)


def test_a_same_repository_pr_from_the_issue_branch_converges_on_the_issue_key() -> None:
    ref = job_key(PR, ARMED, Head("pi/issue-7", REPO))
    assert ref is not None and ref.key == issue_key("github", REPO, 7) == branch_key("github", REPO, "pi/issue-7")
    assert ref.branch == "pi/issue-7"


def test_a_payload_fork_is_never_looked_up() -> None:
    assert not needs_head_lookup({**PR, "fork": True}, ARMED)
    assert key_and_reason({**PR, "fork": True}, ARMED, None) == (None, NoHead.FORK_BY_PAYLOAD)
    assert needs_head_lookup(PR, ARMED)
    assert not needs_head_lookup(PR, {"run": {}}), "resume off: no lookup at all"
    assert not needs_head_lookup({**PR, "pullRequest": None, "issue": 3}, ARMED)


def test_without_a_client_and_without_resolved_the_reason_says_so() -> None:
    assert key_and_reason(PR, ARMED, None) == (None, NoHead.NO_CLIENT)


# ---- comments ----------------------------------------------------------------------------------------------

def test_sessions_dir_unset_comment_names_the_problem_and_both_ways_out() -> None:
    body = refusal_comment(JobReason.SESSIONS_DIR_UNSET, "fix", "uid-1")
    assert body is not None
    assert "run.resume" in body and "no session store" in body and "did not run" in body
    assert "sessions.enabled=true" in body and "remove `run.resume`" in body
    assert body.rstrip().endswith(marker("uid-1")) and marker("uid-1") == "<!-- pi-dispatch:job=uid-1 -->"


def test_config_refused_comment_points_at_doctor() -> None:
    body = refusal_comment(JobReason.CONFIG_REFUSED, "fix", "uid-2")
    assert body is not None
    assert "configuration problem" in body and "pidispatch doctor" in body and "whoever runs" in body
    assert "gh" not in body.split(), "the public comment does not spell out the deployment's credentials"


def test_other_refusals_post_nothing() -> None:
    assert refusal_comment("TriggerNotFound", "fix", "uid") is None
    assert refusal_comment("None", "fix", "uid") is None


def test_a_comment_is_posted_once_per_delivery(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    forge = app_forge(fake, app_key[0])
    body = refusal_comment(JobReason.SESSIONS_DIR_UNSET, "fix", "uid-9")
    assert body is not None
    fake.add_comment(REPO, 9, "@pi go")
    assert forge.comment_once(REPO, 9, body, "uid-9") is True
    assert forge.comment_once(REPO, 9, body, "uid-9") is False, "a restart finds its own marker"
    assert forge.comment_once(REPO, 9, body.replace("uid-9", "uid-10"), "uid-10") is True, "another delivery"
    bodies = [c["body"] for c in fake.comments(REPO, 9)]
    assert len(bodies) == 3 and sum(marker("uid-9") in b for b in bodies) == 1
    assert len(fake.calls("POST", f"/repos/{REPO}/issues/9/comments")) == 2


def test_the_marker_is_found_pages_down(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    for i in range(230):
        fake.add_comment(REPO, 11, f"comment {i}")
    fake.add_comment(REPO, 11, "earlier post\n" + marker("uid-11"), login="pi-dispatch[bot]")
    assert app_forge(fake, app_key[0]).comment_once(REPO, 11, "again", "uid-11") is False
    assert len(fake.calls("GET", f"/repos/{REPO}/issues/11/comments")) == 3
    assert fake.calls("POST", f"/repos/{REPO}/issues/11/comments") == []


def test_pagination_links_to_another_host_are_not_followed() -> None:
    api = "https://api.github.com"
    assert _next_link(f'<{api}/repos/a/b/issues/1/comments?page=2>; rel="next"', api) == \
        f"{api}/repos/a/b/issues/1/comments?page=2"
    assert _next_link('<https://evil.example/steal?page=2>; rel="next"', api) is None
    assert _next_link(f'<{api}.evil.example/x>; rel="next"', api) is None
    assert _next_link(f'<{api}/x?page=9>; rel="last"', api) is None


def test_has_marker_ignores_odd_comments() -> None:
    assert not has_marker([None, {"body": None}, {"nobody": 1}], "u")
    assert has_marker([{"body": f"x {marker('u')}"}], "u")


# ---- tokens stay secret ----------------------------------------------------------------------------------

def test_a_token_is_not_in_repr_str_or_errors(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> None:
    forge = app_forge(fake, app_key[0])
    token = forge.mint_job_token(REPO)
    assert token.value not in repr(token) and token.value not in str(token) and token.value not in f"{token}"
    forge.revoke(token)
    fake.set_pull(REPO, 1)
    with pytest.raises(GitHubError) as err:
        forge.client.pull(REPO, 1, f"Bearer {token.value}")
    assert token.value not in str(err.value) and REPO not in str(err.value)


def test_no_credentials_is_a_github_error_without_a_token() -> None:
    exc = NoCredentials("GITHUB_TOKEN_FILE cannot be read (No such file or directory)")
    assert isinstance(exc, GitHubError) and exc.reason == NoHead.NO_CREDENTIALS


def test_the_pod_gets_the_token_only_by_reference() -> None:
    token = InstallationToken("ghs_secretvalue", time.time() + 3600, ("widgets",))
    secret = job_token_secret("job-1", "uid-1", "ns", "pi-job-token-uid-1", token.value, "2030-01-01T00:00:00Z")
    assert secret["stringData"] == {"token": token.value} and secret["immutable"] is True
    owner = secret["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Job", "uid-1", True)
    inputs = PodInputs(job_name="job-1", job_uid="uid-1", namespace="ns", image="i", command=["c"],
                       env={"GH_TOKEN": "from job.env, overridden", "A": "b"},
                       github_token=("pi-job-token-uid-1", "token"))
    pod = job_pod(inputs)
    fixed = set(workspace_env(inputs.workspace))  # git identity, no prompts: every job Pod has them
    env = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] not in fixed]
    assert [e["name"] for e in env] == ["A", "GH_TOKEN"]
    assert env[1] == {"name": "GH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "pi-job-token-uid-1",
                                                                         "key": "token"}}}
    assert token.value not in json.dumps(pod)
    without = job_pod(PodInputs(**{**inputs.__dict__, "github_token": None, "env": {"A": "b"}}))
    assert [e["name"] for e in without["spec"]["containers"][0]["env"] if e["name"] not in fixed] == ["A"]
    assert not any("TOKEN" in name for name in fixed)


def _refused(reason: str, commented: str | None = None, completed: str | None = None) -> dict[str, Any]:
    conditions = [] if commented is None else [{"type": "Commented", "status": "True" if commented in (
        "Posted", "AlreadyPosted") else "False", "reason": commented, "message": "", "lastTransitionTime": "x"}]
    return {"status": {"phase": "Refused", "reason": reason, "conditions": conditions,
                       "completedAt": completed or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}


@pytest.mark.parametrize(("job", "pending"), [
    (_refused("sessions-dir-unset"), True),
    (_refused("config-refused"), True),
    (_refused("sessions-dir-unset", "Posted"), False),
    (_refused("sessions-dir-unset", "AlreadyPosted"), False),
    (_refused("sessions-dir-unset", "NotCommented"), False),
    (_refused("sessions-dir-unset", "CommentFailed"), True),
    (_refused("sessions-dir-unset", "CommentFailed", "2020-01-01T00:00:00Z"), False),
    ({"status": {"phase": "Failed", "conditions": []}}, False),
    ({"status": {"phase": "Succeeded"}}, False),
], ids=["store refusal, not yet commented", "config refusal, not yet commented", "posted", "found after a restart",
        "no client", "GitHub refused: retried", "GitHub refused an hour ago: given up", "a Failed Job",
        "a finished Job"])
def test_which_jobs_still_owe_a_comment(job: dict[str, Any], pending: bool) -> None:
    assert comment_pending(job) is pending


def test_only_the_two_spec_refusals_post() -> None:
    assert [r for r in ("sessions-dir-unset", "config-refused", "TriggerNotFound", None) if posts_comment(r)] == [
        "sessions-dir-unset", "config-refused"]
