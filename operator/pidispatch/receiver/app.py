"""The aiohttp shell: ``POST /webhook`` on the webhook port; ``/healthz``, ``/readyz``, ``/metrics`` on another.

Two listeners in one process. The webhook port is the one put on the internet (the chart's Service
exposes it alone), so it answers ``/webhook`` and nothing else: the probes and the metrics (Trigger
counts, delivery results) listen on the health port, which only the kubelet and Prometheus reach. The
webhook port holds at most ``max_connections`` connections at once (:class:`ConnectionCap`): one more
is answered 503 and closed, unread, so a flood of connections costs a file descriptor each for a moment
and never starves the probes, which have their own listener.

Order of the checks on a delivery (each answers at once; only the last one creates anything):

1. ``X-Hub-Signature-256`` present and shaped ``sha256=<64 hex>``      else 401  (no body read)
2. ``Content-Length`` within the cap                                   else 413  (no body read)
3. a body-read permit free (``BODY_BUDGET`` / cap bodies read at once) else 503 + Retry-After (no body read)
4. the body, read up to the cap + 1 byte, within the read deadline     else 413 / 408
5. the HMAC of the raw body equals the header (constant time)          else 401
6. ``X-GitHub-Delivery`` usable as the Job's ``deliveryId``            else 400
7. ``X-GitHub-Event`` one a Trigger can match                          else 202 ``{"ignored": ...}``
8. the body (JSON, or form-encoded ``payload=<JSON>``) of that event's shape else 400
9. the action one a Trigger can match, the sender not a bot or one of the jobs' own logins
   commenting                                                          else 202 ``{"ignored": ...}``
9b. ``pull_request.closed`` or ``issues.closed``: no Job; when a resume-armed Trigger serves the repository
    and trusts whoever closed it (``closed.retirement_problem``), the key's SessionKey is annotated
    ``pi-dispatch.dev/retire`` (a pull request's number too, for the operator's ownership check)
    → 202 ``{"retired": <key>, "reason"}`` (no SessionKey, a fork's pull request, a ``pi/cron-…`` head branch,
    a closer no such Trigger trusts: 202 ``{"ignored": ...}``, counted as ``ignored``)
9c. the repository served by some Trigger (``on.repository``, ``on.repositories``: ``api/serves.py``)
    else 202 ``{"ignored": "repository not served by any Trigger"}``
10. one Job per matching Trigger (none match: 202 ``{"ignored": ...}``) → 202 ``{"jobs", "duplicates"}``;
    the API server unavailable → 503 (a redelivery completes the set: names are deterministic). Names
    come from the Trigger and the body's SHA-256, so a replay of a body under a new delivery id is a
    duplicate, never a second Job. A Job refused for good (the receiver's own check of the CRD's bounds,
    or the API server's 400, 403 or 422) → 422 ``{"error", "jobs", "duplicates", "refused"}``, the others
    still created: see :meth:`Receiver._refused`.

Anyone can send a body, and it is held in memory until its HMAC is checked: the permits of step 3
bound that memory (about ``BODY_BUDGET``, whatever the number of connections), and ``KEEPALIVE_SECONDS``
bounds how long a connection may sit without a complete request head (idle, or trickling its headers).

Neither the secret nor the body is ever logged; the log line of a delivery carries its id, event,
result and Job names.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import HttpVersion11, web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pidispatch.events import emit
from pidispatch.receiver import delivery as core
from pidispatch.receiver.cluster import Cluster, ClusterUnavailable
from pidispatch.receiver.intake import Kind, Outcome, intake
from pidispatch.receiver.metrics import ReceiverMetrics, Result
from pidispatch.receiver.payload import Malformed, payload_of
from pidispatch.receiver.settings import DEFAULT_MAX_CONNECTIONS
from pidispatch.receiver.signature import HEADER, WebhookSecret, header_problem, signature_matches

WEBHOOK_PATH = "/webhook"
EVENT_HEADER = "X-GitHub-Event"
DELIVERY_HEADER = "X-GitHub-Delivery"
# A sender that trickles its body is cut off: GitHub sends a whole delivery well within this.
BODY_DEADLINE = 10.0
_READ_CHUNK = 64 * 1024
# Bodies read at once share this many bytes of cap: 32 bodies at the default 1 MiB cap, 1 at the 25 MiB
# maximum. A body being read costs up to twice its cap at the final join, so at most ~64 MiB over the ~60 MB
# the receiver uses idle: well inside the chart's 256Mi limit, and 32 deliveries in flight at once is far
# more than one installation's webhooks send.
BODY_BUDGET = 32 * 1024 * 1024
# What a sender refused for lack of a permit is told to wait; GitHub does not redeliver on its own, but a
# redelivery (by hand, or by a script over the failed deliveries) after this is likely to find one free.
BUSY_RETRY_AFTER = 5
# A connection without a complete request head for this long is closed: aiohttp's keep-alive timer runs
# from the connection's start and from the end of each answer, and fires unless a request is being
# handled, so it bounds an idle keep-alive connection and a client trickling its headers alike.
KEEPALIVE_SECONDS = 15.0

METRICS_KEY: web.AppKey[ReceiverMetrics] = web.AppKey("metrics", ReceiverMetrics)


def body_reads_within_budget(max_body: int) -> int:
    """How many bodies of up to ``max_body`` bytes may be read at once within ``BODY_BUDGET`` (at least one)."""
    return max(1, BODY_BUDGET // max_body)


class BodyReadPermits:
    """The bodies being read at once, against a limit; a request over it is refused, never queued.

    Refusing instead of waiting keeps a flood from holding connections and tasks open in a queue: the
    sender is told 503 at once, and its unread body is dropped (not buffered) while the connection closes.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"at least one body must be readable at once, not {limit}")
        self.limit = limit
        self.taken = 0

    def all_taken(self) -> bool:
        return self.taken >= self.limit

    @contextmanager
    def permit(self) -> Iterator[bool]:
        """Take a permit if one is free (``True``), and give it back on leaving, whatever ends the read."""
        if self.all_taken():
            yield False
            return
        self.taken += 1
        try:
            yield True
        finally:
            self.taken -= 1


