"""The CONNECT proxy's limits on real sockets (gateway/egress.py, egress_tunnel.py): the connection caps, the
head deadline, the idle deadline, half-close, backpressure, the capability's expiry, shutdown, the ledger's
cap on named hosts, and logs that never hold a capability."""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Callable, Iterator

import pytest

from pidispatch.contract.gateway_wire import REFUSAL_HEADER
from pidispatch.gateway.egress import EgressLimits
from testkit.egresskit import KEY, UID, Pki, Rig, basic, capability, connect, make_pki

WAIT = 10.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("egress-limits-pki"))


@pytest.fixture
def rig(pki: Pki) -> Iterator[Rig]:
    rig = Rig(pki)
    try:
        yield rig
    finally:
        rig.close()


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the peer ends ``sock`` (EOF or reset) within ``seconds``; bytes before the end are read."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


def limits(**overrides: float) -> EgressLimits:
    return EgressLimits(**overrides)  # type: ignore[arg-type]


def echo_cap(rig: Rig, **overrides: object) -> str:
    return capability(egress=(f"localhost:{rig.echo_port}", f"localhost:{rig.source_port}"), **overrides)


def tunnel_to(rig: Rig, proxy, port: int, cap: str) -> socket.socket:  # type: ignore[no-untyped-def]
    status, _, _, sock = connect(proxy, f"localhost:{port}", {"Proxy-Authorization": basic(cap)})
    assert status == 200
    return sock


# -- the tunnel ------------------------------------------------------------------------------------------
def test_an_idle_tunnel_is_closed_and_a_busy_one_is_not(rig: Rig) -> None:
    proxy = rig.start_proxy(limits=limits(idle_seconds=1.0))
    busy = tunnel_to(rig, proxy, rig.echo_port, echo_cap(rig))
    idle = tunnel_to(rig, proxy, rig.echo_port, echo_cap(rig))
    idle.sendall(b"once")
    assert idle.recv(4) == b"once"
    started = time.monotonic()
    while time.monotonic() - started < 3.0:  # three idle periods, a byte each way every 0.1 s
        busy.sendall(b"x")
        assert busy.recv(1) == b"x"
        time.sleep(0.1)
    assert closed_within(idle, 0.1)  # it was closed meanwhile
    busy.sendall(b"still")
    assert busy.recv(5) == b"still"
    assert closed_within(busy, 3.0)
    wait_until(lambda: proxy.proxy.open == 0, "the proxy to let go of both")
    assert rig.metrics.value("pidispatch_gateway_egress_open_tunnels") == 0


def test_a_half_close_is_passed_on_and_the_other_direction_keeps_flowing(rig: Rig) -> None:
    proxy = rig.start_proxy()
    sock = tunnel_to(rig, proxy, rig.echo_port, echo_cap(rig))
    sock.sendall(b"abc")
    sock.shutdown(socket.SHUT_WR)  # the echo upstream answers "bye" only once it sees this EOF
    received = b""
    sock.settimeout(WAIT)
    while chunk := sock.recv(65536):
        received += chunk
    assert received == b"abcbye"
    wait_until(lambda: rig.metrics.value("pidispatch_gateway_egress_bytes_total", direction="down") == 6,
               "the tunnel's bytes to be counted")
    assert rig.metrics.value("pidispatch_gateway_egress_bytes_total", direction="up") == 3


def test_a_job_that_does_not_read_stops_the_host_sending(rig: Rig) -> None:
    """Backpressure: the proxy reads from the host only as fast as the job reads, so what it holds is its
    buffers and the sockets', not the host's output."""
    proxy = rig.start_proxy()
    sock = tunnel_to(rig, proxy, rig.source_port, echo_cap(rig))
    seen = [-1]

    def settled() -> bool:  # the source's count unchanged over half a second
        before, seen[0] = seen[0], rig.source.sent
        time.sleep(0.5)
        return before == seen[0] == rig.source.sent

    wait_until(settled, "the source to stop (backpressure)")
    stalled = rig.source.sent
    time.sleep(1.0)
    assert rig.source.sent == stalled  # still stopped
    assert stalled < 64 * 1024 * 1024  # loopback's socket buffers (a few MiB each way), not a flood
    received = 0
    sock.settimeout(WAIT)
    while received < stalled + 1024 * 1024:
        received += len(sock.recv(1 << 20))
    assert rig.source.sent > stalled  # reading again let it go on
    sock.close()


