"""The receiver's bounds on what an unauthenticated client can hold: body-read permits and idle connections.

Anyone can open a connection and send a body, and a body is held in memory until its signature is
checked; so the receiver reads only a few bodies at once (the others are told 503 at once, unread) and
closes a connection that has no complete request head for a while. The real app on a real loopback
socket, as in ``tests/receiver/test_receiver.py`` (whose cluster, deliveries and raw-socket helpers are reused);
the server runs here with a low permit count or a short keep-alive.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from pidispatch.receiver import delivery as core
from pidispatch.receiver.app import KEEPALIVE_SECONDS
from testkit.fakegithub import Delivery, Webhooks
from testkit.receiver import MemoryCluster, Running, final_answer, raw_exchange, request_head, trigger
from testkit.wait import wait_until

WAIT = 10.0  # seconds: the bound on anything awaited here; never a measure of speed
WRONG_SIGNATURE = "sha256=" + "0" * 64  # well formed, so the body is read before the HMAC refuses it


class Served(Running):
    """``test_receiver.Running`` with one ``@pi`` Trigger and the given limits, and what these tests read."""

    def __init__(self, *, max_body_reads: int | None = None, keepalive_timeout: float = KEEPALIVE_SECONDS) -> None:
        super().__init__(MemoryCluster([trigger("fix", "issue_comment.created", phrase="@pi")]),
                         max_body_reads=max_body_reads, keepalive_timeout=keepalive_timeout)

    def permits_taken(self) -> int:
        return self.receiver.body_reads.taken

    def busy_count(self) -> float:
        """``pidispatch_receiver_deliveries_total{result="busy"}``, as scraped from /metrics."""
        return self.counts()["busy"]


@pytest.fixture
def served() -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(**limits: float) -> Served:
        running = Served(**limits)  # type: ignore[arg-type]
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


def comment(hooks: Webhooks) -> Delivery:
    return hooks.issue_comment(7, "@pi please fix")


@dataclass
class Upload:
    """A connection that sent a delivery's head and part of its body (wrongly signed), then stopped."""

    sock: socket.socket
    rest: bytes


def stalled_upload(served: Served, sent_of_body: int = 100) -> Upload:
    delivery = comment(served.hooks)
    body = delivery.body
    s = socket.create_connection(("127.0.0.1", served.port), timeout=WAIT)
    s.sendall(request_head(delivery, WRONG_SIGNATURE, f"Content-Length: {len(body)}\r\n") + body[:sent_of_body])
    return Upload(s, body[sent_of_body:])


def finish_upload(upload: Upload) -> int:
    """Send the rest of a stalled upload's body; the status of the answer."""
    upload.sock.sendall(upload.rest)
    data = b""
    while (answer := final_answer(data)) is None:
        more = upload.sock.recv(65536)
        assert more, f"the server closed without answering: {data[:200]!r}"
        data += more
    return answer[0]


def busy_upload_answer(served: Served, *, expect_continue: bool = False) -> tuple[int, bytes]:
    """One more wrongly signed upload, whole: the status and head of the answer."""
    delivery = comment(served.hooks)
    body = delivery.body
    extra = f"Content-Length: {len(body)}\r\n" + ("Expect: 100-continue\r\n" if expect_continue else "")
    head = request_head(delivery, WRONG_SIGNATURE, extra)
    # With Expect the body is withheld: a refusal must come before it (the 100 would be skipped over).
    return raw_exchange(served.port, head, () if expect_continue else (body,), timeout=WAIT / 2)


