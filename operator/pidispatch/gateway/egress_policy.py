"""Where the proxy may open a connection once a host is allowed (docs/gateway.md#egress).

The allow-list is of names; what a name resolves to is the name's owner's choice, and can change between
two lookups (DNS rebinding). So the gateway resolves the name itself, checks every address it got, and
connects to an address it checked, never to the name: an allowed name that resolves into the cluster,
onto the node's loopback or onto the cloud's metadata address (169.254.169.254) is refused
(``address-not-allowed``), however often it is asked.

Refused unless this policy opens them:

* link-local (``169.254.0.0/16``, ``fe80::/10``): always, the metadata service lives there;
* loopback (``127.0.0.0/8``, ``::1``): only with ``allow_loopback`` (the tests' upstreams are on loopback);
* ``denied_networks`` (the cluster's Pod and Service ranges): always, whatever else opens them;
* anything not globally routable (RFC 1918, ``100.64.0.0/10``, ``fc00::/7``, unspecified, reserved,
  multicast) unless it is in ``allowed_networks`` (an internal registry mirror the chart names).

An IPv6 address that carries an IPv4 one (``::ffff:a.b.c.d``, 6to4 ``2002::/16``, NAT64 ``64:ff9b::/96``)
is judged by the IPv4 address it carries.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from pidispatch.gateway.egress_hosts import Address

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[Address]]]

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class Unresolved(OSError):
    """The name has no address (the message names nothing the job sent)."""


def _carried(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


@dataclass(frozen=True)
class AddressPolicy:
    """Which resolved addresses the proxy connects to; the default opens only globally routable ones."""

    allow_loopback: bool = False
    allowed_networks: tuple[Network, ...] = ()
    denied_networks: tuple[Network, ...] = ()

    @classmethod
    def of(cls, *, allow_loopback: bool = False, allowed: Sequence[str] = (),
           denied: Sequence[str] = ()) -> AddressPolicy:
        """From the chart's CIDR strings (``ValueError`` on one that is not a network)."""
        return cls(allow_loopback, tuple(ipaddress.ip_network(text, strict=False) for text in allowed),
                   tuple(ipaddress.ip_network(text, strict=False) for text in denied))

    def permits(self, address: Address) -> bool:
        inner = _carried(address)
        for candidate in {address, inner}:
            if any(candidate.version == net.version and candidate in net for net in self.denied_networks):
                return False
        if inner.is_link_local or address.is_link_local:
            return False
        if inner.is_loopback or address.is_loopback:
            return self.allow_loopback
        if any(inner.version == net.version and inner in net for net in self.allowed_networks):
            return True
        return inner.is_global and not inner.is_multicast


async def system_resolver(name: str, port: int) -> list[Address]:
    """The addresses of ``name`` from the system's resolver (the Pod's: cluster DNS), in its order."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM,
                                                             proto=socket.IPPROTO_TCP)
    except socket.gaierror:
        raise Unresolved("the name does not resolve") from None
    seen: list[Address] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        address = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
        if address not in seen:
            seen.append(address)
    if not seen:
        raise Unresolved("the name does not resolve")
    return seen


def static_resolver(table: Mapping[str, Sequence[str]], fallback: Resolver | None = system_resolver) -> Resolver:
    """A resolver answering the names of ``table`` (lower-case ASCII) itself and the rest by ``fallback``:
    a split-horizon name the chart pins, or a test's name for a loopback upstream."""
    pinned = {name.lower().rstrip("."): [ipaddress.ip_address(text) for text in texts] for name, texts in table.items()}

    async def resolve(name: str, port: int) -> list[Address]:
        if name in pinned:
            return list(pinned[name])
        if fallback is None:
            raise Unresolved("the name does not resolve")
        return await fallback(name, port)

    return resolve
