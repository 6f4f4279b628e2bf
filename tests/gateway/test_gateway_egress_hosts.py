"""The proxy's allow-list (gateway/egress_hosts.py) and address policy (gateway/egress_policy.py): one
form for every spelling of a name, wildcards on label boundaries, addresses only as themselves, and the
addresses an allowed name may not lead to."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from pidispatch.gateway.egress_hosts import AllowList, BadHost, Host, normalise, split_port
from pidispatch.gateway.egress_policy import AddressPolicy, Unresolved, static_resolver, system_resolver


@pytest.mark.parametrize(("text", "name"), [
    ("Registry.NPMJS.org", "registry.npmjs.org"),
    ("registry.npmjs.org.", "registry.npmjs.org"),
    ("bücher.example", "xn--bcher-kva.example"),
    ("XN--BCHER-KVA.example", "xn--bcher-kva.example"),
    ("ｒｅｇｉｓｔｒｙ.npmjs.org", "registry.npmjs.org"),  # fullwidth letters: UTS #46 maps them
    ("_mirror.example.com", "_mirror.example.com"),
    ("pypi.org", "pypi.org"),
])
def test_names_come_to_one_form(text: str, name: str) -> None:
    assert normalise(text) == Host(name=name)


@pytest.mark.parametrize("text", [
    "", "a..b", "x..", ".x", "..", "-a.example", "a-.example", "a" * 64 + ".example", "a b.example",
    "2130706433", "0x7f.1", "127.1", "example.123", "::1", "[example.org]", "[::1", "a/b.example",
    "evil.example\x00.org", "a.example..",
])
def test_what_is_not_a_name_is_refused(text: str) -> None:
    with pytest.raises(BadHost) as caught:
        normalise(text)
    assert not text or text not in str(caught.value)


def test_addresses_are_read_as_addresses() -> None:
    assert normalise("192.0.2.7") == Host(address=ipaddress.ip_address("192.0.2.7"))
    assert normalise("[2001:DB8::7]") == Host(address=ipaddress.ip_address("2001:db8::7"))
    assert str(normalise("[2001:db8::7]")) == "[2001:db8::7]"


@pytest.mark.parametrize(("text", "expected"), [
    ("example.org:443", ("example.org", 443)), ("example.org", ("example.org", 443)),
    ("[::1]:8443", ("[::1]", 8443)), ("[::1]", ("[::1]", 443)),
])
def test_ports(text: str, expected: tuple[str, int]) -> None:
    assert split_port(text, default=443) == expected


@pytest.mark.parametrize("text", ["example.org:0", "example.org:65536", "example.org:+1", "example.org:١٢",
                                  "example.org:", "[::1]x", "[::1]:", "example.org: 443"])
def test_bad_ports_are_refused(text: str) -> None:
    with pytest.raises(BadHost):
        split_port(text, default=443)


def test_connect_targets_need_a_port() -> None:
    with pytest.raises(BadHost):
        split_port("example.org", default=None)


def allows(entries: list[str], target: str) -> bool:
    host, port = split_port(target, default=None)
    return AllowList(entries).allows(normalise(host), port)


@pytest.mark.parametrize(("target", "allowed"), [
    ("registry.npmjs.org:443", True), ("a.b.npmjs.org:443", True), ("REGISTRY.npmjs.org.:443", True),
    ("npmjs.org:443", False), ("evilnpmjs.org:443", False), ("registry.npmjs.org.evil.example:443", False),
    ("registry.npmjs.org:8443", False),
])
def test_a_wildcard_opens_subdomains_on_a_label_boundary(target: str, allowed: bool) -> None:
    assert allows(["*.npmjs.org"], target) is allowed


def test_ports_named_by_an_entry() -> None:
    assert allows(["mirror.example:8443"], "mirror.example:8443")
    assert not allows(["mirror.example:8443"], "mirror.example:443")
    assert not allows(["mirror.example"], "mirror.example:80")
    assert allows(["*.example.net:8080"], "a.example.net:8080")


def test_an_address_matches_only_itself() -> None:
    assert allows(["192.0.2.7"], "192.0.2.7:443")
    assert allows(["[2001:db8::7]:8443"], "[2001:0db8:0::7]:8443")
    assert not allows(["192.0.2.7"], "192.0.2.8:443")
    assert not allows(["*.example.org"], "192.0.2.7:443")
    assert not allows(["192.0.2.7"], "[::ffff:192.0.2.7]:443")


def test_an_idn_entry_and_its_ascii_form_are_one() -> None:
    assert allows(["bücher.example"], "xn--bcher-kva.example:443")
    assert allows(["*.xn--bcher-kva.example"], "shop.bücher.example:443")


@pytest.mark.parametrize("entry", ["*.com", "*.192.0.2.7", "*.[::1]", "*", "**.example.org", "a.*.example.org",
                                   "example.org:99999", ""])
def test_entries_that_are_none_are_skipped_not_widened(entry: str) -> None:
    listed = AllowList([entry, "pypi.org"])
    assert listed.skipped == [entry]
    assert [str(e.host) for e in listed.entries] == ["pypi.org"]
    assert not listed.allows(normalise("example.org"), 443)


# -- addresses ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("address", "default", "loopback"), [
    ("8.8.8.8", True, True), ("2606:4700:4700::1111", True, True),
    ("127.0.0.1", False, True), ("127.9.9.9", False, True), ("::1", False, True), ("::ffff:127.0.0.1", False, True),
    ("169.254.169.254", False, False), ("fe80::1", False, False), ("::ffff:169.254.169.254", False, False),
    ("64:ff9b::a9fe:a9fe", False, False),  # NAT64 of the metadata address
    ("2002:a9fe:a9fe::1", False, False),  # 6to4 of it
    ("10.0.0.1", False, False), ("172.16.0.1", False, False), ("192.168.1.1", False, False),
    ("100.64.0.1", False, False), ("fc00::1", False, False), ("0.0.0.0", False, False), ("::", False, False),
    ("224.0.0.1", False, False), ("255.255.255.255", False, False), ("240.0.0.1", False, False),
])
def test_which_addresses_a_name_may_lead_to(address: str, default: bool, loopback: bool) -> None:
    parsed = ipaddress.ip_address(address)
    assert AddressPolicy().permits(parsed) is default
    assert AddressPolicy(allow_loopback=True).permits(parsed) is loopback


def test_the_chart_opens_a_private_range_and_closes_the_clusters() -> None:
    policy = AddressPolicy.of(allowed=["10.20.0.0/16", "169.254.0.0/16"], denied=["10.20.30.0/24", "8.8.8.0/24"])
    assert policy.permits(ipaddress.ip_address("10.20.1.1"))
    assert not policy.permits(ipaddress.ip_address("10.20.30.40"))  # the cluster's range beats the opening
    assert not policy.permits(ipaddress.ip_address("::ffff:10.20.30.40"))
    assert not policy.permits(ipaddress.ip_address("8.8.8.8"))
    assert not policy.permits(ipaddress.ip_address("169.254.169.254"))  # link-local: never
    with pytest.raises(ValueError):
        AddressPolicy.of(denied=["not-a-network"])


def test_resolvers() -> None:
    async def run() -> None:
        assert ipaddress.ip_address("127.0.0.1") in await system_resolver("localhost", 443)
        with pytest.raises(Unresolved):
            await system_resolver("nothing.invalid", 443)
        pinned = static_resolver({"Mirror.Test.": ["127.0.0.1"]}, fallback=None)
        assert await pinned("mirror.test", 443) == [ipaddress.ip_address("127.0.0.1")]
        with pytest.raises(Unresolved):
            await pinned("other.test", 443)
    asyncio.run(run())
