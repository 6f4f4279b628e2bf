"""The ``Resumable`` refresh over many keys: one LIST a page at a time, no GET per key, no unchanged
transcript read again, a write only where a status changed, and a listed body that went stale never
overwriting fresher facts. The apiserver is ``testkit.countingapi.CountingApi``; the store is real."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.timers import refresh_sessionkeys
from pidispatch.kubeapi import Api, ApiError
from pidispatch.settings import OperatorSettings
from pidispatch.store import handoff, handoffdir, scanmemo
from testkit.countingapi import SESSIONKEYS, CountingApi
from testkit.memoryapi import NS, MemoryApi
from testkit.store import NOW_MS, Store, sample

KEYS = [f"{i:032x}" for i in range(1, 8)]


@pytest.fixture(autouse=True)
def fresh_memo() -> Iterator[None]:
    scanmemo.MEMO.clear()
    yield
    scanmemo.MEMO.clear()


@pytest.fixture
def api(store: Store) -> CountingApi:
    api = CountingApi()
    for key in KEYS:
        store.put(key=key)
        api.create(SESSIONKEYS, {"metadata": {"name": key}, "spec": {"forge": "github", "repository": "acme/widgets",
                                                                   "branch": "main"}})
    return api


def settings_of(store: Store, tmp_path: Path) -> OperatorSettings:
    return OperatorSettings(store=store.settings, staging_dir=str(tmp_path / "staging"))


def refresh(store: Store, tmp_path: Path, api: CountingApi, busy: set[str] = frozenset()) -> dict[str, int]:  # type: ignore[assignment]
    api.calls = {}
    refresh_sessionkeys(settings_of(store, tmp_path), Cluster(api, NS), set(busy))  # type: ignore[arg-type]
    return api.calls


def status(api: CountingApi, key: str) -> dict[str, Any]:
    return api.get(f"{SESSIONKEYS}/{key}").get("status") or {}


def test_a_refresh_lists_in_pages_writes_only_changes_and_reads_no_unchanged_transcript(
        store: Store, tmp_path: Path, api: CountingApi) -> None:
    first = refresh(store, tmp_path, api)
    assert first == {"LIST": 3, "PATCH": len(KEYS)}, "one LIST per page of 3, no GET, every new status written"
    assert all(status(api, k)["next"] == "resumed" for k in KEYS)
    hits = scanmemo.MEMO.hits
    assert refresh(store, tmp_path, api) == {"LIST": 3}, "nothing changed: nothing written"
    assert scanmemo.MEMO.hits - hits == len(KEYS), "every gate-12 answer came from the memo, none from the bytes"
    # One key expires, one gets a new transcript: exactly those two are written.
    os.utime(store.key_dir(KEYS[0]) / "current.jsonl", ns=(0, 0))
    store.put(sample("s1_after_turn1.jsonl"), key=KEYS[1])
    assert refresh(store, tmp_path, api) == {"LIST": 3, "PATCH": 2}
    assert status(api, KEYS[0])["next"] == "expired"
    assert status(api, KEYS[1])["bytes"] == len(sample("s1_after_turn1.jsonl"))


def test_busy_keys_are_left_to_their_job(store: Store, tmp_path: Path, api: CountingApi) -> None:
    calls = refresh(store, tmp_path, api, busy={KEYS[2]})
    assert calls["PATCH"] == len(KEYS) - 1 and status(api, KEYS[2]) == {}


def test_a_listed_body_gone_stale_never_overwrites_the_facts_a_job_wrote_meanwhile(
        store: Store, tmp_path: Path, api: CountingApi) -> None:
    key = KEYS[3]
    path = f"{SESSIONKEYS}/{key}"

    def job_ends_now(patched: str) -> None:  # between the LIST and the refresh's write of this key
        if patched != path + "/status":
            api.before_patch = job_ends_now  # not this key's write yet: wait for it
            return
        MemoryApi.patch(api, patched, {"status": {"lastJob": "job-that-just-ended"}})

    api.before_patch = job_ends_now
    calls = refresh(store, tmp_path, api)
    assert api.before_patch is None, "the job's write happened"
    assert calls["GET"] == 1, "the conflicting key alone was read again"
    st = status(api, key)
    assert st["lastJob"] == "job-that-just-ended", "the refresh wrote the older facts over the job's"
    assert st["next"] == "resumed", "after the conflict the key was read again and judged"


def test_a_waiting_letter_hashes_its_transcript_once_per_version(store: Store) -> None:
    data = sample("s1_after_turn2.jsonl")
    path = store.put(data)
    key_dir = store.key_dir()
    letter = handoff.render_letter(handoff.parse_handoff({"writer": "agent", "status": "landed", "letter": {},
                                                           "entry": {}}),
                                   job="j1", sha256=hashlib.sha256(data).hexdigest(), size=len(data), session=None,
                                   now_s=NOW_MS / 1000)
    (key_dir / "letter.md").write_text(letter)
    assert handoffdir.describe(str(key_dir))["letter"]["job"] == "j1"
    assert (scanmemo.MEMO.digest_hits, len(scanmemo.MEMO)) == (0, 1)
    assert handoffdir.describe(str(key_dir))["letter"]["job"] == "j1"
    assert scanmemo.MEMO.digest_hits == 1, "the second look used the remembered digest"
    # Rewritten in place, same size and mtime: a new ctime, so a new version, hashed again (and no longer waiting).
    before = os.stat(path)
    with open(path, "r+b") as f:
        f.write(b"X")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert handoffdir.describe(str(key_dir))["letter"] is None
    assert scanmemo.MEMO.digest_hits == 1


def test_the_gate_answer_and_the_digest_share_one_entry_and_one_bound() -> None:
    memo = scanmemo.ScanMemo(capacity=2)
    a, b, c = (scanmemo.pack(1, ino, 10, 20, 30) for ino in (1, 2, 3))
    memo.put_digest(a, b"d" * 32)
    assert memo.get(a) is None, "a digest alone is no gate-12 answer"
    memo.put(a, True)
    assert (memo.get(a), memo.digest(a)) == (True, b"d" * 32)
    memo.put(b, False)
    memo.put_digest(b, b"e" * 32)
    assert (memo.get(b), memo.digest(b)) == (False, b"e" * 32)
    memo.put(c, False)  # a was used least recently
    assert len(memo) == 2 and memo.digest(a) is None and memo.get(a) is None


# ---- kubeapi: pages, and a walk that outlasts its snapshot -------------------------------------------

class ScriptedApi(Api):
    def __init__(self, answers: list[Any]) -> None:
        super().__init__("https://127.0.0.1:1")
        self.answers = answers
        self.queries: list[dict[str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, *, params: dict[str, Any] | None = None,
                content_type: str = "application/json") -> Any:
        self.queries.append(dict(params or {}))
        answer = self.answers.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        return answer


def page(names: list[str], token: str | None) -> dict[str, Any]:
    return {"items": [{"metadata": {"name": n}} for n in names], "metadata": {"continue": token} if token else {}}


def test_pages_are_fetched_as_they_are_consumed() -> None:
    api = ScriptedApi([page(["a", "b"], "t1"), page(["c"], None)])
    walk = api.pages("/x", limit=2)
    assert [i["metadata"]["name"] for i in next(walk)] == ["a", "b"]
    assert len(api.queries) == 1, "the second page is not fetched before the first is done with"
    assert [i["metadata"]["name"] for i in next(walk)] == ["c"]
    assert api.queries == [{"limit": 2}, {"limit": 2, "continue": "t1"}]
    assert next(walk, None) is None


def test_a_walk_that_outlasts_its_snapshot_carries_on_with_the_offered_token() -> None:
    expired = ApiError(410, "GET", "/x", "The provided continue parameter is too old",
                       {"kind": "Status", "reason": "Expired", "metadata": {"continue": "fresh"}})
    api = ScriptedApi([page(["a"], "t1"), expired, page(["b"], None)])
    assert [i["metadata"]["name"] for p in api.pages("/x") for i in p] == ["a", "b"]
    assert [q.get("continue") for q in api.queries] == [None, "t1", "fresh"]


def test_a_410_without_a_token_is_raised() -> None:
    api = ScriptedApi([page(["a"], "t1"), ApiError(410, "GET", "/x", "gone", {"kind": "Status"})])
    with pytest.raises(ApiError):
        [i for p in api.pages("/x") for i in p]
    assert Api.list(ScriptedApi([page(["a"], "t"), page(["b"], None)]), "/x") == [
        {"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]


def test_the_next_page_is_fetched_while_this_one_is_judged_and_its_error_comes_in_its_place() -> None:
    from pidispatch.jobflow.timers import _ahead

    fetched: list[int] = []

    def pages() -> Iterator[list[dict[str, Any]]]:
        for n in range(3):
            fetched.append(n)
            yield [{"n": n}]
        raise ApiError(500, "GET", "/x", "the fourth page failed")

    walk = _ahead(pages())
    assert next(walk) == [{"n": 0}]
    deadline = time.monotonic() + 5
    while len(fetched) < 2 and time.monotonic() < deadline:  # the prefetch runs in its own thread: poll for it
        time.sleep(0.01)
    assert fetched == [0, 1], "the second page was not fetched ahead, or more than one page was"
    assert next(walk) == [{"n": 1}] and next(walk) == [{"n": 2}]
    with pytest.raises(ApiError):
        next(walk)
