"""The forge path: git smart HTTP, REST and GraphQL, with the job's token added and its repository only
(docs/gateway.md#the-forge-path).

The job presents its capability (git: the Basic password; ``gh``: ``Authorization: token``); the gateway checks
it, decides the request (``forge_rest.py``, ``forge_graphql.py``), and forwards it with the job's forge token in
place of the capability: git gets ``Basic x-access-token:<token>``, the API ``Authorization: token <token>``.
Bodies stream both ways (a pack is never held whole); only GraphQL bodies, a few KiB, are read to be judged.
Upstream redirects are not followed: a ``Location`` under the forge is rewritten onto the gateway, any other
refused (``forge_headers.py``), so neither the capability goes upstream nor the token, or a URL that carries
one, comes back.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from pidispatch.contract.gateway_wire import (
    API_PREFIX,
    GRAPHQL_PATH,
    REFUSED_BAD_CAPABILITY,
    REFUSED_NO_CAPABILITY,
    REFUSED_NO_TOKEN,
    REFUSED_REDIRECT,
    REFUSED_UNCHECKED,
)
from pidispatch.gateway import forge_graphql, forge_rest, refusal
from pidispatch.gateway.auth import presented
from pidispatch.gateway.capability import CapabilityError, Claims, verify
from pidispatch.gateway.forge_graphql import Refusal, graphql_url
from pidispatch.gateway.forge_headers import to_job, to_upstream
from pidispatch.gateway.ledger import Ledger
from pidispatch.gateway.secrets import SecretMissing, SecretSource

log = logging.getLogger("pidispatch.gateway.forge")

CHUNK = 64 * 1024
TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=300)
LOOKUP_TIMEOUT = aiohttp.ClientTimeout(total=30)
SessionFactory = Callable[[], aiohttp.ClientSession]


class _Forge:
    """The routes' shared state: the key, where tokens are, the ledger, and one upstream session."""

    def __init__(self, key: bytes, secrets: SecretSource, ledger: Ledger, session_factory: SessionFactory) -> None:
        self.key = key
        self.secrets = secrets
        self.ledger = ledger
        self.session_factory = session_factory
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = self.session_factory()
        return self._session

    async def close(self, _app: web.Application | None = None) -> None:
        if self._session is not None:
            await self._session.close()

    # ---- what the job presents ----------------------------------------------------------------------------

    async def refuse(self, request: web.Request, claims: Claims | None, reason: str, message: str, *,
                     git: bool = False) -> web.Response:
        """The refusal, logged (the path only: never a header, a query or a body) and counted."""
        log.info("forge refused %s %s: %s (job %s)", request.method, request.path, reason,
                 f"{claims.namespace}/{claims.job}" if claims else "unknown")
        if claims is not None:
            await self.ledger.record_refusal(claims, reason)
        headers = refusal.headers(reason)
        if git:  # git prints a text/plain error body as "remote: ..." lines
            headers["Content-Type"] = "text/plain; charset=utf-8"
            if reason == REFUSED_NO_CAPABILITY:
                headers["WWW-Authenticate"] = 'Basic realm="pi-dispatch gateway"'
            data = f"pi-dispatch gateway: {reason}: {message}\n".encode()
        else:  # gh prints a GitHub error's "message"; the model clients read error.message
            data = json.dumps({"message": f"pi-dispatch gateway: {reason}: {message}",
                               **json.loads(refusal.body(reason, message))}).encode()
        return web.Response(status=refusal.status_of(reason), body=data, headers=headers)

    async def claims(self, request: web.Request, *, git: bool = False) -> Claims | web.Response:
        value = presented(request.headers)
        if not value:
            return await self.refuse(request, None, REFUSED_NO_CAPABILITY, "present the job's capability", git=git)
        try:
            return verify(self.key, value)
        except CapabilityError as exc:
            return await self.refuse(request, None, REFUSED_BAD_CAPABILITY, str(exc), git=git)

    async def token(self, request: web.Request, claims: Claims, *, git: bool = False) -> str | web.Response:
        if claims.token is None:
            return await self.refuse(request, claims, REFUSED_NO_TOKEN, "the job has no forge token", git=git)
        try:
            return await self.secrets.read(claims.namespace, claims.token)
        except SecretMissing as exc:
            return await self.refuse(request, claims, REFUSED_NO_TOKEN, str(exc), git=git)

    # ---- forwarding ---------------------------------------------------------------------------------------

    async def forward(self, request: web.Request, claims: Claims, url: URL, auth: str, *, body: Any = None,
                      git: bool = False) -> web.StreamResponse:
        """``request`` to ``url`` with ``auth`` as its only credential, both bodies streamed."""
        headers = to_upstream(request.headers)
        headers["Authorization"] = auth
        if body is None and request.body_exists:
            body = request.content.iter_chunked(CHUNK)
        try:
            upstream = await self.session.request(request.method, url, headers=headers, data=body,
                                                  allow_redirects=False, auto_decompress=False, timeout=TIMEOUT)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("forge unreachable for %s %s: %s", request.method, request.path, type(exc).__name__)
            return web.Response(status=502, text="pi-dispatch gateway: the forge did not answer\n")
        async with upstream:
            gateway = f"{request.scheme}://{request.host}"
            out = to_job(claims, upstream.headers, url, gateway, keep_length=True)
            if 300 <= upstream.status < 400 and "Location" not in out and "location" in {
                    h.lower() for h in upstream.headers}:
                return await self.refuse(request, claims, REFUSED_REDIRECT,
                                         "the forge redirected outside itself; the gateway does not follow", git=git)
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=out)
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_chunked(CHUNK):
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionResetError, aiohttp.ClientError):
                log.info("forge stream cut for %s %s", request.method, request.path)
            return response

    # ---- the three path spaces ----------------------------------------------------------------------------

    async def git(self, request: web.Request) -> web.StreamResponse:
        owner, name, rest = request.match_info["owner"], request.match_info["name"], request.match_info["rest"]
        if owner in ("api", "model"):
            raise web.HTTPNotFound()
        claims = await self.claims(request, git=True)
        if isinstance(claims, web.Response):
            return claims
        name = name[:-4] if name.endswith(".git") else name
        if rest == "info/refs" and request.method == "GET":
            service = request.query.get("service")
        elif rest in forge_rest.GIT_SERVICES and request.method == "POST":
            service = rest
        else:
            service = None
        refused = forge_rest.git(claims, owner, name, service)
        if refused is not None:
            return await self.refuse(request, claims, refused.reason, refused.message, git=True)
        token = await self.token(request, claims, git=True)
        if isinstance(token, web.Response):
            return token
        url = URL(claims.forge.rstrip("/") + f"/{claims.repository}.git/{rest}")
        if rest == "info/refs" and service is not None:
            url = url.with_query({"service": service})
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        return await self.forward(request, claims, url, f"Basic {basic}", git=True)

    async def rest(self, request: web.Request) -> web.StreamResponse:
        claims = await self.claims(request)
        if isinstance(claims, web.Response):
            return claims
        raw_path = request.rel_url.raw_path[len(API_PREFIX) - 1:]
        refused = forge_rest.rest(claims, request.method, raw_path)
        if refused is not None:
            return await self.refuse(request, claims, refused.reason, refused.message)
        token = await self.token(request, claims)
        if isinstance(token, web.Response):
            return token
        query = request.rel_url.raw_query_string
        url = URL(claims.api.rstrip("/") + raw_path + (f"?{query}" if query else ""), encoded=True)
        return await self.forward(request, claims, url, f"token {token}")

    async def graphql(self, request: web.Request) -> web.StreamResponse:
        claims = await self.claims(request)
        if isinstance(claims, web.Response):
            return claims
        data = b""
        while len(data) <= forge_graphql.MAX_BODY_BYTES:
            chunk = await request.content.read(forge_graphql.MAX_BODY_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
        if len(data) > forge_graphql.MAX_BODY_BYTES or request.headers.get("Content-Encoding"):
            return await self.refuse(request, claims, REFUSED_UNCHECKED, "a GraphQL body the gateway reads whole, "
                                     f"uncompressed, up to {forge_graphql.MAX_BODY_BYTES} bytes")
        try:
            body = json.loads(data, object_pairs_hook=_unique)
        except ValueError:  # not JSON, or a key given twice (which of the two would GitHub read?)
            body = None
        token = await self.token(request, claims)
        if isinstance(token, web.Response):
            return token
        refused: Refusal | None = await forge_graphql.check(claims, body, _Lookup(self.session, claims, token))
        if refused is not None:
            return await self.refuse(request, claims, refused.reason, refused.message)
        return await self.forward(request, claims, URL(graphql_url(claims.api)), f"token {token}", body=data)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different; ``ValueError`` otherwise."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key given twice")
    return out