class Receiver:
    """The request handlers, bound to one secret, one cap, one cluster and one metrics registry."""

    def __init__(self, cluster: Cluster, secret: WebhookSecret, *, max_body: int,
                 auth_source: str | None = None, metrics: ReceiverMetrics | None = None,
                 max_body_reads: int | None = None, ignore_logins: Collection[str] = ()) -> None:
        self.cluster = cluster
        self.secret = secret
        self.max_body = max_body
        self.auth_source = auth_source
        self.ignore_logins = frozenset(login.casefold() for login in ignore_logins)
        self.metrics = metrics or ReceiverMetrics()
        if max_body_reads is None:
            max_body_reads = body_reads_within_budget(max_body)
        self.body_reads = BodyReadPermits(max_body_reads)

    # -- answers ---------------------------------------------------------------------------------------
    def _answer(self, request: web.Request, started: float, status: int, result: Result, body: dict[str, Any],
                *, close: bool = False, **log: Any) -> web.Response:
        self.metrics.deliveries.labels(result=result.value).inc()
        self.metrics.seconds.observe(time.monotonic() - started)
        delivery = (request.headers.get(DELIVERY_HEADER) or "")[:core.DELIVERY_MAX]
        event = (request.headers.get(EVENT_HEADER) or "")[:64]
        emit("receiver_delivery", delivery=delivery or None, githubEvent=event or None, result=result.value,
             status=status, **log)
        response = web.json_response(body, status=status)
        if close:
            # The rest of the body is still on the wire: do not keep the connection for another request.
            response.force_close()
        return response

    def _reject(self, request: web.Request, started: float, status: int, result: Result, why: str,
                *, close: bool = False) -> web.Response:
        return self._answer(request, started, status, result, {"error": why}, close=close, why=why)

    def _busy(self, request: web.Request, started: float) -> web.Response:
        """503 with Retry-After: every body-read permit is taken (counted as ``busy``, apart from ``failed``:
        too busy is not the API server being down)."""
        response = self._reject(request, started, 503, Result.BUSY,
                                f"as many deliveries as may be read at once ({self.body_reads.limit}) are being "
                                f"read; redeliver later",
                                close=True)
        response.headers["Retry-After"] = str(BUSY_RETRY_AFTER)
        return response

    def _refused(self, request: web.Request, started: float, created: list[str], duplicates: list[str],
                 refused: dict[str, str]) -> web.Response:
        """422: a Job of this delivery can never be created, so the delivery can never complete.

        Not 503, which says "the server failed, try again": GitHub shows a 5xx as a failed delivery to be
        redelivered, and a redelivery would be refused the same way. A 4xx says the request itself cannot
        succeed; 422 (Unprocessable Content) says it was understood, verified and well-formed, and what
        it asks for still cannot be made, as the API server's own 422 Invalid says. The Jobs the other
        Triggers asked for are created all the same and listed. The log line and the answer carry each
        refused Job's name, the status and reason and the fields at fault: never the refused value.
        """
        why = "; ".join(refused.values())
        return self._answer(request, started, 422, Result.REFUSED,
                            {"error": f"{why}: redelivering cannot change this; fix the Trigger or the "
                                      f"receiver's permissions, then redeliver",
                             "jobs": created, "duplicates": duplicates, "refused": list(refused)},
                            why=why, jobs=created, duplicates=duplicates, refused=list(refused))

    def _ignore(self, request: web.Request, started: float, why: str, **extra: Any) -> web.Response:
        return self._answer(request, started, 202, Result.IGNORED, {"ignored": why, **extra}, why=why)

    # -- before the body -------------------------------------------------------------------------------
    def _before_body(self, request: web.Request, started: float) -> web.Response | None:
        problem = header_problem(request.headers.get(HEADER))
        if problem is not None:
            return self._reject(request, started, 401, Result.UNAUTHORIZED, problem, close=True)
        length = request.content_length
        if length is not None and length > self.max_body:
            return self._reject(request, started, 413, Result.TOO_LARGE,
                                f"the body ({length} bytes) is larger than the cap of {self.max_body} bytes",
                                close=True)
        return None

    async def expect(self, request: web.Request) -> web.StreamResponse | None:
        """``Expect: 100-continue``: refuse before the client sends the body, when the headers already tell."""
        started = time.monotonic()
        refusal = self._before_body(request, started)
        if refusal is not None:
            return refusal
        if self.body_reads.all_taken():
            # Say so before the client sends a body nobody would read (the handler checks again).
            return self._busy(request, started)
        if request.version == HttpVersion11:
            if request.headers.get("Expect", "").lower() != "100-continue":
                raise web.HTTPExpectationFailed(text="only Expect: 100-continue is understood")
            # As aiohttp's own expect handler does; the body's size count starts after this line.
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0
        return None

    async def _read_capped(self, request: web.Request) -> bytes | None:
        """The body, or ``None`` as soon as it passes the cap (the rest is never read into memory)."""
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = await request.content.read(_READ_CHUNK)
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > self.max_body:
                return None
            chunks.append(chunk)

    async def _read_body(self, request: web.Request, started: float) -> bytes | web.Response:
        """The body, or the refusal: no permit free (503), too slow (408), over the cap (413).

        The permit is held only while this request's own body is read, and given back however the
        read ends (the deadline, the client going away, an error), before the signature is checked.
        """
        with self.body_reads.permit() as granted:
            if not granted:
                return self._busy(request, started)
            try:
                body = await asyncio.wait_for(self._read_capped(request), BODY_DEADLINE)
            except TimeoutError:
                return self._reject(request, started, 408, Result.MALFORMED,
                                    f"the body did not arrive within {BODY_DEADLINE:.0f}s", close=True)
            except ConnectionError:
                # Nobody will read this answer; it makes a logged, counted line of what would otherwise
                # be an error traceback per dropped connection.
                return self._reject(request, started, 400, Result.MALFORMED,
                                    "the sender went away before its whole body arrived", close=True)
        if body is None:
            return self._reject(request, started, 413, Result.TOO_LARGE,
                                f"the body is larger than the cap of {self.max_body} bytes", close=True)
        return body

    # -- the delivery ----------------------------------------------------------------------------------
    async def webhook(self, request: web.Request) -> web.Response:
        started = time.monotonic()
        refusal = self._before_body(request, started)
        if refusal is not None:
            return refusal
        body = await self._read_body(request, started)
        if isinstance(body, web.Response):
            return body
        if not signature_matches(self.secret.current(), body, request.headers[HEADER]):
            return self._reject(request, started, 401, Result.UNAUTHORIZED,
                                f"{HEADER} does not match the body: a wrong secret, or the body was altered")

        # Verified: from here on the sender is GitHub (or holds the secret).
        delivery = request.headers.get(DELIVERY_HEADER)
        problem = core.delivery_id_problem(delivery)
        if problem is not None:
            return self._reject(request, started, 400, Result.MALFORMED, problem)
        assert delivery is not None
        event_name = request.headers.get(EVENT_HEADER)
        ignored = core.event_problem(event_name)
        if ignored is not None:
            return self._ignore(request, started, ignored.why)
        assert event_name is not None
        try:
            payload = payload_of(body, request.content_type)
        except Malformed as exc:
            return self._reject(request, started, 400, Result.MALFORMED, f"not a {event_name} payload: {exc}")
        outcome = await intake(self.cluster, event_name, payload, delivery, core.body_digest(body),
                               auth_source=self.auth_source, ignore_logins=self.ignore_logins)
        return self._outcome(request, started, outcome)

    def _outcome(self, request: web.Request, started: float, outcome: Outcome) -> web.Response:
        """The HTTP answer of what :func:`intake` did (the path a polled event takes too)."""
        kind, why = outcome.kind, outcome.why
        self.metrics.jobs_created.inc(len(outcome.jobs))
        if kind is Kind.MALFORMED:
            return self._reject(request, started, 400, Result.MALFORMED, why)
        if kind is Kind.IGNORED:
            extra: dict[str, Any] = {"jobs": [], "duplicates": []} if outcome.listed else {}
            if outcome.key is not None:
                extra["key"] = outcome.key
            return self._ignore(request, started, why, **extra)
        if kind is Kind.RETIRED:
            return self._answer(request, started, 202, Result.RETIRED,
                                {"retired": outcome.key, "reason": outcome.reason},
                                key=outcome.key, reason=outcome.reason)
        if kind is Kind.UNAVAILABLE:
            if not outcome.listed:
                return self._reject(request, started, 503, Result.FAILED, f"{why}; redeliver later")
            return self._answer(request, started, 503, Result.FAILED,
                                {"error": f"{why}; redeliver to create the rest", "jobs": outcome.jobs,
                                 "duplicates": outcome.duplicates}, why=why, jobs=outcome.jobs)
        if kind is Kind.REFUSED:
            return self._refused(request, started, outcome.jobs, outcome.duplicates, outcome.refused)
        result = Result.CREATED if kind is Kind.CREATED else Result.DUPLICATE
        return self._answer(request, started, 202, result, {"jobs": outcome.jobs, "duplicates": outcome.duplicates},
                            jobs=outcome.jobs, duplicates=outcome.duplicates)

    # -- probes ----------------------------------------------------------------------------------------
    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def readyz(self, request: web.Request) -> web.Response:
        """Ready when the Triggers can be listed: without them no delivery could be matched."""
        try:
            triggers = await self.cluster.triggers()
        except ClusterUnavailable as exc:
            return web.json_response({"ready": False, "why": str(exc)}, status=503)
        return web.json_response({"ready": True, "triggers": len(triggers)})

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(self.metrics.registry))
        response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        response.charset = "utf-8"
        return response


