"""The gateway's CONNECT proxy (gateway/egress.py) with real clients: curl, Python's urllib by
``HTTPS_PROXY``, npm by its ``https-proxy``, through to a real TLS upstream on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pidispatch.contract.gateway_wire import REFUSAL_HEADER
from pidispatch.gateway.egress import EgressServer
from testkit.egresskit import PAGE, UID, Pki, Rig, basic, capability, connect, echo_upstream, make_pki
from testkit.wait import wait_until

WAIT = 10.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("egress-pki"))


@pytest.fixture
def rig(pki: Pki) -> Iterator[Rig]:
    rig = Rig(pki)
    try:
        yield rig
    finally:
        rig.close()


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(extra)
    return env


def curl(proxy: EgressServer, url: str, pki: Pki, cap: str | None, *, user: str = "job") -> subprocess.CompletedProcess:
    creds = f"{user}:{cap}@" if cap is not None else ""
    return subprocess.run(["curl", "-sS", "--max-time", "10", "--proxy", f"http://{creds}127.0.0.1:{proxy.port}",
                           "--cacert", str(pki.ca), "-w", "\n%{http_connect}", url],
                          capture_output=True, text=True, timeout=WAIT * 2, env=clean_env())


# -- real clients through to a real TLS upstream -----------------------------------------------------------
def test_curl_reaches_an_allowed_host_by_name_and_the_bytes_are_counted(rig: Rig, pki: Pki) -> None:
    proxy = rig.start_proxy()
    cap = capability(egress=(f"localhost:{rig.https_port}",))
    result = curl(proxy, f"https://localhost:{rig.https_port}/", pki, cap)
    assert result.returncode == 0, result.stderr
    assert result.stdout == PAGE.decode() + "\n200"
    assert rig.metrics.value("pidispatch_gateway_egress_tunnels_total") == 1
    # A tunnel's bytes are counted when it ends, which the proxy sees just after curl has exited.
    wait_until("the tunnel's end counted", lambda: rig.metrics.value(
        "pidispatch_gateway_egress_bytes_total", direction="down") > 0, timeout=10)
    up = rig.metrics.value("pidispatch_gateway_egress_bytes_total", direction="up")
    down = rig.metrics.value("pidispatch_gateway_egress_bytes_total", direction="down")
    assert up > 200 and down > len(PAGE)  # a TLS handshake and a request each way, the page in the reply


def test_the_charts_list_opens_a_host_to_every_job(rig: Rig, pki: Pki) -> None:
    proxy = rig.start_proxy(allowed=[f"localhost:{rig.https_port}"])
    result = curl(proxy, f"https://localhost:{rig.https_port}/", pki, capability(egress=()))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(PAGE.decode())


def test_a_wildcard_entry_opens_subdomains_only(rig: Rig, pki: Pki) -> None:
    proxy = rig.start_proxy()
    cap = capability(egress=(f"*.pkg.test:{rig.https_port}",))
    for name in ("mirror.pkg.test", "deep.mirror.pkg.test", "MIRROR.Pkg.Test"):
        result = curl(proxy, f"https://{name}:{rig.https_port}/", pki, cap)
        assert result.returncode == 0, (name, result.stderr)
        assert result.stdout.startswith(PAGE.decode())
    refused = curl(proxy, f"https://pkg.test:{rig.https_port}/", pki, cap)
    assert refused.returncode != 0 and refused.stdout.endswith("403")
    assert rig.refusals() == {f"host-not-allowed:pkg.test:{rig.https_port}": 1}


def test_urllib_by_https_proxy(rig: Rig, pki: Pki) -> None:
    proxy = rig.start_proxy()
    cap = capability(egress=(f"localhost:{rig.https_port}",))
    script = ("import ssl, sys, urllib.request; "
              f"ctx = ssl.create_default_context(cafile={str(pki.ca)!r}); "
              "opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx)); "
              f"sys.stdout.write(opener.open('https://localhost:{rig.https_port}/', timeout=10).read().decode())")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT * 2,
                            env=clean_env(HTTPS_PROXY=f"http://job:{cap}@127.0.0.1:{proxy.port}"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == PAGE.decode()


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_npm_by_its_https_proxy_setting(rig: Rig, pki: Pki, tmp_path: Path) -> None:
    proxy = rig.start_proxy()
    cap = capability(egress=(f"localhost:{rig.https_port}",))
    npmrc = tmp_path / "npmrc"
    npmrc.write_text(f"registry=https://localhost:{rig.https_port}/\n"
                     f"https-proxy=http://job:{cap}@127.0.0.1:{proxy.port}\ncafile={pki.ca}\n")
    env = clean_env(HOME=str(tmp_path), npm_config_userconfig=str(npmrc), npm_config_cache=str(tmp_path / "cache"),
                    npm_config_update_notifier="false", npm_config_fetch_retries="0")
    result = subprocess.run(["npm", "ping"], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert rig.metrics.value("pidispatch_gateway_egress_tunnels_total") >= 1
    cap_other = capability(egress=())
    npmrc.write_text(npmrc.read_text().replace(cap, cap_other))
    refused = subprocess.run(["npm", "ping"], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert refused.returncode != 0
    assert rig.refusals().get(f"host-not-allowed:localhost:{rig.https_port}", 0) >= 1


# -- who may use it --------------------------------------------------------------------------------------
def test_an_unlisted_host_is_refused_counted_and_recorded(rig: Rig, pki: Pki) -> None:
    proxy = rig.start_proxy()
    cap = capability(egress=("registry.npmjs.org",))
    result = curl(proxy, f"https://localhost:{rig.https_port}/", pki, cap)
    assert result.returncode != 0 and result.stdout.endswith("403")
    status, headers, body, sock = connect(proxy, "example.org:443", {"Proxy-Authorization": basic(cap)})
    sock.close()
    assert status == 403 and headers[REFUSAL_HEADER.lower()] == "host-not-allowed"
    assert json.loads(body)["error"]["reason"] == "host-not-allowed"
    assert rig.refusals() == {f"host-not-allowed:localhost:{rig.https_port}": 1, "host-not-allowed:example.org": 1}
    assert rig.metrics.value("pidispatch_gateway_egress_refusals_total", reason="host-not-allowed") == 2
    assert rig.metrics.value("pidispatch_gateway_egress_tunnels_total") == 0


def test_a_named_host_allows_443_only_unless_its_entry_names_the_port(rig: Rig) -> None:
    proxy = rig.start_proxy()
    cap = capability(egress=("localhost",))
    status, headers, _, sock = connect(proxy, f"localhost:{rig.https_port}", {"Proxy-Authorization": basic(cap)})
    sock.close()
    assert status == 403 and headers[REFUSAL_HEADER.lower()] == "host-not-allowed"


@pytest.mark.parametrize("target", ["localhost.:{port}", "LOCALHOST:{port}", "127.0.0.1:{port}"])
def test_spellings_of_a_name_compare_as_the_name_and_an_address_only_as_itself(rig: Rig, target: str) -> None:
    proxy = rig.start_proxy()
    cap = capability(egress=(f"localhost:{rig.https_port}",))
    status, headers, _, sock = connect(proxy, target.format(port=rig.https_port), {"Proxy-Authorization": basic(cap)})
    sock.close()
    if target.startswith("127."):
        assert status == 403 and headers[REFUSAL_HEADER.lower()] == "host-not-allowed"
    else:
        assert status == 200


def test_an_address_literal_listed_literally_is_allowed(rig: Rig, pki: Pki) -> None:
    proxy = rig.start_proxy()
    cap = capability(egress=(f"127.0.0.1:{rig.https_port}",))
    result = curl(proxy, f"https://127.0.0.1:{rig.https_port}/", pki, cap)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("case", ["none", "forged", "expired", "bearer-garbage"])
def test_no_forged_or_expired_capability_is_asked_for_credentials(rig: Rig, pki: Pki, case: str) -> None:
    proxy = rig.start_proxy()
    good = capability(egress=(f"localhost:{rig.https_port}",))
    presented = {"none": None, "forged": good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB"),
                 "expired": capability(egress=(f"localhost:{rig.https_port}",), exp=1_000),
                 "bearer-garbage": None}[case]
    headers = {} if presented is None else {"Proxy-Authorization": basic(presented)}
    if case == "bearer-garbage":
        headers = {"Proxy-Authorization": "Bearer nonsense"}
    status, answer, body, sock = connect(proxy, f"localhost:{rig.https_port}", headers)
    sock.close()
    assert status == 407
    assert answer["proxy-authenticate"].startswith("Basic ")
    assert answer[REFUSAL_HEADER.lower()] in ("no-capability", "bad-capability")
    assert presented is None or presented not in body.decode()
    if presented is not None:
        result = curl(proxy, f"https://localhost:{rig.https_port}/", pki, presented)
        assert result.returncode != 0 and result.stdout.endswith("407")
    assert rig.metrics.value("pidispatch_gateway_egress_tunnels_total") == 0
    assert rig.ledger.figures == {}


def test_a_plain_proxy_request_is_refused_405(rig: Rig) -> None:
    proxy = rig.start_proxy()
    cap = capability(egress=(f"localhost:{rig.echo_port}",))
    status, headers, body, sock = connect(proxy, f"http://localhost:{rig.echo_port}/", method="GET",
                                          headers={"Proxy-Authorization": basic(cap)})
    sock.close()
    assert status == 405 and headers["allow"] == "CONNECT"
    assert headers[REFUSAL_HEADER.lower()] == "not-connect"
    assert b"CONNECT" in body


# -- where it connects -----------------------------------------------------------------------------------
def test_an_allowed_name_resolving_to_loopback_is_refused_without_the_option(rig: Rig) -> None:
    """DNS rebinding: the name is allowed, the address it resolves to is not (the system resolver's
    ``localhost``, and a pinned name standing for a public name re-pointed at 127.0.0.1)."""
    proxy = rig.start_proxy(allow_loopback=False)
    cap = capability(egress=(f"localhost:{rig.https_port}", f"rebind.test:{rig.https_port}", "169.254.169.254"))
    for target in (f"localhost:{rig.https_port}", f"rebind.test:{rig.https_port}", "169.254.169.254:443"):
        status, headers, _, sock = connect(proxy, target, {"Proxy-Authorization": basic(cap)})
        sock.close()
        assert (status, headers[REFUSAL_HEADER.lower()]) == (403, "address-not-allowed"), target
    assert rig.refusals() == {"address-not-allowed": 3}
    assert rig.metrics.value("pidispatch_gateway_egress_refusals_total", reason="address-not-allowed") == 3


def test_an_unresolvable_name_and_a_closed_port_are_502(rig: Rig) -> None:
    proxy = rig.start_proxy()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    cap = capability(egress=("nothing.invalid", f"localhost:{port}"))
    cases = (("nothing.invalid:443", "upstream-unresolved"), (f"localhost:{port}", "upstream-unreachable"))
    for target, reason in cases:
        status, headers, _, sock = connect(proxy, target, {"Proxy-Authorization": basic(cap)})
        sock.close()
        assert (status, headers[REFUSAL_HEADER.lower()]) == (502, reason)


def test_claims_of_another_job_count_under_that_job(rig: Rig) -> None:
    proxy = rig.start_proxy()
    other = capability(uid="other-uid", egress=())
    status, _, _, sock = connect(proxy, "example.org:443", {"Proxy-Authorization": basic(other, user="x")})
    sock.close()
    assert status == 403
    assert rig.refusals("other-uid") == {"host-not-allowed:example.org": 1} and rig.refusals(UID) == {}


def test_an_ipv6_literal_listed_literally_reaches_its_host_and_loopback_only_by_the_option(rig: Rig) -> None:
    server = rig.run(lambda: asyncio.start_server(echo_upstream, "::1", 0))
    rig.servers.append(server)
    port = server.sockets[0].getsockname()[1]
    cap = capability(egress=(f"[::1]:{port}", f"[::ffff:127.0.0.1]:{rig.echo_port}"))
    status, _, _, sock = connect(rig.start_proxy(), f"[0:0::1]:{port}", {"Proxy-Authorization": basic(cap)})
    sock.sendall(b"v6")
    assert status == 200 and sock.recv(2) == b"v6"
    sock.close()
    closed = rig.start_proxy(allow_loopback=False)
    for target in (f"[::1]:{port}", f"[::ffff:127.0.0.1]:{rig.echo_port}"):
        status, headers, _, sock = connect(closed, target, {"Proxy-Authorization": basic(cap)})
        sock.close()
        assert (status, headers[REFUSAL_HEADER.lower()]) == (403, "address-not-allowed"), target
