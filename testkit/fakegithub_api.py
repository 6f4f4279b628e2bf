"""A local fake of the GitHub REST API, speaking GitHub's own JSON, for the operator's forge tests.

``FakeGitHubAPI`` (stdlib ``http.server``, 127.0.0.1, a free port) serves what the operator calls:

* ``GET  /repos/{o}/{r}/pulls/{n}``: a pull request whose head is set per PR (:meth:`FakeGitHubAPI.set_pull`):
  head ref, head repository ``full_name`` or ``None`` for a deleted fork, and a forced status (404, 500)
  or a delay (to make the client time out). A PR never set is a 404, as on GitHub;
* ``GET  /repos/{o}/{r}/pulls`` (``head=OWNER:BRANCH``, ``state``, ``per_page``): the listing the operator reads a
  job's pull request from (``jobflow/outputs.py``);
* ``GET  /repos/{o}/{r}/issues/{n}/comments`` (``per_page``/``page``, a ``Link: rel="next"`` header) and
  ``POST`` to the same path;
* ``POST /app/installations/{id}/access_tokens``: checks the App's JWT (RS256 with the App's public key,
  ``iss`` = the App id, ``iat``/``exp`` sane and at most ten minutes apart) and returns
  ``{"token", "expires_at", "permissions", "repository_selection", "repositories"}`` scoped to the
  repositories asked for (names of the installation's repositories; any other is a 422) and, as GitHub
  does, narrowed to the ``permissions`` asked for (a permission the installation lacks, or a level above
  its own, is a 422); what was asked stays in :attr:`requests` (``body``);
* ``DELETE /installation/token``: revokes the installation token it is called with;
* the listings a poller reads, with ``ETag``/``304`` and the rate-limit headers (``testkit/fakegithub_polling.py``).

Repository endpoints take ``Authorization: Bearer <installation token>`` (scoped to that repository:
otherwise 404, as GitHub hides what a token cannot see) or ``token <pat>`` (:attr:`pats`); anything else
is a 401 ``Bad credentials``. An installation token may do only what its ``permissions`` say, as on
GitHub: a write it lacks is a 403 ``Resource not accessible by integration`` (``PUT .../contents/{path}``
needs ``contents: write``; an issue comment ``issues: write``, or ``pull_requests: write`` on a pull
request; ``POST .../pulls`` ``pull_requests: write``), and a push (``git-receive-pack``) with a token
without ``contents: write`` is a 403 ``Permission to OWNER/NAME.git denied to ...``, which git prints as
``remote:`` lines. ``PUT .../contents/{path}`` with the permission commits the file to the real repository.

Every request lands in :attr:`requests` with the token's SHA-256, never the token itself, so a test can
say which credential was used.

Every REST request and every answer is held to GitHub's published description (``testkit/github_contract.py``;
the JSON objects come from ``testkit/github_objects.py``): a request GitHub would not accept (a path or method
it does not have, a parameter or body field of the wrong type) or an answer GitHub would not give is answered
500 with the mismatch, kept in :attr:`violations` and in the record that fails the running test
(``testkit/contract_fixture.py``; docs/github-contracts.md). GraphQL and git's smart HTTP are not REST and
not checked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from testkit import github_objects as objects
from testkit.contracts import ContractError, record, take
from testkit.fakegithub_graphql import GraphQLAnswers
from testkit.fakegithub_polling import PollingAnswers
from testkit.fakegithub_records import Issued, Pull
from testkit.gitforge import git, git_path, read_body, serve_git
from testkit.github_contract import check_request, check_response, description

SAME = object()  # set_pull: the head repository is the base repository
JWT_MAX_LIFETIME = 600
CLOCK_SKEW = 60


def fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def generate_app_key() -> tuple[bytes, Any]:
    """A fresh RSA key for a test App: (private key PEM for the operator, public key for this fake)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                            serialization.NoEncryption())
    return pem, key.public_key()


def _b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


BOT_LOGIN = "pi-dispatch[bot]"  # who an installation token acts as


def _may(issued: Issued | None, name: str, level: str) -> bool:
    """Whether an installation token's permissions reach ``level`` on ``name`` (``None``: a pat, which may)."""
    if issued is None:
        return True
    levels = {"read": 1, "write": 2, "admin": 3}
    return levels.get(issued.permissions.get(name, ""), 0) >= levels[level]