def build_app(receiver: Receiver) -> web.Application:
    """The webhook application of ``receiver``: ``POST /webhook`` only (anything else is 404 or 405)."""
    app = web.Application()
    app[METRICS_KEY] = receiver.metrics
    app.router.add_post(WEBHOOK_PATH, receiver.webhook, expect_handler=receiver.expect)
    return app


def build_health_app(receiver: Receiver) -> web.Application:
    """The internal application of ``receiver``: ``/healthz``, ``/readyz``, ``/metrics``, never ``/webhook``."""
    app = web.Application()
    app[METRICS_KEY] = receiver.metrics
    app.router.add_get("/healthz", receiver.healthz)
    app.router.add_get("/readyz", receiver.readyz)
    app.router.add_get("/metrics", receiver.metrics_endpoint)
    return app


# After a refusal the client may still be sending: read and drop its bytes this long (so it sees the
# answer instead of a reset), then close.
LINGER_SECONDS = 1.0
_OVER_CAP_BODY = b'{"error": "as many connections as this receiver holds at once are open; redeliver later"}'
# A whole HTTP answer, written before anything is read: a client over the cap learns why (GitHub shows
# it on the delivery) and when to try again.
OVER_CAP_ANSWER = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                   b"Retry-After: %d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                   % (BUSY_RETRY_AFTER, len(_OVER_CAP_BODY), _OVER_CAP_BODY))


