"""GitHub's JSON objects, complete, for the fakes: users, repositories, labels, issues, comments, pull requests,
reviews and commits, shaped as GitHub's REST API and webhooks send them.

``testkit/fakegithub.py`` builds webhook deliveries from them and ``testkit/fakegithub_api.py`` its REST answers,
so both are held to GitHub's published descriptions (``docs/github-contracts.md``): the webhook schemas allow no
field they do not name (``additionalProperties: false``) and require every field GitHub always sends, so each
builder here gives exactly GitHub's fields. ``api`` and ``web`` are the API's and the site's base URLs
(``https://api.github.com`` and ``https://github.com``, or the fake forge's own).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

API = "https://api.github.com"
WEB = "https://github.com"
EPOCH = "2024-01-02T03:04:05Z"  # when the fixtures' repositories and users were made


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stable_id(text: str, digits: int = 7) -> int:
    """An id GitHub would give ``text``: stable across runs, so two builders agree on it."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:digits], 16)


def user(login: str, *, bot: bool = False, api: str = API, web: str = WEB) -> dict[str, Any]:
    """A user as every payload and answer embeds it (REST ``simple-user``, webhooks ``user``)."""
    uid = stable_id(login)
    base = f"{api}/users/{login}"
    return {
        "login": login, "id": uid, "node_id": f"{'BOT' if bot else 'U'}_kgDO{uid}",
        "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}?v=4", "gravatar_id": "",
        "url": base, "html_url": f"{web}/{'apps/' + login.removesuffix('[bot]') if bot else login}",
        "followers_url": f"{base}/followers", "following_url": f"{base}/following{{/other_user}}",
        "gists_url": f"{base}/gists{{/gist_id}}", "starred_url": f"{base}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{base}/subscriptions", "organizations_url": f"{base}/orgs",
        "repos_url": f"{base}/repos", "events_url": f"{base}/events{{/privacy}}",
        "received_events_url": f"{base}/received_events", "type": "Bot" if bot else "User",
        "site_admin": False,
    }


def repository(full_name: str, *, default_branch: str = "main", private: bool = False, fork: bool = False,
               api: str = API, web: str = WEB) -> dict[str, Any]:
    """A repository as payloads and answers embed it (webhooks ``repository``, REST ``repository``)."""
    owner, name = full_name.split("/", 1)
    rid = stable_id(full_name, 8)
    base = f"{api}/repos/{full_name}"
    host = web.split("://", 1)[1]
    return {
        "id": rid, "node_id": f"R_kgDO{rid}", "name": name, "full_name": full_name, "private": private,
        "owner": user(owner, api=api, web=web), "html_url": f"{web}/{full_name}", "description": None,
        "fork": fork, "url": base, "forks_url": f"{base}/forks", "keys_url": f"{base}/keys{{/key_id}}",
        "collaborators_url": f"{base}/collaborators{{/collaborator}}", "teams_url": f"{base}/teams",
        "hooks_url": f"{base}/hooks", "issue_events_url": f"{base}/issues/events{{/number}}",
        "events_url": f"{base}/events", "assignees_url": f"{base}/assignees{{/user}}",
        "branches_url": f"{base}/branches{{/branch}}", "tags_url": f"{base}/tags",
        "blobs_url": f"{base}/git/blobs{{/sha}}", "git_tags_url": f"{base}/git/tags{{/sha}}",
        "git_refs_url": f"{base}/git/refs{{/sha}}", "trees_url": f"{base}/git/trees{{/sha}}",
        "statuses_url": f"{base}/statuses/{{sha}}", "languages_url": f"{base}/languages",
        "stargazers_url": f"{base}/stargazers", "contributors_url": f"{base}/contributors",
        "subscribers_url": f"{base}/subscribers", "subscription_url": f"{base}/subscription",
        "commits_url": f"{base}/commits{{/sha}}", "git_commits_url": f"{base}/git/commits{{/sha}}",
        "comments_url": f"{base}/comments{{/number}}", "issue_comment_url": f"{base}/issues/comments{{/number}}",
        "contents_url": f"{base}/contents/{{+path}}", "compare_url": f"{base}/compare/{{base}}...{{head}}",
        "merges_url": f"{base}/merges", "archive_url": f"{base}/{{archive_format}}{{/ref}}",
        "downloads_url": f"{base}/downloads", "issues_url": f"{base}/issues{{/number}}",
        "pulls_url": f"{base}/pulls{{/number}}", "milestones_url": f"{base}/milestones{{/number}}",
        "notifications_url": f"{base}/notifications{{?since,all,participating}}",
        "labels_url": f"{base}/labels{{/name}}", "releases_url": f"{base}/releases{{/id}}",
        "deployments_url": f"{base}/deployments", "created_at": EPOCH, "updated_at": EPOCH, "pushed_at": EPOCH,
        "git_url": f"git://{host}/{full_name}.git", "ssh_url": f"git@{host}:{full_name}.git",
        "clone_url": f"{web}/{full_name}.git", "svn_url": f"{web}/{full_name}", "homepage": None, "size": 12,
        "stargazers_count": 0, "watchers_count": 0, "language": "Python", "has_issues": True,
        "has_projects": True, "has_downloads": True, "has_wiki": True, "has_pages": False,
        "has_discussions": False, "forks_count": 0, "mirror_url": None, "archived": False, "disabled": False,
        "open_issues_count": 1, "license": None, "allow_forking": True, "is_template": False,
        "web_commit_signoff_required": False, "topics": [], "visibility": "private" if private else "public",
        "forks": 0, "open_issues": 1, "watchers": 0, "default_branch": default_branch, "custom_properties": {},
    }


