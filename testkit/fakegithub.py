"""A fake GitHub for tests: signed webhook deliveries in GitHub's real format.

``Webhooks`` builds deliveries the way GitHub's webhook service (Hookshot) sends them -- the headers
``X-GitHub-Event``, ``X-GitHub-Delivery`` (a UUID), ``X-Hub-Signature-256`` (``sha256=<hex>`` HMAC of
the raw body), ``User-Agent: GitHub-Hookshot/<sha>``, ``Content-Type: application/json`` -- with
GitHub's complete payloads (``testkit/github_objects.py``: ``repository``, ``sender``, ``issue``, ``comment``,
``label``, ``pull_request`` with ``head``/``base``, ``review``), each checked against GitHub's webhook schema
for its event and action (``testkit/webhook_contract.py``, docs/github-contracts.md), and posts them::

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
from typing import Any
from urllib.parse import quote_plus

import requests

from testkit import github_objects as objects
from testkit.webhook_contract import check_payload

HOOKSHOT_AGENT = "GitHub-Hookshot/8c1e3b2"
_ids = itertools.count(1_000_001)


def _next_id() -> int:
    return next(_ids)


def signature(secret: bytes, body: bytes) -> str:
    """``X-Hub-Signature-256`` as GitHub computes it."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


# -- the state deliveries describe ----------------------------------------------------------------------------
user = objects.user


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

    def as_json(self, *, fork: bool = False) -> dict[str, Any]:
        return objects.repository(self.full_name, default_branch=self.default_branch, private=self.private,
                                  fork=fork)


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
    author_association: str = "OWNER"  # the author's, as the payload's pull_request.author_association says
    head_sha: str = field(default_factory=lambda: uuid.uuid4().hex + "00000000")

    @property
    def head(self) -> Repository | None:
        return None if self.head_deleted else (self.head_repo or self.base)

    def as_json(self) -> dict[str, Any]:
        """The pull request as ``pull_request`` deliveries and ``GET .../pulls/{n}`` carry it."""
        head = self.head
        head_owner = head.owner if head else "ghost"
        return objects.pull_request(self.base.as_json(), self.number, title=self.title, body=None,
                                    author=user(self.author), head_ref=self.head_ref, head_sha=self.head_sha,
                                    head_repo=head.as_json(fork=head != self.base) if head else None,
                                    head_owner=user(head_owner), base_ref=self.base_ref, base_sha="0" * 40,
                                    association=self.author_association)


# -- deliveries -----------------------------------------------------------------------------------------------
@dataclass
class Delivery:
    """One webhook delivery: the event, its payload and its id (a redelivery keeps the id)."""

    event: str
    payload: dict[str, Any]
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    # Why this delivery is deliberately not one GitHub sends (a refusal test's hostile payload): then its
    # payload is not held to GitHub's webhook schemas when sent. Empty: it is, and must pass.
    unlike_github: str = ""

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
        return Delivery(self.event, json.loads(json.dumps(self.payload)), self.id, self.unlike_github)


@dataclass
class Sent:
    status: int
    json: Any
    delivery: Delivery


_UNSET: Any = object()