class _OverCap(asyncio.Protocol):
    """A connection beyond the cap: answered 503 at once and closed, nothing of it read or parsed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(OVER_CAP_ANSWER)
        transport.close()


class _Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted out of the cap when the connection ends."""

    def __init__(self, inner: asyncio.Protocol, cap: ConnectionCap) -> None:
        self._inner = inner
        self._cap = cap
        self._open = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._open:
            self._open = False
            self._cap.released()
        self._inner.connection_lost(exc)


class ConnectionCap:
    """The webhook listener's protocol factory: aiohttp's handler for up to ``limit`` connections at once.

    The count is taken when the connection is accepted (before aiohttp reads a byte of it) and given
    back when it closes, however it ends; a connection accepted over the limit gets :class:`_OverCap`.
    aiohttp itself has no such limit (``backlog`` only bounds connections not yet accepted).
    """

    def __init__(self, factory: Callable[[], asyncio.Protocol], limit: int, metrics: ReceiverMetrics) -> None:
        if limit < 1:
            raise ValueError(f"at least one connection must be allowed, not {limit}")
        self._factory = factory
        self.limit = limit
        self.open = 0
        self._metrics = metrics

    def __call__(self) -> asyncio.Protocol:
        if self.open >= self.limit:
            self._metrics.connections_refused.inc()
            return _OverCap()
        self.open += 1
        self._metrics.connections.set(self.open)
        return _Counted(self._factory(), self)

    def released(self) -> None:
        self.open -= 1
        self._metrics.connections.set(self.open)


