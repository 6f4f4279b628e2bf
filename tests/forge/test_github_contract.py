"""The GitHub contract checks fail where they must (docs/github-contracts.md).

GitHub's published descriptions (``testkit/github-schemas``) judge every request the fake forge receives, every
answer it gives and every webhook payload the tests post. These tests prove each check can fail, and that its
error names the operation or event and the JSON pointer of the field: a request body of the wrong type, an
answer missing a required field, a path or method or query parameter GitHub does not have, a webhook payload
missing a required field or of an action GitHub does not send. And that a mismatch the code under test swallows
still fails the test.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from testkit import github_contract, webhook_contract
from testkit.contracts import ContractError, installed_version, recorded
from testkit.fakegithub import Delivery, Webhooks
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.github_contract import check_request, check_response, description
from testkit.webhook_contract import check_payload

ROOT = Path(__file__).resolve().parents[2]
REPO = "acme/widgets"
PAT = "ghp_contract"


@pytest.fixture
def fake() -> Any:
    with FakeGitHubAPI(pats={PAT}) as api:
        api.set_pull(REPO, 5)
        yield api


def call(api: FakeGitHubAPI, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(api.url + path, data=data, method=method,
                                     headers={"Authorization": f"token {PAT}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


# -- the pinned descriptions ---------------------------------------------------------------------------------
def test_the_pinned_versions_are_the_installed_ones() -> None:
    """``make github-schemas`` installs exactly what the lock file pins: a stale node_modules is noticed."""
    lock = json.loads((ROOT / "testkit" / "github-schemas" / "package-lock.json").read_text())["packages"]
    for package in ("@octokit/openapi", "@octokit/webhooks-schemas"):
        assert installed_version(package) == lock[f"node_modules/{package}"]["version"], package
    assert description().version == installed_version("@octokit/openapi")
    assert description().document["openapi"].startswith("3.0."), "validated as OpenAPI 3.0 (nullable)"


# -- requests ------------------------------------------------------------------------------------------------
def test_a_request_body_of_the_wrong_type_names_the_operation_and_the_field() -> None:
    with pytest.raises(ContractError) as err:
        check_request("POST", f"/repos/{REPO}/issues/7/comments", "", b'{"body": 7}')
    assert err.value.where == "issues/create-comment (POST /repos/{owner}/{repo}/issues/{issue_number}/comments)"
    assert (err.value.part, err.value.pointer) == ("request body", "/body")
    assert "is not of type 'string'" in str(err.value)


def test_a_nested_field_of_the_wrong_value_is_named_by_its_pointer() -> None:
    body = {"repositories": ["widgets"], "permissions": {"contents": "admin"}}
    with pytest.raises(ContractError) as err:
        check_request("POST", "/app/installations/77/access_tokens", "", json.dumps(body).encode())
    assert err.value.where.startswith("apps/create-installation-access-token ")
    assert err.value.pointer == "/permissions/contents"


def test_a_missing_required_body_and_a_path_parameter_of_the_wrong_type_fail() -> None:
    with pytest.raises(ContractError, match="issues/create-comment .* request body at /: required, none given"):
        check_request("POST", f"/repos/{REPO}/issues/7/comments")
    with pytest.raises(ContractError) as err:
        check_request("GET", f"/repos/{REPO}/pulls/seven")
    assert err.value.where.startswith("pulls/get ") and err.value.part == "path parameter pull_number"


@pytest.mark.parametrize(("method", "path", "words"), [
    ("GET", f"/repos/{REPO}/pull/5", "has no such path"),
    ("GET", "/api/v3/repos/acme/widgets", "has no such path"),
    ("PATCH", "/installation/token", "has no PATCH here (it has DELETE apps/revoke-installation-access-token)"),
    ("DELETE", f"/repos/{REPO}/issues/5/comments",
     "has no DELETE here (it has GET issues/list-comments, POST issues/create-comment)"),
], ids=["a misspelt path", "an API prefix left in", "a method the path lacks", "another method the path lacks"])
def test_a_path_or_method_githubs_api_does_not_have_is_an_error(method: str, path: str, words: str) -> None:
    with pytest.raises(ContractError, match=re.escape(words)):
        check_request(method, path)


def test_a_query_parameter_the_operation_does_not_take_or_of_the_wrong_type_is_an_error() -> None:
    path = f"/repos/{REPO}/issues/7/comments"
    assert check_request("GET", path, "per_page=100&page=2").id == "issues/list-comments"
    with pytest.raises(ContractError, match="query parameter perpage at /: not a parameter of this operation"):
        check_request("GET", path, "perpage=100")
    with pytest.raises(ContractError) as err:
        check_request("GET", path, "per_page=many")
    assert err.value.part == "query parameter per_page"


def test_the_operation_is_found_by_githubs_templates() -> None:
    """A literal segment beats a parameter; a multi-segment parameter spans slashes."""
    assert check_request("GET", f"/repos/{REPO}/issues/comments").id == "issues/list-comments-for-repo"
    assert check_request("GET", f"/repos/{REPO}/issues/3/comments").id == "issues/list-comments"
    assert check_request("GET", f"/repos/{REPO}/git/ref/heads/pi/issue-7").id == "git/get-ref"
    assert check_request("PUT", f"/repos/{REPO}/contents/docs/a%20b.md", "",
                         b'{"message": "m", "content": "eA=="}').id == "repos/create-or-update-file-contents"


# -- answers ---------------------------------------------------------------------------------------------------
def test_an_answer_missing_a_required_field_names_the_operation_status_and_field(fake: FakeGitHubAPI) -> None:
    status, pull = call(fake, "GET", f"/repos/{REPO}/pulls/5")
    assert status == 200
    operation = check_request("GET", f"/repos/{REPO}/pulls/5")
    check_response(operation, 200, pull)  # the fake's own answer is GitHub's
    broken = copy.deepcopy(pull)
    del broken["head"]["sha"]
    with pytest.raises(ContractError) as err:
        check_response(operation, 200, broken)
    assert err.value.where == "pulls/get (GET /repos/{owner}/{repo}/pulls/{pull_number})"
    assert (err.value.part, err.value.pointer) == ("response 200", "/head/sha")
    assert "'sha' is a required property" in str(err.value)


def test_an_answer_of_the_wrong_type_or_status_is_an_error() -> None:
    operation = check_request("POST", f"/repos/{REPO}/issues/7/comments", "", b'{"body": "x"}')
    with pytest.raises(ContractError, match="does not answer this operation with 200"):
        check_response(operation, 200, {})
    with pytest.raises(ContractError, match="response 201 at /: .* is not of type 'object'"):
        check_response(operation, 201, [])
    with pytest.raises(ContractError, match="response 422 at /documentation_url"):
        check_response(operation, 422, {"message": "Validation Failed"})
    revoke = check_request("DELETE", "/installation/token")
    check_response(revoke, 204, None)
    with pytest.raises(ContractError, match="answers this with no body"):
        check_response(revoke, 204, {"message": "gone"})


def test_an_error_status_the_operation_does_not_list_is_held_to_githubs_error_object() -> None:
    operation = check_request("GET", f"/repos/{REPO}/pulls/5")
    check_response(operation, 401, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"})
    with pytest.raises(ContractError, match="response 401 at /message"):
        check_response(operation, 401, {"message": 401})


def test_each_exception_is_still_needed_and_says_why() -> None:
    """An exception GitHub has since fixed in its description is dropped when the pin is bumped: this fails."""
    for allowance in github_contract.ALLOWANCES:
        assert len(allowance.reason) > 40, allowance
        op = description().by_id(allowance.operation)
        declared = description().response(op, int(allowance.part.removeprefix("response ")))
        assert declared is not None and declared[1] is not None, allowance
        errors = description().errors(declared[1], "read", _with(_realistic(op.id), allowance.pointer,
                                                                 allowance.value))
        assert any(e.instance == allowance.value for e in errors), f"no longer needed: {allowance}"
    hooks = Webhooks("http://127.0.0.1:9/webhook", b"s")
    deleted_fork = hooks.pull_request(3, fork="mallory/widgets", deleted_fork=True)
    samples = {"pull_request_review": hooks.pull_request_review(deleted_fork, "@pi"),
               "pull_request_review_comment": hooks.pull_request_review_comment(deleted_fork, "@pi")}
    for allowance in webhook_contract.ALLOWANCES:
        assert len(allowance.reason) > 40, allowance
        sample = samples[allowance.definition.split("$", 1)[0]]
        name = webhook_contract.schemas().definition(sample.event, sample.payload)
        errors = webhook_contract.schemas().validator(name).iter_errors(sample.payload)
        assert any(e.instance == allowance.value for e in errors), f"no longer needed: {allowance}"


def _realistic(operation: str) -> Any:
    from testkit import github_objects as objects

    if operation == "pulls/get":
        return objects.pull_request(objects.repository(REPO), 5, title="t", body=None, author=objects.user("o"),
                                    head_ref="f", head_sha="a" * 40, head_repo=objects.repository("m/widgets"),
                                    head_owner=objects.user("m"), base_ref="main", base_sha="b" * 40)
    if operation == "issues/list-events-for-repo":  # a list: the allowance's `*` is its first item
        return [{"id": 1, "node_id": "LE_1", "url": f"{objects.API}/repos/{REPO}/issues/events/1",
                 "actor": objects.user("o"), "event": "labeled", "commit_id": None, "commit_url": None,
                 "created_at": objects.EPOCH, "label": {"name": "pi", "color": "ededed"},
                 "issue": objects.issue(REPO, 5, title="t", body=None, author=objects.user("o")),
                 "performed_via_github_app": None}]
    if operation == "pulls/list-review-comments-for-repo":
        pull = objects.pull_request(objects.repository(REPO), 5, title="t", body=None, author=objects.user("o"),
                                    head_ref="f", head_sha="a" * 40, head_repo=objects.repository(REPO),
                                    head_owner=objects.user("o"), base_ref="main", base_sha="b" * 40)
        return [objects.review_comment(pull, 7, 6, "b", objects.user("o"), path="README.md")]
    return objects.issue(REPO, 5, title="t", body=None, author=objects.user("o"))


def _with(instance: Any, pointer: str, value: Any) -> Any:
    parts = pointer.strip("/").split("/")
    target = instance
    for part in parts[:-1]:
        target = target[0 if part == "*" else part]
    target[parts[-1]] = value
    return instance


# -- the fake forge ----------------------------------------------------------------------------------------------
def test_the_fake_answers_a_request_github_refuses_with_500_and_records_it(fake: FakeGitHubAPI) -> None:
    status, answer = call(fake, "POST", f"/repos/{REPO}/issues/5/comments", {"body": ["not", "a", "string"]})
    assert status == 500 and "issues/create-comment" in answer["message"] and "at /body" in answer["message"]
    assert fake.comments(REPO, 5) == [], "nothing was done with it"
    status, answer = call(fake, "GET", f"/repos/{REPO}/pulls/5/reviews/1/dismissals")
    assert status == 500 and "has no GET here (it has PUT pulls/dismiss-review)" in answer["message"]
    fake.set_pull(REPO, 6, title=6)  # type: ignore[arg-type] - an answer GitHub would not give
    status, answer = call(fake, "GET", f"/repos/{REPO}/pulls/6")
    assert status == 500 and "pulls/get" in answer["message"] and "response 200 at /title" in answer["message"]
    refused, unknown, answered = fake.take_violations()
    assert (refused.part, refused.pointer) == ("request body", "/body")
    assert unknown.part == "method"
    assert (answered.part, answered.pointer) == ("response 200", "/title")
    assert fake.violations == [] and not any(e in recorded() for e in (refused, unknown, answered))


def test_a_mismatch_the_code_under_test_swallows_still_fails_the_test(tmp_path: Path) -> None:
    """The fixture (``testkit/contract_fixture.py``) reads the record after the test, whatever became of the 500."""
    (tmp_path / "conftest.py").write_text("from testkit.contract_fixture import github_contracts_kept  # noqa\n")
    (tmp_path / "test_swallowed.py").write_text(
        "import urllib.error, urllib.request\n"
        "from testkit.fakegithub_api import FakeGitHubAPI\n"
        "def test_swallows() -> None:\n"
        "    with FakeGitHubAPI(pats={'p'}) as api:\n"
        "        request = urllib.request.Request(api.url + '/repos/a/b/issues/1/comments', data=b'{\"body\": 1}',\n"
        "                                         method='POST', headers={'Authorization': 'token p'})\n"
        "        try:\n"
        "            urllib.request.urlopen(request, timeout=10)\n"
        "        except urllib.error.HTTPError:\n"
        "            pass  # the code under test shrugs the 500 off\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed, 1 error" in done.stdout, done.stdout
    assert "GitHub contract mismatch" in done.stdout and "issues/create-comment" in done.stdout, done.stdout


# -- webhook payloads --------------------------------------------------------------------------------------------
def test_a_webhook_payload_missing_a_required_field_names_the_event_and_field() -> None:
    payload = copy.deepcopy(Webhooks("http://127.0.0.1:9/webhook", b"s").issue_comment(7, "@pi fix").payload)
    del payload["comment"]["user"]
    with pytest.raises(ContractError) as err:
        check_payload("issue_comment", payload)
    assert (err.value.where, err.value.pointer) == ("issue_comment$created", "/comment/user")
    assert "'user' is a required property" in str(err.value)


@pytest.mark.parametrize(("event", "edit", "words"), [
    ("issue_comment", lambda p: p.update(action="exploded"), "no issue_comment delivery with action 'exploded'"),
    ("issue_comments", lambda p: None, "GitHub sends no webhook of this event"),
    ("issues", lambda p: p["issue"].update(state="merged"), r"issues\$labeled: payload at /issue/state"),
    ("issues", lambda p: p["issue"].update(surprise=True), "Additional properties are not allowed"),
], ids=["an action GitHub does not send", "an event GitHub does not send", "a value outside the enum",
        "a field GitHub does not send"])
def test_other_payloads_github_does_not_send_are_errors(event: str, edit: Any, words: str) -> None:
    hooks = Webhooks("http://127.0.0.1:9/webhook", b"s")
    payload = copy.deepcopy((hooks.issue_comment(7, "x") if event.startswith("issue_comment")
                             else hooks.issues_labeled(3, "bug")).payload)
    edit(payload)
    with pytest.raises(ContractError, match=words):
        check_payload(event, payload)


def test_sending_a_payload_github_would_not_send_fails_before_it_is_posted() -> None:
    """``Webhooks.send`` checks every delivery's payload; nothing listens at the URL, so only the check can
    answer. A delivery marked ``unlike_github`` (a refusal test's hostile payload) is left to the test."""
    hooks = Webhooks("http://127.0.0.1:9/webhook", b"s", timeout=1)
    delivery = hooks.issue_comment(7, "@pi fix")
    hostile = Delivery("issue_comment", {**delivery.payload, "comment": {"body": "@pi fix"}})
    with pytest.raises(ContractError, match=r"issue_comment\$created: payload at /comment/"):
        hooks.send(hostile)
    hostile.unlike_github = "a forged comment without its author"
    with pytest.raises(OSError):  # checked no more: it went out, and nothing answered
        hooks.send(hostile)
