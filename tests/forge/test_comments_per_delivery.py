"""One refusal comment per delivery (issue 15, item 5), against the local fake GitHub API, no cluster.

What is proven: one delivery that matched two Triggers (two refused Jobs, one ``spec.deliveryId``)
posts one comment, whichever Job comes first, also when both are handled at once; a comment posted
under the earlier, uid-keyed marker is still recognised; a Job without a delivery id keys on its uid;
a delivery id that could close the hidden HTML comment is hashed; two deliveries post two comments.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.views import JobView
from pidispatch.forge.comments import has_marker, marker, refusal_comment
from pidispatch.forge.github import Forge
from pidispatch.jobflow.comment import comment_refusal
from pidispatch.record import JobReason
from pidispatch.settings import GitHubSettings
from testkit.fakegithub_api import FakeGitHubAPI

ROOT = Path(__file__).resolve().parents[2]

REPO = "acme/widgets"
APP_ID, INSTALLATION = 4242, 77
DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"  # GitHub's X-GitHub-Delivery form


@pytest.fixture
def fake(app_key: tuple[Path, Any]):
    with FakeGitHubAPI(app_id=APP_ID, public_key=app_key[1], installation_id=INSTALLATION,
                       installation_repos=(REPO,)) as api:
        yield api


@pytest.fixture
def forge(fake: FakeGitHubAPI, app_key: tuple[Path, Any]) -> Forge:
    return Forge(GitHubSettings(api_url=fake.url, app_id=APP_ID, app_installation_id=INSTALLATION,
                                app_private_key_file=str(app_key[0]), timeout_seconds=5), "app")


def refused_job(uid: str, trigger: str, issue: int, delivery: str | None = DELIVERY,
                reason: str = JobReason.SESSIONS_DIR_UNSET) -> JobView:
    spec: dict[str, Any] = {"trigger": trigger, "forge": "github", "repository": REPO, "issue": issue}
    if delivery is not None:
        spec["deliveryId"] = delivery
    return JobView.of({"metadata": {"name": f"{trigger}-{uid}", "uid": uid}, "spec": spec,
                       "status": {"phase": "Refused", "reason": reason, "conditions": [],
                                  "completedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}})


def posted(fake: FakeGitHubAPI, issue: int) -> list[str]:
    return [c["body"] for c in fake.comments(REPO, issue) if c["user"]["login"] != "octocat"]


@pytest.mark.parametrize("reasons", [
    (JobReason.SESSIONS_DIR_UNSET, JobReason.SESSIONS_DIR_UNSET),
    (JobReason.SESSIONS_DIR_UNSET, JobReason.CONFIG_REFUSED),
], ids=["both Triggers refused for the same reason", "for different reasons"])
def test_one_delivery_matching_two_triggers_posts_one_comment(fake: FakeGitHubAPI, forge: Forge,
                                                              reasons: tuple[str, str]) -> None:
    fake.add_comment(REPO, 7, "@pi fix it")
    first = comment_refusal(forge, refused_job("uid-a", "fix", 7, reason=reasons[0]))
    second = comment_refusal(forge, refused_job("uid-b", "review", 7, reason=reasons[1]))
    assert (first and first.reason, second and second.reason) == ("Posted", "AlreadyPosted")
    [body] = posted(fake, 7)
    assert marker("uid-a", DELIVERY) in body and "uid-a" not in body, "keyed on the delivery, not the Job"
    assert len(fake.calls("POST", f"/repos/{REPO}/issues/7/comments")) == 1


def test_two_jobs_of_one_delivery_handled_at_once_post_one_comment(fake: FakeGitHubAPI, forge: Forge) -> None:
    jobs = [refused_job(f"uid-{i}", f"trigger-{i}", 8) for i in range(4)]
    results: list[Any] = []
    start = threading.Barrier(len(jobs))

    def run(job: dict[str, Any]) -> None:
        start.wait()
        results.append(comment_refusal(forge, job))

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(r.reason for r in results) == ["AlreadyPosted"] * 3 + ["Posted"]
    assert len(posted(fake, 8)) == 1


def test_a_comment_under_the_earlier_uid_marker_is_not_posted_again(fake: FakeGitHubAPI, forge: Forge) -> None:
    fake.add_comment(REPO, 9, "pi-dispatch did not run this job.\n" + marker("uid-old") + "\n",
                     login="pi-dispatch[bot]")
    done = comment_refusal(forge, refused_job("uid-old", "fix", 9))
    assert done is not None and done.reason == "AlreadyPosted", "an upgrade does not post a second comment"
    assert fake.calls("POST", f"/repos/{REPO}/issues/9/comments") == []


def test_a_job_without_a_delivery_id_keys_on_its_uid(fake: FakeGitHubAPI, forge: Forge) -> None:
    assert comment_refusal(forge, refused_job("uid-x", "fix", 10, delivery=None)).reason == "Posted"
    assert comment_refusal(forge, refused_job("uid-y", "fix", 10, delivery=None)).reason == "Posted"
    bodies = posted(fake, 10)
    assert len(bodies) == 2 and marker("uid-x") in bodies[0] and marker("uid-y") in bodies[1]


def test_two_deliveries_post_two_comments(fake: FakeGitHubAPI, forge: Forge) -> None:
    assert comment_refusal(forge, refused_job("uid-1", "fix", 11, delivery="d-1")).reason == "Posted"
    assert comment_refusal(forge, refused_job("uid-2", "fix", 11, delivery="d-2")).reason == "Posted"
    assert len(posted(fake, 11)) == 2


@pytest.mark.parametrize("delivery", ["x --> visible <b>text</b>", "a\nb", "ü" * 10, "x" * 101],
                         ids=["closes the HTML comment", "a newline", "non-ASCII", "too long to show"])
def test_an_odd_delivery_id_is_hashed_into_the_marker(delivery: str) -> None:
    line = marker("uid", delivery)
    assert line.startswith("<!-- pi-dispatch:delivery=sha256-") and line.endswith(" -->")
    assert line.count("-->") == 1 and delivery not in line
    assert marker("uid", delivery) == line and marker("uid", delivery + "!") != line
    body = refusal_comment(JobReason.CONFIG_REFUSED, "fix", "uid", delivery)
    assert body is not None and has_marker([{"body": body}], "other-uid", delivery)
