"""Which comments start a job: the phrase as a mention in visible prose, never the jobs' own comments,
and GitHub's form-encoded webhooks as well as JSON ones.

GitHub's own example payloads (``tests/data/webhooks/``, from ``@octokit/webhooks-examples``) carry
hand-made bodies through the real receiver on a loopback socket (``tests/receiver/test_receiver.py``'s harness):
each bad case of issue 15 item 3 starts nothing, each ordinary way of writing ``@pi`` starts a job. The
matcher itself (``receiver/mention.py``) is then held to properties over generated text.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pidispatch.receiver.inline import shown
from pidispatch.receiver.mention import mentions, phrase_in, prose_paragraphs
from pidispatch.receiver.settings import ReceiverSettings
from pidispatch.receiver.signature import sign
from pidispatch.settings import ConfigError
from testkit.fakegithub import Delivery
from testkit.mentions import A_MENTION, NOT_A_MENTION
from testkit.receiver import SECRET, MemoryCluster, Running, trigger

IGNORE_LOGINS = "PI_DISPATCH_RECEIVER_IGNORE_LOGINS"
EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "webhooks"
# X-GitHub-Event → (example file, the object whose body is the text, the Trigger's event)
TEXT_EXAMPLES = {
    "issue_comment": ("issue_comment.created.json", "comment", "issue_comment.created"),
    "pull_request_review": ("pull_request_review.submitted.json", "review", "pull_request_review.submitted"),
    "pull_request_review_comment": ("pull_request_review_comment.created.json", "comment",
                                    "pull_request_review_comment.created"),
}


def example(name: str) -> dict[str, Any]:
    return json.loads((EXAMPLES / name).read_text())


def written(event: str, text: str | None, *, sender: str | None = None, bot: bool = False) -> Delivery:
    """GitHub's example ``event`` payload with its comment or review body set to ``text``."""
    file, writing, _ = TEXT_EXAMPLES[event]
    payload = example(file)
    payload[writing]["body"] = text
    if sender is not None:
        payload["sender"] = {**payload["sender"], "login": sender, "type": "Bot" if bot else "User"}
        payload[writing]["user"] = copy.deepcopy(payload["sender"])
    return Delivery(event, payload)


@pytest.fixture
def served() -> Any:
    started: list[Running] = []

    def start(**options: Any) -> Running:
        cluster = MemoryCluster([trigger(f"t-{event.replace('_', '-')}", on_event, phrase="@pi")
                                 for event, (_, _, on_event) in TEXT_EXAMPLES.items()]
                                + [trigger("slash", "issue_comment.created", phrase="/pi run"),
                                   trigger("bug", "issues.labeled", label="bug")])
        started.append(Running(cluster, **options))
        return started[-1]

    yield start
    for running in started:
        running.stop()


# -- GitHub's examples as they are ---------------------------------------------------------------------------
def test_githubs_own_examples_parse_and_start_only_what_they_say(served: Any) -> None:
    running = served()
    for event, (file, _, _) in TEXT_EXAMPLES.items():
        sent = running.hooks.send(Delivery(event, example(file)))
        assert sent.status == 202 and "no Trigger matches" in sent.json["ignored"], (event, sent.json)
    labeled = running.hooks.send(Delivery("issues", example("issues.labeled.json")))
    assert labeled.status == 202 and len(labeled.json["jobs"]) == 1, labeled.json
    assert [j["spec"]["repository"] for j in running.cluster.jobs.values()] == ["Codertocat/Hello-World"]


# -- the phrase in visible prose -----------------------------------------------------------------------------


@pytest.mark.parametrize("event", list(TEXT_EXAMPLES))
@pytest.mark.parametrize("text", [c[1] for c in NOT_A_MENTION], ids=[c[0] for c in NOT_A_MENTION])
def test_the_phrase_outside_visible_prose_starts_nothing(served: Any, event: str, text: str) -> None:
    running = served()
    sent = running.hooks.send(written(event, text))
    assert sent.status == 202 and "no Trigger matches" in sent.json.get("ignored", ""), sent.json
    assert running.cluster.jobs == {}


@pytest.mark.parametrize("event", list(TEXT_EXAMPLES))
@pytest.mark.parametrize("text", [c[1] for c in A_MENTION], ids=[c[0] for c in A_MENTION])
def test_the_phrase_as_a_mention_starts_a_job(served: Any, event: str, text: str) -> None:
    running = served()
    sent = running.hooks.send(written(event, text))
    assert sent.status == 202 and len(sent.json.get("jobs", [])) == 1, sent.json
    [job] = running.cluster.jobs.values()
    assert job["spec"]["comment"] == text, "the Job carries the comment as written"


@pytest.mark.parametrize(("text", "matches"), [
    ("/pi run the tests", True), ("please\n/pi run", True), ("src/pi run", False), ("`/pi run`", False),
    ("> /pi run", False), ("/pi running", False), ("/pi run.", True)],
    ids=["at the start", "on its own line", "a path", "code", "quoted", "a longer word", "a sentence end"])
def test_a_phrase_that_is_not_a_mention_matches_as_whole_words(served: Any, text: str, matches: bool) -> None:
    running = served()
    sent = running.hooks.send(written("issue_comment", text))
    assert [j["spec"]["trigger"] for j in running.cluster.jobs.values()] == (["slash"] if matches else []), sent.json