def label(name: str, repo: str, *, api: str = API) -> dict[str, Any]:
    lid = stable_id(f"{repo}#{name}")
    return {"id": lid, "node_id": f"LA_kwDO{lid}", "url": f"{api}/repos/{repo}/labels/{name}", "name": name,
            "color": "ededed", "default": name in ("bug", "documentation", "enhancement"), "description": None}


def reactions(url: str) -> dict[str, Any]:
    return {"url": url, "total_count": 0, "+1": 0, "-1": 0, "laugh": 0, "hooray": 0, "confused": 0, "heart": 0,
            "rocket": 0, "eyes": 0}


def issue(repo: str, number: int, *, title: str, body: str | None, author: dict[str, Any],
          labels: list[dict[str, Any]] | None = None, pull_request: bool = False, comments: int = 0,
          created_at: str | None = None, association: str = "OWNER", api: str = API,
          web: str = WEB) -> dict[str, Any]:
    """An issue (or the issue side of a pull request, ``pull_request``) as webhooks and ``GET .../issues/{n}``
    carry it."""
    base = f"{api}/repos/{repo}/issues/{number}"
    stamp = created_at or now()
    out: dict[str, Any] = {
        "url": base, "repository_url": f"{api}/repos/{repo}", "labels_url": f"{base}/labels{{/name}}",
        "comments_url": f"{base}/comments", "events_url": f"{base}/events",
        "html_url": f"{web}/{repo}/{'pull' if pull_request else 'issues'}/{number}",
        "id": stable_id(f"{repo}#{number}", 9), "node_id": f"I_kwDO{stable_id(f'{repo}#{number}')}",
        "number": number, "title": title, "user": author, "labels": list(labels or []), "state": "open",
        "locked": False, "assignee": None, "assignees": [], "milestone": None, "comments": comments,
        "created_at": stamp, "updated_at": stamp, "closed_at": None, "author_association": association,
        "active_lock_reason": None, "body": body, "reactions": reactions(f"{base}/reactions"),
        "timeline_url": f"{base}/timeline", "performed_via_github_app": None, "state_reason": None,
    }
    if pull_request:
        # What makes an issue a pull request's issue (an issue comment on it a pull-request comment).
        out["draft"] = False
        out["pull_request"] = {"url": f"{api}/repos/{repo}/pulls/{number}", "html_url": f"{web}/{repo}/pull/{number}",
                               "diff_url": f"{web}/{repo}/pull/{number}.diff",
                               "patch_url": f"{web}/{repo}/pull/{number}.patch", "merged_at": None}
    return out


