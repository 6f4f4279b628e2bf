"""A Job the API server refuses for good is answered 422, never 503: no redelivery can create it.

The real receiver app on a loopback socket, with its real cluster client (``ApiCluster`` over
``kubeapi.Api``) talking HTTP to a small fake API server that answers the way kube-apiserver does: a
``metav1.Status`` body with the code, the reason (``Invalid``, ``Forbidden``, ``BadRequest``) and, for
``Invalid``, the causes naming each field and quoting the refused value. What GitHub is told, what the
metrics count and what the log says are checked; the value never reaches the log.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pidispatch.api.vocabulary import GROUP, VERSION
from pidispatch.kubeapi import Api
from pidispatch.receiver import delivery as core
from pidispatch.receiver.cluster import ApiCluster
from pidispatch.receiver.metrics import Result
from testkit.receiver import NAMESPACE, Running, check_against_crd, free_port, trigger

MARKER = "zebra-41c9"  # in the comment; the fake's Invalid answer quotes it, as the real one quotes a value
BASE = f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}"


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    """A ``metav1.Status`` failure, as kube-apiserver writes one."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details, "code": code}


def invalid(name: str) -> dict[str, Any]:
    cause = {"reason": "FieldValueNotSupported", "field": "spec.authSource",
             "message": f'Unsupported value: "{MARKER}": supported values: "app", "pat", "gh"'}
    return status(422, "Invalid", f'Job.{GROUP} "{name}" is invalid: spec.authSource: {cause["message"]}',
                  name=name, group=GROUP, kind="Job", causes=[cause])


def forbidden(name: str) -> dict[str, Any]:
    return status(403, "Forbidden", f'jobs.{GROUP} is forbidden: User "system:serviceaccount:{NAMESPACE}:receiver" '
                  f'cannot create resource "jobs" in API group "{GROUP}" in the namespace "{NAMESPACE}"',
                  group=GROUP, kind="jobs")


def bad_request(name: str) -> dict[str, Any]:
    return status(400, "BadRequest", f"the body of the request was in an unknown format: {MARKER}")


def conflict(name: str) -> dict[str, Any]:
    return status(409, "AlreadyExists", f'jobs.{GROUP} "{name}" already exists', name=name, group=GROUP,
                  kind="jobs")


def unavailable(name: str) -> dict[str, Any]:
    return status(503, "ServiceUnavailable", "the server is currently unable to handle the request")


class FakeApiServer:
    """Lists the Triggers it holds; answers each Job create with ``answer(name)`` (``None``: 201, created)."""

    def __init__(self, triggers: list[dict[str, Any]]) -> None:
        self.triggers = triggers
        self.answers: dict[str, Any] = {}  # Trigger name → the Status its Jobs are refused with
        self.posted: list[dict[str, Any]] = []
        self.created: set[str] = set()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] == f"{BASE}/triggers":
                    self._send(200, {"kind": "TriggerList", "apiVersion": f"{GROUP}/{VERSION}", "metadata": {},
                                     "items": fake.triggers})
                else:
                    self._send(404, status(404, "NotFound", "the server could not find the requested resource"))

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.posted.append(body)
                name = body["metadata"]["name"]
                answer = fake.answers.get(body["spec"]["trigger"])
                if answer is None and name in fake.created:
                    self._send(409, conflict(name))
                elif answer is None:
                    fake.created.add(name)
                    self._send(201, body)
                else:
                    refusal = answer(name)
                    self._send(refusal["code"], refusal)

            def log_message(self, *args: Any) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="fake-apiserver")
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    fake = FakeApiServer([trigger("fix", "issue_comment.created", phrase="@pi"),
                          trigger("other", "issue_comment.created", phrase="@pi")])
    yield fake
    fake.stop()


