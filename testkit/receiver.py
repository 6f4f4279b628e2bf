"""The webhook receiver served in-process for the tests: the real aiohttp app on a loopback socket
(``Running``), the in-memory cluster at the one seam where it lists Triggers and creates Jobs
(``MemoryCluster``, checking each Job against the CRD as the API server would), and raw HTTP helpers.
"""

from __future__ import annotations

import asyncio
import copy
import re
import socket
import threading
import time
from typing import Any

from pidispatch.api.crds import GROUP, VERSION, job_crd
from pidispatch.receiver.app import KEEPALIVE_SECONDS, Receiver, build_app, build_health_app, serve
from pidispatch.receiver.cluster import ClusterUnavailable
from pidispatch.receiver.settings import DEFAULT_MAX_BODY
from pidispatch.receiver.signature import WebhookSecret
from testkit.fakegithub import Delivery, Webhooks

SECRET = b"It's a Secret to Everybody"
NAMESPACE = "pi"
JOB_SPEC_SCHEMA = job_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def trigger(name: str, event: str, **on: Any) -> dict[str, Any]:
    run = on.pop("run", {"model": "fake/fake-model"})
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Trigger", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"on": {"event": event, **on}, "run": run}}


def check_against_crd(body: dict[str, Any]) -> None:
    """What the API server would refuse with 422: unknown fields, missing required ones, wrong types, too long."""
    spec = body["spec"]
    props = JOB_SPEC_SCHEMA["properties"]
    assert set(spec) <= set(props), f"fields the CRD does not know: {set(spec) - set(props)}"
    assert set(JOB_SPEC_SCHEMA["required"]) <= set(spec)
    for key, value in spec.items():
        schema = props[key]
        kind = {"string": str, "integer": int, "boolean": bool}[schema["type"]]
        assert isinstance(value, kind) and (kind is bool or not isinstance(value, bool)), (key, value)
        if "enum" in schema:
            assert value in schema["enum"], (key, value)
        if "maxLength" in schema:
            assert len(value) <= schema["maxLength"], key
        if "minimum" in schema:
            assert value >= schema["minimum"], key
    name = body["metadata"]["name"]
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63, name


class MemoryCluster:
    """The receiver's cluster seam in memory: Triggers to list, Jobs by name (409 → ``False``)."""

    def __init__(self, triggers: list[dict[str, Any]] | None = None) -> None:
        self.trigger_objects = list(triggers or [])
        self.jobs: dict[str, dict[str, Any]] = {}
        self.down = False
        self.lists = 0
        # SessionKeys that exist (by key) → the annotations the receiver set on them.
        self.sessionkeys: dict[str, dict[str, str]] = {}

    async def triggers(self) -> list[dict[str, Any]]:
        if self.down:
            raise ClusterUnavailable("cannot list Triggers: 0 cannot reach the API server")
        self.lists += 1
        return copy.deepcopy(self.trigger_objects)

    async def create_job(self, body: dict[str, Any]) -> bool:
        if self.down:
            raise ClusterUnavailable("cannot create Job: 0 cannot reach the API server")
        check_against_crd(body)
        name = body["metadata"]["name"]
        if name in self.jobs:
            return False
        self.jobs[name] = copy.deepcopy(body)
        return True

    async def retire(self, key: str, reason: str, pull_request: int | None = None) -> bool:
        if self.down:
            raise ClusterUnavailable("cannot annotate SessionKey: 0 cannot reach the API server")
        if key not in self.sessionkeys:
            return False
        self.sessionkeys[key]["pi-dispatch.dev/retire"] = reason
        # As the merge patch does: a null removes the annotation.
        self.sessionkeys[key].pop("pi-dispatch.dev/retire-pull-request", None)
        if pull_request is not None:
            self.sessionkeys[key]["pi-dispatch.dev/retire-pull-request"] = str(pull_request)
        return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Running:
    """The receiver app served on 127.0.0.1:<free port> by an event loop in a thread."""

    def __init__(self, cluster: MemoryCluster, *, max_body: int = DEFAULT_MAX_BODY, auth_source: str | None = None,
                 secret: WebhookSecret | None = None, max_body_reads: int | None = None,
                 keepalive_timeout: float = KEEPALIVE_SECONDS, **receiver_options: Any) -> None:
        self.cluster = cluster
        self.receiver = Receiver(cluster, secret or WebhookSecret(SECRET), max_body=max_body, auth_source=auth_source,
                                 max_body_reads=max_body_reads, **receiver_options)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.health_port = free_port()
        while self.health_port == self.port:
            self.health_port = free_port()
        self.health_url = f"http://127.0.0.1:{self.health_port}"  # /healthz, /readyz, /metrics
        self.hooks = Webhooks(f"{self.url}/webhook", SECRET)
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        started = threading.Event()
        self._error: BaseException | None = None

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            ready = asyncio.Event()

            async def main() -> None:
                async def flag() -> None:
                    await ready.wait()
                    started.set()

                waiter = asyncio.ensure_future(flag())
                try:
                    await serve(build_app(self.receiver), "127.0.0.1", self.port, self._stop, ready,
                                keepalive_timeout=keepalive_timeout, health=build_health_app(self.receiver),
                                health_port=self.health_port)
                finally:
                    waiter.cancel()

            try:
                self._loop.run_until_complete(main())
            except BaseException as exc:  # noqa: BLE001 - reported to the test
                self._error = exc
                started.set()

        self._thread = threading.Thread(target=run, daemon=True, name="receiver")
        self._thread.start()
        if not started.wait(10) or self._error:
            raise RuntimeError(f"the receiver did not start: {self._error!r}")

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def counts(self) -> dict[str, float]:
        """``pidispatch_receiver_deliveries_total`` by result, as scraped from /metrics."""
        text = self.hooks.session.get(f"{self.health_url}/metrics", timeout=5).text
        return {m.group(1): float(m.group(2)) for m in re.finditer(
            r'^pidispatch_receiver_deliveries_total\{result="([^"]*)"\} (\S+)$', text, re.M)}


def final_answer(data: bytes) -> tuple[int, bytes] | None:
    """The first status line and headers that are not ``100 Continue``, once they are complete."""
    while b"\r\n\r\n" in data:
        head, data = data.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 100"):
            return int(head[9:12]), head
    return None


def raw_exchange(port: int, head: bytes, chunks: tuple[bytes, ...] = (), timeout: float = 5.0) -> tuple[int, bytes]:
    """Send ``head`` and ``chunks`` on a plain socket and keep it open; the final answer's status and headers."""
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head)
        for chunk in chunks:
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = final_answer(data)
            if answer is not None:
                return answer
            try:
                more = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not more:
                break
            data += more
    raise AssertionError(f"no final HTTP answer within {timeout}s: {data[:300]!r}")


def request_head(delivery: Delivery, body_signature: str | None, extra: str = "") -> bytes:
    lines = ["POST /webhook HTTP/1.1", "Host: 127.0.0.1", "User-Agent: GitHub-Hookshot/8c1e3b2",
             "Content-Type: application/json", f"X-GitHub-Event: {delivery.event}",
             f"X-GitHub-Delivery: {delivery.id}"]
    if body_signature is not None:
        lines.append(f"X-Hub-Signature-256: {body_signature}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()
