"""What comes back from the forge through the gateway (docs/gateway.md#what-crosses): a forge that redirects to a
URL carrying a credential, echoes the token in headers, or sets cookies; the job sees none of it."""

from __future__ import annotations

import base64
import http.client
import json
import logging
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pidispatch.gateway.capability import Claims, SecretRef, mint
from pidispatch.gateway.secrets import StaticSecrets
from testkit.gateway_forge import KEY, TOKEN, ForgeGateway, job_env, run
from testkit.gitforge import make_tls

SECRET_URL = f"https://x-access-token:{TOKEN}@elsewhere.example/acme/widgets.git/info/refs?service=git-upload-pack"


@dataclass
class Hostile:
    """A forge that answers every request with what ``answers`` names for its path, and keeps every header it got."""

    seen: list[dict[str, str]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None
    # The streaming pair: set when the forge has the request's first chunk, and when the client has the answer's.
    got_first_request_chunk: threading.Event = field(default_factory=threading.Event)
    got_first_answer_chunk: threading.Event = field(default_factory=threading.Event)

    def stream(self, h: BaseHTTPRequestHandler) -> None:
        """A push that answers only as it reads: the first chunk of the request is noted before the rest can come,
        and the answer's second chunk waits until the client has its first."""
        def chunk() -> bytes:
            size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
            data = h.rfile.read(size) if size else b""
            h.rfile.readline()
            return data

        received = [chunk()]
        self.got_first_request_chunk.set()
        while received[-1]:
            received.append(chunk())
        h.send_response(200)
        h.send_header("Content-Type", "application/x-git-receive-pack-result")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        total = str(sum(len(part) for part in received)).encode()
        for part in (b"first:" + total, b"second"):
            h.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            h.wfile.flush()
            if part.startswith(b"first"):
                self.got_first_answer_chunk.wait(20)
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def start(self, directory: Path) -> tuple[str, str]:
        ca, cert, key = make_tls(directory)
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def answer(self) -> None:
                hostile.seen.append(dict(self.headers.items()))
                if self.path == "/acme/widgets.git/git-receive-pack":
                    hostile.stream(self)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                base = f"https://127.0.0.1:{self.server.server_address[1]}"
                status, headers = 200, {"Content-Type": "application/json"}
                if self.path.startswith("/acme/widgets.git/info/refs") or self.path.endswith("/tarball/main"):
                    status, headers["Location"] = 302, SECRET_URL
                elif self.path.endswith("/moved"):
                    status, headers["Location"] = 301, f"{base}/api/v3/repos/acme/widgets/new-home"
                elif self.path.endswith("/leaky"):
                    headers.update({"Set-Cookie": f"session={TOKEN}", "X-Echo": self.headers.get("Authorization", ""),
                                    "WWW-Authenticate": f'Bearer realm="{TOKEN}"',
                                    "X-GitHub-SSO": f"required; url=https://sso.example/?authorization_request={TOKEN}",
                                    "Link": f'<{base}/api/v3/repos/acme/widgets/leaky?page=2>; rel="next", '
                                            f'<https://elsewhere.example/?token={TOKEN}>; rel="last"'})
                data = b"{}"
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return f"https://127.0.0.1:{self.server.server_address[1]}", str(ca)


@pytest.fixture
def hostile(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[tuple[Hostile, ForgeGateway, str]]:
    caplog.set_level(logging.DEBUG)
    forge = Hostile()
    web, ca = forge.start(tmp_path / "forge-tls")
    claims = Claims(uid="u-hostile", namespace="jobs", job="j", repository="acme/widgets", forge=web,
                    api=web + "/api/v3", exp=int(time.time()) + 600, token=SecretRef("s", "token"))
    gateway = ForgeGateway(tmp_path / "gw-tls", KEY, StaticSecrets({("jobs", "s", "token"): TOKEN}),
                           upstream_ca=ca).start()
    try:
        yield forge, gateway, mint(KEY, claims)
    finally:
        gateway.stop()
        assert forge.server is not None
        forge.server.shutdown()
        forge.server.server_close()


def get(gateway: ForgeGateway, path: str, capability: str) -> http.client.HTTPResponse:
    context = ssl.create_default_context(cafile=str(gateway.ca))
    conn = http.client.HTTPSConnection("127.0.0.1", gateway.port, context=context, timeout=30)
    conn.request("GET", path, headers={"Authorization": f"token {capability}"})
    return conn.getresponse()


def test_a_redirect_outside_the_forge_is_refused_and_its_url_never_shown(
        hostile: tuple[Hostile, ForgeGateway, str], caplog: pytest.LogCaptureFixture) -> None:
    _, gateway, capability = hostile
    answer = get(gateway, "/api/v3/repos/acme/widgets/tarball/main", capability)
    body = answer.read().decode()
    assert answer.status == 403 and answer.getheader("X-Pi-Gateway-Refusal") == "upstream-redirect"
    assert answer.getheader("Location") is None
    assert TOKEN not in body and "elsewhere" not in body
    assert TOKEN not in caplog.text and capability not in caplog.text


def test_git_shown_a_credential_bearing_redirect_follows_nothing(
        hostile: tuple[Hostile, ForgeGateway, str], tmp_path: Path) -> None:
    _, gateway, capability = hostile
    env = job_env(gateway, capability, tmp_path / "home")
    done = run(env, "git", "clone", f"{gateway.url}/acme/widgets.git", str(tmp_path / "w"),
               extra={"GIT_TRACE_CURL": "1", "GIT_TRACE_CURL_NO_DATA": "1"})
    assert done.returncode != 0
    assert "upstream-redirect" in done.stderr
    assert TOKEN not in done.stderr and "elsewhere" not in done.stderr


def test_a_redirect_within_the_forge_is_rewritten_onto_the_gateway(hostile: tuple[Hostile, ForgeGateway, str]
                                                                    ) -> None:
    _, gateway, capability = hostile
    answer = get(gateway, "/api/v3/repos/acme/widgets/moved", capability)
    assert answer.status == 301
    assert answer.getheader("Location") == f"https://127.0.0.1:{gateway.port}/api/v3/repos/acme/widgets/new-home"


def test_headers_that_could_carry_the_token_are_dropped(hostile: tuple[Hostile, ForgeGateway, str],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    forge, gateway, capability = hostile
    answer = get(gateway, "/api/v3/repos/acme/widgets/leaky", capability)
    answer.read()
    shown = dict(answer.getheaders())
    assert answer.status == 200
    assert TOKEN not in json.dumps(shown)
    assert not {"Set-Cookie", "X-Echo", "WWW-Authenticate", "X-GitHub-SSO"} & set(shown)
    assert shown["Link"] == f'<https://127.0.0.1:{gateway.port}/api/v3/repos/acme/widgets/leaky?page=2>; rel="next"'
    upstream = forge.seen[-1]
    assert upstream["Authorization"] == f"token {TOKEN}"
    assert capability not in json.dumps(forge.seen)
    assert TOKEN not in caplog.text and capability not in caplog.text


def test_git_gets_the_token_as_basic_x_access_token(hostile: tuple[Hostile, ForgeGateway, str]) -> None:
    forge, gateway, capability = hostile
    context = ssl.create_default_context(cafile=str(gateway.ca))
    conn = http.client.HTTPSConnection("127.0.0.1", gateway.port, context=context, timeout=30)
    basic = base64.b64encode(f"anyone:{capability}".encode()).decode()
    conn.request("POST", "/acme/widgets.git/git-upload-pack", body=b"0000",
                 headers={"Authorization": f"Basic {basic}", "Content-Type": "application/x-git-upload-pack-request"})
    assert conn.getresponse().status == 200
    expected = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert forge.seen[-1]["Authorization"] == f"Basic {expected}"


def test_a_graphql_body_with_a_key_given_twice_is_refused_unforwarded(hostile: tuple[Hostile, ForgeGateway, str]
                                                                      ) -> None:
    """Which ``query`` would the forge read, the first or the second? The gateway does not guess."""
    forge, gateway, capability = hostile
    context = ssl.create_default_context(cafile=str(gateway.ca))
    conn = http.client.HTTPSConnection("127.0.0.1", gateway.port, context=context, timeout=30)
    body = (b'{"query": "{ repository(owner: \\"acme\\", name: \\"widgets\\") { id } }", '
            b'"query": "{ viewer { login } }"}')
    conn.request("POST", "/api/graphql", body=body, headers={"Authorization": f"token {capability}",
                                                             "Content-Type": "application/json"})
    answer = conn.getresponse()
    assert answer.status == 403 and answer.getheader("X-Pi-Gateway-Refusal") == "unchecked-request"
    assert forge.seen == []


def test_a_push_streams_both_ways(hostile: tuple[Hostile, ForgeGateway, str]) -> None:
    """The forge has the pack's first chunk while the job still holds the rest, and the job has the answer's first
    chunk while the forge still holds the rest: a gateway that buffered either body whole would wait forever
    (here: time out and fail)."""
    forge, gateway, capability = hostile
    context = ssl.create_default_context(cafile=str(gateway.ca))
    conn = http.client.HTTPSConnection("127.0.0.1", gateway.port, context=context, timeout=30)
    basic = base64.b64encode(f"x:{capability}".encode()).decode()
    held_back: list[bool] = []

    def pack() -> Iterator[bytes]:
        yield b"A" * 70000
        held_back.append(forge.got_first_request_chunk.wait(20))
        yield b"B" * 70000

    conn.request("POST", "/acme/widgets/git-receive-pack", body=pack(), encode_chunked=True,
                 headers={"Authorization": f"Basic {basic}", "Transfer-Encoding": "chunked",
                          "Content-Type": "application/x-git-receive-pack-request"})
    assert held_back == [True], "the forge saw nothing of the pack until the job had sent all of it"
    answer = conn.getresponse()
    assert answer.status == 200
    first = answer.read1()
    assert first == b"first:140000"
    forge.got_first_answer_chunk.set()
    assert answer.read() == b"second"
