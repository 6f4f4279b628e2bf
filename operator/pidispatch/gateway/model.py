"""``/model/<provider>/<rest>``: a job's model requests, forwarded with the provider's key.

docs/gateway.md#the-model-path.

For each request, in this order, each step refusing before anything reaches the provider:

1. the capability (``auth.presented``: Bearer or ``x-api-key``) verified (401 ``no-capability`` /
   ``bad-capability``);
2. the provider known (pi's table or the chart's models.json) and the path one of the wire APIs the gateway
   reads usage from (403 ``unknown-provider``);
3. the key: the first of the provider's environment names the claims' ``credentials`` map, read from its
   Secret, or the literal of models.json (403 ``no-provider-key``);
4. the budget: ``ledger.used(claims) >= claims.max_tokens`` is refused (403 ``token-budget``); a reply that
   started under the budget finishes, whatever it costs.

Then the request goes upstream with every credential header removed and the key added as the API wants
it; the reply's head and each piece of its body are passed on as they arrive (no buffering: the time to
the first token is the provider's), while :class:`~pidispatch.gateway.usage.UsageReader` reads the
provider's figures from the same bytes. When the reply ends (or the job hangs up), its figures go to the
ledger; a successful reply that carried none is counted as a request with no tokens and a ``no-usage``
anomaly in the ledger's refusals, so it is visible, not silently free.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

import aiohttp
from aiohttp import web

from pidispatch.contract.gateway_wire import (
    MODEL_PREFIX,
    REFUSED_BAD_CAPABILITY,
    REFUSED_BUDGET,
    REFUSED_NO_CAPABILITY,
    REFUSED_NO_KEY,
    REFUSED_PROVIDER,
)
from pidispatch.events import emit
from pidispatch.gateway import auth, refusal
from pidispatch.gateway.capability import CapabilityError, Claims, verify
from pidispatch.gateway.ledger import Ledger
from pidispatch.gateway.metrics import GatewayMetrics
from pidispatch.gateway.prices import PriceTable, price_of, price_table, requested_model
from pidispatch.gateway.providers import Provider, key_header, wire_api
from pidispatch.gateway.secrets import SecretMissing, SecretSource
from pidispatch.gateway.usage import UsageReader

log = logging.getLogger("pidispatch.gateway.model")

NO_USAGE = "no-usage"  # a successful reply without the provider's figures: an anomaly, in the ledger's refusals
DEFAULT_MAX_BODY = 64 * 2**20  # a request body: a whole conversation with images stays far below
# Response headers that describe the upstream's connection or encoding, not the reply: aiohttp sets its own.
_DROP_REPLY = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "upgrade",
               "trailer", "proxy-authenticate", "set-cookie"}

MODEL_PATH_KEY: web.AppKey[ModelPath] = web.AppKey("gateway_model_path")


@dataclass(frozen=True)
class ModelLimits:
    max_body: int = DEFAULT_MAX_BODY
    body_seconds: float = 300.0  # the job's request body, whole
    connect_seconds: float = 30.0  # reaching the provider
    read_seconds: float = 600.0  # between two reads of the reply (a model may think long before it speaks)


class _Refusal(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def refused(reason: str, message: str) -> web.Response:
    return web.Response(status=refusal.status_of(reason), body=refusal.body(reason, message),
                        headers=refusal.headers(reason))


class ModelPath:
    """The model path's state: the gateway key, where keys and figures are, the providers, one HTTP client."""

    def __init__(self, *, key: bytes, secrets: SecretSource, ledger: Ledger, providers: Mapping[str, Provider],
                 metrics: GatewayMetrics, limits: ModelLimits | None = None, prices: PriceTable | None = None
                 ) -> None:
        self.key = key
        self.secrets = secrets
        self.ledger = ledger
        self.providers = dict(providers)
        self.prices = price_table() if prices is None else prices
        self.metrics = metrics
        self.limits = limits or ModelLimits()
        self._client: aiohttp.ClientSession | None = None

    async def start(self, _app: web.Application | None = None) -> None:
        timeout = aiohttp.ClientTimeout(total=None, connect=self.limits.connect_seconds,
                                        sock_read=self.limits.read_seconds)
        # No cookies kept between jobs; no proxy from the gateway's own environment.
        self._client = aiohttp.ClientSession(timeout=timeout, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False,
                                             connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=60))

    async def close(self, _app: web.Application | None = None) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    # -- the checks --------------------------------------------------------------------------------------
    def _claims(self, request: web.Request) -> Claims:
        presented = auth.presented(request.headers)
        if not presented:
            raise _Refusal(REFUSED_NO_CAPABILITY, "no gateway capability: send it as the provider's API key")
        try:
            return verify(self.key, presented)
        except CapabilityError as exc:
            raise _Refusal(REFUSED_BAD_CAPABILITY, str(exc)) from None

    def _route(self, name: str, rest: str) -> tuple[Provider, str, str]:
        provider = self.providers.get(name)
        if provider is None:
            raise _Refusal(REFUSED_PROVIDER, f"the gateway knows no model provider {name!r}")
        if any(segment in (".", "..") for segment in unquote(rest).split("/")):
            raise _Refusal(REFUSED_PROVIDER, "a model path may not step out of the provider's base URL")
        api = wire_api(rest)
        base = provider.base_for(api) if api else None
        if api is None or base is None:
            raise _Refusal(REFUSED_PROVIDER, f"the gateway forwards chat completions, Responses and Anthropic "
                           f"Messages requests of {name!r}, not /{rest}")
        return provider, api, base.rstrip("/") + "/" + rest

    async def _key(self, provider: Provider, claims: Claims) -> str:
        for env in provider.env:
            ref = claims.credentials.get(env)
            if ref is not None:
                try:
                    return await self.secrets.read(claims.namespace, ref)
                except SecretMissing as exc:
                    raise _Refusal(REFUSED_NO_KEY, str(exc)) from None
        if provider.literal is not None:
            return provider.literal
        names = ", ".join(provider.env) or "none"
        raise _Refusal(REFUSED_NO_KEY, f"the job has no key for {provider.name!r} (its credentials name none of: "
                       f"{names})")

    # -- the handler -------------------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = request.rel_url.raw_path[len(MODEL_PREFIX):]
        name, _, rest = raw.partition("/")
        claims: Claims | None = None
        try:
            claims = self._claims(request)
            provider, api, url = self._route(unquote(name), rest)
            key = await self._key(provider, claims)
            if claims.max_tokens is not None:
                used = await self.ledger.used(claims)
                if used >= claims.max_tokens:
                    raise _Refusal(REFUSED_BUDGET, f"the job has used {used} of its {claims.max_tokens} tokens")
        except _Refusal as exc:
            emit("gateway_refused", reason=exc.reason, provider=unquote(name)[:100],
                 uid=claims.uid if claims else None, namespace=claims.namespace if claims else None)
            self.metrics.refusals.labels(reason=exc.reason).inc()
            if claims is not None:
                await self.ledger.record_refusal(claims, exc.reason)
            return refused(exc.reason, str(exc))
        if request.rel_url.raw_query_string:
            url += "?" + request.rel_url.raw_query_string
        return await self._forward(request, claims, provider.name, api, url, key)

    async def _forward(self, request: web.Request, claims: Claims, provider: str, api: str, url: str,
                       key: str) -> web.StreamResponse:
        assert self._client is not None, "ModelPath.start was not called"
        try:
            body = await asyncio.wait_for(request.read(), self.limits.body_seconds)
        except TimeoutError:
            return web.Response(status=408, text="the request body did not arrive in time")
        headers = auth.without_credentials(request.headers)
        headers["Accept-Encoding"] = "identity"  # the usage is read from the bytes that pass
        headers.update(key_header(api, key))
        started = time.monotonic()
        reader: UsageReader | None = None
        reply: web.StreamResponse | None = None
        status = 0
        try:
            async with self._client.request(request.method, url, data=body, headers=headers,
                                            allow_redirects=False) as upstream:
                self.metrics.upstream_seconds.labels(api=api).observe(time.monotonic() - started)
                status = upstream.status
                stream = upstream.content_type == "text/event-stream"
                reader = UsageReader(api, stream=stream)
                reply = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for name, value in upstream.headers.items():
                    if name.lower() not in _DROP_REPLY:
                        reply.headers.add(name, value)
                await reply.prepare(request)
                try:
                    async for data in upstream.content.iter_any():
                        reader.feed(data)
                        await reply.write(data)
                except (ConnectionResetError, aiohttp.ClientConnectionResetError):
                    return reply  # the job hung up: what the provider reported so far is still counted
                # Counted before the reply ends, so the job's next request is checked against it.
                accounting, reader = reader, None
                await asyncio.shield(self._account(claims, _Reply(provider, api, status, body), accounting))
                await reply.write_eof()
                return reply
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.metrics.upstream_errors.labels(api=api).inc()
            if reply is None or not reply.prepared:
                log.warning("model upstream unreachable: %s %s", api, type(exc).__name__)
                return web.json_response({"error": {"type": "pi_gateway_upstream", "message":
                                                    f"the model provider could not be reached ({type(exc).__name__})"}},
                                         status=502)
            # The reply had started: end the connection without the chunked terminator, so the job sees a
            # truncated reply, not a whole one.
            if request.transport is not None:
                request.transport.abort()
            assert reply is not None
            return reply
        finally:
            if reader is not None:
                await asyncio.shield(self._account(claims, _Reply(provider, api, status, body), reader))

    async def _account(self, claims: Claims, reply: _Reply, reader: UsageReader) -> None:
        api, status = reply.api, reply.status
        self.metrics.requests.labels(api=api, status=f"{status // 100}xx").inc()
        usage = reader.finish()
        emit("gateway_model_reply", uid=claims.uid, namespace=claims.namespace, job=claims.job, api=api,
             status=status, usage=None if usage is None else {"input": usage.input, "output": usage.output,
                                                             "cacheRead": usage.cache_read,
                                                             "cacheWrite": usage.cache_write})
        if usage is None:
            await self.ledger.record_usage(claims, input=0, output=0, cache_read=0, cache_write=0, cost=0.0)
            if 200 <= status < 300:
                self.metrics.refusals.labels(reason=NO_USAGE).inc()
                await self.ledger.record_refusal(claims, NO_USAGE)
            return
        for kind, value in (("input", usage.input), ("output", usage.output), ("cacheRead", usage.cache_read),
                            ("cacheWrite", usage.cache_write)):
            self.metrics.tokens.labels(kind=kind).inc(value)
        # The model the job asked for, as pi names it: what pi priced the reply by. A large body is parsed off the
        # event loop, so other jobs' streams do not wait for it.
        model = (await asyncio.to_thread(requested_model, reply.body) if len(reply.body) > _INLINE_PARSE
                 else requested_model(reply.body))
        price = price_of(self.prices, reply.provider, model)
        figures = {"input": usage.input, "output": usage.output, "cache_read": usage.cache_read,
                   "cache_write": usage.cache_write}
        await self.ledger.record_usage(claims, **figures, cost=None if price is None else price.of(**figures))


@dataclass(frozen=True)
class _Reply:
    """What a reply is counted by: the provider and model it was asked of, its API and its status."""

    provider: str
    api: str
    status: int
    body: bytes  # the request's, for the model it names


_INLINE_PARSE = 64 * 1024


def add_routes(app: web.Application, model: ModelPath) -> None:
    """``/model/{provider}/{rest}`` for every method on ``app``, and the client's start and close with it."""
    app[MODEL_PATH_KEY] = model
    app.router.add_route("*", MODEL_PREFIX + "{provider}/{rest:.*}", model.handle)
    app.on_startup.append(model.start)
    app.on_cleanup.append(model.close)
