"""The fake REST API's listings a poller reads, with GitHub's conditional requests and rate-limit headers.

Mixed into ``FakeGitHubAPI`` (``testkit/fakegithub_api.py``), whose comments and pull requests it reads:

* ``GET /repos/{o}/{r}/issues/comments`` (``sort``, ``direction``, ``since``, ``per_page``, ``page``): every issue
  and pull-request comment of the repository, ``since`` filtering on ``updated_at`` as GitHub does;
* ``GET /repos/{o}/{r}/pulls/comments``: the review comments (:meth:`PollingAnswers.add_review_comment`);
* ``GET /repos/{o}/{r}/issues/events``: the issue events, newest first (:meth:`PollingAnswers.label_issue`,
  :meth:`PollingAnswers.close_issue`), with ``X-Poll-Interval`` when :attr:`poll_interval` is set.

Every answer of these carries an ``ETag`` (a hash of the answer's bytes) and, when asked ``If-None-Match`` with it,
is a ``304 Not Modified`` without a body, which, as on GitHub, spends nothing of the rate limit. Every answer carries
``x-ratelimit-limit``/``-remaining``/``-reset``/``-used``/``-resource``; a counted request with nothing remaining is
GitHub's 403 ``API rate limit exceeded``. :attr:`refusals` scripts the next answers as a secondary rate limit's
(403 or 429, with or without ``retry-after``). :attr:`polled` keeps what each of these requests was answered.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from testkit import github_objects as objects
from testkit.fakegithub_records import Pull

LISTINGS = (("issues", "comments"), ("pulls", "comments"), ("issues", "events"))


@dataclass
class Polled:
    """One listing request as answered: its path and query, whether it carried ``If-None-Match``, the status."""

    path: str
    query: dict[str, list[str]]
    conditional: bool
    status: int


class PollingAnswers:
    """State and routes of the listings; ``FakeGitHubAPI`` provides ``url``, ``web_url``, ``pulls``, ``_comments``,
    ``_lock``, ``_pull_json`` and ``_next_id``."""

    url: str
    web_url: str
    pulls: dict[tuple[str, int], Pull]
    _comments: dict[tuple[str, int], list[dict[str, Any]]]
    _lock: threading.Lock
    _next_id: int

    # Set by the test: None leaves the budget unlimited (but its headers are still sent).
    rate_limit: int = 5000
    rate_remaining: int | None = None
    rate_reset: float | None = None
    poll_interval: int | None = None

    def _polling_state(self) -> dict[str, Any]:
        state = self.__dict__.get("_polling")
        if state is None:
            state = self.__dict__["_polling"] = {"events": {}, "review_comments": {}, "refusals": [], "polled": []}
        return state

    @property
    def refusals(self) -> list[tuple[int, dict[str, str]]]:
        """The next listing answers, scripted: (403 or 429, extra headers such as ``retry-after``)."""
        return self._polling_state()["refusals"]  # type: ignore[no-any-return]

    @property
    def polled(self) -> list[Polled]:
        with self._lock:
            return list(self._polling_state()["polled"])

    def _user_json(self, login: str, bot: bool = False) -> dict[str, Any]:
        return objects.user(login, bot=bot, api=self.url, web=self.web_url)

    # -- scripting ---------------------------------------------------------------------------------------------
    def add_issue_comment(self, repo: str, number: int, body: str, *, login: str = "octocat", bot: bool = False,
                          association: str = "OWNER") -> dict[str, Any]:
        """A comment on issue (or pull request) ``number``, by ``login`` with ``association`` to the repository."""
        with self._lock:
            self._next_id += 1
            comment = objects.issue_comment(repo, number, self._next_id, body, self._user_json(login, bot),
                                            on_pull_request=(repo, number) in self.pulls, association=association,
                                            api=self.url, web=self.web_url)
            self._comments.setdefault((repo, number), []).append(comment)
            return comment

    def edit_issue_comment(self, comment: dict[str, Any], body: str, *, at: str | None = None) -> None:
        """The comment's text changed (a new ``updated_at``): what ``since`` brings back and nothing starts from."""
        with self._lock:
            comment["body"], comment["updated_at"] = body, at or objects.now()

    def add_review_comment(self, repo: str, number: int, body: str, *, login: str = "octocat",
                           association: str = "OWNER") -> dict[str, Any]:
        """A review comment on pull request ``number`` (set with ``set_pull`` first)."""
        with self._lock:
            pull = self._pull_json(self.pulls[(repo, number)])  # type: ignore[attr-defined]
            self._next_id += 2
            comment = objects.review_comment(pull, self._next_id, self._next_id - 1, body,
                                             self._user_json(login), path="README.md", api=self.url)
            comment["author_association"] = association
            self._polling_state()["review_comments"].setdefault(repo, []).append(comment)
            return comment

    def _issue_event(self, repo: str, number: int, event: str, actor: str, *, bot: bool = False,
                     author: str = "octocat", association: str = "OWNER", **fields: Any) -> dict[str, Any]:
        with self._lock:
            self._next_id += 1
            is_pull = (repo, number) in self.pulls
            issue = objects.issue(repo, number, title=f"Issue {number}", body="Something is broken.",
                                  author=self._user_json(author), pull_request=is_pull, association=association,
                                  api=self.url, web=self.web_url)
            if event == "closed":
                issue.update({"state": "closed", "closed_at": objects.now(),
                              "state_reason": "completed"})
            ident = self._next_id
            record = {"id": ident, "node_id": f"LE_kwDO{ident}",
                      "url": f"{self.url}/repos/{repo}/issues/events/{ident}",
                      "actor": self._user_json(actor, bot), "event": event, "commit_id": None, "commit_url": None,
                      "created_at": objects.now(), "issue": issue, "performed_via_github_app": None, **fields}
            self._polling_state()["events"].setdefault(repo, []).append(record)
            return record

    def label_issue(self, repo: str, number: int, label: str, *, actor: str = "octocat", bot: bool = False
                    ) -> dict[str, Any]:
        """``labeled``: ``actor`` added ``label`` to issue (or pull request) ``number``."""
        return self._issue_event(repo, number, "labeled", actor, bot=bot, label={"name": label, "color": "ededed"})

    def close_issue(self, repo: str, number: int, *, actor: str = "octocat", author: str = "octocat",
                    association: str = "OWNER") -> dict[str, Any]:
        """``closed``: ``actor`` closed issue (or pull request) ``number``, which ``author`` opened."""
        return self._issue_event(repo, number, "closed", actor, author=author, association=association)

    # -- the server side ---------------------------------------------------------------------------------------
    def _polling_route(self, method: str, repo: str, rest: list[str], query: dict[str, list[str]]
                       ) -> tuple[int, Any, dict[str, str], float] | None:
        if method != "GET" or tuple(rest) not in LISTINGS:
            return None
        with self._lock:
            if tuple(rest) == ("issues", "comments"):
                every = [c for (r, _), cs in self._comments.items() if r == repo for c in cs]
            elif tuple(rest) == ("pulls", "comments"):
                every = list(self._polling_state()["review_comments"].get(repo, []))
            else:
                every = sorted(self._polling_state()["events"].get(repo, []), key=lambda e: -e["id"])
            every = json.loads(json.dumps(every))
        if rest[1] == "comments":
            since = (query.get("since") or [None])[0]
            if since:
                every = [c for c in every if c["updated_at"] >= since]
            key = "updated_at" if (query.get("sort") or ["created"])[0] == "updated" else "created_at"
            every.sort(key=lambda c: (c[key], c["id"]), reverse=(query.get("direction") or ["asc"])[0] == "desc")
        per_page = min(int((query.get("per_page") or ["30"])[0]), 100)
        page = int((query.get("page") or ["1"])[0])
        chunk = every[(page - 1) * per_page:page * per_page]
        headers: dict[str, str] = {}
        if page * per_page < len(every):
            kept = "&".join(f"{k}={v[0]}" for k, v in sorted(query.items()) if k != "page")
            headers["Link"] = f'<{self.url}/repos/{repo}/{"/".join(rest)}?{kept}&page={page + 1}>; rel="next"'
        if rest == ["issues", "events"] and self.poll_interval is not None:
            headers["X-Poll-Interval"] = str(self.poll_interval)
        return 200, chunk, headers, 0.0

    def _is_listing(self, method: str, path: str) -> bool:
        parts = [p for p in path.split("/") if p]
        return method == "GET" and len(parts) == 5 and parts[0] == "repos" and tuple(parts[3:]) in LISTINGS

    def _refused_listing(self, method: str, path: str) -> tuple[int, Any, dict[str, str], float] | None:
        """A scripted refusal, or the spent budget's 403, for a listing request; ``None``: answer it."""
        if not self._is_listing(method, path):
            return None
        with self._lock:
            refusals = self._polling_state()["refusals"]
            if refusals:
                status, extra = refusals.pop(0)
                body = {"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you "
                                   "try again.", "documentation_url": "https://docs.github.com/rest/overview/"
                                   "rate-limits-for-the-rest-api", "status": str(status)}
                return status, body, {**self._rate_headers(count=False), **extra}, 0.0
            if self.rate_remaining == 0:
                body = {"message": "API rate limit exceeded for installation.",
                        "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
                        "status": "403"}
                return 403, body, self._rate_headers(count=False), 0.0
        return None

    def _rate_headers(self, *, count: bool) -> dict[str, str]:
        """GitHub's rate-limit headers after this request (``count``: it spent one of the budget)."""
        if self.rate_reset is None or self.rate_reset < time.time():
            self.rate_reset = time.time() + 3600
            self.rate_remaining = self.rate_limit
        if self.rate_remaining is None:
            self.rate_remaining = self.rate_limit
        if count and self.rate_remaining > 0:
            self.rate_remaining -= 1
        return {"x-ratelimit-limit": str(self.rate_limit), "x-ratelimit-remaining": str(self.rate_remaining),
                "x-ratelimit-reset": str(int(self.rate_reset)),
                "x-ratelimit-used": str(self.rate_limit - self.rate_remaining), "x-ratelimit-resource": "core"}

    def _conditional(self, method: str, path: str, query: dict[str, list[str]], if_none_match: str | None,
                     answer: tuple[int, Any, dict[str, str], float]) -> tuple[int, Any, dict[str, str], float]:
        """A listing's answer with its ETag and rate-limit headers; a 304 when ``If-None-Match`` names that ETag."""
        if not self._is_listing(method, path):
            return answer
        status, payload, headers, delay = answer
        with self._lock:
            if status != 200:
                self._polling_state()["polled"].append(Polled(path, query, bool(if_none_match), status))
                return answer
            etag = 'W/"' + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32] + '"'
            fresh = if_none_match != etag
            headers = {**headers, "ETag": etag, **self._rate_headers(count=fresh)}
            self._polling_state()["polled"].append(Polled(path, query, bool(if_none_match), 200 if fresh else 304))
        if not fresh:
            return 304, None, headers, delay
        return status, payload, headers, delay
