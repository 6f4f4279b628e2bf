"""What the forge path lets through, decided on the request alone (docs/gateway.md#graphql, docs/gateway.md#rest):
GraphQL documents read by the gateway's own parser, REST paths as the job sent them, upstream URLs rewritten."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from yarl import URL

from pidispatch.gateway import forge_graphql, forge_rest
from pidispatch.gateway.capability import Claims
from pidispatch.gateway.forge_headers import rewrite_url, to_job, to_upstream

API = "https://ghe.example/api/v3"
JOB = Claims(uid="u", namespace="ns", job="j", repository="acme/widgets", forge="https://ghe.example", api=API,
             exp=int(time.time()) + 60)
FORK = Claims(**{**JOB.__dict__, "fork": True, "subject": 8})
REPO_ID, SUBJECT_ID, OTHER_ISSUE, FOREIGN = "R_repo", "PR_8", "I_7", "I_elsewhere"


class Lookup:
    """The upstream's word about node ids, as a table."""

    async def repository_id(self) -> str | None:
        return REPO_ID

    async def subject_ids(self) -> set[str]:
        return {SUBJECT_ID, "I_8"}

    async def node_repository(self, node_id: str) -> str | None:
        return {SUBJECT_ID: "acme/widgets", OTHER_ISSUE: "acme/widgets", FOREIGN: "evil/elsewhere"}.get(node_id)


def check(claims: Claims, query: str, variables: dict[str, Any] | None = None) -> str | None:
    refused = asyncio.run(forge_graphql.check(claims, {"query": query, "variables": variables or {}}, Lookup()))
    return None if refused is None else refused.reason


REPOSITORY_INFO = """
    fragment repo on Repository { id name owner { login } viewerPermission defaultBranchRef { name } }
    query RepositoryInfo($owner: String!, $name: String!) {
        repository(owner: $owner, name: $name) { ...repo parent { ...repo } mergeCommitAllowed }
    }"""
OURS = {"owner": "acme", "name": "widgets"}


@pytest.mark.parametrize(("query", "variables"), [
    (REPOSITORY_INFO, OURS),
    (REPOSITORY_INFO, {"owner": "ACME", "name": "Widgets"}),
    ('{ r: repository(owner: "acme", name: "widgets") { issue(number: 7) { title } } }', {}),
    ('query { viewer { login } rateLimit { remaining } __typename }', {}),
    ('query Issue_fields{Issue: __type(name: "Issue"){fields(includeDeprecated: true){name}}}', {}),
    ('query Q($o: String = "x") { ... on Query { repository(owner: $o, name: "widgets") { id } } }', {"o": "acme"}),
    ('query { repository(owner: "acme", name: "widgets") { description(format: """a "quoted" block""") } }', {}),
    ('# a comment\nquery { repository(owner:"acme",name:"widgets"){ pullRequests(states:[OPEN],first:1)'
     '{ nodes { headRepositoryOwner { login } } } } }', {}),
])
def test_queries_of_the_jobs_repository_pass(query: str, variables: dict[str, Any]) -> None:
    assert check(JOB, query, variables) is None
    assert check(FORK, query, variables) is None


