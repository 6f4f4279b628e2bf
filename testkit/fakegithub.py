"""A fake GitHub for tests: signed webhook deliveries in GitHub's real format.

``Webhooks`` builds deliveries the way GitHub's webhook service (Hookshot) sends them -- the headers
``X-GitHub-Event``, ``X-GitHub-Delivery`` (a UUID), ``X-Hub-Signature-256`` (``sha256=<hex>`` HMAC of
the raw body), ``User-Agent: GitHub-Hookshot/<sha>``, ``Content-Type: application/json`` -- with
payloads shaped like GitHub's (``repository``, ``sender``, ``issue``, ``comment``, ``label``,
``pull_request`` with ``head``/``base``, ``review``) and posts them::

    hooks = Webhooks("http://127.0.0.1:8000/webhook", secret=b"s3cret")
    sent = hooks.send(hooks.issue_comment(7, "@pi fix it"))
    assert sent.status == 202 and sent.json["jobs"]

Every builder returns a :class:`Delivery` (event, payload, a fresh delivery id); :meth:`Webhooks.send`
signs and posts it, and takes overrides to forge, drop or replay what a real sender would not.

The state a delivery describes (:class:`Repository`, :class:`PullRequest`) is plain data here, so a
fake of GitHub's REST API (``GET /repos/{owner}/{repo}/pulls/{n}``, issue comments) can serve the
same objects from this module.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote_plus

import requests

HOOKSHOT_AGENT = "GitHub-Hookshot/8c1e3b2"
_ids = itertools.count(1_000_001)


def _next_id() -> int:
    return next(_ids)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def signature(secret: bytes, body: bytes) -> str:
    """``X-Hub-Signature-256`` as GitHub computes it."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


# -- the state deliveries describe ----------------------------------------------------------------------------
def user(login: str, *, bot: bool = False) -> dict[str, Any]:
    uid = int(hashlib.sha256(login.encode()).hexdigest()[:7], 16)
    return {"login": login, "id": uid, "node_id": f"U_{uid}", "type": "Bot" if bot else "User",
            "site_admin": False, "html_url": f"https://github.com/{login}",
            "url": f"https://api.github.com/users/{login}"}


@dataclass(frozen=True)
class Repository:
    full_name: str
    default_branch: str = "main"
    private: bool = False

    @property
    def owner(self) -> str:
        return self.full_name.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.full_name.split("/", 1)[1]

    def as_json(self) -> dict[str, Any]:
        rid = int(hashlib.sha256(self.full_name.encode()).hexdigest()[:8], 16)
        return {"id": rid, "node_id": f"R_{rid}", "name": self.name, "full_name": self.full_name,
                "private": self.private, "owner": user(self.owner), "fork": False,
                "html_url": f"https://github.com/{self.full_name}",
                "url": f"https://api.github.com/repos/{self.full_name}", "default_branch": self.default_branch}


@dataclass
class PullRequest:
    """A pull request of ``base``. Its head is ``head_repo`` (a fork) or ``base`` itself; ``head_deleted``
    models a fork deleted after the PR was opened (GitHub then sends ``head.repo: null``)."""

    base: Repository
    number: int
    head_ref: str = "feature"
    head_repo: Repository | None = None
    head_deleted: bool = False
    base_ref: str = "main"
    title: str = "A change"
    author: str = "octocat"
    head_sha: str = field(default_factory=lambda: uuid.uuid4().hex + "00000000")

    @property
    def head(self) -> Repository | None:
        return None if self.head_deleted else (self.head_repo or self.base)

    def as_json(self) -> dict[str, Any]:
        repo = self.base.full_name
        head = self.head
        head_owner = head.owner if head else "ghost"
        return {
            "id": self.number * 1000 + 7, "node_id": f"PR_{self.number}", "number": self.number, "state": "open",
            "title": self.title, "user": user(self.author), "draft": False, "merged": False,
            "html_url": f"https://github.com/{repo}/pull/{self.number}",
            "url": f"https://api.github.com/repos/{repo}/pulls/{self.number}",
            "head": {"label": f"{head_owner}:{self.head_ref}", "ref": self.head_ref, "sha": self.head_sha,
                     "user": user(head_owner), "repo": head.as_json() if head else None},
            "base": {"label": f"{self.base.owner}:{self.base_ref}", "ref": self.base_ref, "sha": "0" * 40,
                     "user": user(self.base.owner), "repo": self.base.as_json()},
        }