def issue_comment(repo: str, number: int, comment_id: int, body: str, author: dict[str, Any], *,
                  on_pull_request: bool = False, association: str = "OWNER", api: str = API,
                  web: str = WEB) -> dict[str, Any]:
    """An issue (or pull-request conversation) comment: webhooks ``issue-comment``, REST ``issue-comment``."""
    stamp = now()
    url = f"{api}/repos/{repo}/issues/comments/{comment_id}"
    return {
        "url": url, "html_url": f"{web}/{repo}/{'pull' if on_pull_request else 'issues'}/{number}"
                                f"#issuecomment-{comment_id}",
        "issue_url": f"{api}/repos/{repo}/issues/{number}", "id": comment_id, "node_id": f"IC_kwDO{comment_id}",
        "user": author, "created_at": stamp, "updated_at": stamp, "author_association": association,
        "body": body, "reactions": reactions(f"{url}/reactions"), "performed_via_github_app": None,
    }


def _link(href: str) -> dict[str, str]:
    return {"href": href}


def pull_request(base_repo: dict[str, Any], number: int, *, title: str, body: str | None, author: dict[str, Any],
                 head_ref: str, head_sha: str, head_repo: dict[str, Any] | None, head_owner: dict[str, Any],
                 base_ref: str, base_sha: str, created_at: str | None = None, association: str = "OWNER",
                 api: str = API, web: str = WEB) -> dict[str, Any]:
    """A pull request as ``GET /repos/{o}/{r}/pulls/{n}`` answers it. ``head_repo`` ``None``: its head
    repository (a fork) was deleted, as GitHub then says (``head.repo: null``)."""
    repo = base_repo["full_name"]
    pulls = f"{api}/repos/{repo}/pulls/{number}"
    issues = f"{api}/repos/{repo}/issues/{number}"
    stamp = created_at or now()
    return {
        "url": pulls, "id": stable_id(f"{repo}!{number}", 9), "node_id": f"PR_kwDO{stable_id(f'{repo}!{number}')}",
        "html_url": f"{web}/{repo}/pull/{number}", "diff_url": f"{web}/{repo}/pull/{number}.diff",
        "patch_url": f"{web}/{repo}/pull/{number}.patch", "issue_url": issues, "number": number,
        "state": "open", "locked": False, "title": title, "user": author, "body": body, "created_at": stamp,
        "updated_at": stamp, "closed_at": None, "merged_at": None, "merge_commit_sha": None, "assignee": None,
        "assignees": [], "requested_reviewers": [], "requested_teams": [], "labels": [], "milestone": None,
        "draft": False, "commits_url": f"{pulls}/commits", "review_comments_url": f"{pulls}/comments",
        "review_comment_url": f"{api}/repos/{repo}/pulls/comments{{/number}}", "comments_url": f"{issues}/comments",
        "statuses_url": f"{api}/repos/{repo}/statuses/{head_sha}",
        "head": {"label": f"{head_owner['login']}:{head_ref}", "ref": head_ref, "sha": head_sha,
                 "user": head_owner, "repo": head_repo},
        "base": {"label": f"{base_repo['owner']['login']}:{base_ref}", "ref": base_ref, "sha": base_sha,
                 "user": base_repo["owner"], "repo": base_repo},
        "_links": {"self": _link(pulls), "html": _link(f"{web}/{repo}/pull/{number}"), "issue": _link(issues),
                   "comments": _link(f"{issues}/comments"), "review_comments": _link(f"{pulls}/comments"),
                   "review_comment": _link(f"{api}/repos/{repo}/pulls/comments{{/number}}"),
                   "commits": _link(f"{pulls}/commits"),
                   "statuses": _link(f"{api}/repos/{repo}/statuses/{head_sha}")},
        "author_association": association, "auto_merge": None, "active_lock_reason": None, "merged": False,
        "mergeable": True, "rebaseable": True, "mergeable_state": "clean", "merged_by": None, "comments": 0,
        "review_comments": 0, "maintainer_can_modify": False, "commits": 1, "additions": 1, "deletions": 1,
        "changed_files": 1,
    }


