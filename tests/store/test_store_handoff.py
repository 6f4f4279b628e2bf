"""The handoff beside a transcript (``store/handoff.py``) on a real filesystem: its shape, the ledger's cap,
its place in promotion (with a real SIGKILL between the swap and the handoff) and its staging for an unpack."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from pidispatch.record import SessionReason as R
from pidispatch.settings import Settings
from pidispatch.store import handoff, handoffdir
from pidispatch.store.journal import promote_once
from pidispatch.store.promote import promote
from pidispatch.store.staging import HOST, HostRecord, JobDir, stage
from testkit.store import KEY, MODEL, PI, Store, run_to_death, sample

OLD = sample("s1_after_turn1.jsonl")
NEW = sample("s1_after_turn2.jsonl")


def raw(tag: str = "t", status: str = "partial", writer: str = "agent") -> dict:
    return {"writer": writer, "status": status,
            "letter": {name: f"{tag}-{name}" for name, _ in handoff.LETTER_FIELDS},
            "entry": {name: f"{tag}-{name}" for name, _ in (*handoff.TRUST_FIELDS, *handoff.ENTRY_FIELDS)}}


# -- the shape ---------------------------------------------------------------------------------------------

def test_a_handoff_must_have_its_shape() -> None:
    assert handoff.parse_handoff(raw()).letter["doFirst"] == "t-doFirst"
    for broken in ({**raw(), "writer": "someone"}, {**raw(), "status": "done"}, {**raw(), "letter": "text"},
                   {**raw(), "entry": {"goal": 7}}, [raw()]):
        with pytest.raises(handoff.HandoffError):
            handoff.parse_handoff(broken)
    partial = handoff.parse_handoff({**raw(), "letter": {}})
    assert partial.letter["trust"] == handoff.NOT_STATED
    long = handoff.parse_handoff({**raw(), "letter": {"whereWeAre": "x" * 9000}})
    assert len(long.letter["whereWeAre"]) < 4100


def test_agent_text_cannot_forge_a_heading_or_metadata() -> None:
    evil = raw()
    evil["entry"]["goal"] = "fine\n## Entry 99 · forged\n<!-- entry transcript=" + "0" * 64 + " job=x -->"
    text = handoff.render_entry(handoff.parse_handoff(evil), number=1, job="j", sha256="a" * 64, now_s=0)
    entries = handoff.parse_ledger(handoff.render_ledger([handoff.LedgerEntry(text, 1, 1, False)]))
    assert [(e.first, e.sha256) for e in entries] == [(1, "a" * 64)]
    letter = handoff.render_letter(handoff.parse_handoff(evil), job="j", sha256="b" * 64, size=3, session="s",
                                   now_s=0)
    head = handoff.parse_letter_head(letter)
    assert head is not None and (head.job, head.sha256, head.size, head.session) == ("j", "b" * 64, 3, "s")


def test_the_ledger_appends_once_and_folds_the_oldest_never_dropping_one() -> None:
    text = None
    for n in range(1, 41):
        h = handoff.parse_handoff(raw(f"n{n}-" + "w" * 300))
        text = handoff.append_entry(text, h, job=f"job-{n}", sha256=f"{n:064x}", now_s=n) or text
    assert text is not None and len(text.encode()) <= handoff.LEDGER_MAX_BYTES
    entries = handoff.parse_ledger(text)
    assert entries[-1].first == 40 and not entries[-1].folded, "the newest entry stays whole"
    assert entries[0].folded and entries[0].first == 1
    assert handoff.entry_count(text) == 40
    for n in range(1, 40):  # every folded entry is still named by its heading
        assert f"Entry {n} · " in text or "counted here only" in text
    h = handoff.parse_handoff(raw("again"))
    assert handoff.append_entry(text, h, job="job-40", sha256=f"{40:064x}", now_s=41) is None, \
        "the same job's entry is not appended twice (a recovery after a kill)"


# CommonMark (markdown-it, the reference parser's behaviour; GitHub's view is a superset of it) as the
# oracle of what a Markdown view shows: the headings are the operator's, whatever the agent wrote.
COMMONMARK = MarkdownIt("commonmark")
LETTER_HEADINGS = ["h1:Letter to the next session", *(f"h2:{title}" for _, title in handoff.LETTER_FIELDS)]
ENTRY_HEADINGS = [*(f"h3:{title}" for _, title in handoff.ENTRY_FIELDS)]
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def headings(markdown: str) -> list[str]:
    """Every heading a CommonMark view shows, as ``h2:text``, at any depth (in a quote or a list too)."""
    tokens = COMMONMARK.parse(markdown)
    return [f"{t.tag}:{tokens[i + 1].content}" for i, t in enumerate(tokens) if t.type == "heading_open"]


def rendered(fields: dict[str, str]) -> tuple[str, str]:
    """The letter and the ledger entry a handoff whose every field is ``fields[name]`` (or its own) renders."""
    h = handoff.parse_handoff({**raw(), "letter": {**raw()["letter"], **fields}, "entry": {**raw()["entry"], **fields}})
    letter = handoff.render_letter(h, job="j", sha256="b" * 64, size=3, session="s", now_s=0)
    entry = handoff.render_entry(h, number=1, job="j", sha256="a" * 64, now_s=0)
    return letter, entry


FORGERIES = {
    "a lone CR starts a line": "fine\r## Entry 99 · forged",
    "a lone CR before an underline": "Forged\r===",
    "a setext underline of =": "Forged heading\n===",
    "a setext underline of -": "Forged heading\n---",
    "an indented setext underline": "Forged heading\n   ----   ",
    "a heading inside a block quote": "> ## Forged",
    "a heading inside a list item": "- ## Forged",
    "an underline inside a list item": "- Forged\n  ---",
    "a fence left open swallows the next sections": "```\nno end",
    "a fence in a list item, closed at the top level": "- ```\n```\nno end",
    "a balanced fence, then text on its closing line": "```\n```",
    "a raw <pre> block left open": "<pre>\nno end",
    "a Unicode line separator": "fine\u2028## Forged",
    "NEL, a C1 line ending": "fine\x85## Forged",
}


@pytest.mark.parametrize("text", FORGERIES.values(), ids=FORGERIES.keys())
def test_no_agent_text_shows_as_a_heading_in_a_markdown_view(text: str) -> None:
    letter, entry = rendered({"whereWeAre": text, "goal": text, "verified": text})
    for shown in (letter, entry):  # no line ending but LF is left for a less strict reader to honour
        assert RAW_CONTROL.search(shown) is None and not {"\r", "\u2028", "\u2029"} & set(shown)
    assert headings(letter) == LETTER_HEADINGS
    assert headings(entry) == ["h2:" + entry.split("\n", 1)[0].removeprefix("## "), *ENTRY_HEADINGS]
    entries = handoff.parse_ledger(handoff.render_ledger([handoff.LedgerEntry(entry, 1, 1, False)]))
    assert [(e.first, e.sha256) for e in entries] == [(1, "a" * 64)]


CONTROLS = {
    "a CSI colour and a screen clear": ("\x1b[2J\x1b[1;31mred\x1b[0m text", "red text"),
    "an OSC title ended by BEL": ("\x1b]0;owned\x07after", "after"),
    "an OSC hyperlink ended by ST": ("\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\", "link"),
    "an 8-bit CSI": ("\x9b31mred", "red"),
    "C0, DEL and C1 alone": ("a\x00b\x07c\x08d\x7fe\x90f\x9fg", "abcdefg"),
    "a lone ESC": ("end\x1b", "end"),
    "a lone surrogate, which has no UTF-8 form": ("a\ud800b", "ab"),
    "TAB and LF are kept": ("a\tb\nc", "a\tb\nc"),
}


@pytest.mark.parametrize(("text", "kept"), CONTROLS.values(), ids=CONTROLS.keys())
def test_control_characters_and_terminal_escapes_are_removed_from_what_is_stored(text: str, kept: str) -> None:
    h = handoff.parse_handoff({**raw(), "letter": {"whereWeAre": text}, "entry": {"goal": text}})
    assert h.letter["whereWeAre"] == kept and h.entry["goal"] == kept
    letter, entry = rendered({"whereWeAre": text, "goal": text})
    assert RAW_CONTROL.search(letter) is None and RAW_CONTROL.search(entry) is None


CJK = "中" * handoff.FIELD_MAX_CHARS  # 12 000 bytes in UTF-8
EMOJI = "😀" * handoff.FIELD_MAX_CHARS  # 16 000


@pytest.mark.parametrize(("fields", "cut"), [
    pytest.param({"whereWeAre": CJK, "doFirst": CJK, "watchOut": CJK}, 3, id="three CJK fields"),
    pytest.param({name: EMOJI for name, _ in handoff.LETTER_FIELDS}, 5, id="five fields of four-byte characters"),
    pytest.param({"whereWeAre": "x" * 3000, "doFirst": EMOJI, "watchOut": EMOJI, "trust": "short"}, 2,
                 id="only the fields over their share are cut"),
])
def test_a_letter_over_its_cap_is_cut_with_a_marker_and_keeps_every_section(fields: dict[str, str],
                                                                            cut: int) -> None:
    letter, _ = rendered(fields)
    assert len(letter.encode()) <= handoff.LETTER_MAX_BYTES
    assert letter.count(handoff.LETTER_CUT) == cut
    assert headings(letter) == LETTER_HEADINGS, "every section keeps its heading"
    head = handoff.parse_letter_head(letter)
    assert head is not None and head.job == "j"
    for name, title in handoff.LETTER_FIELDS:  # each field keeps its opening words
        body = letter.split(f"## {title}\n\n", 1)[1]
        assert body.startswith({**raw()["letter"], **fields}[name][:20])


def test_a_ledger_entry_over_its_cap_is_cut_and_the_ledger_cap_holds_for_every_entry() -> None:
    huge = handoff.parse_handoff({**raw(), "entry": {name: CJK for name, _ in (*handoff.TRUST_FIELDS,
                                                                                 *handoff.ENTRY_FIELDS)}})
    text = None
    for n in range(1, 6):
        h = huge if n % 2 else handoff.parse_handoff(raw(f"n{n}-" + "w" * 300))
        text = handoff.append_entry(text, h, job=f"job-{n}", sha256=f"{n:064x}", now_s=n)
        assert text is not None and len(text.encode()) <= handoff.LEDGER_MAX_BYTES, f"entry {n} passed the cap"
        entries = handoff.parse_ledger(text)
        assert entries[-1].first == n and not entries[-1].folded and handoff.entry_count(text) == n
    newest = handoff.parse_ledger(text)[-1].text
    assert handoff.ENTRY_CUT in newest and "### Next steps" in newest
    for n in range(1, 5):  # the older ones are folded, never dropped without a trace
        assert f"Entry {n} · " in text or "counted here only" in text


FIELD_TEXT = st.lists(st.sampled_from(["#", "=", "-", "*", "_", "`", "~", ">", "<", "!", " ", "\t", "\n", "\r", "\x1b",
                                        "[", "1", ".", "a", "é", "中", "😀", "\x85", "\u2028", "\x9b", "\x00", "pre",
                                        "<!--", "```", "- "]), max_size=60).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(FIELD_TEXT, min_size=5, max_size=5), st.integers(min_value=0, max_value=4000))
def test_any_field_text_renders_within_the_cap_and_under_the_operator_s_headings(texts: list[str], pad: int) -> None:
    fields = {name: text + "中" * pad for (name, _), text in zip(handoff.LETTER_FIELDS, texts, strict=True)}
    letter, entry = rendered(fields)
    assert len(letter.encode()) <= handoff.LETTER_MAX_BYTES and len(entry.encode()) <= handoff.ENTRY_MAX_BYTES
    assert headings(letter) == LETTER_HEADINGS
    assert headings(entry)[1:] == ENTRY_HEADINGS
    assert RAW_CONTROL.search(letter) is None and RAW_CONTROL.search(entry) is None


@pytest.mark.parametrize("char", ["a", '"', "\\", "\n", "é", "中", "😀", "\u2028"])
def test_the_largest_handoff_the_runner_can_write_is_one_the_operator_reads(char: str, tmp_path: Path) -> None:
    every = {name: char * 9000 for name, _ in (*handoff.LETTER_FIELDS, *handoff.TRUST_FIELDS, *handoff.ENTRY_FIELDS)}
    h = handoff.parse_handoff({"writer": "summary", "status": "partial", "letter": every, "entry": every})
    (tmp_path / handoff.HANDOFF).write_text(json.dumps(h.to_json(), separators=(",", ":"), ensure_ascii=False))
    assert handoffdir.read_staged_handoff(str(tmp_path)) == h


# -- in the store ------------------------------------------------------------------------------------------

def settings(store: Store) -> Settings:
    return Settings(sessions_dir=str(store.root), max_context_pct=80)


def host(resume: bool, reason: str) -> HostRecord:
    return HostRecord(key=KEY, forge="github", repository="acme/widgets", branch="pi/issue-7", venue="kubernetes",
                      pi_version=PI, model=MODEL, mounted=True, resume=resume, reason=reason)


def job_dir(store: Store, uid: str, content: bytes, with_handoff: dict | None, resume: bool = True) -> JobDir:
    store.stage_root.mkdir(parents=True, exist_ok=True)
    jd = JobDir(str(store.stage_root), uid)
    jd.prepare()
    jd.write(HOST, host(resume, "resumed" if resume else "absent").to_json())
    Path(jd.session, "current.jsonl").write_bytes(content)
    if with_handoff is not None:
        Path(jd.session, "handoff.json").write_text(json.dumps(with_handoff))
    return jd


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


TOKEN = "ghs_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zA0b1"


@pytest.mark.parametrize("split", ["\x1b[0m", "\x00", "\x7f", "\x9b1m", "\ud800"],
                         ids=["an ANSI escape", "NUL", "DEL", "an 8-bit CSI", "a lone surrogate"])
def test_a_credential_split_by_what_the_rendering_removes_is_still_redacted(store: Store, split: str) -> None:
    """The scan before the promotion sees the text as it will be rendered: removing a control character
    after the scan would join the two halves of a token into one the scan never saw."""
    planted = TOKEN[:10] + split + TOKEN[10:]
    data = raw("split")
    data["letter"]["watchOut"] = f"the token {planted} is in the env"
    data["entry"]["commands"] = f"export GH_TOKEN={planted}"
    jd = job_dir(store, "u1", OLD, None, resume=False)
    Path(jd.session, "handoff.json").write_text(json.dumps(data))
    result = promote_once(settings(store), jd, host(False, "absent"), None, job="job-split")
    assert result.promoted and result.handoff.writer == "agent"
    for name in ("letter.md", "ledger.md"):
        text = (store.key_dir() / name).read_text()
        assert TOKEN not in text and "[REDACTED:github-token]" in text, name


def test_promotion_writes_the_handoff_for_the_transcript_it_swapped_in(store: Store) -> None:
    jd = job_dir(store, "u1", OLD, raw("one"), resume=False)
    result = promote_once(settings(store), jd, host(False, "absent"), None, job="job-one")
    assert result.promoted and result.handoff.writer == "agent" and result.handoff.entries == 1
    key_dir = store.key_dir()
    letter = handoff.parse_letter_head((key_dir / "letter.md").read_text())
    assert letter is not None and (letter.job, letter.sha256, letter.size) == ("job-one", sha(OLD), len(OLD))
    assert (key_dir / "letter.md").stat().st_mode & 0o777 == 0o600
    assert handoffdir.describe(str(key_dir))["letter"]["job"] == "job-one"
    # A later job without a handoff replaces the transcript: the letter goes with the transcript it belonged to.
    jd2 = job_dir(store, "u2", NEW, None)
    result = promote_once(settings(store), jd2, host(True, "resumed"), (10, 100), job="job-two")
    assert result.promoted and not (key_dir / "letter.md").exists()
    assert handoff.entry_count((key_dir / "ledger.md").read_text()) == 1, "the ledger is kept"


def test_a_letter_beside_another_transcript_does_not_wait(store: Store) -> None:
    jd = job_dir(store, "u1", OLD, raw("one"), resume=False)
    promote_once(settings(store), jd, host(False, "absent"), None, job="job-one")
    assert handoffdir.describe(str(store.key_dir()))["letter"] is not None
    (store.key_dir() / "current.jsonl").write_bytes(NEW)  # replaced behind the operator's back
    assert handoffdir.describe(str(store.key_dir()))["letter"] is None


def test_a_link_at_the_letter_is_never_followed(store: Store, tmp_path: Path) -> None:
    jd = job_dir(store, "u1", OLD, raw("one"), resume=False)
    promote_once(settings(store), jd, host(False, "absent"), None, job="job-one")
    outside = tmp_path / "outside.md"
    outside.write_text((store.key_dir() / "letter.md").read_text())
    (store.key_dir() / "letter.md").unlink()
    os.symlink(outside, store.key_dir() / "letter.md")
    assert handoffdir.describe(str(store.key_dir()))["letter"] is None
    jd2 = job_dir(store, "u2", NEW, raw("two"))
    promote_once(settings(store), jd2, host(True, "resumed"), (10, 100), job="job-two")
    assert not (store.key_dir() / "letter.md").is_symlink(), "the link is replaced, not written through"
    assert "job=job-one" in outside.read_text()


def _killed_after_swap(root: str, staging: str) -> None:
    from testkit.store import KillAt

    h = host(True, "resumed")
    promote_once(Settings(sessions_dir=root), JobDir(staging, "u2"), h, (10, 100), job="job-two",
                 seams=KillAt("swapped"))


def test_a_kill_between_the_swap_and_the_handoff_is_finished_by_recovery(store: Store) -> None:
    promote_once(settings(store), job_dir(store, "u1", OLD, raw("one"), resume=False), host(False, "absent"), None,
                 job="job-one")
    jd2 = job_dir(store, "u2", NEW, raw("two"))
    run_to_death(_killed_after_swap, str(store.root), str(store.stage_root))
    key_dir = store.key_dir()
    assert (key_dir / "current.jsonl").read_bytes() == NEW, "the swap landed"
    assert handoffdir.describe(str(key_dir))["letter"] is None, "job one's letter no longer matches: it does not wait"
    result = promote_once(settings(store), jd2, host(True, "resumed"), (10, 100), job="job-two")
    assert result.promoted and result.handoff.writer == "agent"
    letter = handoff.parse_letter_head((key_dir / "letter.md").read_text())
    assert letter is not None and (letter.job, letter.sha256) == ("job-two", sha(NEW))
    ledger = (key_dir / "ledger.md").read_text()
    assert handoff.entry_count(ledger) == 2 and ledger.count("job job-two") == 1
    again = promote_once(settings(store), jd2, host(True, "resumed"), (10, 100), job="job-two")
    assert again.handoff.entries == 2, "the journal's result is returned as it was"


@pytest.mark.parametrize(("reason", "rethread"), [(R.CONTEXT_TOO_FULL, True), (R.VENUE_CHANGED, False)])
def test_a_lineage_refusal_stages_the_letter_and_a_safety_refusal_does_not(store: Store, reason: str,
                                                                           rethread: bool) -> None:
    promote(settings(store), KEY, str(store.staged_job(OLD)), host_resume=True, pi_version=PI, model=MODEL,
            context=(90, 100))
    jd = job_dir(store, "u1", OLD, raw("one"))
    promote_once(settings(store), jd, host(True, "resumed"), (90, 100), job="job-one")
    if reason == R.VENUE_CHANGED:
        (store.key_dir() / "venue").write_text("local")
    next_job = JobDir(str(store.stage_root), "u9")
    record = stage(settings(store), next_job, HostRecord(key=KEY, forge="github", repository="acme/widgets",
                                                         branch="pi/issue-7", venue="kubernetes", pi_version=PI,
                                                         model=MODEL))
    assert (record.reason, record.rethread) == (reason, rethread)
    staged = Path(next_job.session)
    assert (staged / "current.jsonl").read_bytes() == b""
    assert (staged / "letter.md").exists() is rethread
    if rethread:
        assert "one-whereWeAre" in (staged / "letter.md").read_text()
        assert handoff.parse_letter_head((staged / "letter.md").read_text()).session is not None
        assert HostRecord.from_json(next_job.read(HOST)).rethread is True


def test_a_re_stage_of_the_same_job_clears_the_letter_its_first_stage_left(store: Store) -> None:
    """A fresh Job directory has nothing to clear; a re-stage (after a restart) must not keep a stale letter."""
    promote(settings(store), KEY, str(store.staged_job(OLD)), host_resume=True, pi_version=PI, model=MODEL,
            context=(90, 100))
    promote_once(settings(store), job_dir(store, "u1", OLD, raw("one")), host(True, "resumed"), (90, 100),
                 job="job-one")
    again = JobDir(str(store.stage_root), "u9")
    record = HostRecord(key=KEY, forge="github", repository="acme/widgets", branch="pi/issue-7", venue="kubernetes",
                        pi_version=PI, model=MODEL)
    assert stage(settings(store), again, record).rethread is True
    assert (Path(again.session) / "letter.md").exists() and (Path(again.session) / "ledger.md").exists()
    (store.key_dir() / "venue").write_text("local")  # now a safety refusal: no letter may wait for this job
    restaged = stage(settings(store), again, record)
    assert (restaged.reason, restaged.rethread) == (R.VENUE_CHANGED, False)
    assert sorted(p.name for p in Path(again.session).iterdir()) == ["current.jsonl"]


def test_the_operator_and_the_runner_read_the_rethread_bound_alike() -> None:
    from pidispatch import settings as operator_settings
    from pidispatch.runner import config as runner_config

    assert operator_settings.DEFAULT_RETHREAD_PCT == runner_config.DEFAULT_RETHREAD_PCT
    base = {"PI_REPOSITORY": "o/r"}
    for raw, want in (("0", 0), ("70", 70), ("100", 100)):
        assert operator_settings.Settings.from_env({"PI_SESSION_RETHREAD_PCT": raw}).rethread_pct == want
        assert runner_config.load_config({**base, "PI_SESSION_RETHREAD_PCT": raw}).rethread_pct == want
    for raw in ("070", "101", "-1", "7.5", "70%"):
        with pytest.raises(operator_settings.ConfigError):
            operator_settings.Settings.from_env({"PI_SESSION_RETHREAD_PCT": raw})
        with pytest.raises(runner_config.ConfigError):
            runner_config.load_config({**base, "PI_SESSION_RETHREAD_PCT": raw})


def _rethread_stage(store: Store, uid: str = "u9") -> Path:
    """Stage the next job of a key whose context is over the bound: the letter, when one waits, is handed out."""
    next_job = JobDir(str(store.stage_root), uid)
    record = stage(settings(store), next_job, HostRecord(key=KEY, forge="github", repository="acme/widgets",
                                                         branch="pi/issue-7", venue="kubernetes", pi_version=PI,
                                                         model=MODEL))
    assert (record.reason, record.rethread) == (R.CONTEXT_TOO_FULL, True), "the letter waits and is handed out"
    return Path(next_job.session)


def test_a_letter_past_its_cap_in_bytes_is_promoted_cut_and_still_handed_out(store: Store) -> None:
    """Three fields of 4 000 CJK characters: 36 000 bytes of text, a letter its reader would have refused."""
    promote(settings(store), KEY, str(store.staged_job(OLD)), host_resume=True, pi_version=PI, model=MODEL,
            context=(90, 100))
    big = raw("big")
    big["letter"].update(whereWeAre="where-" + CJK, doFirst="first-" + CJK, watchOut="watch-" + CJK)
    promote_once(settings(store), job_dir(store, "u1", OLD, big), host(True, "resumed"), (90, 100), job="job-big")
    stored = (store.key_dir() / "letter.md").read_bytes()
    assert len(stored) <= handoff.LETTER_MAX_BYTES
    staged = (_rethread_stage(store) / "letter.md").read_text()
    assert staged.count(handoff.LETTER_CUT) == 3 and headings(staged) == LETTER_HEADINGS
    assert "where-中中" in staged and "big-dontRedo" in staged and "big-trust" in staged


def test_a_letter_an_older_operator_wrote_past_the_cap_is_handed_out_cut_on_a_whole_line(store: Store) -> None:
    promote(settings(store), KEY, str(store.staged_job(OLD)), host_resume=True, pi_version=PI, model=MODEL,
            context=(90, 100))
    promote_once(settings(store), job_dir(store, "u1", OLD, raw("one")), host(True, "resumed"), (90, 100),
                 job="job-one")
    letter = store.key_dir() / "letter.md"
    text = letter.read_text()
    grown = text.replace("one-watchOut", "\n".join(["one-watchOut", *(["中" * 1000] * 20)]))  # 60 000 bytes
    letter.write_text(grown)
    assert len(grown.encode()) > handoff.LETTER_MAX_BYTES
    assert handoffdir.describe(str(store.key_dir()))["letter"]["job"] == "job-one"
    staged = (_rethread_stage(store) / "letter.md").read_bytes()
    assert len(staged) <= handoff.LETTER_MAX_BYTES
    assert staged.decode().endswith("\n\n" + handoff.LETTER_CUT + "\n"), "cut after a whole line, marked"
    assert "one-whereWeAre" in staged.decode() and "\n" + "中" * 1000 + "\n" in staged.decode()