def _is_push(rest: str, query: str) -> bool:
    """A smart-HTTP request of a push: the receive-pack advertisement or the pack itself."""
    return rest == "git-receive-pack" or (rest == "info/refs" and "service=git-receive-pack" in query)


def _text(h: BaseHTTPRequestHandler, status: int, text: str) -> None:
    data = text.encode()
    h.send_response(status)
    h.send_header("Content-Type", "text/plain; charset=utf-8")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


_CONTENTS_DOC = "repos/contents#create-or-update-file-contents"
_TOKEN_DOC = "apps/apps#create-an-installation-access-token-for-an-app"


def _error(status: int, message: str, doc: str = "") -> dict[str, str]:
    """GitHub's error body (``basic-error``; a 422's ``validation-error`` needs ``documentation_url`` too)."""
    return {"message": message, "documentation_url": f"https://docs.github.com/rest{'/' + doc if doc else ''}",
            "status": str(status)}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Request:
    method: str
    path: str
    auth: str  # "none", "jwt", "installation", "pat", "invalid"
    token_sha256: str | None
    status: int
    body: Any = None


@dataclass
class FakeGitHubAPI(GraphQLAnswers, PollingAnswers):
    """The fake API. ``installation_repos`` are the full names the App's installation can see."""

    app_id: int | None = None
    public_key: Any = None
    installation_id: int | None = None
    installation_repos: tuple[str, ...] = ()
    pats: set[str] = field(default_factory=set)
    token_ttl: float = 3600.0
    permissions: dict[str, str] = field(default_factory=lambda: {
        "contents": "write", "issues": "write", "pull_requests": "write", "metadata": "read"})
    requests: list[Request] = field(default_factory=list)
    tokens: dict[str, Issued] = field(default_factory=dict)
    pulls: dict[tuple[str, int], Pull] = field(default_factory=dict)
    # The git forge behind the API (``testkit/gitforge.py``): branch tips, default branches, commits and
    # ``/OWNER/NAME.git`` smart HTTP come from these real repositories. None: the API alone.
    repos: Any = None
    tls: tuple[str, str] | None = None  # (certificate, key): serve HTTPS (gh needs it for a non-github.com host)
    bind: str = "127.0.0.1"  # where it listens: a real node's Pods reach this machine at the node's address
    prefix: str = ""  # "/api/v3": GitHub Enterprise's layout (REST under the prefix, git at the root)
    issues: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)  # (title, body)
    graphql: list[dict[str, Any]] = field(default_factory=list)  # every GraphQL request body, in order
    headers_seen: list[dict[str, str]] = field(default_factory=list)  # every request's headers as received
    # Every request GitHub's description refuses and every answer it does not allow (docs/github-contracts.md).
    violations: list[ContractError] = field(default_factory=list)
    # A lagging answer: GET git/ref/<ref> names this commit whatever the repository says (a replica
    # behind a force-push).
    stale_refs: dict[tuple[str, str], str] = field(default_factory=dict)
    _comments: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _next_id: int = 1000

    # ---- life cycle ----------------------------------------------------------------------------------

    def start(self) -> FakeGitHubAPI:
        description()  # GitHub's description, read now: a missing one (make github-schemas) fails here
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet: the request log is fake.requests
                pass

            def _serve(self) -> None:
                fake._handle(self)

            do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _serve

        self._server = ThreadingHTTPServer((self.bind, 0), Handler)
        self._server.daemon_threads = True
        if self.tls is not None:
            import ssl
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls[0], self.tls[1])
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fakegithub-api",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeGitHubAPI:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def web_url(self) -> str:
        """The forge's own address (clones: ``<web_url>/OWNER/NAME.git``)."""
        assert self._server is not None, "start() first"
        return f"{'https' if self.tls else 'http'}://{self.bind}:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        """The REST API's base URL."""
        return self.web_url + self.prefix

    @property
    def host(self) -> str:
        """``GH_HOST`` for gh: host:port."""
        return self.web_url.split("://", 1)[1]

    def set_issue(self, repo: str, number: int, title: str, body: str = "") -> None:
        with self._lock:
            self.issues[(repo, number)] = (title, body)

    # ---- scripting -----------------------------------------------------------------------------------

    def set_pull(self, repo: str, number: int, *, head_ref: str = "feature", head_repo: Any = SAME,
                 status: int = 200, delay: float = 0.0, title: str = "", body: str = "") -> None:
        """Configure PR ``number`` of ``repo``: ``head_repo=None`` is a deleted fork."""
        with self._lock:
            self.pulls[(repo, number)] = Pull(repo, number, head_ref, repo if head_repo is SAME else head_repo,
                                              status, delay, title or f"PR {number}", body)

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._comments.get((repo, number), []))

    def add_comment(self, repo: str, number: int, body: str, login: str = "octocat") -> dict[str, Any]:
        with self._lock:
            return self._add_comment(repo, number, body, login, "User")

    def calls(self, method: str, path_prefix: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.method == method and r.path.startswith(path_prefix)]

    def issued(self) -> list[tuple[str, Issued]]:
        """(token SHA-256, what it was issued for), in order."""
        with self._lock:
            return [(fingerprint(t), i) for t, i in self.tokens.items()]

    def issued_token(self, token_sha256: str) -> str | None:
        """The token with this SHA-256 (tests compare what a Pod saw with what was minted)."""
        with self._lock:
            return next((t for t in self.tokens if fingerprint(t) == token_sha256), None)

    # ---- the server side -----------------------------------------------------------------------------

    def _add_comment(self, repo: str, number: int, body: str, login: str, kind: str) -> dict[str, Any]:
        self._next_id += 1
        comment = objects.issue_comment(repo, number, self._next_id, body,
                                        objects.user(login, bot=kind == "Bot", api=self.url, web=self.web_url),
                                        on_pull_request=(repo, number) in self.pulls, association="NONE",
                                        api=self.url, web=self.web_url)
        self._comments.setdefault((repo, number), []).append(comment)
        return comment

    def _repo_json(self, full_name: str, *, fork: bool = False) -> dict[str, Any]:
        default = self.repos.default_branch(full_name) if self.repos is not None and self.repos.exists(full_name) \
            else "main"
        return objects.repository(full_name, default_branch=default, fork=fork, api=self.url, web=self.web_url)

    def _tip(self, repo: str | None, branch: str) -> str | None:
        if self.repos is None or repo is None or not self.repos.exists(repo):
            return None
        return self.repos.tip(repo, branch)

    def _pull_sha(self, p: Pull) -> str:
        """The head commit: the head branch's tip in the forge (a fork's: refs/pull/<n>/head of the base)."""
        if self.repos is not None and self.repos.exists(p.base_repo):
            if p.head_repo == p.base_repo:
                return self._tip(p.base_repo, p.head_ref) or "a" * 40
            return self.repos.resolve(p.base_repo, f"refs/pull/{p.number}/head") or "a" * 40
        return "a" * 40

    def _pull_json(self, p: Pull) -> dict[str, Any]:
        head_repo = None if p.head_repo is None else self._repo_json(p.head_repo, fork=p.head_repo != p.base_repo)
        head_owner = p.head_repo.split("/", 1)[0] if p.head_repo else "ghost"
        return objects.pull_request(
            self._repo_json(p.base_repo), p.number, title=p.title or f"PR {p.number}", body=p.body or None,
            author=self._user(head_owner), head_ref=p.head_ref, head_sha=self._pull_sha(p), head_repo=head_repo,
            head_owner=self._user(head_owner), base_ref=p.base_ref,
            base_sha=self._tip(p.base_repo, p.base_ref) or "b" * 40, api=self.url, web=self.web_url)

    def _user(self, login: str, *, bot: bool = False) -> dict[str, Any]:
        return objects.user(login, bot=bot, api=self.url, web=self.web_url)

    def _forge_route(self, method: str, repo: str, rest: list[str], body: Any, kind: str
                     ) -> tuple[int, Any, dict[str, str], float] | None:
        """The routes the workspace checkout and ``gh`` use, answered from the real repositories."""
        not_found = (404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, {}, 0.0)
        forge = self.repos if self.repos is not None and self.repos.exists(repo) else None
        if method == "GET" and not rest:  # GET /repos/{o}/{r}
            return 200, {**self._repo_json(repo), "subscribers_count": 0, "network_count": 0,
                         "permissions": {"admin": False, "maintain": False, "push": True, "triage": True,
                                         "pull": True}}, {}, 0.0
        if method == "GET" and len(rest) >= 4 and rest[:3] == ["git", "ref", "heads"]:
            ref = "refs/heads/" + unquote("/".join(rest[3:]))
            sha = self.stale_refs.get((repo, ref)) or (forge.resolve(repo, ref) if forge else None)
            if sha is None:
                return not_found
            return 200, {"ref": ref, "node_id": f"REF_kwDO{objects.stable_id(repo + ref)}",
                         "url": f"{self.url}/repos/{repo}/git/{ref}",
                         "object": {"sha": sha, "type": "commit", "url": f"{self.url}/repos/{repo}/git/commits/{sha}"}
                         }, {}, 0.0
        if method == "GET" and len(rest) == 2 and rest[0] == "issues" and rest[1].isdigit():
            with self._lock:
                found = self.issues.get((repo, int(rest[1])))
                pull = self.pulls.get((repo, int(rest[1]))) if found is None else None
            if pull is not None and pull.status == 200:  # as on GitHub: a pull request is an issue too
                found = (pull.title, pull.body)
            if found is None:
                return not_found
            return 200, objects.issue(repo, int(rest[1]), title=found[0], body=found[1] or None,
                                      author=self._user("octocat"), created_at=objects.EPOCH, api=self.url,
                                      web=self.web_url, pull_request=pull is not None), {}, 0.0
        if method == "GET" and len(rest) == 2 and rest[0] == "compare" and "..." in rest[1]:
            base, _, head = unquote(rest[1]).partition("...")
            counts = forge.count(repo, base, head) if forge else None
            if counts is None or forge is None:
                return not_found
            return 200, self._comparison(forge, repo, base, head, counts), {}, 0.0
        if method == "POST" and rest == ["pulls"]:
            if not isinstance(body, dict) or not all(isinstance(body.get(k), str) for k in ("title", "head", "base")):
                return 422, _error(422, "Validation Failed", "pulls/pulls#create-a-pull-request"), {}, 0.0
            return self._create_pull(repo, body["title"], str(body.get("body") or ""), body["head"], body["base"])
        return None

    def _commit_json(self, forge: Any, repo: str, sha: str) -> dict[str, Any]:
        c = forge.commit_fields(repo, sha)
        return objects.commit(repo, c["sha"], message=c["message"], tree=c["tree"], parents=c["parents"],
                              author=c["author"], committer=c["committer"], api=self.url, web=self.web_url)

    def _comparison(self, forge: Any, repo: str, base: str, head: str, counts: tuple[int, int]) -> dict[str, Any]:
        """``GET .../compare/{base}...{head}``: GitHub's ``commit-comparison`` of two commits of the forge."""
        ahead, behind = counts
        status = "identical" if not ahead and not behind else "ahead" if not behind else \
            "behind" if not ahead else "diverged"
        merge_base, commits = forge.between(repo, base, head)
        spec = f"{base}...{head}"
        return {"url": f"{self.url}/repos/{repo}/compare/{spec}", "html_url": f"{self.web_url}/{repo}/compare/{spec}",
                "permalink_url": f"{self.web_url}/{repo}/compare/{spec}",
                "diff_url": f"{self.web_url}/{repo}/compare/{spec}.diff",
                "patch_url": f"{self.web_url}/{repo}/compare/{spec}.patch",
                "base_commit": self._commit_json(forge, repo, base),
                "merge_base_commit": self._commit_json(forge, repo, merge_base or base), "status": status,
                "ahead_by": ahead, "behind_by": behind, "total_commits": ahead,
                "commits": [self._commit_json(forge, repo, c) for c in commits[:250]], "files": []}

    def _not_permitted(self, method: str, repo: str, rest: list[str], issued: Issued | None
                       ) -> tuple[int, Any, dict[str, str], float] | None:
        """GitHub's 403 for a write an installation token's permissions do not cover (``None``: allowed).
        A pat (``issued`` None) may do everything here."""
        if issued is None or method == "GET":
            return None
        needs: tuple[tuple[str, str], ...] = ()
        if rest[:1] == ["contents"] and method in ("PUT", "DELETE"):
            needs, doc = (("contents", "write"),), "repos/contents#create-or-update-file-contents"
        elif rest[:2] == ["git", "refs"]:
            needs, doc = (("contents", "write"),), "git/refs#create-a-reference"
        elif len(rest) == 3 and rest[0] == "issues" and rest[2] == "comments" and method == "POST":
            # "Create an issue comment": Issues write, or Pull requests write (on a pull request).
            with self._lock:
                is_pull = rest[1].isdigit() and (repo, int(rest[1])) in self.pulls
            needs = (("issues", "write"), ("pull_requests", "write")) if is_pull else (("issues", "write"),)
            doc = "issues/comments#create-an-issue-comment"
        elif rest == ["pulls"] and method == "POST":
            needs, doc = (("pull_requests", "write"),), "pulls/pulls#create-a-pull-request"
        if not needs or any(_may(issued, name, level) for name, level in needs):
            return None
        return 403, {"message": "Resource not accessible by integration",
                     "documentation_url": f"https://docs.github.com/rest/{doc}", "status": "403"}, {}, 0.0

    def _put_contents(self, repo: str, path: str, body: Any) -> tuple[int, Any, dict[str, str], float]:
        """``PUT /repos/{o}/{r}/contents/{path}``: commit one file on ``branch`` (default: the default branch)."""
        if not isinstance(body, dict) or not isinstance(body.get("message"), str) or \
                not isinstance(body.get("content"), str):
            return 422, _error(422, "Invalid request.", _CONTENTS_DOC), {}, 0.0
        if self.repos is None or not self.repos.exists(repo):
            return 404, _error(404, "Not Found", _CONTENTS_DOC), {}, 0.0
        branch = str(body.get("branch") or self.repos.default_branch(repo))
        try:
            text = base64.b64decode(body["content"], validate=True).decode()
        except ValueError:
            return 422, _error(422, "content is not valid Base64", _CONTENTS_DOC), {}, 0.0
        bare = self.repos.path(repo)
        existed = bool(git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}:{path}", cwd=bare, check=False))
        sha = self.repos.commit(repo, branch, {path: text}, body["message"])
        blob = git("rev-parse", f"{sha}:{path}", cwd=bare)
        c = self._commit_json(self.repos, repo, sha)
        contents = f"{self.url}/repos/{repo}/contents/{path}?ref={branch}"
        return (200 if existed else 201), {
            "content": {"name": path.rsplit("/", 1)[-1], "path": path, "sha": blob, "size": len(text.encode()),
                        "url": contents, "html_url": f"{self.web_url}/{repo}/blob/{branch}/{path}",
                        "git_url": f"{self.url}/repos/{repo}/git/blobs/{blob}",
                        "download_url": f"{self.web_url}/{repo}/raw/{branch}/{path}", "type": "file",
                        "_links": {"self": contents, "git": f"{self.url}/repos/{repo}/git/blobs/{blob}",
                                   "html": f"{self.web_url}/{repo}/blob/{branch}/{path}"}},
            "commit": {"sha": sha, "node_id": c["node_id"], "url": c["commit"]["url"], "html_url": c["html_url"],
                       "author": c["commit"]["author"], "committer": c["commit"]["committer"],
                       "message": body["message"], "tree": c["commit"]["tree"], "parents": c["parents"],
                       "verification": c["commit"]["verification"]}}, {}, 0.0

    def _create_pull(self, repo: str, title: str, body: str, head: str, base: str
                     ) -> tuple[int, Any, dict[str, str], float]:
        head = head.split(":", 1)[-1]
        if self.repos is None or self.repos.tip(repo, head) is None:
            return 422, {**_error(422, "Validation Failed", "pulls/pulls#create-a-pull-request"),
                         "errors": [{"resource": "PullRequest", "field": "head", "code": "invalid"}]}, {}, 0.0
        with self._lock:
            if any(p.base_repo == repo and p.head_ref == head for p in self.pulls.values()):
                return 422, {**_error(422, "Validation Failed", "pulls/pulls#create-a-pull-request"), "errors": [{
                    "resource": "PullRequest", "code": "custom",
                    "message": f"A pull request already exists for {repo.split('/')[0]}:{head}."}]}, {}, 0.0
            number = max([n for (r, n) in list(self.pulls) + list(self.issues) if r == repo] + [0]) + 1
            pull = Pull(repo, number, head, repo, title=title, body=body, base_ref=base)
            self.pulls[(repo, number)] = pull
        return 201, self._pull_json(pull), {}, 0.0

    def created_pulls(self, repo: str) -> list[Pull]:
        with self._lock:
            return [p for (r, _), p in self.pulls.items() if r == repo]

    def _verify_jwt(self, jwt: str) -> str | None:
        """``None`` when the App's JWT is good, else why not."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        parts = jwt.split(".")
        if len(parts) != 3 or self.public_key is None:
            return "not a JWT"
        try:
            header = json.loads(_b64url_decode(parts[0]))
            claims = json.loads(_b64url_decode(parts[1]))
            signature = _b64url_decode(parts[2])
        except ValueError:
            return "undecodable"
        if header.get("alg") != "RS256":
            return "alg is not RS256"
        try:
            self.public_key.verify(signature, f"{parts[0]}.{parts[1]}".encode(), padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return "bad signature"
        now = time.time()
        iat, exp = claims.get("iat"), claims.get("exp")
        if str(claims.get("iss")) != str(self.app_id):
            return "iss is not the App id"
        if not isinstance(iat, int) or not isinstance(exp, int):
            return "iat/exp missing"
        if iat > now + CLOCK_SKEW:
            return "iat in the future"
        if exp <= now:
            return "expired"
        if exp - iat > JWT_MAX_LIFETIME + CLOCK_SKEW or exp > now + JWT_MAX_LIFETIME + CLOCK_SKEW:
            return "exp too far in the future"
        return None

    def _credential(self, header: str | None) -> tuple[str, str | None, Issued | None]:
        """(kind, token, issued) of an Authorization header."""
        if not header:
            return "none", None, None
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() not in ("bearer", "token") or not token:
            return "invalid", token or None, None
        if token.count(".") == 2 and scheme.lower() == "bearer":
            return "jwt", token, None
        issued = self.tokens.get(token)
        if issued is not None:
            ok = not issued.revoked and issued.expires_at > time.time()
            return ("installation" if ok else "invalid"), token, issued
        if token in self.pats:
            return "pat", token, None
        return "invalid", token, None

    def _git_user(self, header: str | None, repo: str) -> tuple[str, str | None, str | None]:
        """(kind, token, user) of a git request's Basic credentials: a live token that can see ``repo``."""
        scheme, _, encoded = (header or "").partition(" ")
        if scheme.lower() != "basic":
            return "none", None, None
        try:
            user, _, token = base64.b64decode(encoded.strip()).decode().partition(":")
        except ValueError:
            return "invalid", None, None
        kind, _, issued = self._credential(f"token {token}")
        if kind == "installation" and issued is not None and repo not in issued.repositories:
            kind = "invalid"
        return kind, token, user if kind in ("installation", "pat") else None

    def _serve_git(self, h: BaseHTTPRequestHandler, repo: str, rest: str, query: str) -> None:
        body = read_body(h)
        with self._lock:
            kind, token, user = self._git_user(h.headers.get("Authorization"), repo)
            issued = self.tokens.get(token) if kind == "installation" and token else None
        status = 403 if user and _is_push(rest, query) and not _may(issued, "contents", "write") else \
            200 if user else 401
        with self._lock:
            self.requests.append(Request(h.command, urlsplit(h.path).path, f"git-{kind}",
                                         fingerprint(token) if token else None, status))
        if user is not None and _is_push(rest, query) and not _may(issued, "contents", "write"):
            # GitHub's answer to a push with a token that may only read: git shows the text as "remote: ...".
            _text(h, 403, f"Permission to {repo}.git denied to {BOT_LOGIN}.\n")
            return
        if user is None or self.repos is None or not self.repos.exists(repo):
            # As GitHub: ask for credentials (git then runs its askpass), and hide what the caller cannot see.
            data = b"Authentication required\n" if user is None else b"Repository not found\n"
            h.send_response(401 if user is None else 404)
            if user is None:
                h.send_header("WWW-Authenticate", 'Basic realm="GitHub"')
            h.send_header("Content-Type", "text/plain")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        serve_git(h, self.repos, repo, rest, query, body, user)

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.headers_seen.append(dict(h.headers.items()))
        split = urlsplit(h.path)
        target = git_path(split.path) if self.repos is not None else None
        if target is not None:
            self._serve_git(h, target[0], target[1], split.query)
            return
        query = parse_qs(split.query)
        raw = read_body(h)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = "<not json>"
        auth_header = h.headers.get("Authorization")
        with self._lock:
            kind, token, issued = self._credential(auth_header)
        path = split.path
        if path == "/api/graphql":
            status, payload, headers, delay = self._graphql(body, kind, token, issued)
        elif (refused := self._refused_listing(h.command, path[len(self.prefix):])) is not None:
            status, payload, headers, delay = refused  # a spent budget or a scripted secondary limit
        else:
            status, payload, headers, delay = self._conditional(
                h.command, path[len(self.prefix):], query, h.headers.get("If-None-Match"),
                self._rest(h.command, path, split.query, raw, query, body, kind, token, issued))
        with self._lock:  # logged before any delay: a client that gave up was still asked
            self.requests.append(Request(h.command, split.path, kind, fingerprint(token) if token else None, status,
                                         body))
        if delay:
            time.sleep(delay)
        data = b"" if payload is None else json.dumps(payload).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json; charset=utf-8")
            h.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    def _rest(self, method: str, path: str, query_text: str, raw: bytes, query: dict[str, list[str]], body: Any,
              kind: str, token: str | None, issued: Issued | None) -> tuple[int, Any, dict[str, str], float]:
        """A REST call, held to GitHub's description both ways (``testkit/github_contract.py``): a request GitHub
        does not accept, or an answer it would not give, is answered 500 with the mismatch and recorded
        (:attr:`violations`, and the process-wide record the tests' fixture reads: docs/github-contracts.md)."""
        try:
            if self.prefix and not path.startswith(self.prefix + "/"):
                raise ContractError(f"{method} {path}", "path", "", f"outside the API's prefix {self.prefix}/")
            operation = check_request(method, path[len(self.prefix):], query_text, raw)
        except ContractError as exc:
            return self._violated(exc)
        answer = self._route(method, path[len(self.prefix):], query, body, kind, token, issued)
        try:
            check_response(operation, answer[0], answer[1])
        except ContractError as exc:
            return self._violated(exc)
        return answer

    def _violated(self, error: ContractError) -> tuple[int, Any, dict[str, str], float]:
        with self._lock:
            self.violations.append(error)
        record(error)
        return 500, {"message": str(error), "documentation_url": "docs/github-contracts.md"}, {}, 0.0

    def take_violations(self) -> list[ContractError]:
        """The contract mismatches met so far, taken out of the record: a test that provoked them looks at them."""
        with self._lock:
            taken, self.violations = list(self.violations), []
        take(taken)
        return taken

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: Any, kind: str,
               token: str | None, issued: Issued | None) -> tuple[int, Any, dict[str, str], float]:
        parts = [p for p in path.split("/") if p]
        not_found = (404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, {}, 0.0)
        bad_credentials = (401, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"},
                           {}, 0.0)
        # POST /app/installations/{id}/access_tokens
        if method == "POST" and len(parts) == 4 and parts[:2] == ["app", "installations"] and \
                parts[3] == "access_tokens":
            if kind != "jwt" or token is None:
                return 401, {"message": "A JSON web token could not be decoded"}, {}, 0.0
            why = self._verify_jwt(token)
            if why is not None:
                return 401, {"message": f"'Issued at' or 'Expiration time' or signature invalid: {why}"}, {}, 0.0
            if parts[2] != str(self.installation_id):
                return not_found
            asked = (body or {}).get("repositories") if isinstance(body, dict) else None
            by_name = {r.split("/", 1)[1]: r for r in self.installation_repos}
            if asked is None:
                scoped = tuple(self.installation_repos)
            elif not isinstance(asked, list) or not all(isinstance(a, str) and a in by_name for a in asked):
                return 422, _error(422, "There is at least one repository that does not exist or is not "
                                        "accessible to the parent installation.", _TOKEN_DOC), {}, 0.0
            else:
                scoped = tuple(by_name[a] for a in asked)
            wanted = (body or {}).get("permissions") if isinstance(body, dict) else None
            levels = {"read": 1, "write": 2, "admin": 3}
            if wanted is None:
                granted = dict(self.permissions)
            elif not isinstance(wanted, dict) or not all(
                    isinstance(v, str) and v in levels and levels[v] <= levels.get(self.permissions.get(k, ""), 0)
                    for k, v in wanted.items()):
                return 422, _error(422, "The permissions requested are not granted to this installation.",
                                   _TOKEN_DOC), {}, 0.0
            else:
                granted = dict(wanted)
            new = "ghs_" + secrets.token_urlsafe(27)[:36]
            with self._lock:
                self.tokens[new] = Issued(int(parts[2]), scoped, time.time() + self.token_ttl, granted)
            return 201, {"token": new, "expires_at": _iso(time.time() + self.token_ttl),
                         "permissions": dict(granted), "repository_selection": "selected",
                         "repositories": [self._repo_json(r) for r in scoped]}, {}, 0.0
        # DELETE /installation/token
        if method == "DELETE" and parts == ["installation", "token"]:
            if kind != "installation" or issued is None:
                return bad_credentials
            with self._lock:
                issued.revoked = True
            return 204, None, {}, 0.0
        if method == "GET" and parts == ["user"]:  # who the token is (gh api user)
            if kind not in ("installation", "pat"):
                return bad_credentials
            login = BOT_LOGIN if kind == "installation" else "token-owner"
            return 200, {**self._user(login, bot=kind == "installation"), "name": None, "company": None, "blog": "",
                         "location": None, "email": None, "hireable": None, "bio": None, "public_repos": 0,
                         "public_gists": 0, "followers": 0, "following": 0, "created_at": objects.EPOCH,
                         "updated_at": objects.EPOCH, "user_view_type": "public"}, {}, 0.0
        if len(parts) < 3 or parts[0] != "repos":
            return not_found
        repo = f"{parts[1]}/{parts[2]}"
        if kind not in ("installation", "pat"):
            return bad_credentials
        if kind == "installation" and issued is not None and repo not in issued.repositories:
            return not_found  # GitHub does not say a repository exists to a token that cannot see it
        refused = self._not_permitted(method, repo, parts[3:], issued if kind == "installation" else None)
        if refused is not None:
            return refused
        if method == "PUT" and len(parts) >= 5 and parts[3] == "contents":
            return self._put_contents(repo, unquote("/".join(parts[4:])), body)
        answered = self._forge_route(method, repo, parts[3:], body, kind) or \
            self._polling_route(method, repo, parts[3:], query)
        if answered is not None:
            return answered
        # GET /repos/{o}/{r}/pulls?head=OWNER:BRANCH&state=...: the listing, newest first (the fake's pulls are open)
        if method == "GET" and len(parts) == 4 and parts[3] == "pulls":
            head = (query.get("head") or [None])[0]
            state = (query.get("state") or ["open"])[0]
            with self._lock:
                found = sorted((p for (r, _), p in self.pulls.items() if r == repo and p.status == 200),
                               key=lambda p: -p.number)
            if head is not None:
                owner, _, ref = head.partition(":")
                found = [p for p in found if p.head_ref == ref and (p.head_repo or "").split("/", 1)[0] == owner]
            listed = [objects.simple_pull_request(self._pull_json(p)) for p in found] if state != "closed" else []
            per_page = min(int((query.get("per_page") or ["30"])[0]), 100)
            return 200, listed[:per_page], {}, 0.0
        # GET /repos/{o}/{r}/pulls/{n}
        if method == "GET" and len(parts) == 5 and parts[3] == "pulls" and parts[4].isdigit():
            with self._lock:
                pull = self.pulls.get((repo, int(parts[4])))
            if pull is None:
                return not_found
            if pull.status == 404:
                return (*not_found[:3], pull.delay)
            if pull.status != 200:
                return pull.status, {"message": "Server Error"}, {}, pull.delay
            return 200, self._pull_json(pull), {}, pull.delay
        # /repos/{o}/{r}/issues/{n}/comments
        if len(parts) == 6 and parts[3] == "issues" and parts[4].isdigit() and parts[5] == "comments":
            number = int(parts[4])
            if method == "GET":
                per_page = min(int((query.get("per_page") or ["30"])[0]), 100)
                page = int((query.get("page") or ["1"])[0])
                with self._lock:
                    every = list(self._comments.get((repo, number), []))
                chunk = every[(page - 1) * per_page:page * per_page]
                headers = {}
                if page * per_page < len(every):
                    headers["Link"] = (f'<{self.url}{path}?per_page={per_page}&page={page + 1}>; rel="next", '
                                       f'<{self.url}{path}?per_page={per_page}&page='
                                       f'{(len(every) + per_page - 1) // per_page}>; rel="last"')
                return 200, chunk, headers, 0.0
            if method == "POST":
                if not isinstance(body, dict) or not isinstance(body.get("body"), str):
                    return 422, {"message": "Invalid request.\n\nFor 'links/0/schema', nil is not an object."}, \
                        {}, 0.0
                login = "pi-dispatch[bot]" if kind == "installation" else "token-owner"
                with self._lock:
                    comment = self._add_comment(repo, number, body["body"], login,
                                                "Bot" if kind == "installation" else "User")
                return 201, comment, {"Location": comment["url"]}, 0.0
        return not_found
