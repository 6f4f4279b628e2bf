"""The transfer server's listener: a cap on connections, and a deadline on the TLS handshake and request head.

Anyone who reaches the transfer Service can open a connection; the token is only checked once a request
head has arrived. So what a connection costs before then is bounded here, as the webhook receiver bounds
its own (``receiver/app.py``'s ``ConnectionCap``), and with TLS in the way:

* **A cap** (``max_connections``). The count is taken when the connection is accepted, before a byte of
  it is read, and given back when it closes, however it ends. A connection over the cap is aborted at
  once, on plain TCP: no TLS handshake is started for it (asyncio's TLS protocol allocates a 256 KiB
  read buffer per connection, the bulk of what an idle one costs), nothing of it is read, so a flood
  costs a file descriptor per connection for a moment and never a queue. A job's runner retries a
  connection that was reset (``transfer/client.py``).
* **The head deadline** (``head_seconds``), from the accept: the TLS handshake and the first request's
  head must both be done within it, else the connection is aborted. That is what frees the slots a
  flood of idle connections took. A request's head is known to have arrived when aiohttp hands it to
  the application (:meth:`ConnectionGate.middleware`).
* **Idle keep-alive** (``idle_seconds``) is aiohttp's keep-alive timer: it runs from the end of each
  answer and fires unless a request is being handled, so it bounds an idle connection and a later
  request's trickled head alike.

TLS is started by hand (``loop.start_tls``) on an admitted connection, not by ``create_server(ssl=...)``:
that would start the handshake for every accepted connection, inside the cap or not.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

from aiohttp import web

from pidispatch.events import emit

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Refused(asyncio.Protocol):
    """A connection over the cap: aborted on accept, nothing read and no handshake started."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.abort()


class _Admitted(asyncio.Protocol):
    """One admitted connection: plain TCP until its handshake is done, then aiohttp's protocol behind TLS.

    Between ``connection_made`` and the handshake this object is the TCP transport's protocol; after,
    the TLS transport's application protocol, forwarding everything to aiohttp's handler.
    """

    def __init__(self, gate: ConnectionGate) -> None:
        self._gate = gate
        self._raw: asyncio.Transport | None = None
        self._inner: asyncio.Protocol | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._open = True
        # What TLS decrypted between the handshake's end and aiohttp's protocol taking over (the client's
        # first request may follow its handshake at once): a read or two, handed over first.
        self._early: list[bytes] = []
        self._early_eof = False

    # -- plain TCP, then the handshake ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._raw is not None:
            return  # the TLS transport does not announce itself (start_tls passes call_connection_made=False)
        assert isinstance(transport, asyncio.Transport)
        self._raw = transport
        transport.pause_reading()  # nothing is read until start_tls takes the transport over
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self._gate.head_seconds, self._overdue)
        self._gate.handshakes.add(loop.create_task(self._handshake(transport)))

    async def _handshake(self, raw: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        try:
            tls = await loop.start_tls(raw, self, self._gate.ssl_context, server_side=True,
                                       ssl_handshake_timeout=self._gate.head_seconds)
        except (OSError, ssl.SSLError, TimeoutError, RuntimeError, ConnectionError):
            # A handshake that failed, timed out, or whose connection went away: nothing to answer.
            raw.abort()
            self._closed()
            return
        except asyncio.CancelledError:  # the server is shutting down
            raw.abort()
            self._closed()
            raise
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._gate.handshakes.discard(task)
        if not self._open or tls is None or tls.is_closing():
            # Lost during the handshake without an error (aborted at the deadline, or shut down): asyncio
            # then completes start_tls with a transport that is already closed.
            raw.abort()
            self._closed()
            return
        inner = self._gate.factory()
        self._inner = inner
        self._gate.awaiting_head[inner] = self
        inner.connection_made(tls)
        early, self._early = self._early, []
        for data in early:
            inner.data_received(data)
        if self._early_eof and not inner.eof_received():
            tls.close()

    def _overdue(self) -> None:
        """The head deadline passed without a request head: abort, unread."""
        self._deadline = None
        self._gate.overdue += 1
        self._closed()  # now: a connection lost inside its handshake is never announced to this protocol
        if self._raw is not None:
            self._raw.abort()

    def head_arrived(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    # -- then as aiohttp's protocol ------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)
        else:
            self._early.append(data)

    def eof_received(self) -> bool | None:
        if self._inner is not None:
            return self._inner.eof_received()
        self._early_eof = True
        return True  # keep the transport open until aiohttp's protocol has seen what came before

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed()
        if self._inner is not None:
            inner, self._inner = self._inner, None
            self._gate.awaiting_head.pop(inner, None)
            inner.connection_lost(exc)

    def _closed(self) -> None:
        if self._open:
            self._open = False
            self.head_arrived()  # cancels the deadline's timer
            self._gate.released()


class ConnectionGate:
    """The listener's protocol factory: TLS and aiohttp's handler for up to ``limit`` connections at once."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], ssl_context: ssl.SSLContext, *, limit: int,
                 head_seconds: float, event: str = "transfer_connections_refused") -> None:
        if limit < 1:
            raise ValueError(f"at least one connection must be allowed, not {limit}")
        if head_seconds <= 0:
            raise ValueError(f"the head deadline must be a positive number of seconds, not {head_seconds}")
        self.factory = factory
        self.event = event  # the log event of a flood's refusals (the gateway reuses this listener)
        self.ssl_context = ssl_context
        self.limit = limit
        self.head_seconds = head_seconds
        self.open = 0
        self.refused = 0  # connections aborted over the cap, since the start
        self.overdue = 0  # connections aborted at the head deadline, since the start
        self.awaiting_head: dict[asyncio.Protocol, _Admitted] = {}
        self.handshakes: set[asyncio.Task[None]] = set()
        self.listener: asyncio.Server | None = None

    async def listen(self, host: str | None, port: int) -> int:
        """Listen on ``host:port`` (plain TCP: TLS starts per admitted connection); the bound port."""
        self.listener = await asyncio.get_running_loop().create_server(self, host, port, backlog=128)
        return int(self.listener.sockets[0].getsockname()[1])

    async def shutdown(self, _app: web.Application | None = None) -> None:
        """Accept nothing more and drop the connections still in their handshake (an ``on_shutdown`` hook:
        aiohttp's runner then closes the ones it holds)."""
        if self.listener is not None:
            self.listener.close()
        for task in list(self.handshakes):
            task.cancel()

    def __call__(self) -> asyncio.Protocol:
        if self.open >= self.limit:
            self.refused += 1
            if self.refused == 1 or self.refused % 1000 == 0:  # a flood makes one line, not one per connection
                emit(self.event, refused=self.refused, limit=self.limit)
            return _Refused()
        self.open += 1
        return _Admitted(self)

    def released(self) -> None:
        self.open -= 1

    @web.middleware
    async def middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        """A request's head has arrived: its connection's head deadline no longer applies."""
        admitted = self.awaiting_head.pop(request.protocol, None)
        if admitted is not None:
            admitted.head_arrived()
        return await handler(request)
