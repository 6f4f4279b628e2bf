"""The GitHub REST client and :class:`Forge`, everything the controller asks of GitHub.

Plain JSON over urllib3 (thread-safe pooling, explicit timeouts, no retries: a failed head lookup
degrades to no key, spec rule 21). Errors name the endpoint's template, never the repository, the
branch or a token; a token is sent only to the configured API URL (a pagination link to another
host is not followed).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import quote, urlencode

import urllib3

from pidispatch.contract.keys import issue_branch
from pidispatch.forge.appauth import InstallationToken, app_jwt, broader_than, load_private_key, parse_expiry
from pidispatch.forge.checkout import (
    Checkout,
    FlowSource,
    Moved,
    Subject,
    Unresolvable,
    default_branch,
    from_pull,
    moved,
    ref_commit,
)
from pidispatch.forge.comments import has_marker
from pidispatch.forge.credentials import fork_permissions, repository_name
from pidispatch.forge.head import Head, NoHead, head_from_pull
from pidispatch.kubeapi import json_body
from pidispatch.settings import GitHubSettings, OperatorSettings

USER_AGENT = "pi-dispatch-operator"
API_VERSION = "2022-11-28"
MAX_COMMENT_PAGES = 50  # 5000 comments: a marker further down than that is not looked for
TOKEN_FILE_REREAD_SECONDS = 60
# The operator's own App token: reading pull requests, refs and commits (heads, the checkout, what moved)
# and writing issue comments (the refusal comment, which on a pull request is an issue comment too).
# Deliberately narrower than a job's token (settings.GitHubSettings.job_token_permissions): the
# operator never pushes, merges or edits.
OPERATOR_TOKEN_PERMISSIONS = {"contents": "read", "issues": "write", "metadata": "read", "pull_requests": "read"}


class GitHubError(Exception):
    """A GitHub call that did not succeed. ``status`` 0: no HTTP answer (``timeout`` says whether it timed out)."""

    def __init__(self, method: str, endpoint: str, status: int, detail: str, timeout: bool = False) -> None:
        super().__init__(f"GitHub {method} {endpoint}: {status or 'no answer'} {detail}".rstrip())
        self.status = status
        self.timeout = timeout

    @property
    def reason(self) -> NoHead:
        if self.status:
            return NoHead.LOOKUP_HTTP_ERROR
        return NoHead.LOOKUP_TIMEOUT if self.timeout else NoHead.LOOKUP_UNREACHABLE


class NoCredentials(GitHubError):
    """The operator has no token for its own call (the App could not mint one, the token file is unreadable)."""

    def __init__(self, detail: str, status: int = 0) -> None:
        super().__init__("-", "credentials", status, detail)

    @property
    def reason(self) -> NoHead:
        return NoHead.NO_CREDENTIALS


def _repo_path(repository: str) -> str:
    owner, _, name = repository.partition("/")
    return f"/repos/{quote(owner, safe='')}/{quote(name, safe='')}"


class GitHubClient:
    """The REST calls, each with an ``Authorization`` value given by the caller."""

    def __init__(self, api_url: str, timeout: float = 10.0, pool: int = 8, ca_file: str | None = None) -> None:
        self.api_url = api_url.rstrip("/")
        # ``ca_file``: a private CA's bundle (GitHub Enterprise); verification is never turned off.
        self._http = urllib3.PoolManager(num_pools=2, maxsize=pool, block=False, retries=False,
                                         timeout=urllib3.Timeout(connect=timeout, read=timeout),
                                         cert_reqs="CERT_REQUIRED", ca_certs=ca_file)

    def request(self, method: str, endpoint: str, path_or_url: str, authorization: str, body: Any = None,
                params: dict[str, Any] | None = None) -> tuple[int, Any, urllib3.BaseHTTPResponse]:
        """One call; ``endpoint`` (a template such as ``/repos/{owner}/{repo}/pulls/{n}``) names it in errors."""
        url = path_or_url if path_or_url.startswith(self.api_url + "/") else self.api_url + path_or_url
        if params:
            url += ("&" if "?" in url else "?") + urlencode(params)
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION,
                   "User-Agent": USER_AGENT, "Authorization": authorization}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        try:
            response = self._http.request(method, url, body=data, headers=headers, preload_content=True)
        except urllib3.exceptions.NewConnectionError as exc:  # before TimeoutError: urllib3 derives it from that
            raise GitHubError(method, endpoint, 0, f"unreachable ({type(exc).__name__})") from None
        except urllib3.exceptions.TimeoutError:
            raise GitHubError(method, endpoint, 0, "timed out", timeout=True) from None
        except urllib3.exceptions.HTTPError as exc:
            raise GitHubError(method, endpoint, 0, f"unreachable ({type(exc).__name__})") from None
        payload = json_body(response.data)
        if response.status >= 300:
            # GitHub's own error message (e.g. "Not Found", "Bad credentials"); never the request.
            detail = payload.get("message") if isinstance(payload, dict) else None
            raise GitHubError(method, endpoint, response.status, str(detail)[:200] if detail else "")
        return response.status, payload, response

    def pull(self, repository: str, number: int, authorization: str) -> Any:
        endpoint = "/repos/{owner}/{repo}/pulls/{n}"
        return self.request("GET", endpoint, f"{_repo_path(repository)}/pulls/{number}", authorization)[1]

    def pulls_with_head(self, repository: str, branch: str, authorization: str) -> Any:
        """``GET /repos/{o}/{r}/pulls?head=OWNER:branch&state=all``: the pull requests from ``branch`` of
        ``repository`` itself (a fork's branch of the same name is another head), newest first."""
        owner = repository.split("/", 1)[0]
        return self.request("GET", "/repos/{owner}/{repo}/pulls", f"{_repo_path(repository)}/pulls", authorization,
                            params={"head": f"{owner}:{branch}", "state": "all", "per_page": 10})[1]

    def repository(self, repository: str, authorization: str) -> Any:
        return self.request("GET", "/repos/{owner}/{repo}", _repo_path(repository), authorization)[1]

    def git_ref(self, repository: str, ref: str, authorization: str) -> Any:
        """``GET /repos/{o}/{r}/git/ref/{ref}`` (``ref`` without ``refs/``: ``heads/pi/issue-7``)."""
        return self.request("GET", "/repos/{owner}/{repo}/git/ref/{ref}",
                            f"{_repo_path(repository)}/git/ref/{quote(ref, safe='/')}", authorization)[1]

    def issue(self, repository: str, number: int, authorization: str) -> Any:
        return self.request("GET", "/repos/{owner}/{repo}/issues/{n}", f"{_repo_path(repository)}/issues/{number}",
                            authorization)[1]

    def compare(self, repository: str, base: str, head: str, authorization: str) -> Any:
        return self.request("GET", "/repos/{owner}/{repo}/compare/{base}...{head}",
                            f"{_repo_path(repository)}/compare/{quote(base, safe='')}...{quote(head, safe='')}",
                            authorization)[1]

    def issue_comments(self, repository: str, number: int, authorization: str) -> list[Any]:
        """Every comment of an issue or pull request, following ``Link: rel="next"`` on this API's host only."""
        endpoint = "/repos/{owner}/{repo}/issues/{n}/comments"
        url: str | None = f"{_repo_path(repository)}/issues/{number}/comments"
        params: dict[str, Any] | None = {"per_page": 100}
        comments: list[Any] = []
        for _ in range(MAX_COMMENT_PAGES):
            if url is None:
                break
            _, payload, response = self.request("GET", endpoint, url, authorization, params=params)
            if not isinstance(payload, list):
                raise GitHubError("GET", endpoint, 200, "the answer is not a list of comments")
            comments.extend(payload)
            url, params = _next_link(response.headers.get("Link"), self.api_url), None
        return comments

    def create_comment(self, repository: str, number: int, body: str, authorization: str) -> Any:
        endpoint = "/repos/{owner}/{repo}/issues/{n}/comments"
        return self.request("POST", endpoint, f"{_repo_path(repository)}/issues/{number}/comments", authorization,
                            body={"body": body})[1]

    def installation_token(self, installation_id: int, jwt: str, repositories: list[str] | None,
                           permissions: dict[str, str] | None = None) -> InstallationToken:
        """``POST /app/installations/{id}/access_tokens``, optionally scoped to ``repositories`` (names) and
        narrowed to ``permissions``. A token GitHub grants more than ``permissions`` is revoked, not returned."""
        endpoint = "/app/installations/{id}/access_tokens"
        body: dict[str, Any] = {"repositories": repositories} if repositories is not None else {}
        if permissions is not None:
            body["permissions"] = dict(permissions)
        _, payload, _ = self.request("POST", endpoint, f"/app/installations/{installation_id}/access_tokens",
                                     f"Bearer {jwt}", body=body)
        token = payload.get("token") if isinstance(payload, dict) else None
        expires = parse_expiry(payload.get("expires_at")) if isinstance(payload, dict) else None
        if not isinstance(token, str) or not token or expires is None:
            raise GitHubError("POST", endpoint, 201, "the answer carries no token and expiry")
        scoped = tuple(r.get("name", "") for r in payload.get("repositories") or [] if isinstance(r, dict))
        granted = payload.get("permissions") if isinstance(payload.get("permissions"), dict) else {}
        minted = InstallationToken(token, expires, scoped, tuple(sorted((str(k), str(v)) for k, v in granted.items())))
        beyond = broader_than(granted, permissions) if permissions is not None else []
        if beyond:
            try:
                self.revoke(minted)
            except GitHubError:
                pass  # it expires within the hour; it was never handed out
            raise GitHubError("POST", endpoint, 201, "the token grants more than was asked for: " + ", ".join(beyond))
        return minted

    def revoke(self, token: InstallationToken) -> None:
        """``DELETE /installation/token``: a token minted for nothing is withdrawn at once."""
        self.request("DELETE", "/installation/token", "/installation/token", f"Bearer {token.value}")


def _next_link(header: str | None, api_url: str) -> str | None:
    for part in (header or "").split(","):
        url, _, rest = part.strip().partition(";")
        if 'rel="next"' in rest:
            url = url.strip().removeprefix("<").removesuffix(">")
            return url if url.startswith(api_url + "/") else None
    return None


class _AppAuth:
    """The App: its JWT, and installation tokens for the operator's own calls (cached per repository)."""

    def __init__(self, client: GitHubClient, app_id: int, installation_id: int, key_file: str,
                 clock: Callable[[], float]) -> None:
        self.client, self.app_id, self.installation_id, self.clock = client, app_id, installation_id, clock
        self.key = load_private_key(key_file)
        self._cache: dict[str, InstallationToken] = {}
        self._lock = threading.Lock()

    def mint(self, repository: str, permissions: dict[str, str]) -> InstallationToken:
        """A token for ``repository`` only, narrowed to ``permissions``."""
        jwt = app_jwt(self.app_id, self.key, self.clock())
        return self.client.installation_token(self.installation_id, jwt, [repository_name(repository)], permissions)

    def authorization(self, repository: str) -> str:
        with self._lock:
            token = self._cache.get(repository)
            if token is None or not token.fresh(now=self.clock()):
                try:
                    token = self.mint(repository, OPERATOR_TOKEN_PERMISSIONS)
                except GitHubError as exc:
                    raise NoCredentials(f"the App could not mint an installation token: {exc}", exc.status) from None
                self._cache[repository] = token
            return f"Bearer {token.value}"


class _TokenFile:
    """A pat/gh token from a mounted Secret, re-read every minute (a rotated Secret is picked up)."""

    def __init__(self, path: str, clock: Callable[[], float]) -> None:
        self.path, self.clock = path, clock
        self._token: str | None = None
        self._read = 0.0
        self._lock = threading.Lock()

    def authorization(self, repository: str) -> str:
        with self._lock:
            if self._token is None or self.clock() - self._read > TOKEN_FILE_REREAD_SECONDS:
                try:
                    with open(self.path) as f:
                        self._token = f.read().strip()
                except OSError as exc:
                    raise NoCredentials(f"GITHUB_TOKEN_FILE cannot be read ({exc.strerror})") from None
                self._read = self.clock()
            if not self._token:
                raise NoCredentials("GITHUB_TOKEN_FILE is empty")
            return f"token {self._token}"


class Forge:
    """GitHub as the controller uses it: head lookups, refusal comments, job tokens."""

    def __init__(self, github: GitHubSettings, source: str, *, clock: Callable[[], float] = time.time) -> None:
        self.client = GitHubClient(github.api_url, github.timeout_seconds, ca_file=github.ca_bundle_file)
        self.source = source
        self.job_token_permissions = dict(github.job_token_permissions)
        # The list-then-post of comment_once is one step: two refused Jobs of one delivery (two Triggers),
        # handled side by side, would otherwise both find no marker and both post.
        self._comment_lock = threading.Lock()
        self.app: _AppAuth | None = None
        self.token_file: _TokenFile | None = None
        if source == "app" and github.app_configured:
            assert github.app_id and github.app_installation_id and github.app_private_key_file
            self.app = _AppAuth(self.client, github.app_id, github.app_installation_id, github.app_private_key_file,
                                clock)
        elif source in ("pat", "gh") and github.token_file:
            self.token_file = _TokenFile(github.token_file, clock)

    @property
    def configured(self) -> bool:
        """Whether the operator can make its own calls (otherwise the controller keeps its old behaviour)."""
        return self.app is not None or self.token_file is not None

    def authorization(self, repository: str) -> str:
        """The operator's own ``Authorization`` value for ``repository``: what the receiver's poller reads the
        forge with (``receiver/poll/forge.py``). Raises :class:`NoCredentials`."""
        return self._authorization(repository)

    def _authorization(self, repository: str) -> str:
        auth = self.app or self.token_file
        if auth is None:
            raise NoCredentials("no GitHub credentials are configured for the operator")
        return auth.authorization(repository)

    def pull_head(self, repository: str, number: int) -> Head:
        """The head of a pull request; any failure is a :class:`Head` with ``failure`` set, never an exception."""
        try:
            payload = self.client.pull(repository, number, self._authorization(repository))
        except GitHubError as exc:
            return Head.failed(exc.reason)
        return head_from_pull(payload)

    def checkout(self, repository: str, issue: int | None, pull_request: int | None,
                 branch: str | None = None, *, flow: bool = False) -> Checkout:
        """The commit a job's workspace holds (``forge/checkout.py``). Raises :class:`Unresolvable` when the
        forge says what the job names is not there (a 404, a malformed answer), ``GitHubError`` otherwise.
        ``branch``: the branch of a job that names neither an issue nor a pull request (a cron Trigger's,
        ``jobflow/key.py``), or an issue replica's (``pi/issue-<n>-r<i>``), checked out as an issue's: its tip
        when it exists, else the default branch's. ``flow``: the job runs a flow, so the default branch's tip
        is resolved too (:class:`FlowSource`), whatever the job checks out."""
        auth = self._authorization(repository)
        try:
            if pull_request is not None:
                found = from_pull(repository, pull_request, self.client.pull(repository, pull_request, auth))
                return replace(found, flow=self._default_tip(repository, auth)) if flow else found
            if issue is None and branch is None:
                raise Unresolvable("the job names neither an issue nor a pull request")
            subject = Subject.of(self.client.issue(repository, issue, auth)) if issue is not None else None
            if branch is None and issue is not None:
                branch = issue_branch(issue)
            try:
                sha = ref_commit(self.client.git_ref(repository, f"heads/{branch}", auth), f"refs/heads/{branch}")
                return Checkout(f"refs/heads/{branch}", sha, branch, subject,
                                flow=self._default_tip(repository, auth) if flow else None)
            except GitHubError as exc:
                if exc.status != 404:
                    raise
            tip = self._default_tip(repository, auth)
            return Checkout(tip.ref, tip.sha, branch, subject, flow=tip if flow else None)
        except GitHubError as exc:
            if exc.status in (404, 410, 422):
                raise Unresolvable(str(exc)) from None
            raise

    def _default_tip(self, repository: str, auth: str) -> FlowSource:
        """The default branch and its tip, as the forge API reports them now."""
        default = default_branch(self.client.repository(repository, auth))
        ref = f"refs/heads/{default}"
        return FlowSource(ref, ref_commit(self.client.git_ref(repository, f"heads/{default}", auth), ref))

    def moved(self, repository: str, previous: str, current: str) -> Moved:
        """How ``current`` relates to ``previous``; a commit the forge does not know is ``unknown``."""
        try:
            return moved(previous, self.client.compare(repository, previous, current,
                                                       self._authorization(repository)))
        except GitHubError as exc:
            if exc.status in (404, 422):
                return Moved(previous, None, None, "unknown")
            raise

    def comment_once(self, repository: str, number: int, body: str, job_uid: str,
                     delivery_id: str | None = None) -> bool:
        """Post ``body`` unless a comment with this delivery's (or this Job's) marker is there already.
        ``True`` when posted now."""
        auth = self._authorization(repository)
        with self._comment_lock:
            if has_marker(self.client.issue_comments(repository, number, auth), job_uid, delivery_id):
                return False
            self.client.create_comment(repository, number, body, auth)
            return True

    def mint_job_token(self, repository: str, fork: bool = False) -> InstallationToken:
        """An installation token for a job Pod: ``repository`` only, the configured permissions only
        (``PI_DISPATCH_JOB_TOKEN_PERMISSIONS``), and for a fork's pull request (``fork``) those capped at
        read but for commenting (``credentials.fork_permissions``). It lives an hour and is not refreshed:
        the job's run timeout is capped below its life instead (``jobflow/jobtoken.py``, ``token_capped_deadline``)."""
        if self.app is None:
            raise NoCredentials("the GitHub App is not configured")
        permissions = fork_permissions(self.job_token_permissions) if fork else self.job_token_permissions
        return self.app.mint(repository, permissions)

    def revoke(self, token: InstallationToken) -> None:
        try:
            self.client.revoke(token)
        except GitHubError:
            pass  # it expires within the hour anyway


def from_settings(settings: OperatorSettings) -> Forge | None:
    """The operator's :class:`Forge`, or ``None`` when no GitHub credentials are configured for it.

    Raises :class:`~pidispatch.forge.appauth.AppKeyError` when the App's key file cannot be used: a
    configuration error, reported at start.
    """
    forge = Forge(settings.github, settings.store.github_auth_source)
    return forge if forge.configured else None