# -- deliveries -----------------------------------------------------------------------------------------------
@dataclass
class Delivery:
    """One webhook delivery: the event, its payload and its id (a redelivery keeps the id)."""

    event: str
    payload: dict[str, Any]
    id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def body(self) -> bytes:
        return json.dumps(self.payload, separators=(",", ":")).encode()

    @property
    def form_body(self) -> bytes:
        """The body of a webhook whose content type is ``application/x-www-form-urlencoded``."""
        return b"payload=" + quote_plus(json.dumps(self.payload, separators=(",", ":"))).encode()

    def headers(self, secret: bytes | None, body: bytes | None = None) -> dict[str, str]:
        """The headers GitHub sends with it; no signature header when ``secret`` is ``None``."""
        out = {
            "User-Agent": HOOKSHOT_AGENT,
            "Content-Type": "application/json",
            "Accept": "*/*",
            "X-GitHub-Event": self.event,
            "X-GitHub-Delivery": self.id,
            "X-GitHub-Hook-ID": "424242",
            "X-GitHub-Hook-Installation-Target-Type": "repository",
            "X-GitHub-Hook-Installation-Target-ID": str(self.payload.get("repository", {}).get("id", 1)),
        }
        if secret is not None:
            out["X-Hub-Signature-256"] = signature(secret, self.body if body is None else body)
        return out

    def redelivered(self) -> Delivery:
        """What GitHub's "Redeliver" button sends: the same payload under the same id."""
        return Delivery(self.event, json.loads(json.dumps(self.payload)), self.id)


@dataclass
class Sent:
    status: int
    json: Any
    delivery: Delivery


_UNSET: Any = object()


