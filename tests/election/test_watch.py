"""The operator's own list+watch (``pidispatch/election/watch.py``) against an HTTP server that answers as the
apiserver does: a list with its resourceVersion, then a chunked watch of one JSON event per line.

Each case scripts the server's answers in order and checks what was delivered and what was asked: the
watch resumes from the last resourceVersion (bookmarks included), a 410 (as an ERROR event or as the
answer) lists again and delivers the deletions it missed, any other failure backs off and resumes."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from pidispatch.election.watch import ListWatch
from pidispatch.kubeapi import Api
from testkit.wait import wait_until

PATH = "/apis/pi-dispatch.dev/v1alpha1/namespaces/ns/jobs"


def job(name: str, rv: str) -> dict[str, Any]:
    return {"apiVersion": "pi-dispatch.dev/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv}}


def listed(rv: str, *names: str) -> tuple[int, dict[str, Any]]:
    return 200, {"kind": "JobList", "metadata": {"resourceVersion": rv},
                 "items": [job(n, str(100 + i)) for i, n in enumerate(names)]}


def event(kind: str, name: str, rv: str) -> dict[str, Any]:
    if kind == "BOOKMARK":
        return {"type": "BOOKMARK", "object": {"kind": "Job", "metadata": {"resourceVersion": rv}}}
    return {"type": kind, "object": job(name, rv)}


GONE = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}


class Server:
    """Answers each request with the next scripted answer: ``(status, dict)`` for a list or an error,
    ``[event, ...]`` for a watch (streamed as chunks, then the answer ends); past the script, a watch that
    stays open until the test ends."""

    def __init__(self, script: list[Any]) -> None:
        self.script, self.asked = list(script), []
        self.done = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                query = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
                outer.asked.append(query)
                answer = outer.script.pop(0) if outer.script else []
                if isinstance(answer, tuple):
                    data = json.dumps(answer[1]).encode()
                    self.send_response(answer[0])
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for item in answer:
                    line = json.dumps(item).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                if not outer.script and not answer:
                    outer.done.wait(10)  # the watch after the script: open until the test is over
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> Server:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.done.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def run(script: list[Any], answers: int) -> tuple[list[tuple[str | None, str]], list[dict[str, str]]]:
    """Run a watch until the server has given ``answers`` answers plus the open watch after them."""
    delivered: list[tuple[str | None, str]] = []
    with Server(script) as server:
        watch = ListWatch(Api(server.url, retries=0), PATH,
                          lambda kind, body: delivered.append((kind, body["metadata"]["name"])),
                          backoff_seconds=0.01, client_timeout=30)
        watch.start()
        wait_until("every scripted answer asked for, and the watch after them", lambda: len(server.asked) > answers,
                   timeout=10, interval=0.01)
        watch.stopping.set()
    watch.stop()
    return delivered, server.asked


def versions(asked: list[dict[str, str]]) -> list[str]:
    """Each request as ``list`` or ``watch@<resourceVersion>``."""
    return [f"watch@{q.get('resourceVersion')}" if q.get("watch") == "true" else "list" for q in asked]


CASES = [
    pytest.param(
        [listed("12", "a", "b"), [event("BOOKMARK", "", "15"), event("ADDED", "c", "16")],
         [event("MODIFIED", "c", "17")]],
        [(None, "a"), (None, "b"), ("ADDED", "c"), ("MODIFIED", "c")],
        ["list", "watch@12", "watch@16", "watch@17"],
        id="a-watch-that-ends-resumes-from-the-last-version-seen-bookmarks-included"),
    pytest.param(
        [listed("12", "a", "b"), [event("ADDED", "c", "16"), GONE], listed("20", "a", "c")],
        [(None, "a"), (None, "b"), ("ADDED", "c"), ("DELETED", "b"), (None, "a"), (None, "c")],
        ["list", "watch@12", "list", "watch@20"],
        id="a-410-error-event-lists-again-and-delivers-the-deletion-it-missed"),
    pytest.param(
        [listed("12", "a"), (410, {"kind": "Status", "code": 410, "message": "too old resource version"}),
         listed("30", "a")],
        [(None, "a"), (None, "a")],
        ["list", "watch@12", "list", "watch@30"],
        id="a-410-answer-to-the-watch-lists-again"),
    pytest.param(
        [listed("12", "a"), (500, {"kind": "Status", "code": 500, "message": "etcd"}), [event("ADDED", "b", "13")]],
        [(None, "a"), ("ADDED", "b")],
        ["list", "watch@12", "watch@12", "watch@13"],
        id="another-failure-backs-off-and-resumes-without-listing"),
    pytest.param(
        [(503, {"kind": "Status", "code": 503}), listed("12", "a")],
        [(None, "a")],
        ["list", "list", "watch@12"],
        id="a-failed-first-list-is-tried-again"),
]


@pytest.mark.parametrize(("script", "delivered", "asked"), CASES)
def test_list_then_watch(script: list[Any], delivered: list[tuple[str | None, str]], asked: list[str]) -> None:
    got, requests = run(script, len(script))
    assert got == delivered
    assert versions(requests) == asked
    assert all(q.get("allowWatchBookmarks") == "true" and q.get("timeoutSeconds") == "300"
               for q in requests if q.get("watch") == "true")


def test_a_callback_that_fails_does_not_end_the_watch() -> None:
    seen: list[str] = []

    def deliver(kind: str | None, body: dict[str, Any]) -> None:
        seen.append(body["metadata"]["name"])
        if body["metadata"]["name"] == "bad":
            raise RuntimeError("a bug in one Job's handling")

    with Server([listed("12", "bad"), [event("ADDED", "good", "13")]]) as server:
        watch = ListWatch(Api(server.url, retries=0), PATH, deliver, backoff_seconds=0.01)
        watch.start()
        wait_until("the Job after the failing one delivered", lambda: "good" in seen, timeout=10, interval=0.01)
        watch.stopping.set()
    watch.stop()

