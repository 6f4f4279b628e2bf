"""The receiver's public surface: what the webhook port answers, and how many connections it holds.

The webhook port is the one put on the internet; it answers ``POST /webhook`` and nothing else, while
``/healthz``, ``/readyz`` and ``/metrics`` answer on a separate health port (the chart's Service exposes
the webhook port alone). The webhook port holds at most ``PI_DISPATCH_RECEIVER_MAX_CONNECTIONS``
connections at once: one more is answered 503 at once and closed, unread, while the ones already open
are still served, and the count comes back as they close. The real app on real loopback sockets, as in
``tests/receiver/test_receiver.py`` (whose cluster, Triggers and raw-socket helpers are reused).
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import requests

from pidispatch.receiver import app as receiver_app
from pidispatch.receiver.app import Receiver, build_app, serve
from pidispatch.receiver.settings import DEFAULT_MAX_BODY, ReceiverSettings
from pidispatch.receiver.signature import WebhookSecret, sign
from pidispatch.settings import ConfigError
from testkit.fakegithub import Webhooks
from testkit.receiver import SECRET, MemoryCluster, final_answer, free_port, raw_exchange, request_head, trigger
from testkit.wait import wait_until

WAIT = 10.0  # seconds: the bound on anything awaited here; never a measure of speed
PROBES = ["/healthz", "/readyz", "/metrics"]


class Surface:
    """The receiver served by an event loop in a thread, with ``serve_kw`` given to :func:`serve` as is."""

    def __init__(self, *, health: bool = True, **serve_kw: Any) -> None:
        self.cluster = MemoryCluster([trigger("fix", "issue_comment.created", phrase="@pi")])
        self.receiver = Receiver(self.cluster, WebhookSecret(SECRET), max_body=DEFAULT_MAX_BODY)
        self.port = free_port()
        self.health_port = free_port()
        while self.health_port == self.port:
            self.health_port = free_port()
        if health:
            serve_kw.update(health=receiver_app.build_health_app(self.receiver), health_port=self.health_port)
        self.url = f"http://127.0.0.1:{self.port}"
        self.health_url = f"http://127.0.0.1:{self.health_port}"
        self.hooks = Webhooks(f"{self.url}/webhook", SECRET)
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._error: BaseException | None = None
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)

            async def main() -> None:
                ready = asyncio.Event()
                flag = asyncio.ensure_future(ready.wait())
                flag.add_done_callback(lambda _: started.set())
                try:
                    await serve(build_app(self.receiver), "127.0.0.1", self.port, self._stop, ready, **serve_kw)
                finally:
                    flag.cancel()

            try:
                self._loop.run_until_complete(main())
            except BaseException as exc:  # noqa: BLE001 - reported to the test
                self._error = exc
                started.set()

        self._thread = threading.Thread(target=run, daemon=True, name="receiver-surface")
        self._thread.start()
        if not started.wait(WAIT) or self._error:
            raise RuntimeError(f"the receiver did not start: {self._error!r}")

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(WAIT)

    def metric(self, name: str) -> float:
        text = requests.get(f"{self.health_url}/metrics", timeout=5).text
        found = re.search(rf"^{name} (\S+)$", text, re.M)
        assert found, f"{name} not in /metrics"
        return float(found.group(1))


@pytest.fixture
def surface() -> Iterator[Callable[..., Surface]]:
    started: list[Surface] = []

    def start(**kw: Any) -> Surface:
        running = Surface(**kw)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


def get(url: str) -> int:
    with requests.Session() as s:
        s.trust_env = False
        return s.get(url, timeout=5).status_code


# -- two listeners ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", PROBES)
def test_the_webhook_port_does_not_answer_probes_or_metrics(surface: Callable[..., Surface], path: str) -> None:
    # Served as the old receiver was (one app, one port): this is the surface the chart put on the internet.
    running = surface(health=False)
    assert get(f"{running.url}{path}") == 404


def test_probes_and_metrics_answer_on_the_health_port_and_the_webhook_does_not(
        surface: Callable[..., Surface]) -> None:
    running = surface()
    assert [get(f"{running.health_url}{path}") for path in PROBES] == [200, 200, 200]
    assert [get(f"{running.url}{path}") for path in PROBES] == [404, 404, 404]
    sent = running.hooks.send(running.hooks.issue_comment(7, "@pi fix"))
    assert sent.status == 202 and len(running.cluster.jobs) == 1, "the webhook port still takes deliveries"
    stray = requests.post(f"{running.health_url}/webhook", data=b"{}", timeout=5)
    assert stray.status_code == 404, "no delivery is taken on the health port"
    assert running.metric('pidispatch_receiver_deliveries_total{result="created"}') == 1
    assert running.metric("pidispatch_receiver_jobs_created_total") == 1


# -- the connection cap -------------------------------------------------------------------------------------
def open_idle(port: int, count: int, stack: ExitStack) -> list[socket.socket]:
    """``count`` connections that have sent nothing (connected in order: the server accepts them in order)."""
    return [stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=WAIT)) for _ in range(count)]


def refusal(s: socket.socket) -> bytes:
    """What the server says, unasked, before it closes ``s``; fails if it keeps ``s`` open without a word."""
    data = b""
    s.settimeout(WAIT)
    try:
        while more := s.recv(65536):
            data += more
    except TimeoutError:
        raise AssertionError(f"connection held open for {WAIT:.0f}s, not refused (received {data[:200]!r})") from None
    except ConnectionResetError:
        pass
    return data


def served_unsigned(s: socket.socket) -> int:
    """The status of an unsigned delivery sent on the open connection ``s`` (401 from the handler, when served)."""
    s.sendall(b"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
    data = b""
    while (answer := final_answer(data)) is None:
        more = s.recv(65536)
        assert more, f"closed without an answer: {data[:200]!r}"
        data += more
    return answer[0]


def test_the_default_cap_refuses_one_more_connection_and_serves_those_it_holds(
        surface: Callable[..., Surface]) -> None:
    """The default, with ``serve`` called as before: the cap exists without being asked for."""
    cap = 256  # the documented default (test_surface_settings_defaults_and_values)
    running = surface(health=False)
    with ExitStack() as stack:
        held = open_idle(running.port, cap, stack)
        extra = open_idle(running.port, 4, stack)
        for s in extra:
            answer = refusal(s)
            assert answer.startswith(b"HTTP/1.1 503 ") and b"Retry-After: " in answer, answer[:200]
            assert b"connections" in answer.split(b"\r\n\r\n", 1)[1]
        assert [served_unsigned(s) for s in held] == [401] * cap, "every connection within the cap is served"
    assert running.cluster.jobs == {}


def test_over_the_cap_nothing_is_read_and_the_count_recovers(surface: Callable[..., Surface]) -> None:
    cap = 3
    running = surface(max_connections=cap)
    delivery = running.hooks.issue_comment(7, "@pi fix")
    signed = request_head(delivery, sign(SECRET, delivery.body), f"Content-Length: {len(delivery.body)}\r\n")
    with ExitStack() as stack:
        held = open_idle(running.port, cap, stack)
        wait_until(f"{cap} connections counted",
                   lambda: running.metric("pidispatch_receiver_connections") == cap, timeout=WAIT, interval=0.01)
        for _ in range(5):
            # A signed delivery over the cap: told 503 (or reset, if the close beats the send), never read.
            with socket.create_connection(("127.0.0.1", running.port), timeout=WAIT) as s:
                try:
                    s.sendall(signed + delivery.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                answer = refusal(s)
                assert answer == b"" or answer.startswith(b"HTTP/1.1 503 "), answer[:200]
        assert running.cluster.jobs == {}, "a delivery over the cap creates nothing"
        assert running.metric("pidispatch_receiver_connections_refused_total") == 5
        assert get(f"{running.health_url}/healthz") == 200, "the probes are not behind the webhook port's cap"
        # The connections held are still served, a delivery on one of them included.
        held[0].sendall(signed + delivery.body)
        data = b""
        while final_answer(data) is None:
            data += held[0].recv(65536)
        assert final_answer(data)[0] == 202 and len(running.cluster.jobs) == 1  # type: ignore[index]
        assert [served_unsigned(s) for s in held[1:]] == [401] * (cap - 1)
    wait_until("every connection counted out",
               lambda: running.metric("pidispatch_receiver_connections") == 0, timeout=WAIT, interval=0.01)
    with ExitStack() as stack:
        # Exactly the cap again (no leak, no drift): the cap-th is served, the one after it refused.
        again = open_idle(running.port, cap + 1, stack)
        assert refusal(again[-1]).startswith(b"HTTP/1.1 503 ")
        assert [served_unsigned(s) for s in again[:-1]] == [401] * cap


def test_a_connection_dropped_mid_body_is_counted_out(surface: Callable[..., Surface]) -> None:
    running = surface(max_connections=2)
    delivery = running.hooks.issue_comment(7, "@pi fix")
    head = request_head(delivery, sign(SECRET, delivery.body), f"Content-Length: {len(delivery.body)}\r\n")
    for _ in range(4):
        with socket.create_connection(("127.0.0.1", running.port), timeout=WAIT) as s:
            s.sendall(head + delivery.body[:10])
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # reset
    wait_until("the reset connections counted out",
               lambda: running.metric("pidispatch_receiver_connections") == 0, timeout=WAIT, interval=0.01)
    status, _ = raw_exchange(running.port, head, (delivery.body,))
    assert status == 202 and len(running.cluster.jobs) == 1


# -- settings -----------------------------------------------------------------------------------------------
BASE = {"PI_DISPATCH_NAMESPACE": "pi", "GITHUB_WEBHOOK_SECRET": "x"}


def test_surface_settings_defaults_and_values() -> None:
    s = ReceiverSettings.from_env(BASE)
    assert (s.port, s.health_port, s.max_connections) == (8000, 8001, 256)
    s = ReceiverSettings.from_env({**BASE, "PI_DISPATCH_RECEIVER_HEALTH_PORT": "9090",
                                   "PI_DISPATCH_RECEIVER_MAX_CONNECTIONS": "16"})
    assert (s.health_port, s.max_connections) == (9090, 16)


SURFACE_REFUSED = [
    ("health port equal to the webhook port", {"PI_DISPATCH_RECEIVER_PORT": "9000",
                                               "PI_DISPATCH_RECEIVER_HEALTH_PORT": "9000"}, "HEALTH_PORT"),
    ("health port equal to the default webhook port", {"PI_DISPATCH_RECEIVER_HEALTH_PORT": "8000"}, "HEALTH_PORT"),
    ("health port zero", {"PI_DISPATCH_RECEIVER_HEALTH_PORT": "0"}, "HEALTH_PORT"),
    ("health port a name", {"PI_DISPATCH_RECEIVER_HEALTH_PORT": "health"}, "HEALTH_PORT"),
    ("no connections", {"PI_DISPATCH_RECEIVER_MAX_CONNECTIONS": "0"}, "MAX_CONNECTIONS"),
    ("connections with a sign", {"PI_DISPATCH_RECEIVER_MAX_CONNECTIONS": "+5"}, "MAX_CONNECTIONS"),
    ("connections beyond the bound", {"PI_DISPATCH_RECEIVER_MAX_CONNECTIONS": "16385"}, "MAX_CONNECTIONS"),
]


@pytest.mark.parametrize(("env", "named"), [r[1:] for r in SURFACE_REFUSED], ids=[r[0] for r in SURFACE_REFUSED])
def test_surface_settings_refuse_unusable_values(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as err:
        ReceiverSettings.from_env({**BASE, **env})
    assert f"PI_DISPATCH_RECEIVER_{named}" in str(err.value)


# -- `pidispatch receiver check`, what `helm test` runs against the receiver's Service ----------------------------

def test_the_check_passes_against_the_real_receiver_and_nothing_is_created(surface: Callable[..., Surface],
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from pidispatch.cli import main as cli

    running = surface()
    assert cli(["receiver", "check", f"{running.url}/webhook"]) == 0
    assert "refused an unsigned delivery (401)" in capsys.readouterr().out
    assert running.cluster.jobs == {} and running.cluster.lists == 0, "refused before the body: nothing read or made"


class _AnswersEverything(threading.Thread):
    """A web server that answers every POST with ``status``: what a misrouted path or a receiver
    without its secret would look like from the check's side."""

    def __init__(self, status: int) -> None:
        import http.server

        answer = status

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(answer)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        super().__init__(target=self.server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhook"


@pytest.mark.parametrize(("status", "said"), [(200, "ACCEPTED an unsigned delivery (200)"),
                                              (202, "ACCEPTED an unsigned delivery (202)"),
                                              (404, "answered an unsigned delivery with 404, not 401")],
                         ids=["accepted", "accepted for later", "something else on the path"])
def test_the_check_fails_when_the_webhook_does_not_refuse(status: int, said: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from pidispatch.cli import main as cli

    server = _AnswersEverything(status)
    server.start()
    try:
        assert cli(["receiver", "check", server.url]) == 1
    finally:
        server.server.shutdown()
    assert said in capsys.readouterr().err


def test_the_check_fails_naming_the_url_when_nothing_answers(capsys: pytest.CaptureFixture[str]) -> None:
    from pidispatch.cli import main as cli

    url = f"http://127.0.0.1:{free_port()}/webhook"
    assert cli(["receiver", "check", url]) == 1
    err = capsys.readouterr().err
    assert f"no answer from {url}" in err and "kubectl get pods,endpoints" in err