class Webhooks:
    """Builds and posts signed deliveries to ``url`` for one repository (overridable per delivery)."""

    def __init__(self, url: str, secret: bytes, *, repository: str = "acme/widgets", sender: str = "octocat",
                 timeout: float = 15.0) -> None:
        self.url = url
        self.secret = secret
        self.repository = Repository(repository)
        self.sender = sender
        self.timeout = timeout
        self.session = requests.Session()
        self.session.trust_env = False  # a loopback receiver: no proxies from the environment

    # -- payload pieces --------------------------------------------------------------------------------
    def _repo(self, repository: str | Repository | None) -> Repository:
        if repository is None:
            return self.repository
        return repository if isinstance(repository, Repository) else Repository(repository)

    def _common(self, action: str, repo: Repository, sender: str | None, bot: bool) -> dict[str, Any]:
        return {"action": action, "repository": repo.as_json(), "sender": user(sender or self.sender, bot=bot),
                "installation": {"id": 31337, "node_id": "I_31337"}}

    def _issue(self, repo: Repository, number: int, *, pull_request: bool = False,
               labels: tuple[str, ...] = ()) -> dict[str, Any]:
        issue: dict[str, Any] = {
            "id": number * 1000 + 3, "node_id": f"I_{number}", "number": number, "title": f"Issue {number}",
            "state": "open", "user": user(self.sender), "body": "Something is broken.", "comments": 0,
            "labels": [self._label(name) for name in labels], "author_association": "OWNER",
            "html_url": f"https://github.com/{repo.full_name}/{'pull' if pull_request else 'issues'}/{number}",
            "url": f"https://api.github.com/repos/{repo.full_name}/issues/{number}",
            "created_at": _now(), "updated_at": _now(),
        }
        if pull_request:
            # What makes an issue comment a pull-request comment.
            issue["pull_request"] = {
                "url": f"https://api.github.com/repos/{repo.full_name}/pulls/{number}",
                "html_url": f"https://github.com/{repo.full_name}/pull/{number}",
                "diff_url": f"https://github.com/{repo.full_name}/pull/{number}.diff",
                "patch_url": f"https://github.com/{repo.full_name}/pull/{number}.patch", "merged_at": None}
        return issue

    @staticmethod
    def _label(name: str) -> dict[str, Any]:
        lid = int(hashlib.sha256(name.encode()).hexdigest()[:7], 16)
        return {"id": lid, "node_id": f"LA_{lid}", "name": name, "color": "ededed", "default": False,
                "description": None}

    def _comment(self, repo: Repository, body: str | None, sender: str | None, where: str) -> dict[str, Any]:
        cid = _next_id()
        return {"id": cid, "node_id": f"IC_{cid}", "body": body, "user": user(sender or self.sender),
                "author_association": "OWNER", "created_at": _now(), "updated_at": _now(),
                "html_url": f"https://github.com/{repo.full_name}/{where}#issuecomment-{cid}",
                "url": f"https://api.github.com/repos/{repo.full_name}/issues/comments/{cid}"}

    def pull_request(self, number: int, *, head_ref: str = "feature", fork: str | None = None,
                     repository: str | Repository | None = None, deleted_fork: bool = False) -> PullRequest:
        """A pull request of the repository; ``fork="someone/widgets"`` makes its head another repository."""
        return PullRequest(self._repo(repository), number, head_ref=head_ref,
                           head_repo=Repository(fork) if fork else None, head_deleted=deleted_fork)

    # -- the four deliveries a Trigger can match -------------------------------------------------------
    def issues_labeled(self, issue: int, label: str, *, repository: str | Repository | None = None,
                       sender: str | None = None, bot: bool = False, action: str = "labeled") -> Delivery:
        repo = self._repo(repository)
        payload = self._common(action, repo, sender, bot)
        payload["issue"] = self._issue(repo, issue, labels=(label,))
        payload["label"] = self._label(label)
        return Delivery("issues", payload)

    def issue_comment(self, number: int, body: str | None, *, on_pull_request: bool = False,
                      repository: str | Repository | None = None, sender: str | None = None, bot: bool = False,
                      action: str = "created") -> Delivery:
        repo = self._repo(repository)
        payload = self._common(action, repo, sender, bot)
        payload["issue"] = self._issue(repo, number, pull_request=on_pull_request)
        where = f"{'pull' if on_pull_request else 'issues'}/{number}"
        payload["comment"] = self._comment(repo, body, sender, where)
        return Delivery("issue_comment", payload)

    def pull_request_review(self, pr: PullRequest | int, body: str | None, *, state: str = "commented",
                            sender: str | None = None, bot: bool = False, action: str = "submitted") -> Delivery:
        pr = self.pull_request(pr) if isinstance(pr, int) else pr
        payload = self._common(action, pr.base, sender, bot)
        payload["pull_request"] = pr.as_json()
        rid = _next_id()
        payload["review"] = {
            "id": rid, "node_id": f"PRR_{rid}", "user": user(sender or self.sender), "body": body, "state": state,
            "commit_id": pr.head_sha, "submitted_at": _now(), "author_association": "OWNER",
            "html_url": f"https://github.com/{pr.base.full_name}/pull/{pr.number}#pullrequestreview-{rid}"}
        return Delivery("pull_request_review", payload)

    def pull_request_review_comment(self, pr: PullRequest | int, body: str | None, *, path: str = "README.md",
                                    sender: str | None = None, bot: bool = False,
                                    action: str = "created") -> Delivery:
        pr = self.pull_request(pr) if isinstance(pr, int) else pr
        payload = self._common(action, pr.base, sender, bot)
        payload["pull_request"] = pr.as_json()
        comment = self._comment(pr.base, body, sender, f"pull/{pr.number}")
        comment.update({"path": path, "line": 1, "side": "RIGHT", "commit_id": pr.head_sha,
                        "pull_request_review_id": _next_id(), "diff_hunk": "@@ -1 +1 @@\n-old\n+new"})
        payload["comment"] = comment
        return Delivery("pull_request_review_comment", payload)

    def event(self, event: str, action: str | None = "opened", **fields: Any) -> Delivery:
        """Any other event (``ping``, ``push``, ``pull_request``...), with the common fields."""
        payload = self._common(action or "", self.repository, None, False)
        if action is None:
            payload.pop("action")
        payload.update(fields)
        return Delivery(event, payload)

    # -- posting ---------------------------------------------------------------------------------------
    def send(self, delivery: Delivery, *, body: bytes | None = None, secret: bytes | None = _UNSET,
             signature_header: str | None = _UNSET, headers: dict[str, str | None] | None = None,
             form: bool = False) -> Sent:
        """Sign and post ``delivery``.

        ``body`` replaces the payload's bytes (signed unless ``signature_header`` is given);
        ``secret=None`` sends no signature, another secret forges one; ``signature_header`` is sent
        verbatim (``None`` drops it); ``headers`` overrides or (with ``None``) removes headers;
        ``form=True`` sends it as a webhook set to ``application/x-www-form-urlencoded`` does
        (``payload=<JSON>``, the signature over those bytes).
        """
        raw = (delivery.form_body if form else delivery.body) if body is None else body
        key = self.secret if secret is _UNSET else secret
        sent_headers: dict[str, str] = delivery.headers(key, raw)
        if form:
            sent_headers["Content-Type"] = "application/x-www-form-urlencoded"
        if signature_header is not _UNSET:
            sent_headers.pop("X-Hub-Signature-256", None)
            if signature_header is not None:
                sent_headers["X-Hub-Signature-256"] = signature_header
        for name, value in (headers or {}).items():
            sent_headers.pop(name, None)
            if value is not None:
                sent_headers[name] = value
        response = self.session.post(self.url, data=raw, headers=sent_headers, timeout=self.timeout)
        try:
            payload = response.json()
        except ValueError:
            payload = response.text
        return Sent(response.status_code, payload, delivery)
