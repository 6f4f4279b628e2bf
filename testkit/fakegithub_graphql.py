"""The GraphQL side of the fake GitHub API (``testkit/fakegithub_api.py``): the few operations ``gh pr create``
sends (gh 2.23), answered from the fake's own state. GraphQL is not REST: GitHub's REST description does not
judge it (docs/github-contracts.md, "Not checked").
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testkit.fakegithub_api import Issued, Pull


class GraphQLAnswers:
    """Mixed into ``FakeGitHubAPI``, whose state (``pulls``, ``repos``, ``graphql``, ...) it reads."""

    graphql: list[dict[str, Any]]
    pulls: dict[tuple[str, int], Any]
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
            return {"createPullRequest": {"pullRequest": {"id": f"PR_{payload['number']}",
                                                          "url": f"{self.web_url}/{repo}/pull/{payload['number']}"}}}
        return None

    def _known_repos(self) -> list[str]:
        if self.repos is None:
            return []
        return [f"{owner.name}/{repo.name[:-4]}" for owner in self.repos.root.iterdir() if owner.is_dir()
                for repo in owner.iterdir() if repo.name.endswith(".git")]

    def _pull_node(self, p: Pull) -> dict[str, Any]:
        return {"id": f"PR_{p.number}", "number": p.number, "title": p.title, "state": "OPEN", "body": p.body,
                "url": f"{self.web_url}/{p.base_repo}/pull/{p.number}", "headRefName": p.head_ref,
                "baseRefName": p.base_ref, "isCrossRepository": p.head_repo != p.base_repo,
                "headRepositoryOwner": {"login": (p.head_repo or "x/").split("/")[0]}}