def test_a_reset_by_the_job_closes_the_hosts_end_too(rig: Rig) -> None:
    proxy = rig.start_proxy()
    sock = tunnel_to(rig, proxy, rig.source_port, echo_cap(rig))
    sock.recv(65536)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # an RST
    wait_until(lambda: proxy.proxy.open == 0, "the tunnel to end")
    sent = rig.source.sent
    time.sleep(0.3)
    assert rig.source.sent == sent  # the host's end was closed: nothing more is accepted from it


def test_a_tunnel_ends_when_the_capability_expires(rig: Rig) -> None:
    proxy = rig.start_proxy()
    sock = tunnel_to(rig, proxy, rig.echo_port, echo_cap(rig, exp=int(time.time()) + 3))  # 2 to 3 s from now
    sock.sendall(b"ok")
    assert sock.recv(2) == b"ok"
    assert closed_within(sock, 6.0)


def test_closing_the_server_ends_its_tunnels(rig: Rig) -> None:
    proxy = rig.start_proxy()
    sock = tunnel_to(rig, proxy, rig.echo_port, echo_cap(rig))
    rig.run(lambda: _close(proxy))
    assert closed_within(sock, 2.0)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=1)


async def _close(proxy) -> None:  # type: ignore[no-untyped-def]
    proxy.close()
    await proxy.wait_closed()


# -- the caps and the head -------------------------------------------------------------------------------
def test_the_connection_cap_answers_503_unread_and_frees_a_slot_on_close(rig: Rig) -> None:
    proxy = rig.start_proxy(limits=limits(max_connections=2, head_seconds=30))
    held = [socket.create_connection(("127.0.0.1", proxy.port), timeout=WAIT) for _ in range(2)]
    wait_until(lambda: proxy.proxy.open == 2, "two connections to be admitted")
    status, headers, _, over = connect(proxy, f"localhost:{rig.echo_port}",
                                       {"Proxy-Authorization": basic(echo_cap(rig))})
    over.close()
    assert status == 503 and headers[REFUSAL_HEADER.lower()] == "too-many-tunnels"
    held.pop().close()
    wait_until(lambda: proxy.proxy.open == 1, "the slot to be given back")
    tunnel_to(rig, proxy, rig.echo_port, echo_cap(rig)).close()
    for sock in held:
        sock.close()


def test_the_per_job_cap_refuses_that_job_only_and_is_recorded(rig: Rig) -> None:
    proxy = rig.start_proxy(limits=limits(max_per_job=2))
    mine = [tunnel_to(rig, proxy, rig.echo_port, echo_cap(rig)) for _ in range(2)]
    status, headers, _, sock = connect(proxy, f"localhost:{rig.echo_port}",
                                       {"Proxy-Authorization": basic(echo_cap(rig))})
    sock.close()
    assert status == 429 and headers[REFUSAL_HEADER.lower()] == "too-many-tunnels"
    assert rig.refusals() == {"too-many-tunnels": 1}
    other = tunnel_to(rig, proxy, rig.echo_port, echo_cap(rig, uid="another-job"))
    mine.pop().close()
    wait_until(lambda: proxy.proxy.per_job[UID] == 1, "the job's slot to be given back")
    mine.append(tunnel_to(rig, proxy, rig.echo_port, echo_cap(rig)))
    for s in [*mine, other]:
        s.close()


