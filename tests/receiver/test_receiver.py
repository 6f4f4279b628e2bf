"""The webhook receiver in-process: the real aiohttp app on a real loopback socket, GitHub-format
deliveries from ``testkit/fakegithub.py``, and an in-memory cluster at the one seam where the receiver
lists Triggers and creates Jobs (it answers 409 for a name that exists, as the API server does).
``e2e/test_receiver.py`` runs the same receiver from the Helm chart against the real API server.
"""

from __future__ import annotations

import copy
import hmac
import json
import logging
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.crds import GROUP, VERSION
from pidispatch.receiver import delivery as core
from pidispatch.receiver.metrics import POLL_ANSWERS, Result
from pidispatch.receiver.settings import DEFAULT_MAX_BODY, DEFAULT_PORT, ReceiverSettings
from pidispatch.receiver.signature import WebhookSecret, header_problem, sign, signature_matches
from pidispatch.settings import ConfigError
from testkit.fakegithub import Delivery, Webhooks
from testkit.receiver import (
    JOB_SPEC_SCHEMA,
    SECRET,
    MemoryCluster,
    Running,
    raw_exchange,
    request_head,
    trigger,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster([
        trigger("fix", "issue_comment.created", phrase="@pi"),
        trigger("label", "issues.labeled", label="pi"),
        trigger("review", "pull_request_review.submitted", phrase="@pi"),
        trigger("inline", "pull_request_review_comment.created", phrase="@pi"),
    ])


@pytest.fixture
def receiver(cluster: MemoryCluster) -> Iterator[Running]:
    running = Running(cluster)
    yield running
    running.stop()


# -- the signature ------------------------------------------------------------------------------------------
def test_a_signed_delivery_creates_its_job(receiver: Running, cluster: MemoryCluster) -> None:
    sent = receiver.hooks.send(receiver.hooks.issue_comment(7, "@pi please fix"))
    assert sent.status == 202, sent.json
    assert sent.json == {"jobs": [core.job_name(core.body_digest(sent.delivery.body), "fix")], "duplicates": []}
    assert list(cluster.jobs) == sent.json["jobs"]
    assert receiver.counts()["created"] == 1


BAD_SIGNATURES = [
    ("missing", None),
    ("empty", ""),
    ("sha1 scheme", "sha1=" + "a" * 40),
    ("no scheme", "a" * 64),
    ("not hex", "sha256=" + "z" * 64),
    ("one digit short", "sha256=" + "a" * 63),
    ("one digit long", "sha256=" + "a" * 65),
    ("trailing space", "sha256=" + "a" * 64 + " "),
]


@pytest.mark.parametrize("header", [b[1] for b in BAD_SIGNATURES], ids=[b[0] for b in BAD_SIGNATURES])
def test_a_missing_or_malformed_signature_is_401_and_creates_nothing(receiver: Running, cluster: MemoryCluster,
                                                                      header: str | None) -> None:
    sent = receiver.hooks.send(receiver.hooks.issue_comment(7, "@pi fix"), signature_header=header)
    assert sent.status == 401, sent.json
    assert "X-Hub-Signature-256" in sent.json["error"]
    assert cluster.jobs == {} and cluster.lists == 0, "nothing read from the cluster either"
    assert receiver.counts()["unauthorized"] == 1


def test_only_sha256_counts_not_the_old_sha1_header(receiver: Running, cluster: MemoryCluster) -> None:
    hooks = receiver.hooks
    delivery = hooks.issue_comment(7, "@pi fix")
    sha1 = "sha1=" + hmac.new(SECRET, delivery.body, "sha1").hexdigest()
    sent = hooks.send(delivery, signature_header=None, headers={"X-Hub-Signature": sha1})
    assert sent.status == 401 and cluster.jobs == {}


@pytest.mark.parametrize("forgery", ["another secret", "body altered after signing", "signature of another body",
                                     "empty secret"])
def test_a_wrong_signature_is_401_and_creates_nothing(receiver: Running, cluster: MemoryCluster,
                                                       forgery: str) -> None:
    hooks = receiver.hooks
    delivery = hooks.issue_comment(7, "@pi fix")
    if forgery == "another secret":
        sent = hooks.send(delivery, secret=b"guess")
    elif forgery == "empty secret":
        sent = hooks.send(delivery, secret=b"")
    elif forgery == "body altered after signing":
        altered = delivery.body.replace(b"@pi fix", b"@pi rm -rf")
        sent = hooks.send(delivery, body=altered, signature_header=sign(SECRET, delivery.body))
    else:
        other = hooks.issue_comment(8, "@pi fix")
        sent = hooks.send(delivery, signature_header=sign(SECRET, other.body))
    assert sent.status == 401, sent.json
    assert "does not match" in sent.json["error"]
    assert cluster.jobs == {} and cluster.lists == 0


def test_the_signature_is_checked_before_anything_is_parsed(receiver: Running, cluster: MemoryCluster) -> None:
    """Unsigned garbage, unsigned unknown events and unsigned oversized bodies all get the same 401."""
    hooks = receiver.hooks
    assert hooks.send(hooks.issue_comment(1, "x"), body=b"{not json", secret=b"wrong").status == 401
    assert hooks.send(hooks.ping(), secret=None).status == 401
    assert hooks.send(hooks.issue_comment(1, "x"), secret=None,
                      headers={"X-GitHub-Delivery": None, "X-GitHub-Event": None}).status == 401
    assert cluster.jobs == {} and receiver.counts()["unauthorized"] == 3


def test_signatures_are_compared_in_constant_time(receiver: Running, cluster: MemoryCluster,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    hooks = receiver.hooks
    delivery = hooks.issue_comment(7, "@pi fix")
    good = sign(SECRET, delivery.body)
    near_miss = good[:-1] + ("0" if good[-1] != "0" else "1")
    assert hooks.send(delivery, signature_header=near_miss).status == 401
    assert hooks.send(delivery).status == 202
    assert calls == [(good.encode(), near_miss.encode()), (good.encode(), good.encode())]


def test_signature_helpers() -> None:
    body = b'{"zen":"Design for failure."}'
    # GitHub's documented example: secret "It's a Secret to Everybody", payload "Hello, World!".
    assert sign(SECRET, b"Hello, World!") == \
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert signature_matches(SECRET, body, sign(SECRET, body))
    assert signature_matches(SECRET, body, sign(SECRET, body).upper().replace("SHA256=", "sha256="))
    assert not signature_matches(SECRET, body + b" ", sign(SECRET, body))
    assert header_problem(sign(SECRET, body)) is None


def test_a_rotated_secret_file_takes_effect_without_a_restart(tmp_path: Path, events: Callable[[], list]) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"old\n")
    holder = WebhookSecret(b"old", str(path))
    assert holder.current() == b"old"
    replacement = tmp_path / "secret.new"
    replacement.write_bytes(b"new")
    replacement.replace(path)  # as the kubelet swaps a Secret volume's files: a new inode
    assert holder.current() == b"new"
    empty = tmp_path / "secret.empty"
    empty.write_bytes(b"")
    empty.replace(path)
    assert holder.current() == b"new", "a half-written rotation keeps the last good secret"
    assert [e["event"] for e in events()] == ["receiver_secret_reloaded", "receiver_secret_reload_failed"]


# -- the body cap --------------------------------------------------------------------------------------------
def test_a_declared_length_over_the_cap_is_413_before_any_body_is_sent(cluster: MemoryCluster) -> None:
    running = Running(cluster, max_body=4096)
    try:
        delivery = running.hooks.issue_comment(7, "@pi fix")
        head = request_head(delivery, sign(SECRET, delivery.body), f"Content-Length: {100 * 1024 * 1024}\r\n")
        status, answer = raw_exchange(running.port, head)  # not one byte of the 100 MiB is sent
        assert status == 413, answer
        assert b"connection: close" in answer.lower(), "the rest of the body is never read: no keep-alive"
        assert cluster.jobs == {} and running.counts()["too_large"] == 1
    finally:
        running.stop()


def test_a_chunked_body_is_cut_off_at_the_cap_without_reading_the_rest(cluster: MemoryCluster) -> None:
    cap = 8192
    running = Running(cluster, max_body=cap)
    try:
        delivery = running.hooks.issue_comment(7, "@pi fix")
        head = request_head(delivery, "sha256=" + "0" * 64, "Transfer-Encoding: chunked\r\n")
        piece = b"x" * 4096
        chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        # Three chunks pass the cap; the terminating chunk is never sent, so an answer proves the
        # receiver stopped reading instead of waiting for the end of the body.
        status, answer = raw_exchange(running.port, head, (chunk, chunk, chunk))
        assert status == 413, answer
        assert cluster.jobs == {} and running.counts()["too_large"] == 1
    finally:
        running.stop()


def test_expect_100_continue_over_the_cap_is_refused_instead_of_continued(cluster: MemoryCluster) -> None:
    running = Running(cluster, max_body=4096)
    try:
        delivery = running.hooks.issue_comment(7, "@pi fix")
        head = request_head(delivery, sign(SECRET, delivery.body),
                            "Content-Length: 1000000\r\nExpect: 100-continue\r\n")
        status, answer = raw_exchange(running.port, head)
        assert status == 413 and b"100 Continue" not in answer, answer
    finally:
        running.stop()


def test_a_body_of_exactly_the_cap_is_accepted(cluster: MemoryCluster) -> None:
    cap = 16 * 1024
    running = Running(cluster, max_body=cap)
    try:
        delivery = running.hooks.issue_comment(7, "@pi fix")
        body = delivery.body + b" " * (cap - len(delivery.body))  # JSON allows trailing whitespace
        assert len(body) == cap
        assert running.hooks.send(delivery, body=body).status == 202
        assert running.hooks.send(running.hooks.issue_comment(8, "@pi fix"), body=body + b" ").status == 413
        assert len(cluster.jobs) == 1
    finally:
        running.stop()


# -- malformed and ignored -----------------------------------------------------------------------------------
MALFORMED = [
    ("not JSON", "issue_comment", b"{\"action\": \"created\", "),
    ("JSON but not an object", "issue_comment", b"[1, 2, 3]"),
    ("not UTF-8", "issue_comment", b"\xff\xfe\x00garbage"),
    ("nested beyond any parser", "issue_comment", b"[" * 200000 + b"]" * 200000),
    ("issue comment without an issue", "issue_comment",
     json.dumps({"action": "created", "repository": {"full_name": "acme/widgets"}, "sender": {"login": "o"},
                 "comment": {"body": "@pi"}}).encode()),
    ("label event without a label", "issues",
     json.dumps({"action": "labeled", "repository": {"full_name": "acme/widgets"}, "sender": {"login": "o"},
                 "issue": {"number": 3}}).encode()),
    ("issue number as a string", "issues",
     json.dumps({"action": "labeled", "repository": {"full_name": "acme/widgets"}, "sender": {"login": "o"},
                 "issue": {"number": "3"}, "label": {"name": "pi"}}).encode()),
    ("issue number true", "issues",
     json.dumps({"action": "labeled", "repository": {"full_name": "acme/widgets"}, "sender": {"login": "o"},
                 "issue": {"number": True}, "label": {"name": "pi"}}).encode()),
    ("repository not OWNER/NAME", "issues",
     json.dumps({"action": "labeled", "repository": {"full_name": "widgets"}, "sender": {"login": "o"},
                 "issue": {"number": 3}, "label": {"name": "pi"}}).encode()),
    ("review without base", "pull_request_review",
     json.dumps({"action": "submitted", "repository": {"full_name": "acme/widgets"}, "sender": {"login": "o"},
                 "review": {"body": "@pi"}, "pull_request": {"number": 3, "head": {"repo": None}}}).encode()),
]


@pytest.mark.parametrize(("event", "body"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_a_signed_but_malformed_payload_is_400_and_creates_nothing(receiver: Running, cluster: MemoryCluster,
                                                                    event: str, body: bytes) -> None:
    delivery = Delivery(event, {})
    sent = receiver.hooks.send(delivery, body=body)
    assert sent.status == 400, sent.json
    assert cluster.jobs == {} and receiver.counts()["malformed"] == 1


@pytest.mark.parametrize("delivery_id", [None, "", "x" * 101, "../../etc", "a b"],
                         ids=["missing", "empty", "too long", "path", "space"])
def test_a_delivery_without_a_usable_id_is_400(receiver: Running, cluster: MemoryCluster,
                                               delivery_id: str | None) -> None:
    sent = receiver.hooks.send(receiver.hooks.issue_comment(7, "@pi fix"), headers={"X-GitHub-Delivery": delivery_id})
    assert sent.status == 400 and "X-GitHub-Delivery" in sent.json["error"]
    assert cluster.jobs == {}


IGNORED: list[tuple[str, Callable[[Webhooks], Delivery], str]] = [
    ("ping", lambda h: h.ping("Anything added dilutes everything else.", hook_id=1), "ping"),
    ("push", lambda h: h.push("refs/heads/main"), "push"),
    ("pull request opened", lambda h: h.pull_request_event(3, "opened"), "pull_request"),
    ("issue opened", lambda h: h.issues_labeled(3, "pi", action="opened"), "'opened'"),
    ("issue unlabeled", lambda h: h.issues_labeled(3, "pi", action="unlabeled"), "'unlabeled'"),
    ("comment edited", lambda h: h.issue_comment(3, "@pi fix", action="edited"), "'edited'"),
    ("comment deleted", lambda h: h.issue_comment(3, "@pi fix", action="deleted"), "'deleted'"),
    ("review dismissed", lambda h: h.pull_request_review(3, "@pi fix", action="dismissed"), "'dismissed'"),
    ("review comment edited", lambda h: h.pull_request_review_comment(3, "@pi fix", action="edited"), "'edited'"),
    ("a bot's comment", lambda h: h.issue_comment(3, "@pi fix", sender="pi-dispatch[bot]", bot=True), "bot"),
    ("a bot's review", lambda h: h.pull_request_review(3, "@pi fix", sender="ci[bot]", bot=True), "bot"),
    # Under a pat or gh token the operator comments as a person's account: its marker still tells.
    ("the operator's own comment", lambda h: h.issue_comment(
        3, "This Trigger asks to resume (@pi)...\n<!-- pi-dispatch:job=1b4e28ba -->\n"), "own comments"),
    ("no Trigger matches", lambda h: h.issue_comment(3, "thanks!"), "no Trigger matches"),
]


@pytest.mark.parametrize(("build", "why"), [i[1:] for i in IGNORED], ids=[i[0] for i in IGNORED])
def test_events_and_actions_no_trigger_can_match_are_202_ignored(receiver: Running, cluster: MemoryCluster,
                                                                  build: Callable[[Webhooks], Delivery],
                                                                  why: str) -> None:
    sent = receiver.hooks.send(build(receiver.hooks))
    assert sent.status == 202, sent.json
    assert why in sent.json["ignored"], sent.json
    assert not sent.json.get("jobs") and cluster.jobs == {}
    assert receiver.counts()["ignored"] == 1


def test_an_event_without_its_header_is_ignored(receiver: Running, cluster: MemoryCluster) -> None:
    sent = receiver.hooks.send(receiver.hooks.issue_comment(3, "@pi"), headers={"X-GitHub-Event": None})
    assert sent.status == 202 and "X-GitHub-Event" in sent.json["ignored"] and cluster.jobs == {}


# -- matching ------------------------------------------------------------------------------------------------
def written_by(association: str | None, delivery: Delivery) -> Delivery:
    """The same delivery, its comment or review written by someone of ``association`` (None: no field)."""
    writing = delivery.payload["review" if delivery.event == "pull_request_review" else "comment"]
    if association is None:
        writing.pop("author_association")
        delivery.unlike_github = "GitHub always says how the author is associated: a sender that leaves it out"
    else:
        writing["author_association"] = association
    return delivery


def unlike_github(delivery: Delivery, why: str, edit: Callable[[dict[str, Any]], Any]) -> Delivery:
    """``delivery`` with ``edit`` made to its payload: what GitHub never sends (``why``), so not held to its schema."""
    edit(delivery.payload)
    delivery.unlike_github = why
    return delivery


COMMENT = {"event": "issue_comment.created", "phrase": "@pi"}
MATCHING: list[tuple[str, dict[str, Any], Callable[[Webhooks], Delivery], bool]] = [
    ("author: a stranger's @pi starts nothing", COMMENT, lambda h: written_by("NONE", h.issue_comment(1, "@pi")),
     False),
    ("author: a contributor is not trusted by default", COMMENT,
     lambda h: written_by("CONTRIBUTOR", h.issue_comment(1, "@pi")), False),
    ("author: a member", COMMENT, lambda h: written_by("MEMBER", h.issue_comment(1, "@pi")), True),
    ("author: a collaborator", COMMENT, lambda h: written_by("COLLABORATOR", h.issue_comment(1, "@pi")), True),
    ("author: a payload without an association reads as NONE", COMMENT,
     lambda h: written_by(None, h.issue_comment(1, "@pi")), False),
    ("author: a Trigger that lets contributors in", {**COMMENT, "authorAssociations": ["CONTRIBUTOR"]},
     lambda h: written_by("CONTRIBUTOR", h.issue_comment(1, "@pi")), True),
    ("author: such a Trigger lists exactly who", {**COMMENT, "authorAssociations": ["CONTRIBUTOR"]},
     lambda h: written_by("OWNER", h.issue_comment(1, "@pi")), False),
    ("author: a stranger's review", {"event": "pull_request_review.submitted"},
     lambda h: written_by("FIRST_TIME_CONTRIBUTOR", h.pull_request_review(2, "@pi")), False),
    ("author: a stranger's review comment", {"event": "pull_request_review_comment.created", "phrase": "/pi"},
     lambda h: written_by("NONE", h.pull_request_review_comment(2, "/pi rename")), False),
    ("author: labels need triage rights on GitHub, not checked", {"event": "issues.labeled", "label": "pi"},
     lambda h: h.issues_labeled(1, "pi", sender="someone"), True),
    ("label: the Trigger's label", {"event": "issues.labeled", "label": "pi"},
     lambda h: h.issues_labeled(1, "pi"), True),
    ("label: case does not matter to GitHub", {"event": "issues.labeled", "label": "Pi-Fix"},
     lambda h: h.issues_labeled(1, "pi-fix"), True),
    ("label: another label", {"event": "issues.labeled", "label": "pi"},
     lambda h: h.issues_labeled(1, "bug"), False),
    ("label: a Trigger without a label matches none", {"event": "issues.labeled"},
     lambda h: h.issues_labeled(1, "pi"), False),
    ("label: added by automation still counts", {"event": "issues.labeled", "label": "pi"},
     lambda h: h.issues_labeled(1, "pi", sender="triage[bot]", bot=True), True),
    ("comment: phrase anywhere in the body", {"event": "issue_comment.created", "phrase": "@pi"},
     lambda h: h.issue_comment(1, "hey @pi, look"), True),
    ("comment: phrase is case-sensitive", {"event": "issue_comment.created", "phrase": "@pi"},
     lambda h: h.issue_comment(1, "hey @PI, look"), False),
    ("comment: no phrase in the body", {"event": "issue_comment.created", "phrase": "@pi"},
     lambda h: h.issue_comment(1, "looks good"), False),
    ("comment: a null body", {"event": "issue_comment.created", "phrase": "@pi"},
     lambda h: unlike_github(h.issue_comment(1, "@pi"), "an issue comment's body is always a string on GitHub",
                             lambda p: p["comment"].update(body=None)), False),
    ("comment: a Trigger without a phrase matches none", {"event": "issue_comment.created"},
     lambda h: h.issue_comment(1, "anything"), False),
    ("comment on a PR: issue_comment Triggers match it", {"event": "issue_comment.created", "phrase": "@pi"},
     lambda h: h.issue_comment(1, "@pi", on_pull_request=True), True),
    ("comment: a label Trigger does not match a comment", {"event": "issues.labeled", "label": "pi"},
     lambda h: h.issue_comment(1, "pi"), False),
    ("review: phrase in the review body", {"event": "pull_request_review.submitted", "phrase": "@pi"},
     lambda h: h.pull_request_review(2, "@pi address these"), True),
    ("review: phrase absent", {"event": "pull_request_review.submitted", "phrase": "@pi"},
     lambda h: h.pull_request_review(2, "LGTM"), False),
    ("review: an approval without a body, the Trigger wants a phrase",
     {"event": "pull_request_review.submitted", "phrase": "@pi"},
     lambda h: h.pull_request_review(2, None, state="approved"), False),
    ("review: no phrase on the Trigger matches every review", {"event": "pull_request_review.submitted"},
     lambda h: h.pull_request_review(2, None, state="approved"), True),
    ("review comment: phrase", {"event": "pull_request_review_comment.created", "phrase": "/pi"},
     lambda h: h.pull_request_review_comment(2, "/pi rename this"), True),
    ("review comment: not an issue comment", {"event": "issue_comment.created", "phrase": "/pi"},
     lambda h: h.pull_request_review_comment(2, "/pi rename this"), False),
    ("review comment: a Trigger without a phrase matches none", {"event": "pull_request_review_comment.created"},
     lambda h: h.pull_request_review_comment(2, "anything"), False),
    ("repository: restricts when set", {"event": "issue_comment.created", "phrase": "@pi",
                                        "repository": "acme/gadgets"},
     lambda h: h.issue_comment(1, "@pi"), False),
    ("repository: the same, ignoring case", {"event": "issue_comment.created", "phrase": "@pi",
                                             "repository": "ACME/Widgets"},
     lambda h: h.issue_comment(1, "@pi"), True),
    ("repository: another owner", {"event": "issue_comment.created", "phrase": "@pi",
                                   "repository": "evil/widgets"},
     lambda h: h.issue_comment(1, "@pi"), False),
    ("repositories: an owner glob serves its repositories", {**COMMENT, "repositories": ["acme/*"]},
     lambda h: h.issue_comment(1, "@pi"), True),
    ("repositories: ignoring case", {**COMMENT, "repositories": ["ACME/WIDG*"]},
     lambda h: h.issue_comment(1, "@pi"), True),
    ("repositories: an untrusted owner", {**COMMENT, "repositories": ["acme/*"]},
     lambda h: h.issue_comment(1, "@pi", repository="evil/widgets"), False),
    ("repositories: an owner whose name starts with a trusted one", {**COMMENT, "repositories": ["acme/*"]},
     lambda h: h.issue_comment(1, "@pi", repository="acme-evil/widgets"), False),
    ("repositories: a fork's pull request is served by its base",
     {"event": "pull_request_review_comment.created", "phrase": "/pi", "repositories": ["acme/*"]},
     lambda h: h.pull_request_review_comment(h.pull_request(2, fork="stranger/widgets"), "/pi"), True),
    ("repositories: a trusted owner's fork of an untrusted base is not",
     {"event": "pull_request_review_comment.created", "phrase": "/pi", "repositories": ["acme/*"]},
     lambda h: h.pull_request_review_comment(h.pull_request(2, fork="acme/widgets", repository="evil/widgets"),
                                             "/pi"), False),
    ("repositories: on.repository is one more exact entry",
     {**COMMENT, "repository": "evil/widgets", "repositories": ["acme/*"]},
     lambda h: h.issue_comment(1, "@pi", repository="evil/widgets"), True),
    ("cron Triggers never match a delivery", {"event": "cron", "schedule": "0 * * * *"},
     lambda h: h.issue_comment(1, "@pi"), False),
]


@pytest.mark.parametrize(("on", "build", "matches"), [m[1:] for m in MATCHING], ids=[m[0] for m in MATCHING])
def test_matching_rules(on: dict[str, Any], build: Callable[[Webhooks], Delivery], matches: bool) -> None:
    cluster = MemoryCluster([trigger("t", **on)])
    running = Running(cluster)
    try:
        sent = running.hooks.send(build(running.hooks))
        assert sent.status == 202, sent.json
        named = core.job_name(core.body_digest(sent.delivery.body), "t")
        assert (sent.json.get("jobs") == [named]) is matches, sent.json
        assert len(cluster.jobs) == (1 if matches else 0)
    finally:
        running.stop()


UNTRUSTED = [
    ("a comment", lambda h: h.issue_comment(3, "@pi fix", repository="evil/widgets")),
    ("a label", lambda h: h.issues_labeled(3, "pi", repository="evil/widgets")),
    ("a fork's review of an untrusted base", lambda h: h.pull_request_review(
        h.pull_request(2, fork="acme/widgets", repository="evil/widgets"), "@pi")),
]


@pytest.mark.parametrize("build", [u[1] for u in UNTRUSTED], ids=[u[0] for u in UNTRUSTED])
def test_a_delivery_from_a_repository_no_trigger_serves_creates_nothing(build: Callable[[Webhooks], Delivery]) -> None:
    cluster = MemoryCluster([
        trigger("fix", "issue_comment.created", phrase="@pi", repositories=["acme/*"]),
        trigger("label", "issues.labeled", label="pi", repositories=["acme/*", "acme-labs/api-*"]),
        trigger("review", "pull_request_review.submitted", phrase="@pi", repository="acme/widgets"),
    ])
    running = Running(cluster)
    try:
        sent = running.hooks.send(build(running.hooks))
        assert sent.status == 202, sent.json
        assert sent.json == {"ignored": "repository not served by any Trigger"}
        assert cluster.jobs == {}
        assert running.counts()["ignored"] == 1
        trusted = running.hooks.send(running.hooks.issue_comment(3, "@pi fix"))
        assert trusted.json["jobs"] == [core.job_name(core.body_digest(trusted.delivery.body), "fix")], trusted.json
        assert list(cluster.jobs) == trusted.json["jobs"]
    finally:
        running.stop()


def test_a_trigger_naming_no_repository_still_serves_every_one(cluster: MemoryCluster) -> None:
    cluster.trigger_objects.append(trigger("acme-only", "issue_comment.created", phrase="@pi",
                                           repositories=["acme/*"]))
    running = Running(cluster)
    try:
        sent = running.hooks.send(running.hooks.issue_comment(3, "@pi fix", repository="elsewhere/widgets"))
        assert sent.json["jobs"] == [core.job_name(core.body_digest(sent.delivery.body), "fix")], sent.json
    finally:
        running.stop()


def test_one_delivery_creates_one_job_per_matching_trigger(cluster: MemoryCluster) -> None:
    cluster.trigger_objects += [trigger("fix-too", "issue_comment.created", phrase="@pi"),
                                trigger("other-repo", "issue_comment.created", phrase="@pi", repository="a/b"),
                                {**trigger("going", "issue_comment.created", phrase="@pi"),
                                 "metadata": {"name": "going", "deletionTimestamp": "2026-01-01T00:00:00Z"}}]
    running = Running(cluster)
    try:
        sent = running.hooks.send(running.hooks.issue_comment(5, "@pi fix"))
        assert sent.json["jobs"] == [core.job_name(core.body_digest(sent.delivery.body), t) for t in ("fix", "fix-too")]
        assert sorted(cluster.jobs) == sorted(sent.json["jobs"])
        assert {j["spec"]["trigger"] for j in cluster.jobs.values()} == {"fix", "fix-too"}
    finally:
        running.stop()


# -- the Job -------------------------------------------------------------------------------------------------
def _only_job(cluster: MemoryCluster) -> dict[str, Any]:
    assert len(cluster.jobs) == 1, cluster.jobs
    return next(iter(cluster.jobs.values()))


def test_job_of_a_label(receiver: Running, cluster: MemoryCluster) -> None:
    sent = receiver.hooks.send(receiver.hooks.issues_labeled(12, "pi", sender="alice"))
    job = _only_job(cluster)
    assert job["apiVersion"] == f"{GROUP}/{VERSION}" and job["kind"] == "Job"
    assert job["metadata"]["labels"] == {"app.kubernetes.io/created-by": "pi-dispatch-receiver"}
    assert job["spec"] == {"trigger": "label", "forge": "github", "repository": "acme/widgets", "issue": 12,
                           "sender": "alice", "deliveryId": sent.delivery.id}


def test_job_of_an_issue_comment(receiver: Running, cluster: MemoryCluster) -> None:
    sent = receiver.hooks.send(receiver.hooks.issue_comment(7, "@pi fix the build", sender="bob"))
    assert _only_job(cluster)["spec"] == {
        "trigger": "fix", "forge": "github", "repository": "acme/widgets", "issue": 7,
        "comment": "@pi fix the build", "sender": "bob", "deliveryId": sent.delivery.id}


def test_job_of_a_comment_on_a_pull_request_names_the_pull_request(receiver: Running, cluster: MemoryCluster) -> None:
    receiver.hooks.send(receiver.hooks.issue_comment(9, "@pi rebase", on_pull_request=True))
    spec = _only_job(cluster)["spec"]
    assert spec["pullRequest"] == 9 and "issue" not in spec
    assert "fork" not in spec, "an issue comment does not say where the head lives: the operator asks the API"


@pytest.mark.parametrize(("kind", "pr", "fork"), [
    ("same repository", {}, False),
    ("a fork", {"fork": "mallory/widgets"}, True),
    ("a deleted fork", {"deleted_fork": True}, True),
    ("the same repository in other case", {"fork": "Acme/Widgets"}, False),
], ids=lambda v: v if isinstance(v, str) else None)
@pytest.mark.parametrize("event", ["pull_request_review", "pull_request_review_comment"])
def test_job_of_a_pull_request_event_carries_the_fork_hint(receiver: Running, cluster: MemoryCluster, event: str,
                                                           kind: str, pr: dict[str, Any], fork: bool) -> None:
    hooks = receiver.hooks
    pull = hooks.pull_request(21, head_ref="topic", **pr)
    delivery = (hooks.pull_request_review(pull, "@pi look") if event == "pull_request_review"
                else hooks.pull_request_review_comment(pull, "@pi look"))
    assert hooks.send(delivery).status == 202
    spec = _only_job(cluster)["spec"]
    assert spec["pullRequest"] == 21 and spec["fork"] is fork and spec["comment"] == "@pi look"
    assert "resolved" not in spec, "the head ref comes from the forge API, never from the payload"


def test_a_long_comment_is_cut_to_the_crds_length(receiver: Running, cluster: MemoryCluster) -> None:
    text = "@pi " + "é" * (core.COMMENT_MAX + 500)
    receiver.hooks.send(receiver.hooks.issue_comment(7, text))
    comment = _only_job(cluster)["spec"]["comment"]
    assert len(comment) == core.COMMENT_MAX == JOB_SPEC_SCHEMA["properties"]["comment"]["maxLength"]
    assert comment == text[:core.COMMENT_MAX]


@pytest.mark.parametrize(("trigger_auth", "receiver_auth", "expected"), [
    ("pat", "app", "pat"), (None, "app", "app"), (None, None, None)],
    ids=["the Trigger's run.auth first", "else the receiver's GITHUB_AUTH_SOURCE", "else none: operator decides"])
def test_auth_source(trigger_auth: str | None, receiver_auth: str | None, expected: str | None) -> None:
    run = {"model": "m", **({"auth": trigger_auth} if trigger_auth else {})}
    cluster = MemoryCluster([trigger("fix", "issue_comment.created", phrase="@pi", run=run)])
    running = Running(cluster, auth_source=receiver_auth)
    try:
        running.hooks.send(running.hooks.issue_comment(7, "@pi"))
        assert _only_job(cluster)["spec"].get("authSource") == expected
    finally:
        running.stop()


# -- names and redelivery ------------------------------------------------------------------------------------
# Names from the Trigger and the body's digest, and replays under new delivery ids: test_receiver_replay.py.


def test_a_redelivery_creates_nothing_new(receiver: Running, cluster: MemoryCluster) -> None:
    hooks = receiver.hooks
    first = hooks.send(hooks.issue_comment(7, "@pi fix"))
    assert first.status == 202 and len(first.json["jobs"]) == 1
    before = copy.deepcopy(cluster.jobs)
    again = hooks.send(first.delivery.redelivered())
    assert again.status == 202
    assert again.json == {"jobs": [], "duplicates": first.json["jobs"]}
    assert cluster.jobs == before
    counts = receiver.counts()
    assert (counts["created"], counts["duplicate"]) == (1, 1)


def test_the_api_server_down_is_503_and_a_redelivery_then_completes(receiver: Running,
                                                                    cluster: MemoryCluster) -> None:
    hooks = receiver.hooks
    cluster.down = True
    failed = hooks.send(hooks.issue_comment(7, "@pi fix"))
    assert failed.status == 503 and "redeliver" in failed.json["error"]
    assert hooks.session.get(f"{receiver.health_url}/readyz", timeout=5).status_code == 503
    assert hooks.session.get(f"{receiver.health_url}/healthz", timeout=5).status_code == 200
    cluster.down = False
    assert hooks.session.get(f"{receiver.health_url}/readyz", timeout=5).status_code == 200
    again = hooks.send(failed.delivery.redelivered())
    assert again.status == 202 and again.json["jobs"] == [core.job_name(core.body_digest(failed.delivery.body), "fix")]
    assert receiver.counts()["failed"] == 1


# -- probes, metrics, logs -----------------------------------------------------------------------------------
def test_metrics_have_closed_labels_only(receiver: Running, cluster: MemoryCluster) -> None:
    hooks = receiver.hooks
    hooks.send(hooks.issue_comment(7, "@pi fix", repository="secret-org/secret-repo", sender="someone"))
    hooks.send(hooks.issue_comment(7, "@pi fix"), secret=b"forged")
    text = hooks.session.get(f"{receiver.health_url}/metrics", timeout=5).text
    labels = set(re.findall(r'(\w+)="([^"]*)"', text))
    assert {name for name, _ in labels} <= {"result", "le"}, labels
    # closed sets: a delivery's results, and the poll mode's answers of the forge (receiver/metrics.py)
    assert {value for name, value in labels if name == "result"} == {r.value for r in Result} | set(POLL_ANSWERS)
    for leak in ("secret-org", "secret-repo", "someone", "@pi"):
        assert leak not in text
    assert re.search(r"^pidispatch_receiver_jobs_created_total 1\.0$", text, re.M)


def test_neither_the_secret_nor_the_body_is_logged(receiver: Running, cluster: MemoryCluster,
                                                   caplog: pytest.LogCaptureFixture,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pidispatch.events import logger as events_logger

    monkeypatch.setattr(events_logger, "propagate", True)  # the CLI's tests may have pointed it at stderr
    caplog.set_level(logging.DEBUG)
    hooks = receiver.hooks
    marker = "@pi zebra-7f3a"
    deliveries = [hooks.issue_comment(7, marker, repository="hidden/place"), hooks.issue_comment(8, marker),
                  hooks.issue_comment(9, marker)]
    hooks.send(deliveries[0])
    hooks.send(deliveries[1], secret=b"forged")
    hooks.send(deliveries[2], body=b"{" + marker.encode())
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "receiver_delivery" in text
    for leak in [SECRET.decode(), "zebra-7f3a", "hidden/place"] + [sign(SECRET, d.body)[7:] for d in deliveries]:
        assert leak not in text
    results = [json.loads(r.getMessage())["result"] for r in caplog.records if "receiver_delivery" in r.getMessage()]
    assert results == ["created", "unauthorized", "malformed"]


def test_a_slow_body_is_cut_off(cluster: MemoryCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from pidispatch.receiver import app

    monkeypatch.setattr(app, "BODY_DEADLINE", 0.5)
    running = Running(cluster)
    try:
        delivery = running.hooks.issue_comment(7, "@pi fix")
        head = request_head(delivery, sign(SECRET, delivery.body), f"Content-Length: {len(delivery.body)}\r\n")
        status, _ = raw_exchange(running.port, head, (delivery.body[:10],))
        assert status == 408 and cluster.jobs == {}
    finally:
        running.stop()


# -- settings and the command --------------------------------------------------------------------------------
def test_settings_defaults_and_values(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(b"s3cret\n")
    s = ReceiverSettings.from_env({"PI_DISPATCH_NAMESPACE": "pi", "GITHUB_WEBHOOK_SECRET_FILE": str(secret_file)})
    assert (s.namespace, s.secret, s.port, s.max_body, s.auth_source) == ("pi", b"s3cret", DEFAULT_PORT,
                                                                           DEFAULT_MAX_BODY, None)
    assert (DEFAULT_PORT, DEFAULT_MAX_BODY) == (8000, 1024 * 1024)
    assert "s3cret" not in repr(s)
    s = ReceiverSettings.from_env({"PI_DISPATCH_NAMESPACE": "pi", "GITHUB_WEBHOOK_SECRET": "inline",
                                   "PI_DISPATCH_RECEIVER_PORT": "9001", "PI_DISPATCH_RECEIVER_MAX_BODY": "2048",
                                   "GITHUB_AUTH_SOURCE": "app"})
    assert (s.secret, s.port, s.max_body, s.auth_source) == (b"inline", 9001, 2048, "app")
    s = ReceiverSettings.from_env({"PI_DISPATCH_NAMESPACE": "pi", "GITHUB_WEBHOOK_SECRET": "x"})
    assert (s.port, s.auth_source) == (DEFAULT_PORT, None), "unset takes the default"
    for name in ("PI_DISPATCH_RECEIVER_PORT", "GITHUB_AUTH_SOURCE"):
        with pytest.raises(ConfigError, match=name):  # empty is refused, never read as unset
            ReceiverSettings.from_env({"PI_DISPATCH_NAMESPACE": "pi", "GITHUB_WEBHOOK_SECRET": "x", name: ""})


BAD_SETTINGS = [
    ("no secret", {}, "GITHUB_WEBHOOK_SECRET"),
    ("empty secret", {"GITHUB_WEBHOOK_SECRET": ""}, "GITHUB_WEBHOOK_SECRET"),
    ("missing secret file", {"GITHUB_WEBHOOK_SECRET_FILE": "/nonexistent/secret"}, "GITHUB_WEBHOOK_SECRET_FILE"),
    ("empty secret file", {"GITHUB_WEBHOOK_SECRET_FILE": "EMPTY"}, "GITHUB_WEBHOOK_SECRET_FILE"),
    ("both secret forms", {"GITHUB_WEBHOOK_SECRET": "x", "GITHUB_WEBHOOK_SECRET_FILE": "FILE"}, "not both"),
    ("no namespace", {"GITHUB_WEBHOOK_SECRET": "x", "PI_DISPATCH_NAMESPACE": ""}, "PI_DISPATCH_NAMESPACE"),
    ("namespace not a name", {"GITHUB_WEBHOOK_SECRET": "x", "PI_DISPATCH_NAMESPACE": "Pi_NS"}, "PI_DISPATCH_NAMESPACE"),
    ("port with a leading zero", {"GITHUB_WEBHOOK_SECRET": "x", "PI_DISPATCH_RECEIVER_PORT": "08000"}, "PORT"),
    ("port zero", {"GITHUB_WEBHOOK_SECRET": "x", "PI_DISPATCH_RECEIVER_PORT": "0"}, "PORT"),
    ("port too high", {"GITHUB_WEBHOOK_SECRET": "x", "PI_DISPATCH_RECEIVER_PORT": "65536"}, "PORT"),
    ("cap in scientific notation", {"GITHUB_WEBHOOK_SECRET": "x", "PI_DISPATCH_RECEIVER_MAX_BODY": "1e6"}, "MAX_BODY"),
    ("cap with a unit", {"GITHUB_WEBHOOK_SECRET": "x", "PI_DISPATCH_RECEIVER_MAX_BODY": "1Mi"}, "MAX_BODY"),
    ("cap too small", {"GITHUB_WEBHOOK_SECRET": "x", "PI_DISPATCH_RECEIVER_MAX_BODY": "10"}, "MAX_BODY"),
    ("unknown auth source", {"GITHUB_WEBHOOK_SECRET": "x", "GITHUB_AUTH_SOURCE": "token"}, "GITHUB_AUTH_SOURCE"),
]


@pytest.mark.parametrize(("env", "named"), [b[1:] for b in BAD_SETTINGS], ids=[b[0] for b in BAD_SETTINGS])
def test_settings_refuse_unusable_values(tmp_path: Path, env: dict[str, str], named: str) -> None:
    (tmp_path / "empty").write_bytes(b"\n")
    (tmp_path / "file").write_bytes(b"from-file")
    env = {k: {"EMPTY": str(tmp_path / "empty"), "FILE": str(tmp_path / "file")}.get(v, v) for k, v in env.items()}
    with pytest.raises(ConfigError) as err:
        ReceiverSettings.from_env({"PI_DISPATCH_NAMESPACE": "pi", **env})
    assert named in str(err.value)


@pytest.mark.parametrize(("env", "named"), [
    ({}, "GITHUB_WEBHOOK_SECRET"),
    ({"GITHUB_WEBHOOK_SECRET": "topsecret-value", "PI_DISPATCH_RECEIVER_PORT": "http"}, "PI_DISPATCH_RECEIVER_PORT"),
    ({"GITHUB_WEBHOOK_SECRET": "topsecret-value", "GITHUB_WEBHOOK_SECRET_FILE": "/x"}, "not both"),
], ids=["no secret", "bad port", "two secrets"])
def test_the_command_exits_2_on_a_configuration_error_without_printing_the_secret(env: dict[str, str],
                                                                                  named: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pidispatch", "receiver"], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "PI_DISPATCH_NAMESPACE": "pi", **env}, timeout=60)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "topsecret-value" not in result.stderr + result.stdout