# -- the jobs' own comments ----------------------------------------------------------------------------------
def test_a_comment_by_the_jobs_own_login_starts_nothing(served: Any) -> None:
    """Under a pat or gh token the agent comments as a person's account; quoting ``@pi`` must not loop."""
    running = served(ignore_logins=("pi-agent",))
    for event in TEXT_EXAMPLES:
        for login in ("pi-agent", "Pi-Agent"):  # GitHub logins ignore case
            sent = running.hooks.send(written(event, "Done. Say @pi again to continue.", sender=login))
            assert sent.status == 202 and "own login" in sent.json["ignored"], sent.json
    assert running.cluster.jobs == {}
    other = running.hooks.send(written("issue_comment", "@pi continue", sender="octocat"))
    assert len(other.json["jobs"]) == 1, "anyone else's comment still counts"


def test_the_apps_bot_starts_nothing_whatever_the_auth_source(served: Any) -> None:
    running = served(auth_source="app")
    sent = running.hooks.send(written("issue_comment", "@pi continue", sender="pi-dispatch[bot]", bot=True))
    assert sent.status == 202 and "bot" in sent.json["ignored"] and running.cluster.jobs == {}


def test_ignore_logins_setting_is_parsed_strictly() -> None:
    base = {"PI_DISPATCH_NAMESPACE": "pi", "GITHUB_WEBHOOK_SECRET": "x"}
    assert ReceiverSettings.from_env(base).ignore_logins == ()
    parsed = ReceiverSettings.from_env({**base, IGNORE_LOGINS: "pi-agent, octo-bot[bot],Someone"})
    assert parsed.ignore_logins == ("pi-agent", "octo-bot[bot]", "Someone")
    for bad in ("", " ", "pi-agent,", ",pi-agent", "pi agent", "-pi", "a" * 40, "pi-agent;rm", "pi[Bot]"):
        with pytest.raises(ConfigError, match=IGNORE_LOGINS):
            ReceiverSettings.from_env({**base, IGNORE_LOGINS: bad})


# -- form-encoded webhooks -----------------------------------------------------------------------------------
def test_a_form_encoded_delivery_creates_its_job(served: Any) -> None:
    running = served()
    delivery = written("issue_comment", "@pi fix + check 100% of it & more")
    sent = running.hooks.send(delivery, form=True)
    assert sent.status == 202 and len(sent.json["jobs"]) == 1, sent.json
    [job] = running.cluster.jobs.values()
    assert job["spec"]["comment"] == "@pi fix + check 100% of it & more", "'+', '%' and '&' decoded once"


def test_a_form_encoded_ping_passes(served: Any) -> None:
    running = served()
    sent = running.hooks.send(Delivery("ping", example("ping.json")), form=True)
    assert sent.status == 202 and "ping" in sent.json["ignored"], sent.json


def test_a_form_encoded_delivery_is_verified_over_its_raw_body(served: Any) -> None:
    running = served()
    delivery = written("issue_comment", "@pi fix")
    # Signed over the JSON inside instead of the bytes sent: what a receiver that verified after decoding
    # would accept.
    sent = running.hooks.send(delivery, form=True, signature_header=sign(SECRET, delivery.body))
    assert sent.status == 401 and running.cluster.jobs == {}


@pytest.mark.parametrize("body", [
    b"payload=%7Bnot+json", b"payload", b"other=%7B%7D", b"payload=%7B%7D&payload=%7B%7D", b"payload=%7B%7D&x=1",
    b"payload=%FF", b"\xffpayload=%7B%7D", b""],
    ids=["not JSON", "no value", "another field", "two payloads", "an extra field", "not UTF-8", "not ASCII",
         "empty"])
def test_a_form_encoded_body_that_is_not_one_payload_field_is_400(served: Any, body: bytes) -> None:
    running = served()
    sent = running.hooks.send(written("issue_comment", "@pi fix"), body=body,
                              headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert sent.status == 400, sent.json
    assert running.cluster.jobs == {}


# -- the matcher's properties --------------------------------------------------------------------------------
# Markdown's own pieces, so that the generated text is mostly quotes, fences, spans and comments.
_PIECES = list("@pi.-/_ \n\t>`~<!-*x1") + ["@pi", "```", "~~~", "<!--", "-->", "    ", "\r\n"]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=40).map("".join) | st.text(max_size=60)
_LINE = st.text(alphabet=st.characters(blacklist_characters="\n\r`<~"), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_TEXT)
def test_a_mention_is_always_a_substring_and_never_crashes(text: str) -> None:
    for phrase in ("@pi", "/pi run", "pi"):
        assert not mentions(text, phrase) or phrase in text
    assert "\n".join(prose_paragraphs(text)).count("@pi") <= text.count("@pi")
    for paragraph in prose_paragraphs(text):
        assert len(shown(paragraph)) <= len(paragraph) + 1


@settings(max_examples=300, deadline=None)
@given(_LINE)
def test_wrapping_text_in_code_quotes_or_comments_hides_it(line: str) -> None:
    text = f"{line} @pi {line}"
    for hidden in (f"`{text}`", f"```\n{text}\n```", f"~~~\n{text}\n~~~", f"> {text}", f"\n    {text}"):
        assert not mentions(hidden, "@pi"), hidden
    if "-->" not in text:
        assert not mentions(f"<!--{text}-->", "@pi")


@pytest.mark.parametrize(("text", "found"), [
    ("@pi", True), ("@pi!", True), ("@pi?", True), ("@pi:", True), ("'@pi'", True), ('"@pi"', True),
    ("x@pi", False), ("@@pi", False), (".@pi", False), ("-@pi", False), ("@pi0", False), ("@pié", False),
    ("é@pi", False), ("@pi.x", False), ("@pi..", True), ("@pi.-", True)])
def test_phrase_boundaries(text: str, found: bool) -> None:
    assert phrase_in(text, "@pi") is found