@pytest.mark.parametrize(("query", "variables", "reason"), [
    (REPOSITORY_INFO, {"owner": "acme", "name": "other"}, "other-repository"),
    (REPOSITORY_INFO, {"owner": "acme"}, "other-repository"),  # a variable not given is null
    ('{ repository(owner: "acme", name: "widgets") { id } other: repository(owner: "evil", name: "x") { id } }', {},
     "other-repository"),
    ('{ node(id: "R_x") { id } }', {}, "other-repository"),
    ('{ search(query: "secret", type: REPOSITORY, first: 5) { repositoryCount } }', {}, "other-repository"),
    ('{ organization(login: "acme") { id } }', {}, "other-repository"),
    ('{ user(login: "acme") { id } }', {}, "other-repository"),
    ('{ viewer { repositories(first: 100) { nodes { name } } } }', {}, "other-repository"),
    ('{ repository(owner: "acme", name: "widgets") { owner { ... on User { repositories(first: 9) { totalCount } }'
     ' } } }', {}, "other-repository"),
    ('fragment f on Repository { owner { login } x: organization { id } }'
     ' { repository(owner: "acme", name: "widgets") { parent { repository { id } } } }', {}, "other-repository"),
    ('fragment F on Query { repository(owner: "evil", name: "x") { id } } query { ...F }', {}, "other-repository"),
    ('query A { repository(owner: "acme", name: "widgets") { id } } query B { node(id: "x") { id } }', {},
     "other-repository"),
    ('subscription { repository(owner: "acme", name: "widgets") { id } }', {}, "unchecked-request"),
    ('{ repository(owner: "acme", name: "widgets") { id }', {}, "unchecked-request"),
    ('fragment A on Query { ...B } fragment B on Query { ...A } { ...A }', {}, "unchecked-request"),
    ('{ ...Missing }', {}, "unchecked-request"),
    ("", {}, "unchecked-request"),
    ('{ repository(owner: "acme", name: "widgets") { id } } \x00', {}, "unchecked-request"),
])
def test_queries_that_reach_elsewhere_or_cannot_be_read_are_refused(query: str, variables: dict[str, Any],
                                                                    reason: str) -> None:
    assert check(JOB, query, variables) == reason


def test_a_document_that_opens_into_too_many_fields_or_nests_too_deep_is_refused() -> None:
    fragments = " ".join(f"fragment F{i} on Query {{ ...F{i + 1} ...F{i + 1} }}" for i in range(30))
    bomb = fragments + ' fragment F30 on Query { __typename } { ...F0 }'
    assert check(JOB, bomb) == "unchecked-request"
    deep = '{ repository(owner: "acme", name: "widgets") { ' + "a { " * 200 + "b" + " }" * 200 + " } }"
    assert check(JOB, deep) == "unchecked-request"


def test_non_objects_are_refused() -> None:
    for body in (None, [], {"query": 3}, {"query": "{ __typename }", "variables": []}):
        refused = asyncio.run(forge_graphql.check(JOB, body, Lookup()))
        assert refused is not None and refused.reason == "unchecked-request"


COMMENT = "mutation CommentCreate($input:AddCommentInput!){addComment(input: $input){commentEdge{node{url}}}}"
CREATE = "mutation PullRequestCreate($input: CreatePullRequestInput!) { createPullRequest(input: $input) " \
         "{ pullRequest { id url } } }"