# -- (a) the permits -------------------------------------------------------------------------------------
@pytest.mark.parametrize("expect_continue", [False, True], ids=["body sent at once", "expect 100-continue"])
def test_an_upload_beyond_the_permits_is_503_at_once_and_a_delivery_passes_once_the_reads_end(
        served: Callable[..., Served], expect_continue: bool) -> None:
    running = served(max_body_reads=2)
    stalled = [stalled_upload(running), stalled_upload(running)]
    try:
        wait_until("both stalled uploads hold a permit",
                   lambda: running.permits_taken() == 2, timeout=WAIT, interval=0.01)

        # Answered before the stalled reads' 10 s deadline (raw_exchange waits half of WAIT): refused, not queued.
        status, head = busy_upload_answer(running, expect_continue=expect_continue)
        assert status == 503, head
        assert b"\r\nRetry-After: 5" in head, head
        assert b"\r\nConnection: close" in head, "its unread body must not be taken for the next request"
        assert running.busy_count() == 1, "the 503 is counted as busy"

        assert [finish_upload(s) for s in stalled] == [401, 401], "the held reads go on, then the HMAC refuses"
    finally:
        for upload in stalled:
            upload.sock.close()
    wait_until("the finished reads give their permits back",
               lambda: running.permits_taken() == 0, timeout=WAIT, interval=0.01)

    sent = running.hooks.send(comment(running.hooks))
    assert sent.status == 202, sent.json
    assert list(running.cluster.jobs) == [core.job_name(core.body_digest(sent.delivery.body), "fix")]


# -- (b) a permit outlives no client -----------------------------------------------------------------------
def test_a_permit_comes_back_when_the_client_goes_away_mid_body(served: Callable[..., Served]) -> None:
    running = served(max_body_reads=1)
    gone = stalled_upload(running)
    wait_until("the first upload holds the only permit",
               lambda: running.permits_taken() == 1, timeout=WAIT, interval=0.01)
    gone.sock.close()
    wait_until("the permit of the client that went away is given back",
               lambda: running.permits_taken() == 0, timeout=WAIT, interval=0.01)

    # The permit is whole again: the next upload gets it (its read ends in the HMAC's 401, not a 503)
    # while a third, with no permit left, is refused.
    second = stalled_upload(running)
    try:
        wait_until("the second upload holds the permit",
                   lambda: running.permits_taken() == 1, timeout=WAIT, interval=0.01)
        status, head = busy_upload_answer(running)
        assert status == 503, head
        assert finish_upload(second) == 401
    finally:
        second.sock.close()


# -- (c) idle connections --------------------------------------------------------------------------------
SHORT_KEEPALIVE = 0.5


def closed_without_answer(s: socket.socket, keep_sending: bytes = b"") -> bytes:
    """Wait (up to ``WAIT``) for the server to close ``s``, sending ``keep_sending`` between looks if given;
    what the server sent before closing."""
    data = b""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if keep_sending:
            try:
                s.sendall(keep_sending)
            except (BrokenPipeError, ConnectionResetError):
                return data
        readable, _, _ = select.select([s], [], [], 0.05)
        if readable:
            try:
                more = s.recv(65536)
            except ConnectionResetError:
                return data
            if not more:
                return data
            data += more
    raise AssertionError(f"the server kept the connection open for {WAIT:.0f}s (received {data[:200]!r})")


def test_an_idle_keep_alive_connection_is_closed_after_the_timeout(served: Callable[..., Served]) -> None:
    running = served(keepalive_timeout=SHORT_KEEPALIVE)
    with socket.create_connection(("127.0.0.1", running.port), timeout=WAIT) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        data = b""
        while final_answer(data) is None:
            more = s.recv(65536)
            assert more, data
            data += more
        status, head = final_answer(data)  # type: ignore[misc]
        # The webhook port answers /webhook alone (the probes are on the health port): a 404, kept alive.
        assert status == 404 and b"Connection: close" not in head, "a keep-alive answer"
        body = data.split(b"\r\n\r\n", 1)[1] + closed_without_answer(s)
        assert body == b"404: Not Found", "then the idle connection is closed, with nothing more said"


@pytest.mark.parametrize("trickle", [b"", b"X-Trickle: 1\r\n"], ids=["head left unfinished", "head trickled"])
def test_a_connection_without_a_whole_request_head_is_closed_after_the_timeout(
        served: Callable[..., Served], trickle: bytes) -> None:
    running = served(keepalive_timeout=SHORT_KEEPALIVE)
    with socket.create_connection(("127.0.0.1", running.port), timeout=WAIT) as s:
        s.sendall(b"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        # Closed with nothing said: not a 400 for too many header lines, which trickling would reach
        # (128 lines) were the connection not cut first.
        assert closed_without_answer(s, trickle) == b""
