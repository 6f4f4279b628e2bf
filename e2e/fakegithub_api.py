"""A local fake of the GitHub REST API, speaking GitHub's own JSON, for the operator's forge tests.

``FakeGitHubAPI`` (stdlib ``http.server``, 127.0.0.1, a free port) serves what the operator calls:

* ``GET  /repos/{o}/{r}/pulls/{n}``: a pull request whose head is set per PR (:meth:`FakeGitHubAPI.set_pull`):
  head ref, head repository ``full_name`` or ``None`` for a deleted fork, and a forced status (404, 500)
  or a delay (to make the client time out). A PR never set is a 404, as on GitHub;
* ``GET  /repos/{o}/{r}/issues/{n}/comments`` (``per_page``/``page``, a ``Link: rel="next"`` header) and
  ``POST`` to the same path;
* ``POST /app/installations/{id}/access_tokens``: checks the App's JWT (RS256 with the App's public key,
  ``iss`` = the App id, ``iat``/``exp`` sane and at most ten minutes apart) and returns
  ``{"token", "expires_at", "permissions", "repository_selection", "repositories"}`` scoped to the
  repositories asked for (names of the installation's repositories; any other is a 422);
* ``DELETE /installation/token``: revokes the installation token it is called with.

Repository endpoints take ``Authorization: Bearer <installation token>`` (scoped to that repository:
otherwise 404, as GitHub hides what a token cannot see) or ``token <pat>`` (:attr:`pats`); anything else
is a 401 ``Bad credentials``. Every request lands in :attr:`requests` with the token's SHA-256, never
the token itself, so a test can say which credential was used.
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
from urllib.parse import parse_qs, urlsplit

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


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Pull:
    base_repo: str
    number: int
    head_ref: str
    head_repo: str | None
    status: int = 200
    delay: float = 0.0


@dataclass
class Issued:
    installation_id: int
    repositories: tuple[str, ...]  # full names
    expires_at: float
    permissions: dict[str, str]
    revoked: bool = False


@dataclass
class Request:
    method: str
    path: str
    auth: str  # "none", "jwt", "installation", "pat", "invalid"
    token_sha256: str | None
    status: int
    body: Any = None


@dataclass
class FakeGitHubAPI:
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
    _comments: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _next_id: int = 1000

    # ---- life cycle ----------------------------------------------------------------------------------

    def start(self) -> FakeGitHubAPI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet: the request log is fake.requests
                pass

            def _serve(self) -> None:
                fake._handle(self)

            do_GET = do_POST = do_DELETE = do_PATCH = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
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
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # ---- scripting -----------------------------------------------------------------------------------

    def set_pull(self, repo: str, number: int, *, head_ref: str = "feature", head_repo: Any = SAME,
                 status: int = 200, delay: float = 0.0) -> None:
        """Configure PR ``number`` of ``repo``: ``head_repo=None`` is a deleted fork."""
        with self._lock:
            self.pulls[(repo, number)] = Pull(repo, number, head_ref, repo if head_repo is SAME else head_repo,
                                              status, delay)

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
        owner, name = repo.split("/", 1)
        comment = {
            "id": self._next_id, "node_id": f"IC_{self._next_id}",
            "url": f"{self.url}/repos/{repo}/issues/comments/{self._next_id}",
            "html_url": f"https://github.com/{repo}/issues/{number}#issuecomment-{self._next_id}",
            "issue_url": f"{self.url}/repos/{repo}/issues/{number}",
            "body": body, "user": {"login": login, "type": kind},
            "created_at": _iso(time.time()), "updated_at": _iso(time.time()),
            "author_association": "NONE",
        }
        self._comments.setdefault((repo, number), []).append(comment)
        return comment

    def _repo_json(self, full_name: str) -> dict[str, Any]:
        owner, name = full_name.split("/", 1)
        rid = int(hashlib.sha256(full_name.encode()).hexdigest()[:8], 16)
        return {"id": rid, "node_id": f"R_{rid}", "name": name, "full_name": full_name, "private": False,
                "owner": {"login": owner, "type": "User"}, "html_url": f"https://github.com/{full_name}",
                "fork": False, "url": f"{self.url}/repos/{full_name}"}

    def _pull_json(self, p: Pull) -> dict[str, Any]:
        head_repo = None if p.head_repo is None else {**self._repo_json(p.head_repo),
                                                       "fork": p.head_repo != p.base_repo}
        head_owner = p.head_repo.split("/", 1)[0] if p.head_repo else "unknown"
        return {
            "url": f"{self.url}/repos/{p.base_repo}/pulls/{p.number}", "id": 90000 + p.number, "number": p.number,
            "state": "open", "locked": False, "title": f"PR {p.number}", "user": {"login": head_owner},
            "head": {"label": f"{head_owner}:{p.head_ref}", "ref": p.head_ref, "sha": "a" * 40,
                     "user": {"login": head_owner}, "repo": head_repo},
            "base": {"label": f"{p.base_repo.split('/')[0]}:main", "ref": "main", "sha": "b" * 40,
                     "user": {"login": p.base_repo.split("/")[0]}, "repo": self._repo_json(p.base_repo)},
            "draft": False, "merged": False,
        }

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

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        split = urlsplit(h.path)
        query = parse_qs(split.query)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = "<not json>"
        auth_header = h.headers.get("Authorization")
        with self._lock:
            kind, token, issued = self._credential(auth_header)
        status, payload, headers, delay = self._route(h.command, split.path, query, body, kind, token, issued)
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
                return 422, {"message": "There is at least one repository that does not exist or is not "
                                        "accessible to the parent installation."}, {}, 0.0
            else:
                scoped = tuple(by_name[a] for a in asked)
            new = "ghs_" + secrets.token_urlsafe(27)[:36]
            with self._lock:
                self.tokens[new] = Issued(int(parts[2]), scoped, time.time() + self.token_ttl, dict(self.permissions))
            return 201, {"token": new, "expires_at": _iso(time.time() + self.token_ttl),
                         "permissions": dict(self.permissions), "repository_selection": "selected",
                         "repositories": [self._repo_json(r) for r in scoped]}, {}, 0.0
        # DELETE /installation/token
        if method == "DELETE" and parts == ["installation", "token"]:
            if kind != "installation" or issued is None:
                return bad_credentials
            with self._lock:
                issued.revoked = True
            return 204, None, {}, 0.0
        if len(parts) < 5 or parts[0] != "repos":
            return not_found
        repo = f"{parts[1]}/{parts[2]}"
        if kind not in ("installation", "pat"):
            return bad_credentials
        if kind == "installation" and issued is not None and repo not in issued.repositories:
            return not_found  # GitHub does not say a repository exists to a token that cannot see it
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