@pytest.fixture
def receiver(apiserver: FakeApiServer, caplog: pytest.LogCaptureFixture,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    from pidispatch.events import logger as events_logger

    monkeypatch.setattr(events_logger, "propagate", True)  # the CLI's tests may have pointed it at stderr
    caplog.set_level(logging.INFO)
    running = Running(ApiCluster(Api(apiserver.url, retries=0), NAMESPACE, cache_seconds=0))  # type: ignore[arg-type]
    yield running
    running.stop()


def delivery_logs(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if "receiver_delivery" in r.getMessage()]


@pytest.mark.parametrize(("answer", "code", "reason"), [
    (invalid, 422, "Invalid"), (forbidden, 403, "Forbidden"), (bad_request, 400, "BadRequest")],
    ids=["422 Invalid", "403 Forbidden", "400 BadRequest"])
def test_a_job_refused_for_good_is_answered_422_counted_and_logged_without_the_value(
        receiver: Running, apiserver: FakeApiServer, caplog: pytest.LogCaptureFixture, answer: Any, code: int,
        reason: str) -> None:
    apiserver.answers["fix"] = answer
    assert receiver.counts()[Result.REFUSED.value] == 0, "the series exists from the start"
    sent = receiver.hooks.send(receiver.hooks.issue_comment(7, f"@pi fix {MARKER}"))
    assert sent.status == 422, sent.json
    [refused] = sent.json["refused"]
    assert refused.startswith("fix-") and f"{code} {reason}" in sent.json["error"], sent.json
    assert sent.json["jobs"] == [n["metadata"]["name"] for n in apiserver.posted if n["spec"]["trigger"] == "other"]
    assert "redeliver" in sent.json["error"] and "cannot" in sent.json["error"]
    assert receiver.counts()[Result.REFUSED.value] == 1
    assert receiver.counts()[Result.FAILED.value] == 0
    [log] = delivery_logs(caplog)
    assert log["result"] == "refused" and log["status"] == 422 and log["refused"] == [refused], log
    assert f"{code} {reason}" in log["why"]
    if reason == "Invalid":
        assert "spec.authSource" in log["why"] and "spec.authSource" in sent.json["error"]
    everything = json.dumps(sent.json) + "\n".join(r.getMessage() for r in caplog.records)
    assert MARKER not in everything, "neither the body nor the API server's quote of it is logged or answered"


def test_the_other_triggers_jobs_are_still_created(receiver: Running, apiserver: FakeApiServer) -> None:
    apiserver.answers["fix"] = invalid
    delivery = receiver.hooks.issue_comment(7, "@pi fix")
    sent = receiver.hooks.send(delivery)
    assert sent.status == 422 and len(sent.json["jobs"]) == 1 and sent.json["jobs"][0].startswith("other-")
    again = receiver.hooks.send(delivery.redelivered())
    assert again.status == 422 and again.json["jobs"] == [] and again.json["duplicates"] == sent.json["jobs"], (
        "a redelivery is refused the same way")


@pytest.mark.parametrize(("answer", "code", "result"), [
    (conflict, 202, Result.DUPLICATE), (unavailable, 503, Result.FAILED)],
    ids=["409 is a duplicate, as before", "503 is redelivered later, as before"])
def test_answers_that_are_not_for_good_are_answered_as_before(receiver: Running, apiserver: FakeApiServer,
                                                             answer: Any, code: int, result: Result) -> None:
    apiserver.answers["fix"] = apiserver.answers["other"] = answer
    sent = receiver.hooks.send(receiver.hooks.issue_comment(7, "@pi fix"))
    assert sent.status == code, sent.json
    assert receiver.counts()[result.value] == 1 and receiver.counts()[Result.REFUSED.value] == 0


def test_a_job_over_the_crds_bounds_is_refused_before_the_api_server_sees_it(
        receiver: Running, apiserver: FakeApiServer, caplog: pytest.LogCaptureFixture) -> None:
    """An issue number over int64 (a signed body can say anything) is refused by the receiver itself."""
    sent = receiver.hooks.send(receiver.hooks.issue_comment(2**63, "@pi fix"))
    assert sent.status == 422 and len(sent.json["refused"]) == 2, sent.json
    assert "spec.issue" in sent.json["error"] and apiserver.posted == [], "no create reached the API server"
    assert receiver.counts()[Result.REFUSED.value] == 1
    [log] = delivery_logs(caplog)
    assert log["result"] == "refused" and "spec.issue" in log["why"]


# -- the receiver's own check, against the CRD's schema ------------------------------------------------------
def _job(**spec: Any) -> dict[str, Any]:
    base = {"trigger": "fix", "forge": "github", "repository": "acme/widgets", "issue": 7, "comment": "@pi",
            "sender": "octocat", "authSource": "app", "deliveryId": "d-1", "fork": False}
    return core.job_body("fix-0123", {k: v for k, v in {**base, **spec}.items() if v is not None})


@pytest.mark.parametrize(("spec", "field"), [
    ({"issue": 0}, "issue"), ({"issue": 2**63}, "issue"), ({"pullRequest": -1}, "pullRequest"),
    ({"issue": True}, "issue"), ({"comment": "x" * 65537}, "comment"), ({"repository": "a/" + "b" * 199}, "repository"),
    ({"sender": "s" * 101}, "sender"), ({"deliveryId": "d" * 101}, "deliveryId"), ({"trigger": "t" * 254}, "trigger"),
    ({"authSource": "token"}, "authSource"), ({"forge": "gitlab"}, "forge"), ({"fork": "yes"}, "fork"),
    ({"repository": None}, "repository"), ({"extra": 1}, "extra")],
    ids=["issue 0", "issue over int64", "negative pull request", "a bool for a number", "comment too long",
         "repository too long", "sender too long", "delivery id too long", "trigger too long",
         "unknown auth source", "unknown forge", "fork not a bool", "repository missing", "a field the CRD lacks"])
def test_the_receivers_check_refuses_what_the_crd_refuses(spec: dict[str, Any], field: str) -> None:
    job = _job(**spec)
    problem = core.job_problem(job)
    assert problem is not None and f"spec.{field}" in problem, problem
    if field != "issue" or spec["issue"] < 2**63:  # the schema test knows no int64 bound: the API server does
        with pytest.raises(AssertionError):
            check_against_crd(job)


@pytest.mark.parametrize("spec", [
    {}, {"issue": 2**63 - 1}, {"comment": "x" * 65536}, {"repository": "a/" + "b" * 198}, {"sender": "s" * 100},
    {"deliveryId": "d" * 100}, {"trigger": "t" * 253}, {"authSource": "gh"}, {"fork": True}],
    ids=["as planned", "the largest number", "the longest comment", "the longest repository", "the longest sender",
         "the longest delivery id", "the longest trigger", "another auth source", "a fork"])
def test_the_receivers_check_passes_what_the_crd_takes(spec: dict[str, Any]) -> None:
    job = _job(**spec)
    check_against_crd(job)
    assert core.job_problem(job) is None
