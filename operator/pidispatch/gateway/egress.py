"""The job's HTTPS proxy: ``CONNECT`` to the hosts its capability or the chart allows (docs/gateway.md#egress).

A job reaches anything but the model and the forge only through here, on ``protocol.PROXY_PORT``, as
``HTTPS_PROXY=http://job:<capability>@<gateway>:3128``. One connection is one request:

1. **The connection cap** (``max_connections``, taken at accept): over it, ``503`` unread.
2. **The head** must arrive within ``head_seconds`` and ``max_head_bytes``, else the connection is dropped.
3. **Only ``CONNECT host:port``.** A plain proxy request (``GET http://...``) is ``405``: the proxy carries
   no plain HTTP, whose requests (and any credential in them) anyone on the path could read or change.
4. **The capability** is the ``Proxy-Authorization: Basic`` password (any user: ``auth.from_authorization``).
   None, forged or expired: ``407`` with ``Proxy-Authenticate: Basic`` (RFC 9110 section 15.5.8: the status a
   proxy asks its client for credentials with; ``401`` and ``WWW-Authenticate`` are the origin's, and a
   client reads them as the origin's, not the proxy's).
5. **The host** must be on the claims' ``egress`` or the chart's list (``egress_hosts.py``), else ``403``
   ``host-not-allowed``, recorded in the ledger as ``host-not-allowed:<host>`` (the first
   ``max_hosts_recorded`` distinct hosts of a job; after those, as the bare reason, so a job cannot
   grow its ledger by asking for names).
6. **The job's cap** (``max_per_job`` tunnels and attempts at once): over it, ``429`` ``too-many-tunnels``.
7. **The address**: the gateway resolves the name and connects only to an address its policy permits
   (``egress_policy.py``); none: ``403`` ``address-not-allowed``. Unresolved or unreachable: ``502``.
8. ``200``, then the tunnel (``egress_tunnel.py``) until both ends finish, ``idle_seconds`` pass with
   nothing moving, or the capability expires. Its bytes are counted (metrics, one log event per tunnel).

No refusal repeats anything the job sent but the host name it asked for; the capability is never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from pidispatch.contract import gateway_wire as protocol
from pidispatch.events import emit
from pidispatch.gateway import auth
from pidispatch.gateway.capability import CapabilityError, Claims, verify
from pidispatch.gateway.egress_head import BadHead, answer, read_head
from pidispatch.gateway.egress_hosts import AllowList, BadHost, Host, normalise, split_port
from pidispatch.gateway.egress_metrics import EgressMetrics
from pidispatch.gateway.egress_policy import AddressPolicy, Resolver, Unresolved, system_resolver
from pidispatch.gateway.egress_tunnel import CHUNK, tunnel
from pidispatch.gateway.ledger import Ledger

# The proxy's own refusal reasons, beside protocol's (the refusal header's value and the metrics' label).
REFUSED_ADDRESS = "address-not-allowed"
REFUSED_METHOD = "not-connect"
REFUSED_BAD_REQUEST = "bad-request"
REFUSED_BUSY = "too-many-tunnels"
REFUSED_UNRESOLVED = "upstream-unresolved"
REFUSED_UNREACHABLE = "upstream-unreachable"
DROPPED_HEAD = "head-timeout"  # not answered: the connection is dropped (a metrics label only)

AUTHENTICATE = {"Proxy-Authenticate": 'Basic realm="pi-dispatch gateway"'}


@dataclass(frozen=True)
class EgressLimits:
    """What the proxy holds open and for how long."""

    max_connections: int = 1024  # connections open at once, all jobs; one more is answered 503 unread
    max_per_job: int = 64  # tunnels (and attempts to open one) of one job at once
    head_seconds: float = 10.0  # accept to the end of the CONNECT head
    connect_seconds: float = 10.0  # resolving the name and connecting to the host
    idle_seconds: float = 300.0  # a tunnel with nothing moving either way
    max_head_bytes: int = 16 * 1024
    max_hosts_recorded: int = 32  # distinct refused hosts per job written to the ledger by name

    def __post_init__(self) -> None:
        if min(self.max_connections, self.max_per_job, self.max_head_bytes, self.max_hosts_recorded) < 1 or \
                min(self.head_seconds, self.connect_seconds, self.idle_seconds) <= 0:
            raise ValueError(f"the egress limits must be positive: {self}")


@dataclass
class _Refusal(Exception):
    status: int
    reason: str
    message: str
    extra: dict[str, str] = field(default_factory=dict)


@lru_cache(maxsize=1024)
def _job_list(egress: tuple[str, ...]) -> AllowList:
    return AllowList(egress)


class Proxy:
    """The proxy's state: its settings, the connections it holds, and what it recorded per job."""

    def __init__(self, *, key: bytes, ledger: Ledger, allowed: Sequence[str], policy: AddressPolicy,
                 resolver: Resolver, limits: EgressLimits, metrics: EgressMetrics) -> None:
        self.key = key
        self.ledger = ledger
        self.allowed = AllowList(allowed)
        self.policy = policy
        self.resolver = resolver
        self.limits = limits
        self.metrics = metrics
        self.open = 0
        self.per_job: Counter[str] = Counter()
        self.tasks: set[asyncio.Task[None]] = set()
        self._hosts: dict[str, tuple[int, set[str]]] = {}  # uid -> (exp, hosts recorded by name)

    # -- one connection --------------------------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if self.open >= self.limits.max_connections:
            self.metrics.refusals.labels(REFUSED_BUSY).inc()
            writer.write(answer(503, REFUSED_BUSY, "the gateway's proxy is at its connection cap"))
            writer.close()
            return
        self.open += 1
        if task is not None:
            self.tasks.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            # Only ``EgressServer.close`` cancels this task (asyncio's stream callback would log a
            # cancelled task as an error): end quietly, both ends aborted below and by the tunnel.
            pass
        finally:
            self.open -= 1
            if task is not None:
                self.tasks.discard(task)
            if not writer.transport.is_closing():
                writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(read_head(reader, self.limits.max_head_bytes), self.limits.head_seconds)
        except TimeoutError:
            self.metrics.refusals.labels(DROPPED_HEAD).inc()
            return
        except BadHead as bad:
            await self._refuse(writer, _Refusal(bad.status, REFUSED_BAD_REQUEST, str(bad)))
            return
        except ConnectionError:
            return
        claims: Claims | None = None
        try:
            claims = self._authorise(head.method, head.headers)
            target = self._target(head.target)
            await self._check_host(claims, *target)
            if self.per_job[claims.uid] >= self.limits.max_per_job:
                raise _Refusal(429, REFUSED_BUSY, f"the job has {self.limits.max_per_job} tunnels open")
        except _Refusal as refused:
            await self._refuse(writer, refused, claims)
            return
        self.per_job[claims.uid] += 1
        try:  # the job's slot is held from here, however this ends (a refusal, a reset, the shutdown)
            try:
                upstream = await self._connect(*target)
            except _Refusal as refused:
                await self._refuse(writer, refused, claims)
                return
            await self._tunnel(claims, target, (reader, writer), upstream)
        finally:
            self._release(claims.uid)

    def _authorise(self, method: str, headers: dict[str, str]) -> Claims:
        if method != "CONNECT":
            raise _Refusal(405, REFUSED_METHOD, "this proxy only opens CONNECT tunnels (use https://)",
                           {"Allow": "CONNECT"})
        presented = auth.from_authorization(headers.get("proxy-authorization"))
        if presented is None:
            raise _Refusal(407, protocol.REFUSED_NO_CAPABILITY,
                           "Proxy-Authorization: Basic with the job's capability as the password is required",
                           dict(AUTHENTICATE))
        try:
            return verify(self.key, presented)
        except CapabilityError as exc:  # its message never repeats the value
            raise _Refusal(407, protocol.REFUSED_BAD_CAPABILITY, str(exc), dict(AUTHENTICATE)) from None

    @staticmethod
    def _target(text: str) -> tuple[Host, int]:
        try:
            host_text, port = split_port(text, default=None)
            return normalise(host_text), port
        except BadHost as exc:
            raise _Refusal(400, REFUSED_BAD_REQUEST, f"the CONNECT target is not host:port ({exc})") from None

    async def _check_host(self, claims: Claims, host: Host, port: int) -> None:
        if self.allowed.allows(host, port) or _job_list(claims.egress).allows(host, port):
            return
        named = f"{host}:{port}" if port != 443 else str(host)
        await self._record(claims, self._host_reason(claims, named))
        raise _Refusal(403, protocol.REFUSED_HOST, f"{named} is not on this job's egress list")

    def _host_reason(self, claims: Claims, named: str) -> str:
        """``host-not-allowed:<host>`` for the job's first distinct hosts, then the bare reason."""
        if len(self._hosts) > 4 * self.limits.max_connections:  # forget jobs whose capability has expired
            now = time.time()
            self._hosts = {uid: entry for uid, entry in self._hosts.items() if entry[0] > now}
        _exp, hosts = self._hosts.setdefault(claims.uid, (claims.exp, set()))
        if named in hosts or len(hosts) < self.limits.max_hosts_recorded:
            hosts.add(named)
            return f"{protocol.REFUSED_HOST}:{named}"
        return protocol.REFUSED_HOST

    async def _connect(self, host: Host, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        deadline = time.monotonic() + self.limits.connect_seconds
        if host.address is not None:
            addresses = [host.address]
        else:
            assert host.name is not None
            try:
                addresses = await asyncio.wait_for(self.resolver(host.name, port), self.limits.connect_seconds)
            except (Unresolved, TimeoutError):
                raise _Refusal(502, REFUSED_UNRESOLVED, f"{host} does not resolve") from None
        permitted = [address for address in addresses if self.policy.permits(address)]
        if not permitted:
            raise _Refusal(403, REFUSED_ADDRESS, f"{host} resolves only to addresses the gateway does not connect to")
        for address in permitted:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            with contextlib.suppress(OSError, TimeoutError):
                return await asyncio.wait_for(
                    asyncio.open_connection(str(address), port, limit=CHUNK // 2), left)
        raise _Refusal(502, REFUSED_UNREACHABLE, f"{host}:{port} did not accept a connection")

    async def _tunnel(self, claims: Claims, target: tuple[Host, int],
                      job: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                      upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        writer = job[1]
        try:
            writer.write(answer(200))
            await writer.drain()
        except ConnectionError:
            upstream[1].transport.abort()
            return
        except asyncio.CancelledError:
            upstream[1].transport.abort()
            raise
        self.metrics.tunnels.inc()
        self.metrics.open.inc()
        started = time.monotonic()
        until = started + max(0.0, claims.exp - time.time())
        try:
            moved = await tunnel(job, upstream, idle_seconds=self.limits.idle_seconds, until=until)
        finally:
            self.metrics.open.dec()
        self.metrics.bytes.labels("up").inc(moved.up)
        self.metrics.bytes.labels("down").inc(moved.down)
        emit("gateway_egress_tunnel", uid=claims.uid, host=str(target[0]), port=target[1], up=moved.up,
             down=moved.down, ended=moved.ended, seconds=round(time.monotonic() - started, 3))

    # -- bookkeeping -----------------------------------------------------------------------------------
    def _release(self, uid: str) -> None:
        self.per_job[uid] -= 1
        if self.per_job[uid] <= 0:
            del self.per_job[uid]

    async def _record(self, claims: Claims, reason: str) -> None:
        try:
            await self.ledger.record_refusal(claims, reason)
        except Exception as exc:  # a ledger that cannot write must not keep the refusal from being answered
            emit("gateway_egress_ledger_failed", uid=claims.uid, error=type(exc).__name__)

    async def _refuse(self, writer: asyncio.StreamWriter, refused: _Refusal, claims: Claims | None = None) -> None:
        """Count ``refused``, record it in the job's ledger when it is the job's doing (a host is recorded
        where it is refused), and answer it."""
        self.metrics.refusals.labels(refused.reason).inc()
        if claims is not None and refused.reason in (REFUSED_ADDRESS, REFUSED_BUSY):
            await self._record(claims, refused.reason)
        with contextlib.suppress(ConnectionError, TimeoutError):
            writer.write(answer(refused.status, refused.reason, refused.message, refused.extra))
            await asyncio.wait_for(writer.drain(), self.limits.head_seconds)
            writer.close()


class EgressServer(asyncio.AbstractServer):
    """The proxy's listener; closing it also ends every connection and tunnel it holds."""

    def __init__(self, listener: asyncio.Server, proxy: Proxy) -> None:
        self.listener = listener
        self.proxy = proxy
        self.port = int(listener.sockets[0].getsockname()[1])

    @property
    def sockets(self) -> tuple[object, ...]:
        return tuple(self.listener.sockets)

    def close(self) -> None:
        self.listener.close()
        for task in list(self.proxy.tasks):
            task.cancel()

    async def wait_closed(self) -> None:
        await self.listener.wait_closed()
        await asyncio.gather(*list(self.proxy.tasks), return_exceptions=True)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.listener.get_loop()

    def is_serving(self) -> bool:
        return self.listener.is_serving()

    async def start_serving(self) -> None:
        await self.listener.start_serving()

    async def serve_forever(self) -> None:
        await self.listener.serve_forever()


async def serve(host: str | None, port: int, *, key: bytes, ledger: Ledger, allowed: Sequence[str] = (),
                policy: AddressPolicy | None = None, resolver: Resolver = system_resolver,
                limits: EgressLimits | None = None, metrics: EgressMetrics | None = None) -> EgressServer:
    """Listen for CONNECT on ``host:port`` (``protocol.PROXY_PORT`` in the gateway; 0 for any free port).

    ``allowed``: the chart's hosts, open to every job beside its claims' ``egress``. ``policy``: which
    addresses may be connected to (the default: globally routable ones only; tests set ``allow_loopback``).
    ``resolver``: how names become addresses (the system's; ``egress_policy.static_resolver`` pins some).
    ``metrics``: where the counters go (the gateway's registry; a private one by default).
    """
    limits = limits or EgressLimits()
    proxy = Proxy(key=key, ledger=ledger, allowed=allowed, policy=policy or AddressPolicy(), resolver=resolver,
                  limits=limits, metrics=metrics or EgressMetrics())
    listener = await asyncio.start_server(proxy.handle, host, port, limit=limits.max_head_bytes * 2, backlog=256)
    emit("gateway_egress_listening", port=int(listener.sockets[0].getsockname()[1]),
         maxConnections=limits.max_connections, maxPerJob=limits.max_per_job, idleSeconds=limits.idle_seconds,
         allowed=len(proxy.allowed.entries), skipped=len(proxy.allowed.skipped))
    return EgressServer(listener, proxy)