class _Lookup:
    """``forge_graphql.NodeLookup`` against the upstream, with the job's own token."""

    def __init__(self, session: aiohttp.ClientSession, claims: Claims, token: str) -> None:
        self.session, self.claims, self.token = session, claims, token
        self.headers = {"Authorization": f"token {token}", "Accept": "application/vnd.github+json",
                        "User-Agent": "pi-dispatch-gateway"}

    async def _get(self, path: str) -> Any:
        try:
            async with self.session.get(self.claims.api.rstrip("/") + path, headers=self.headers,
                                        allow_redirects=False, timeout=LOOKUP_TIMEOUT) as answer:
                return await answer.json(content_type=None) if answer.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def repository_id(self) -> str | None:
        found = await self._get(f"/repos/{self.claims.repository}")
        return found.get("node_id") if isinstance(found, dict) else None

    async def subject_ids(self) -> set[str]:
        """The subject's issue node id and, when it is a pull request, the pull request's (gh comments on a pull
        request by the latter)."""
        if self.claims.subject is None:
            return set()
        out: set[str] = set()
        for kind in ("issues", "pulls"):
            found = await self._get(f"/repos/{self.claims.repository}/{kind}/{self.claims.subject}")
            if isinstance(found, dict) and isinstance(found.get("node_id"), str):
                out.add(found["node_id"])
        return out

    async def node_repository(self, node_id: str) -> str | None:
        query = ("query PiGatewayNodeRepository($id: ID!) { node(id: $id) { ... on Issue { repository { "
                 "nameWithOwner } } ... on PullRequest { repository { nameWithOwner } } } }")
        try:
            async with self.session.post(graphql_url(self.claims.api), headers=self.headers,
                                         json={"query": query, "variables": {"id": node_id}},
                                         allow_redirects=False, timeout=LOOKUP_TIMEOUT) as answer:
                found = await answer.json(content_type=None) if answer.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        node = ((found or {}).get("data") or {}).get("node") if isinstance(found, dict) else None
        repository = node.get("repository") if isinstance(node, dict) else None
        name = repository.get("nameWithOwner") if isinstance(repository, dict) else None
        return name if isinstance(name, str) else None