def test_a_refused_connect_gives_the_jobs_slot_back(rig: Rig) -> None:
    proxy = rig.start_proxy(limits=limits(max_per_job=1))
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    cap = capability(egress=(f"localhost:{port}", f"localhost:{rig.echo_port}"))
    for _ in range(3):
        status, _, _, sock = connect(proxy, f"localhost:{port}", {"Proxy-Authorization": basic(cap)})
        sock.close()
        assert status == 502
    wait_until(lambda: proxy.proxy.per_job[UID] == 0, "the slot to be given back")
    tunnel_to(rig, proxy, rig.echo_port, cap).close()


def test_a_head_that_does_not_arrive_in_time_is_dropped(rig: Rig) -> None:
    proxy = rig.start_proxy(limits=limits(head_seconds=0.3))
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=WAIT)
    sock.sendall(b"CONNECT localhost:443 HTTP/1.1\r\nHost: loc")  # and never the rest
    started = time.monotonic()
    assert closed_within(sock, 3.0)
    assert time.monotonic() - started < 2.0
    assert rig.metrics.value("pidispatch_gateway_egress_refusals_total", reason="head-timeout") == 1
    wait_until(lambda: proxy.proxy.open == 0, "the slot to be given back")


@pytest.mark.parametrize("head", [b"CONNECT localhost:443 HTTP/1.1\r\nX: " + b"a" * 40_000 + b"\r\n\r\n",
                                  b"CONNECT localhost:443 HTTP/1.1\r\n" + b"X-A: b\r\n" * 100 + b"\r\n",
                                  b"CONNECT localhost HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x00\x05hello\r\n\r\n"])
def test_a_head_out_of_shape_is_refused(rig: Rig, head: bytes) -> None:
    proxy = rig.start_proxy()
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=WAIT)
    sock.sendall(head)
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    sock.close()
    status = int(answer.split(b" ", 2)[1])
    assert status in (400, 407, 431), answer[:200]
    if status != 407:
        assert b"bad-request" in answer


# -- the ledger and the logs -----------------------------------------------------------------------------
def test_the_ledger_names_a_jobs_first_refused_hosts_only(rig: Rig) -> None:
    proxy = rig.start_proxy(limits=limits(max_hosts_recorded=3))
    cap = capability(egress=())
    for name in ["a.example", "b.example", "c.example", "d.example", "e.example", "a.example"]:
        status, _, _, sock = connect(proxy, f"{name}:443", {"Proxy-Authorization": basic(cap)})
        sock.close()
        assert status == 403
    assert rig.refusals() == {"host-not-allowed:a.example": 2, "host-not-allowed:b.example": 1,
                              "host-not-allowed:c.example": 1, "host-not-allowed": 2}


def test_the_logs_of_a_run_hold_no_capability_and_no_key(rig: Rig, pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    proxy = rig.start_proxy()
    cap = echo_cap(rig)
    sock = tunnel_to(rig, proxy, rig.echo_port, cap)
    sock.sendall(b"hi")
    assert sock.recv(2) == b"hi"
    sock.close()
    forged = cap[:-6] + "AAAAAA"
    for presented, target in ((cap, "example.org:443"), (forged, f"localhost:{rig.echo_port}")):
        _, _, body, refused = connect(proxy, target, {"Proxy-Authorization": basic(presented)})
        refused.close()
        assert presented not in body.decode()
    wait_until(lambda: any(getattr(r, "fields", {}).get("event") == "gateway_egress_tunnel" for r in caplog.records),
               "the tunnel's event")
    text = "\n".join(record.getMessage() for record in caplog.records)
    tunnel = next(r.fields for r in caplog.records if getattr(r, "fields", {}).get("event") == "gateway_egress_tunnel")
    assert tunnel["up"] == 2 and tunnel["down"] >= 2 and tunnel["uid"] == UID  # "bye" may follow
    for secret in (cap, forged, basic(cap).split(" ")[1], cap.split(".")[2], KEY.decode()):
        assert secret not in text