@pytest.mark.parametrize(("claims", "query", "variables", "reason"), [
    (JOB, COMMENT, {"input": {"subjectId": OTHER_ISSUE, "body": "b"}}, None),
    (JOB, COMMENT, {"input": {"subjectId": FOREIGN, "body": "b"}}, "other-repository"),
    (JOB, COMMENT, {"input": {"subjectId": "I_unknown", "body": "b"}}, "other-repository"),
    (JOB, 'mutation { addComment(input: {subjectId: "I_7", body: "literal"}) { clientMutationId } }', {}, None),
    (JOB, CREATE, {"input": {"repositoryId": REPO_ID, "headRefName": "pi/issue-7", "baseRefName": "main",
                             "title": "t"}}, None),
    (JOB, CREATE, {"input": {"repositoryId": "R_other", "headRefName": "x", "baseRefName": "main", "title": "t"}},
     "other-repository"),
    (JOB, CREATE, {"input": {"repositoryId": REPO_ID, "headRepositoryId": "R_fork", "headRefName": "x",
                             "baseRefName": "main", "title": "t"}}, "other-repository"),
    (JOB, 'mutation { updatePullRequest(input: {pullRequestId: "PR_8", title: "t"}) { clientMutationId } }', {},
     None),
    (JOB, 'mutation { mergePullRequest(input: {pullRequestId: "PR_8"}) { clientMutationId } }', {},
     "other-repository"),
    (JOB, 'mutation { addComment: deleteIssue(input: {issueId: "I_7"}) { clientMutationId } }', {},
     "other-repository"),
    (JOB, COMMENT, {"input": "not an object"}, "unchecked-request"),
    (FORK, COMMENT, {"input": {"subjectId": SUBJECT_ID, "body": "b"}}, None),
    (FORK, COMMENT, {"input": {"subjectId": "I_8", "body": "b"}}, None),
    (FORK, COMMENT, {"input": {"subjectId": OTHER_ISSUE, "body": "b"}}, "fork-read-only"),
    (FORK, CREATE, {"input": {"repositoryId": REPO_ID, "headRefName": "x", "baseRefName": "main", "title": "t"}},
     "fork-read-only"),
    (FORK, 'mutation { updatePullRequest(input: {pullRequestId: "PR_8", title: "t"}) { clientMutationId } }', {},
     "fork-read-only"),
    (FORK, COMMENT + ' mutation Two { addComment(input: {subjectId: "I_7", body: "b"}) { clientMutationId } }',
     {"input": {"subjectId": SUBJECT_ID, "body": "b"}}, "fork-read-only"),
])
def test_mutations(claims: Claims, query: str, variables: dict[str, Any], reason: str | None) -> None:
    assert check(claims, query, variables) == reason


@pytest.mark.parametrize(("claims", "method", "path", "reason"), [
    (JOB, "GET", "/repos/acme/widgets", None),
    (JOB, "GET", "/repos/ACME/Widgets/pulls/8", None),
    (JOB, "POST", "/repos/acme/widgets/pulls", None),
    (JOB, "POST", "/repos/acme/widgets/issues/7/comments", None),
    (JOB, "PATCH", "/repos/acme/widgets/pulls/8", None),
    (JOB, "GET", "/user", None),
    (JOB, "GET", "/rate_limit", None),
    (JOB, "PATCH", "/user", "other-repository"),
    (JOB, "PATCH", "/repos/acme/widgets", "other-repository"),
    (JOB, "DELETE", "/repos/acme/widgets", "other-repository"),
    (JOB, "GET", "/repos/acme/other", "other-repository"),
    (JOB, "GET", "/repos/acme/widgets-evil/pulls", "other-repository"),
    (JOB, "GET", "/orgs/acme/repos", "other-repository"),
    (JOB, "GET", "/search/code", "other-repository"),
    (JOB, "GET", "/users/acme", "other-repository"),
    (JOB, "GET", "/repos", "other-repository"),
    (JOB, "GET", "/repos/acme/widgets/../other", "unchecked-request"),
    (JOB, "GET", "/repos/acme/widgets/%2e%2e/%2e%2e/acme/other", "unchecked-request"),
    (JOB, "GET", "/repos/acme%2Fwidgets/x", "unchecked-request"),
    (JOB, "GET", "/repos/acme/widgets//x", "unchecked-request"),
    (JOB, "GET", "/repos/acme/wid%67ets/pulls", "other-repository"),
    (JOB, "OPTIONS", "/repos/acme/widgets", "unchecked-request"),
    (FORK, "GET", "/repos/acme/widgets/pulls/8/files", None),
    (FORK, "HEAD", "/repos/acme/widgets", None),
    (FORK, "POST", "/repos/acme/widgets/issues/8/comments", None),
    (FORK, "POST", "/repos/acme/widgets/issues/7/comments", "fork-read-only"),
    (FORK, "PATCH", "/repos/acme/widgets/issues/comments/1", "fork-read-only"),
    (FORK, "POST", "/repos/acme/widgets/pulls", "fork-read-only"),
    (FORK, "PUT", "/repos/acme/widgets/contents/x", "fork-read-only"),
])
def test_rest_paths(claims: Claims, method: str, path: str, reason: str | None) -> None:
    refused = forge_rest.rest(claims, method, path)
    assert (None if refused is None else refused.reason) == reason