async def serve(app: web.Application, host: str | None, port: int, stop: asyncio.Event,
                started: asyncio.Event | None = None, *, keepalive_timeout: float = KEEPALIVE_SECONDS,
                health: web.Application | None = None, health_port: int | None = None,
                max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
    """Serve ``app`` on ``host:port`` and ``health`` on ``host:health_port`` until ``stop`` is set.

    ``host=None``: every interface. ``health=None`` serves the webhook listener alone. At most
    ``max_connections`` connections are held on ``port`` at once; the health listener is not capped,
    so the kubelet's probes are answered whatever a flood does to the webhook port.
    """
    if (health is None) != (health_port is None):
        raise ValueError("the health app and the health port come together")
    runner = web.AppRunner(app, access_log=None, handle_signals=False, lingering_time=LINGER_SECONDS,
                           keepalive_timeout=keepalive_timeout, shutdown_timeout=5.0)
    health_runner: web.AppRunner | None = None
    listener: asyncio.Server | None = None
    await runner.setup()
    try:
        assert runner.server is not None
        cap = ConnectionCap(runner.server, max_connections, app[METRICS_KEY])
        # Not a web.TCPSite: the site hands aiohttp's own factory to the loop, where the cap must sit.
        listener = await asyncio.get_running_loop().create_server(cap, host, port, backlog=128)
        if health is not None:
            health_runner = web.AppRunner(health, access_log=None, handle_signals=False, shutdown_timeout=5.0)
            await health_runner.setup()
            await web.TCPSite(health_runner, host, health_port).start()
        emit("receiver_listening", port=port, healthPort=health_port, maxConnections=max_connections)
        if started is not None:
            started.set()
        await stop.wait()
    finally:
        if listener is not None:
            listener.close()  # accept nothing more; the runner then closes what is open
        await runner.cleanup()
        if health_runner is not None:
            await health_runner.cleanup()
        if listener is not None:
            await listener.wait_closed()
