"""The proxy's side of HTTP/1.1: one request head in, one answer out (docs/gateway.md#egress).

The proxy speaks just enough HTTP to take a ``CONNECT`` (RFC 9110 section 9.3.6) and to refuse anything else:
after its ``200`` the connection is the tunnel's, and a refusal always closes it (``Connection: close``),
so there is no keep-alive, no body and no chunking to get wrong.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pidispatch.gateway import refusal

MAX_HEADERS = 64

PHRASES = {200: "Connection established", 400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed",
           407: "Proxy Authentication Required", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
           502: "Bad Gateway", 503: "Service Unavailable"}


class BadHead(ValueError):
    """A head the proxy does not read: ``status`` is what it answers (the message quotes nothing of it)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Head:
    method: str
    target: str
    headers: dict[str, str]  # lower-case names; a repeated header is refused rather than merged


async def read_head(reader: asyncio.StreamReader, max_bytes: int) -> Head:
    """One request head from ``reader`` (its limit must be at least ``max_bytes``); what follows it stays
    in the reader, for the tunnel (a client may send its TLS hello before it has read the ``200``)."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise BadHead(431, "the request head is too large") from None
    except asyncio.IncompleteReadError:
        raise BadHead(400, "the connection ended inside the request head") from None
    if len(raw) > max_bytes:
        raise BadHead(431, "the request head is too large")
    try:
        text = raw[:-4].decode("ascii")
    except UnicodeDecodeError:
        raise BadHead(400, "the request head is not ASCII") from None
    line, *fields = text.split("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not parts[0].isalpha():
        raise BadHead(400, "not an HTTP/1.1 request line")
    if len(fields) > MAX_HEADERS:
        raise BadHead(431, "too many header fields")
    headers: dict[str, str] = {}
    for field in fields:
        name, sep, value = field.partition(":")
        name = name.lower()
        if not sep or not name or name != name.strip() or " " in name:
            raise BadHead(400, "a header field without a name")
        if name in headers:
            raise BadHead(400, "a repeated header field")
        headers[name] = value.strip()
    return Head(parts[0], parts[1], headers)


def answer(status: int, reason: str | None = None, message: str = "",
           extra: dict[str, str] | None = None) -> bytes:
    """An answer's bytes: ``200`` bare; a refusal with the protocol's refusal header and JSON body
    (``refusal.body``), ``Connection: close``."""
    lines = [f"HTTP/1.1 {status} {PHRASES.get(status, 'Refused')}"]
    body = b""
    if reason is not None:
        body = refusal.body(reason, message)
        lines += [f"{name}: {value}" for name, value in refusal.headers(reason).items()]
        lines += [f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (extra or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body