class Webhooks:
    """Builds and posts signed deliveries to ``url`` for one repository (overridable per delivery).

    Every delivery a builder makes, and every payload :meth:`send` posts, is checked against GitHub's webhook
    schema for its event and action (``testkit/webhook_contract.py``): a payload GitHub would not send fails
    the test where it is made."""

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

    def _common(self, action: str | None, repo: Repository, sender: str | None, bot: bool) -> dict[str, Any]:
        payload: dict[str, Any] = {} if action is None else {"action": action}
        payload.update({"repository": repo.as_json(), "sender": user(sender or self.sender, bot=bot),
                        "installation": {"id": 31337, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMzEzMzc="}})
        return payload

    @staticmethod
    def _deliver(event: str, payload: dict[str, Any]) -> Delivery:
        check_payload(event, payload)
        return Delivery(event, payload)

    def _issue(self, repo: Repository, number: int, *, pull_request: bool = False,
               labels: tuple[str, ...] = (), author: str | None = None,
               author_association: str = "OWNER") -> dict[str, Any]:
        return objects.issue(repo.full_name, number, title=f"Issue {number}", body="Something is broken.",
                             author=user(author or self.sender),
                             labels=[objects.label(n, repo.full_name) for n in labels],
                             pull_request=pull_request, association=author_association)

    def _comment(self, repo: Repository, number: int, body: str, sender: str | None, *,
                 on_pull_request: bool = False) -> dict[str, Any]:
        return objects.issue_comment(repo.full_name, number, _next_id(), body, user(sender or self.sender),
                                     on_pull_request=on_pull_request)

    @staticmethod
    def _edited(payload: dict[str, Any], action: str, writing: str) -> None:
        """An ``edited`` delivery says what the text was before (``changes``, which GitHub requires)."""
        if action == "edited":
            payload["changes"] = {"body": {"from": f"{payload[writing].get('body') or ''} (before the edit)"}}

    def pull_request(self, number: int, *, head_ref: str = "feature", fork: str | None = None,
                     repository: str | Repository | None = None, deleted_fork: bool = False,
                     author: str = "octocat", author_association: str = "OWNER") -> PullRequest:
        """A pull request of the repository; ``fork="someone/widgets"`` makes its head another repository;
        ``author`` opened it, with ``author_association`` to the repository."""
        return PullRequest(self._repo(repository), number, head_ref=head_ref,
                           head_repo=Repository(fork) if fork else None, head_deleted=deleted_fork,
                           author=author, author_association=author_association)

    # -- the four deliveries a Trigger can match -------------------------------------------------------
    def issues_labeled(self, issue: int, label: str, *, repository: str | Repository | None = None,
                       sender: str | None = None, bot: bool = False, action: str = "labeled") -> Delivery:
        repo = self._repo(repository)
        payload = self._common(action, repo, sender, bot)
        payload["issue"] = self._issue(repo, issue, labels=(label,))
        if action in ("labeled", "unlabeled"):
            payload["label"] = objects.label(label, repo.full_name)
        return self._deliver("issues", payload)

    def issue_comment(self, number: int, body: str, *, on_pull_request: bool = False,
                      repository: str | Repository | None = None, sender: str | None = None, bot: bool = False,
                      action: str = "created") -> Delivery:
        repo = self._repo(repository)
        payload = self._common(action, repo, sender, bot)
        payload["issue"] = self._issue(repo, number, pull_request=on_pull_request)
        payload["comment"] = self._comment(repo, number, body, sender, on_pull_request=on_pull_request)
        self._edited(payload, action, "comment")
        return self._deliver("issue_comment", payload)

    def pull_request_review(self, pr: PullRequest | int, body: str | None, *, state: str = "commented",
                            sender: str | None = None, bot: bool = False, action: str = "submitted") -> Delivery:
        pr = self.pull_request(pr) if isinstance(pr, int) else pr
        payload = self._common(action, pr.base, sender, bot)
        pull = pr.as_json()
        payload["pull_request"] = objects.simple_pull_request(pull)
        payload["review"] = objects.review(pull, _next_id(), body, user(sender or self.sender),
                                           state="dismissed" if action == "dismissed" else state)
        self._edited(payload, action, "review")
        return self._deliver("pull_request_review", payload)

    def pull_request_review_comment(self, pr: PullRequest | int, body: str, *, path: str = "README.md",
                                    sender: str | None = None, bot: bool = False,
                                    action: str = "created") -> Delivery:
        pr = self.pull_request(pr) if isinstance(pr, int) else pr
        payload = self._common(action, pr.base, sender, bot)
        pull = pr.as_json()
        payload["pull_request"] = objects.simple_pull_request(pull)
        payload["comment"] = objects.review_comment(pull, _next_id(), _next_id(), body,
                                                    user(sender or self.sender), path=path)
        self._edited(payload, action, "comment")
        return self._deliver("pull_request_review_comment", payload)

    # -- the deliveries that close a conversation, and the ones no Trigger matches ---------------------
    def pull_request_event(self, pr: PullRequest | int, action: str = "opened", *, merged: bool = False,
                           sender: str | None = None) -> Delivery:
        """``pull_request`` with ``action`` (``closed`` with ``merged``: the pull request was merged)."""
        pr = self.pull_request(pr) if isinstance(pr, int) else pr
        payload = self._common(action, pr.base, sender, False)
        pull = pr.as_json()
        if action == "closed":
            stamp = objects.now()
            pull.update({"state": "closed", "closed_at": stamp, "merged": merged, "mergeable": None,
                         "rebaseable": None, "mergeable_state": "unknown",
                         "merged_at": stamp if merged else None, "merge_commit_sha": "f" * 40 if merged else None,
                         "merged_by": user(sender or self.sender) if merged else None})
        payload["number"] = pr.number
        payload["pull_request"] = pull
        return self._deliver("pull_request", payload)

    def issues_event(self, number: int, action: str = "closed", *, repository: str | Repository | None = None,
                     sender: str | None = None, author: str | None = None,
                     author_association: str = "OWNER") -> Delivery:
        """``issues`` with ``action`` (``closed``: the issue was closed, as completed) by ``sender``, of an issue
        ``author`` opened (unset: the sender) with ``author_association`` to the repository."""
        repo = self._repo(repository)
        payload = self._common(action, repo, sender, False)
        issue = self._issue(repo, number, author=author or sender, author_association=author_association)
        if action == "closed":
            issue.update({"state": "closed", "closed_at": objects.now(), "state_reason": "completed"})
        payload["issue"] = issue
        return self._deliver("issues", payload)

    def ping(self, zen: str = "Keep it logically awesome.", hook_id: int = 424242) -> Delivery:
        """What GitHub sends when a repository's webhook is created (``ping``: no action, no installation)."""
        repo = self.repository
        hook_url = f"{objects.API}/repos/{repo.full_name}/hooks/{hook_id}"
        payload = {"zen": zen, "hook_id": hook_id, "hook": {
            "type": "Repository", "id": hook_id, "name": "web", "active": True,
            "events": ["issue_comment", "issues", "pull_request", "pull_request_review",
                       "pull_request_review_comment"],
            "config": {"content_type": "json", "insecure_ssl": "0", "url": self.url},
            "updated_at": objects.EPOCH, "created_at": objects.EPOCH, "url": hook_url,
            "test_url": f"{hook_url}/test", "ping_url": f"{hook_url}/pings", "deliveries_url": f"{hook_url}/deliveries",
            "last_response": {"code": None, "status": "unused", "message": None}},
            "repository": repo.as_json(), "sender": user(self.sender)}
        return self._deliver("ping", payload)

    def push(self, ref: str = "refs/heads/main", *, before: str = "0" * 40, message: str = "Update README") -> Delivery:
        """A push of one commit to ``ref``."""
        repo = self.repository
        after = uuid.uuid4().hex + "00000000"
        pusher = {"name": self.sender, "email": f"{self.sender}@users.noreply.github.com"}
        head = {"id": after, "tree_id": uuid.uuid4().hex + "11111111", "distinct": True, "message": message,
                "timestamp": objects.now(), "url": f"{objects.WEB}/{repo.full_name}/commit/{after}",
                "author": {**pusher, "username": self.sender}, "committer": {**pusher, "username": self.sender},
                "added": [], "modified": ["README.md"], "removed": []}
        payload = {"ref": ref, "before": before, "after": after, "created": before == "0" * 40, "deleted": False,
                   "forced": False, "base_ref": None,
                   "compare": f"{objects.WEB}/{repo.full_name}/compare/{before[:12]}...{after[:12]}",
                   "commits": [head], "head_commit": head, "repository": repo.as_json(), "pusher": pusher,
                   "sender": user(self.sender), "installation": self._common(None, repo, None, False)["installation"]}
        return self._deliver("push", payload)

    def event(self, event: str, action: str | None = "opened", **fields: Any) -> Delivery:
        """Any other event, from the common fields and ``fields``; held to GitHub's schema like the rest."""
        payload = self._common(action, self.repository, None, False)
        payload.update(fields)
        return self._deliver(event, payload)

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

        The payload is checked against GitHub's webhook schema for the event it is sent as, unless ``body``
        replaces its bytes (the test's own forgery) or ``delivery.unlike_github`` says why it is not GitHub's.
        """
        raw = (delivery.form_body if form else delivery.body) if body is None else body
        key = self.secret if secret is _UNSET else secret
        sent_headers: dict[str, str] = delivery.headers(key, raw)
        event = (headers or {}).get("X-GitHub-Event", delivery.event)
        if body is None and not delivery.unlike_github and event is not None:
            check_payload(event, delivery.payload)  # GitHub sends nothing its schema refuses
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
