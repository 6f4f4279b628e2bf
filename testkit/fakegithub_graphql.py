"""The GraphQL side of the fake GitHub API (``testkit/fakegithub_api.py``): the few operations ``gh pr create``,
``gh pr view``, ``gh pr comment`` and ``gh issue comment`` send (gh 2.23), and the gateway's node lookup,
answered from the fake's own state. GraphQL is not REST: GitHub's REST description does not
judge it (docs/github-contracts.md, "Not checked").
"""

from __future__ import annotations

import re
from typing import Any

from testkit import github_objects as objects
from testkit.fakegithub_records import Issued, Pull


class GraphQLAnswers:
    """Mixed into ``FakeGitHubAPI``, whose state (``pulls``, ``repos``, ``graphql``, ...) it reads."""

    graphql: list[dict[str, Any]]
    pulls: dict[tuple[str, int], Any]
    issues: dict[tuple[str, int], tuple[str, str]]
    web_url: str
    repos: Any
    installation_repos: tuple[str, ...]
    _lock: Any

    def _graphql(self, body: Any, kind: str, token: str | None, issued: Issued | None
                 ) -> tuple[int, Any, dict[str, str], float]:
        with self._lock:
            self.graphql.append(body if isinstance(body, dict) else {"raw": body})
        if kind not in ("installation", "pat"):
            return 401, {"message": "Bad credentials"}, {}, 0.0
        query = str((body or {}).get("query", "")) if isinstance(body, dict) else ""
        variables = (body or {}).get("variables") or {} if isinstance(body, dict) else {}
        named = re.search(r"\b(query|mutation)\s+(\w+)", query)
        answer = self._graphql_answer(named.group(2) if named else "", variables, kind, issued)
        if answer is None:
            unanswered = named.group(2) if named else query[:80]
            return 200, {"errors": [{"message": f"this fake does not answer {unanswered}"}]}, {}, 0.0
        return 200, {"data": answer}, {}, 0.0

    def _repository_node(self, owner: str, name: str) -> dict[str, Any]:
        full = f"{owner}/{name}"
        default = self.repos.default_branch(full) if self.repos is not None and self.repos.exists(full) else "main"
        rid = self._repo_json(full)["node_id"]
        return {"id": rid, "name": name, "owner": {"login": owner}, "hasIssuesEnabled": True, "description": "",
                "hasWikiEnabled": False, "viewerPermission": "WRITE", "defaultBranchRef": {"name": default},
                "parent": None, "mergeCommitAllowed": True, "rebaseMergeAllowed": True, "squashMergeAllowed": True}

    def _graphql_answer(self, operation: str, v: dict[str, Any], kind: str, issued: Issued | None) -> Any:
        """The few operations ``gh pr create`` sends (gh 2.23), answered from the fake's own state."""
        login = "pi-dispatch[bot]" if kind == "installation" else "token-owner"
        if operation == "RepositoryInfo":
            return {"repository": self._repository_node(str(v.get("owner")), str(v.get("name")))}
        if operation in ("UserCurrent", "CurrentUsername"):
            return {"viewer": {"login": login}}
        if operation == "PullRequestForBranch":
            full = f"{v.get('owner')}/{v.get('repo')}"
            with self._lock:
                found = [p for p in self.pulls.values() if p.base_repo == full and p.head_ref == v.get("headRefName")]
            return {"repository": {"pullRequests": {"nodes": [self._pull_node(p) for p in found]}}}
        if operation == "PullRequestByNumber":
            with self._lock:
                pull = self.pulls.get((f"{v.get('owner')}/{v.get('repo')}", v.get("pr_number")))
            if pull is None:
                return None
            return {"repository": {"pullRequest": self._pull_node(pull)}}
        if operation == "IssueByNumber":
            node = self._issue_or_pull(f"{v.get('owner')}/{v.get('repo')}", v.get("number"))
            return None if node is None else {"repository": {"hasIssuesEnabled": True, "issue": node}}
        if operation == "CommentCreate":
            given = v.get("input") or {}
            found = self._by_node_id(str(given.get("subjectId")))
            if found is None:
                return None
            comment = self.add_comment(found[0], found[1], str(given.get("body", "")), login)
            return {"addComment": {"commentEdge": {"node": {"url": comment["html_url"]}}}}
        if operation == "PiGatewayNodeRepository":  # the gateway asks which repository a node id is in
            found = self._by_node_id(str(v.get("id")))
            return {"node": None if found is None else {"repository": {"nameWithOwner": found[0]}}}
        if operation == "PullRequestCreate":
            given = v.get("input") or {}
            candidates = ({p.base_repo for p in self.pulls.values()} | set(self.installation_repos)
                          | set(self._known_repos()))
            repo = next((r for r in candidates if self._repo_json(r)["node_id"] == given.get("repositoryId")), None)
            if repo is None:
                return None
            status, payload, _, _ = self._create_pull(repo, str(given.get("title", "")), str(given.get("body") or ""),
                                                      str(given.get("headRefName", "")),
                                                      str(given.get("baseRefName", "")))
            if status != 201:
                return None
            return {"createPullRequest": {"pullRequest": {"id": payload["node_id"],
                                                          "url": f"{self.web_url}/{repo}/pull/{payload['number']}"}}}
        return None

    def _known_repos(self) -> list[str]:
        if self.repos is None:
            return []
        return [f"{owner.name}/{repo.name[:-4]}" for owner in self.repos.root.iterdir() if owner.is_dir()
                for repo in owner.iterdir() if repo.name.endswith(".git")]

    @staticmethod
    def pull_node_id(repo: str, number: int) -> str:
        """A pull request's node id, as REST's ``node_id`` says it (``github_objects.pull_request``)."""
        return f"PR_kwDO{objects.stable_id(f'{repo}!{number}')}"

    @staticmethod
    def issue_node_id(repo: str, number: int) -> str:
        return f"I_kwDO{objects.stable_id(f'{repo}#{number}')}"

    def _by_node_id(self, node_id: str) -> tuple[str, int] | None:
        """(repository, number) of the issue or pull request ``node_id``."""
        with self._lock:
            known = list(self.pulls) + list(self.issues)
        for repo, number in known:
            if node_id in (self.pull_node_id(repo, number), self.issue_node_id(repo, number)):
                return repo, number
        return None

    def _issue_or_pull(self, repo: str, number: Any) -> dict[str, Any] | None:
        with self._lock:
            pull = self.pulls.get((repo, number))
            issue = self.issues.get((repo, number))
        if pull is not None:
            return {"__typename": "PullRequest", "id": self.pull_node_id(repo, number),
                    "url": f"{self.web_url}/{repo}/pull/{number}"}
        if issue is not None:
            return {"__typename": "Issue", "id": self.issue_node_id(repo, number),
                    "url": f"{self.web_url}/{repo}/issues/{number}"}
        return None

    def _pull_node(self, p: Pull) -> dict[str, Any]:
        """What ``gh pr view`` reads of a pull request (gh 2.23's default fields; the rest are empty)."""
        empty = {"nodes": [], "totalCount": 0, "pageInfo": {"hasNextPage": False, "endCursor": None}}
        return {"id": self.pull_node_id(p.base_repo, p.number), "number": p.number, "title": p.title,
                "state": "OPEN", "body": p.body, "url": f"{self.web_url}/{p.base_repo}/pull/{p.number}",
                "headRefName": p.head_ref, "baseRefName": p.base_ref, "isCrossRepository": p.head_repo != p.base_repo,
                "headRepositoryOwner": {"login": (p.head_repo or "x/").split("/")[0]},
                "headRepository": None if p.head_repo is None else {"id": "R_0", "name": p.head_repo.split("/")[1]},
                "author": {"login": (p.head_repo or "ghost/").split("/")[0]}, "isDraft": False,
                "maintainerCanModify": False, "mergeable": "MERGEABLE", "additions": 0, "deletions": 0,
                "commits": {"totalCount": 1}, "reviewRequests": {"nodes": []}, "reviews": empty, "assignees": empty,
                "labels": empty, "projectCards": empty, "milestone": None, "comments": empty, "reactionGroups": [],
                "createdAt": objects.EPOCH, "statusCheckRollup": {"nodes": []}}
