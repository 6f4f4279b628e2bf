"""The bytes of one CONNECT tunnel, both ways (docs/gateway.md#egress).

Two pumps, one per direction, each reading at most ``CHUNK`` bytes and waiting for the other side's
transport to drain before it reads again: a side that does not read stops the other side's reads, so a
tunnel holds at most its two streams' buffers whatever the peers do (backpressure): per direction, the
reader's (twice its limit, ``CHUNK // 2``, and one receive of up to 256 KiB) and the writer's (a chunk
over its 64 KiB high-water mark), about 0.6 MiB for a host writing to a job that reads nothing
(``bench/gateway_egress.py`` measures it). ``CHUNK`` is the copy's step: 128 KiB gave the loopback
benchmark about twice the throughput of 64 KiB, and 256 KiB little more for twice the stalled memory.

* **Half-close.** A side's end of stream is passed on as a write EOF to the other side (a TLS peer's
  ``close_notify`` travels as bytes anyway; a TCP ``shutdown(SHUT_WR)`` travels as this), and the other
  direction keeps flowing until it ends too.
* **Idle.** One clock for both directions: the tunnel ends ``idle_seconds`` after the last byte moved
  either way. A long one-way download is not idle; a peer that stops reading while the other writes is
  (nothing moves: its writes wait on the drain), and so is a half-closed tunnel whose other half never
  ends.
* **Expiry.** The capability's ``exp`` (``until``) ends the tunnel however busy it is.
* **Errors.** A reset, a refused write, the idle deadline or the expiry closes both ends, aborting them (no
  linger).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

CHUNK = 128 * 1024


@dataclass
class Moved:
    """What went through one tunnel: ``up`` from the job to the host, ``down`` back; why it ended."""

    up: int = 0
    down: int = 0
    ended: str = "closed"  # closed (both directions ended), idle, expired, error (a reset, or shut down)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, moved: Moved, up: bool,
                touched: list[float]) -> None:
    while True:
        data = await reader.read(CHUNK)
        if not data:
            if writer.can_write_eof() and not writer.is_closing():
                writer.write_eof()
            return
        writer.write(data)
        await writer.drain()
        if up:
            moved.up += len(data)
        else:
            moved.down += len(data)
        touched[0] = time.monotonic()


def _abort(writer: asyncio.StreamWriter) -> None:
    transport = writer.transport
    if not transport.is_closing():
        transport.abort()


async def tunnel(job: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 host: tuple[asyncio.StreamReader, asyncio.StreamWriter], *, idle_seconds: float,
                 until: float | None = None) -> Moved:
    """Copy both ways until both directions end, one fails, nothing moves for ``idle_seconds``, or the clock
    (``time.monotonic``) reaches ``until`` (the capability's expiry); both ends are closed when this returns
    (or is cancelled)."""
    moved = Moved()
    touched = [time.monotonic()]
    pumps = {asyncio.ensure_future(_pump(job[0], host[1], moved, True, touched)),
             asyncio.ensure_future(_pump(host[0], job[1], moved, False, touched))}
    pending = set(pumps)
    try:
        while pending:
            now = time.monotonic()
            if until is not None and now >= until:
                moved.ended = "expired"
                break
            wait = touched[0] + idle_seconds - now
            if wait <= 0:
                moved.ended = "idle"
                break
            if until is not None:
                wait = min(wait, until - now)
            done, pending = await asyncio.wait(pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if any(task.exception() is not None for task in done if not task.cancelled()):
                moved.ended = "error"
                break
    except asyncio.CancelledError:  # the proxy is shutting down
        moved.ended = "error"
        raise
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        if moved.ended == "closed":
            for _reader, writer in (job, host):
                writer.close()
        else:
            _abort(job[1])
            _abort(host[1])
    return moved