@pytest.mark.parametrize(("owner", "name", "service", "claims", "reason"), [
    ("acme", "widgets", "git-upload-pack", JOB, None),
    ("acme", "widgets", "git-receive-pack", JOB, None),
    ("Acme", "WIDGETS", "git-upload-pack", FORK, None),
    ("acme", "widgets", "git-receive-pack", FORK, "fork-read-only"),
    ("acme", "other", "git-upload-pack", JOB, "other-repository"),
    ("acme", "widgets", "git-upload-archive", JOB, "unchecked-request"),
    ("acme", "widgets", None, JOB, "unchecked-request"),
])
def test_git_requests(owner: str, name: str, service: str | None, claims: Claims, reason: str | None) -> None:
    refused = forge_rest.git(claims, owner, name, service)
    assert (None if refused is None else refused.reason) == reason


GATEWAY = "https://gateway.jobs.svc"


@pytest.mark.parametrize(("location", "rewritten"), [
    (f"{API}/repos/acme/widgets/issues/comments/5", f"{GATEWAY}/api/v3/repos/acme/widgets/issues/comments/5"),
    ("/api/v3/repos/acme/widgets/pulls?page=2", f"{GATEWAY}/api/v3/repos/acme/widgets/pulls?page=2"),
    ("https://ghe.example/api/graphql", f"{GATEWAY}/api/graphql"),
    ("https://ghe.example/acme/widgets.git/info/refs?service=git-upload-pack",
     f"{GATEWAY}/acme/widgets.git/info/refs?service=git-upload-pack"),
    ("https://x-access-token:ghs_secret@ghe.example/acme/widgets.git/info/refs", None),
    ("https://codeload.ghe.example/acme/widgets/tar.gz/main?token=ABC", None),
    ("http://ghe.example/api/v3/repos/acme/widgets", None),  # another origin (the scheme)
    ("https://ghe.example:8443/api/v3/repos/acme/widgets", None),
])
def test_upstream_urls_are_rewritten_onto_the_gateway_or_dropped(location: str, rewritten: str | None) -> None:
    assert rewrite_url(JOB, location, URL(f"{API}/repos/acme/widgets"), GATEWAY) == rewritten


def test_headers_each_way_are_an_allow_list() -> None:
    sent = to_upstream({"Authorization": "token pdg1.x.y", "Cookie": "a=b", "Proxy-Authorization": "Basic x",
                        "X-Api-Key": "k", "Accept": "application/json", "Git-Protocol": "version=2",
                        "Content-Length": "4", "Host": "gateway", "Transfer-Encoding": "chunked"})
    assert sent == {"Accept": "application/json", "Git-Protocol": "version=2", "Content-Length": "4"}
    back = to_job(JOB, {"Set-Cookie": "s=ghs_secret", "WWW-Authenticate": 'Basic realm="x"',
                        "X-GitHub-SSO": "required; url=https://ghe.example/sso?authorization_request=SECRET",
                        "X-OAuth-Scopes": "repo", "Content-Type": "application/json", "Content-Length": "2",
                        "X-RateLimit-Remaining": "4999", "Location": "https://elsewhere.example/?token=SECRET",
                        "Link": f'<{API}/repos/acme/widgets/pulls?page=2>; rel="next", '
                                f'<https://elsewhere.example/?token=SECRET>; rel="last"'},
                  URL(f"{API}/repos/acme/widgets/pulls"), GATEWAY, keep_length=True)
    assert back == {"Content-Type": "application/json", "Content-Length": "2", "X-RateLimit-Remaining": "4999",
                    "Link": f'<{GATEWAY}/api/v3/repos/acme/widgets/pulls?page=2>; rel="next"'}