def default_session_factory(upstream_ca: str | None = None) -> SessionFactory:
    """Sessions that verify the forge against the system's CAs, or ``upstream_ca`` (a PEM bundle) instead."""
    def make() -> aiohttp.ClientSession:
        context = ssl.create_default_context(cafile=upstream_ca)
        # A clone holds its connection for as long as its pack takes: room for every job of a busy replica.
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=512), trust_env=False)
    return make


def add_routes(app: web.Application, *, key: bytes, secrets: SecretSource, ledger: Ledger,
               session_factory: SessionFactory | None = None, upstream_ca: str | None = None) -> None:
    """Mount the forge path on ``app``: ``/{owner}/{name}[.git]/info/refs``, ``.../git-upload-pack``,
    ``.../git-receive-pack``, ``/api/v3/...`` and ``/api/graphql``. ``session_factory`` (tests, other client
    options) else sessions verifying the forge with ``upstream_ca`` or the system's CAs; the session it makes
    belongs to the forge path, which closes it when ``app`` cleans up. Register the model path's
    ``/model/{provider}/...`` before these routes: ``/{owner}/{name}/info/refs`` would otherwise match it (the
    forge path answers 404 to an owner named ``model`` or ``api``)."""
    forge = _Forge(key, secrets, ledger, session_factory or default_session_factory(upstream_ca))
    app.on_cleanup.append(forge.close)
    app.router.add_route("POST", GRAPHQL_PATH, forge.graphql)
    app.router.add_route("*", API_PREFIX + "{tail:.*}", forge.rest)
    app.router.add_route("GET", "/{owner}/{name}/{rest:info/refs}", forge.git)
    app.router.add_route("POST", "/{owner}/{name}/{rest:git-upload-pack|git-receive-pack}", forge.git)
