"""Which ``CONNECT`` targets the proxy lets a job reach: its allow-list, read one way on both sides
(docs/gateway.md#egress).

An entry is ``name``, ``*.suffix`` or an IP literal (``192.0.2.7``, ``[2001:db8::7]``), each optionally
with ``:port``; without one it allows port 443 only. A requested host and every entry are brought to one
form before they are compared, so no spelling of a name reaches a host its entries do not name:

* lower case, IDNA (UTS #46) to the ASCII form (``bücher.example`` is ``xn--bcher-kva.example``);
* one trailing dot (the root) is dropped: ``registry.npmjs.org.`` is ``registry.npmjs.org``; an empty
  label anywhere else (``a..b``, ``x..``, ``.x``) is not a name;
* ``*.suffix`` matches a name with at least one more label, on a label boundary (``*.npmjs.org`` matches
  ``registry.npmjs.org``, never ``npmjs.org`` nor ``evilnpmjs.org``);
* an IP literal matches only an entry that is that literal address, never a name or a wildcard; a name a
  resolver would read as an address (``2130706433``, ``0x7f.1``, ``127.1``: an all-numeric or hex last
  label) is not a name either, so it matches nothing.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

import idna

DEFAULT_PORT = 443
MAX_NAME = 253
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class BadHost(ValueError):
    """Not a host name or an IP literal the proxy would compare (the message quotes nothing of it)."""


@dataclass(frozen=True)
class Host:
    """A normalised host: ``name`` (A-labels, lower case, no trailing dot) or ``address``, never both."""

    name: str | None = None
    address: Address | None = None

    def __str__(self) -> str:
        if self.address is not None:
            return f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return self.name or ""


def _literal(text: str) -> Address | None:
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        address = ipaddress.ip_address(inner)
    except ValueError:
        if inner is not text:
            raise BadHost("a bracketed host is not an IPv6 address") from None
        return None
    if inner is text and address.version == 6:
        raise BadHost("an IPv6 address must be bracketed")
    return address


def normalise(text: str) -> Host:
    """``text`` as the proxy compares it, or :class:`BadHost`."""
    text = text.strip()
    if not text or len(text) > 2 * MAX_NAME:
        raise BadHost("an empty or overlong host")
    address = _literal(text)
    if address is not None:
        return Host(address=address)
    if text.endswith("."):
        text = text[:-1]
    try:
        name = idna.encode(text, uts46=True, std3_rules=False, transitional=False).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError, ValueError):
        # idna refuses a name with underscores or an empty label alike; plain ASCII gets a second look
        # below so that ``_dmarc``-style labels (legal in DNS, used by some mirrors) still compare.
        if not text.isascii():
            raise BadHost("not an IDNA host name") from None
        name = text.lower()
    labels = name.split(".")
    if len(name) > MAX_NAME or not all(_LABEL.match(label) for label in labels):
        raise BadHost("not a host name")
    if _NUMERIC_LABEL.match(labels[-1]):
        raise BadHost("a name a resolver would read as an address")
    return Host(name=name)


@dataclass(frozen=True)
class Entry:
    """One allow-list entry: an exact host, or (``wildcard``) the subdomains of ``host.name``; and its port."""

    host: Host
    port: int
    wildcard: bool = False

    def matches(self, host: Host, port: int) -> bool:
        if port != self.port:
            return False
        if self.host.address is not None or host.address is not None:
            return self.host.address is not None and self.host.address == host.address
        assert self.host.name is not None and host.name is not None
        if self.wildcard:
            return host.name.endswith("." + self.host.name)
        return host.name == self.host.name


def split_port(text: str, *, default: int | None) -> tuple[str, int]:
    """``host[:port]`` (``[v6][:port]``) as ``(host, port)``; ``default`` when no port is given (``None``:
    a port is required, as ``CONNECT``'s authority form requires one)."""
    text = text.strip()
    host, port = text, None
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise BadHost("an unclosed bracket")
        host, rest = text[:close + 1], text[close + 1:]
        if rest:
            if not rest.startswith(":"):
                raise BadHost("text after a bracketed address")
            port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    if port is None:
        if default is None:
            raise BadHost("no port")
        return host, default
    if not port.isdigit() or not port.isascii() or not 0 < int(port) < 65536:
        raise BadHost("not a port")
    return host, int(port)


def parse_entry(text: str) -> Entry:
    """An allow-list entry (a Trigger's ``egress``, the chart's list); :class:`BadHost` if it is none."""
    host_text, port = split_port(text, default=DEFAULT_PORT)
    wildcard = host_text.startswith("*.")
    host = normalise(host_text[2:] if wildcard else host_text)
    if wildcard and (host.address is not None or "." not in (host.name or "")):
        raise BadHost("a wildcard needs a name of two labels or more after '*.'")
    return Entry(host, port, wildcard)


class AllowList:
    """The entries of one job's claims and the chart's list; an entry that is not one is skipped (the
    operator validates a Trigger's list; a bad one here must not open anything)."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.entries: list[Entry] = []
        self.skipped: list[str] = []
        for text in entries:
            try:
                self.entries.append(parse_entry(text))
            except BadHost:
                self.skipped.append(text)

    def allows(self, host: Host, port: int) -> bool:
        return any(entry.matches(host, port) for entry in self.entries)