# The fields of a full pull request that the webhooks' smaller pull request objects do not carry.
_FULL_ONLY = ("merged", "mergeable", "rebaseable", "mergeable_state", "merged_by", "comments", "review_comments",
              "maintainer_can_modify", "commits", "additions", "deletions", "changed_files")


def simple_pull_request(full: dict[str, Any]) -> dict[str, Any]:
    """The pull request of a review or review-comment delivery (webhooks ``simple-pull-request``): a full
    one without its merge state and counts."""
    return {k: v for k, v in full.items() if k not in _FULL_ONLY}


def review(pull: dict[str, Any], review_id: int, body: str | None, author: dict[str, Any], *, state: str,
           web: str = WEB) -> dict[str, Any]:
    """A submitted pull-request review (webhooks ``pull-request-review``)."""
    html = f"{pull['html_url']}#pullrequestreview-{review_id}"
    return {"id": review_id, "node_id": f"PRR_kwDO{review_id}", "user": author, "body": body,
            "commit_id": pull["head"]["sha"], "submitted_at": now(), "state": state, "html_url": html,
            "pull_request_url": pull["url"], "author_association": "OWNER",
            "_links": {"html": _link(html), "pull_request": _link(pull["url"])}}


def review_comment(pull: dict[str, Any], comment_id: int, review_id: int, body: str, author: dict[str, Any], *,
                   path: str, api: str = API) -> dict[str, Any]:
    """A comment on a line of a pull request's diff (webhooks ``pull-request-review-comment``)."""
    repo = pull["base"]["repo"]["full_name"]
    url = f"{api}/repos/{repo}/pulls/comments/{comment_id}"
    html = f"{pull['html_url']}#discussion_r{comment_id}"
    stamp = now()
    return {
        "url": url, "pull_request_review_id": review_id, "id": comment_id, "node_id": f"PRRC_kwDO{comment_id}",
        "diff_hunk": "@@ -1 +1 @@\n-old\n+new", "path": path, "position": 1, "original_position": 1,
        "commit_id": pull["head"]["sha"], "original_commit_id": pull["head"]["sha"], "user": author, "body": body,
        "created_at": stamp, "updated_at": stamp, "html_url": html, "pull_request_url": pull["url"],
        "author_association": "OWNER",
        "_links": {"self": _link(url), "html": _link(html), "pull_request": _link(pull["url"])},
        "reactions": reactions(f"{url}/reactions"), "start_line": None, "original_start_line": None,
        "start_side": None, "line": 1, "original_line": 1, "side": "RIGHT", "subject_type": "line",
    }


def git_user(name: str, email: str, date: str) -> dict[str, str]:
    return {"name": name, "email": email, "date": date}


def commit(repo: str, sha: str, *, message: str, tree: str, parents: list[str], author: dict[str, str],
           committer: dict[str, str], api: str = API, web: str = WEB) -> dict[str, Any]:
    """A commit as ``GET .../commits/{ref}`` and a comparison carry it (REST ``commit``); its GitHub users are
    unknown (``{}``): the fake's commits are by nobody with an account."""
    base = f"{api}/repos/{repo}"
    return {
        "sha": sha, "node_id": f"C_kwDO{sha[:12]}", "url": f"{base}/commits/{sha}",
        "html_url": f"{web}/{repo}/commit/{sha}", "comments_url": f"{base}/commits/{sha}/comments",
        "commit": {"url": f"{base}/git/commits/{sha}", "author": author, "committer": committer, "message": message,
                   "tree": {"sha": tree, "url": f"{base}/git/trees/{tree}"}, "comment_count": 0,
                   "verification": {"verified": False, "reason": "unsigned", "signature": None, "payload": None,
                                    "verified_at": None}},
        "author": {}, "committer": {},
        "parents": [{"sha": p, "url": f"{base}/commits/{p}", "html_url": f"{web}/{repo}/commit/{p}"}
                    for p in parents],
    }
