"""No credential is ever stored (issue 31 item 5): the scanner (``store/redact.py``) and the promotion that
copies only its scanned copy (``store/scanned.py``, ``store/journal.py``), on a real filesystem."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pidispatch.contract.digests import SecretDigest, as_json, digest_of
from pidispatch.contract.report import RunnerReport
from pidispatch.record import merge_session
from pidispatch.runner.main import own_secrets
from pidispatch.settings import Settings
from pidispatch.store import handoff
from pidispatch.store.journal import promote_once
from pidispatch.store.redact import marker, redact
from pidispatch.store.staging import HOST, PROMOTION, HostRecord, JobDir
from pidispatch.store.transcriptscan import redact_lines
from testkit.store import KEY, MODEL, PI, KillAt, Store, run_to_death, sample

GH = "ghs_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zA0b1"  # 36 after the prefix, as GitHub issues them
PEM_BODY = "MIIEowIBAAKCAQEAx1+abc/def=\nQ2x3y4z5w6v7u8t9s0r1\n"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}-----END RSA PRIVATE KEY-----"
OWN = "Zq8Lr2Nv5Tx7Wb1Yd4Fh6Jk9Mp3Rs0Ug"  # a job's own secret of no known format (a model key)

# (id, text holding one credential, its kind): each is checked raw and inside a JSON transcript line.
FORMATS = [
    ("github-installation-token", f"token={GH} end", "github-token"),
    *[(f"github-{p}-token", f"use {p}_{GH[4:]} now", "github-token") for p in ("ghp", "gho", "ghu", "ghr")],
    ("github-fine-grained-pat", "github_pat_11ABCDEFG0" + "aB3_" * 20 + " x", "github-token"),
    ("aws-access-key-id", "id AKIAIOSFODNN7EXAMPLE ok", "aws-access-key-id"),
    ("aws-session-key-id", "id ASIAY34FZKBOKMUTVV7A ok", "aws-access-key-id"),
    ("google-api-key", "key=AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY&x", "google-api-key"),
    ("openai-key", "OPENAI_API_KEY=sk-proj-Ab12Cd34Ef56Gh78Ij90KlMn", "openai-key"),
    ("anthropic-key", "x sk-ant-api03-Ab12Cd34Ef56Gh78Ij90KlMnOp-Qr_st y", "anthropic-key"),
    ("slack-bot-token", "xoxb-123456789012-abcdEFGHijkl", "slack-token"),
    ("private-key-block", f"key:\n{PEM}\nafter", "private-key"),
    ("authorization-bearer", 'curl -H "Authorization: Bearer eyJhbGciOi.J9x-y_z" x', "authorization-header"),
    ("authorization-token-json-header", '{"authorization": "token 0123456789abcdef"}', "authorization-header"),
    ("authorization-basic", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "authorization-header"),
]
HIDDEN = {"github-token": (GH[4:], "aB3_aB3_"), "aws-access-key-id": ("IOSFODNN7EXAMPLE", "Y34FZKBOKMUTVV7A"),
          "google-api-key": "9tSrke72Pou",
          "openai-key": "Ab12Cd34Ef56", "anthropic-key": "Ab12Cd34Ef56", "slack-token": "abcdEFGHijkl",
          "private-key": "Q2x3y4z5w6v7", "authorization-header": ("J9x-y_z", "0123456789abcdef", "dXNlcjpwYXNz")}


def line(text: str) -> bytes:
    """A transcript line as pi writes it (JSON.stringify: compact, newlines as ``\\n``)."""
    entry = {"type": "message", "id": "a1", "message": {"role": "toolResult", "content": [{"type": "text",
                                                                                            "text": text}]}}
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


@pytest.mark.parametrize(("text", "kind"), [(t, k) for _, t, k in FORMATS], ids=[i for i, _, _ in FORMATS])
def test_each_format_is_redacted_raw_and_inside_a_transcript_line_which_stays_the_same_json(text: str,
                                                                                              kind: str) -> None:
    raw = redact(text.encode())
    assert dict(raw.kinds) == {kind: 1}, raw.data
    assert marker(kind) in raw.data
    data = line(text)
    result = redact(data)
    assert dict(result.kinds) == {kind: 1}, result.data
    hidden = [h for h in (HIDDEN[kind] if isinstance(HIDDEN[kind], tuple) else (HIDDEN[kind],)) if h in text]
    assert hidden, "the case names what must disappear"
    for out in (raw.data, result.data):
        assert not any(h.encode() in out for h in hidden), out
    entry = json.loads(result.data)  # still valid JSON, one line, same structure
    assert result.data.endswith(b"\n") and result.data.count(b"\n") == 1
    assert entry["message"]["content"][0]["text"] == redact(text.encode()).data.decode()
    assert redact(result.data).hits == 0, "idempotent: a redacted line holds nothing more"
    decoded = redact_lines(data)  # what a promotion runs: the line read through its decoded view
    assert decoded.data == result.data and decoded.kinds == result.kinds
    assert redact_lines(decoded.data).hits == 0


def test_a_private_key_whose_newlines_are_json_escapes_is_redacted_whole() -> None:
    data = line(f"cat id_rsa\n{PEM}\n$ ")
    assert b"\\n-----END RSA PRIVATE KEY-----" in data, "the block's newlines are the two characters \\n"
    result = redact(data)
    assert dict(result.kinds) == {"private-key": 1}
    assert b"PRIVATE KEY" not in result.data and b"MIIEow" not in result.data
    assert json.loads(result.data)["message"]["content"][0]["text"] == "cat id_rsa\n[REDACTED:private-key]\n$ "


def test_a_private_key_cut_short_is_redacted_to_the_end_of_its_base64() -> None:
    result = redact(line("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA"))
    assert dict(result.kinds) == {"private-key": 1} and b"b3BlbnNz" not in result.data
    json.loads(result.data)


def test_a_torn_line_ending_in_a_cut_private_key_is_never_joined_to_the_next_line() -> None:
    data = b'{"type":"message","text":"-----BEGIN EC PRIVATE KEY-----\\nMHcCAQEEIB\n' + line("next")
    result = redact(data)
    assert dict(result.kinds) == {"private-key": 1}
    assert result.data.splitlines()[1] == line("next").rstrip(b"\n")


def test_an_authorization_header_as_a_json_key_keeps_its_key_and_the_object_its_shape() -> None:
    arguments = {"url": "https://api.example", "headers": {"Authorization": "Bearer abcdefgh12345678"}}
    data = json.dumps({"type": "toolCall", "arguments": arguments}, separators=(",", ":")).encode()
    result = redact(data)
    headers = json.loads(result.data)["arguments"]["headers"]
    assert headers == {"Authorization": "Bearer [REDACTED:authorization-header]"}


SECRET_PLACES = [
    ("alone", f"key {OWN} end", 1),
    ("after-a-json-newline-escape", f"key:\n{OWN}", 1),
    ("after-a-unicode-escape", f"\u0001{OWN}", 1),
    ("in-an-env-dump", f"MODEL_KEY={OWN}\nGH_TOKEN=x", 1),
    ("twice", f"{OWN} and {OWN}", 2),
    ("glued-to-other-token-characters", f"x{OWN}y", 0),  # not the secret's own run: a known limit
]


@pytest.mark.parametrize(("text", "hits"), [(t, n) for _, t, n in SECRET_PLACES], ids=[i for i, _, _ in SECRET_PLACES])
def test_the_job_s_own_secret_is_found_by_its_digest_alone(text: str, hits: int) -> None:
    digest = digest_of(OWN)
    assert digest is not None and OWN not in repr(digest)
    result = redact(line(text), [digest])
    assert result.kinds.get("job-secret", 0) == hits, result.data
    assert (OWN.encode() in result.data) == (hits == 0)
    json.loads(result.data)
    assert redact_lines(line(text), [digest]).data == result.data
    assert redact(line(text)).hits == 0, "without its digest the value is of no known format"


def test_a_secret_too_short_or_of_other_characters_is_never_reported_by_digest() -> None:
    assert digest_of("short-key") is None, "a short value's digest could be brute-forced from the report"
    assert digest_of("p@ss word with spaces and more") is None
    assert digest_of(OWN) == digest_of(OWN.encode())


def test_the_runner_reports_digests_of_its_forge_token_and_model_keys_and_the_operator_keeps_them() -> None:
    env = {"GH_TOKEN": GH, "MY_MODEL_KEY": OWN, "PI_SECRET_ENV": "MY_MODEL_KEY,UNSET", "OTHER": "x" * 40}
    reported = own_secrets(env)
    assert [r.length for r in reported] == [len(GH), len(OWN)]
    text = json.dumps({"outcome": "completed", "secrets": as_json(reported)})
    assert GH not in text and OWN not in text
    parsed = RunnerReport.from_message(text)
    assert parsed is not None and parsed.secrets == (digest_of(GH), digest_of(OWN))
    hostile = RunnerReport.from_message(json.dumps({"secrets": [{"length": 3, "sha256": "0" * 64},
                                                                {"length": 40, "sha256": "x"},
                                                                "ghs_", {"length": True, "sha256": "0" * 64}]}))
    assert hostile is not None and hostile.secrets == ()


EDGE = ["b_empty.after2runs.jsonl", "c_garbage_first.after.jsonl", "c2_no_header.after.jsonl",
        "d_torn_last.after2runs.jsonl", "d2_no_trailing_newline.after.jsonl", "e_header_only.after.jsonl"]


@pytest.mark.parametrize("name", ["s1_after_turn1.jsonl", "s1_after_turn2.jsonl", "s2_tool_call.jsonl",
                                  "s3_json_then_rpc_then_json.jsonl", "s4_cached_tokens.jsonl",
                                  "s5_auto_compaction_then_resume.jsonl", "s6_http400_error.jsonl",
                                  "s7_http500_retries_then_resume.jsonl", "s8_sigkill_midturn.jsonl",
                                  *(f"edge/{name}" for name in EDGE)])
def test_no_false_positive_on_real_pi_transcripts(name: str) -> None:
    data = sample(name)
    secrets = [SecretDigest(n, "0" * 64) for n in (20, 36, 40, 93)]  # every run of these lengths is hashed
    result = redact(data, secrets)
    assert result.hits == 0 and result.data == data


# -- the promotion -------------------------------------------------------------------------------------------

def host() -> HostRecord:
    return HostRecord(key=KEY, forge="github", repository="acme/widgets", branch="pi/issue-7", venue="kubernetes",
                      pi_version=PI, model=MODEL, mounted=True, resume=False, reason="absent", bytes=0,
                      secrets=(digest_of(OWN),))  # type: ignore[arg-type]


def planted() -> bytes:
    """A real pi transcript whose tool result printed the environment: the forge token and a model key."""
    lines = sample("s2_tool_call.jsonl").splitlines(keepends=True)
    return b"".join(lines) + line(f"GH_TOKEN={GH}\nMY_MODEL_KEY={OWN}\n{PEM}")


def job_dir(store: Store, uid: str, content: bytes) -> JobDir:
    store.stage_root.mkdir(parents=True, exist_ok=True)
    jd = JobDir(str(store.stage_root), uid)
    jd.prepare()
    jd.write(HOST, host().to_json())
    Path(jd.session, "current.jsonl").write_bytes(content)
    letter = {name: f"field {name}" for name, _ in handoff.LETTER_FIELDS}
    letter["watchOut"] = f"the token {GH} is in the env"
    entry = {name: f"entry {name}" for name, _ in (*handoff.TRUST_FIELDS, *handoff.ENTRY_FIELDS)}
    entry["commands"] = "export OPENAI_API_KEY=sk-proj-Ab12Cd34Ef56Gh78Ij90KlMn"
    data = {"writer": "agent", "status": "partial", "letter": letter, "entry": entry}
    # The agent may escape what it writes: \u0067 is "g", so the token is only there once the JSON is decoded.
    Path(jd.session, "handoff.json").write_text(json.dumps(data).replace(GH[:1], "\\u0067", 1))
    return jd


def stored(store: Store) -> dict[str, bytes]:
    d = store.key_dir()
    return {name: (d / name).read_bytes() for name in ("current.jsonl", "letter.md", "ledger.md")}


def assert_nothing_secret_stored(store: Store) -> None:
    for name, data in stored(store).items():
        for value in (GH, OWN, "MIIEow", "sk-proj-Ab12"):
            assert value.encode() not in data, f"{value[:6]}… stored in {name}"
    for raw in stored(store)["current.jsonl"].splitlines():
        json.loads(raw)


def test_a_promoted_transcript_and_handoff_hold_no_planted_credential_and_the_count_is_on_the_record(
        store: Store) -> None:
    jd = job_dir(store, "uid-1", planted())
    result = promote_once(store.settings, jd, host(), None, job="job-1", secrets=host().secrets)
    assert result.promoted, result
    assert_nothing_secret_stored(store)
    data = stored(store)
    assert b"[REDACTED:github-token]" in data["current.jsonl"] and b"[REDACTED:job-secret]" in data["current.jsonl"]
    assert b"[REDACTED:github-token]" in data["letter.md"] and b"[REDACTED:openai-key]" in data["ledger.md"]
    # transcript: token, own key, PEM; handoff: token (escaped), an OpenAI key
    assert result.redacted == 5
    assert merge_session(host().verdict(), None, result) == {"resumed": False, "reason": "absent",
                                                             "bytes": result.bytes, "redacted": 5}
    assert Path(jd.session, "current.jsonl").read_bytes() == planted(), "the staged copy itself is left as it was"
    # The journal keeps the count: a completion run again (after an operator restart) reports the same.
    assert promote_once(store.settings, jd, host(), None, job="job-1").redacted == 5
    assert GH not in json.dumps(jd.read(PROMOTION)) and OWN not in json.dumps(jd.read(PROMOTION))


def test_a_clean_transcript_is_promoted_byte_for_byte_with_a_count_of_zero(store: Store) -> None:
    clean = sample("s2_tool_call.jsonl")
    jd = job_dir(store, "uid-2", clean)
    os.unlink(os.path.join(jd.session, "handoff.json"))
    result = promote_once(store.settings, jd, host(), None, job="job-2")
    assert result.promoted and result.redacted == 0
    assert (store.key_dir() / "current.jsonl").read_bytes() == clean


def _promote_then_die(root: str, staging: str, uid: str, step: str) -> None:
    promote_once(Settings(sessions_dir=root), JobDir(staging, uid), host(), None, job="job-k",
                 secrets=host().secrets, seams=KillAt(step))


@pytest.mark.parametrize("step", ["scanned", "journaled", "temp-written", "swapped", "handoff-written"])
def test_killed_at_any_step_the_promotion_still_stores_only_the_scanned_copy_and_counts_once(store: Store,
                                                                                             step: str) -> None:
    jd = job_dir(store, "uid-k", planted())
    run_to_death(_promote_then_die, str(store.root), str(store.stage_root), "uid-k", step)
    result = promote_once(store.settings, jd, host(), None, job="job-k", secrets=host().secrets)
    assert result.promoted and result.redacted == 5, result
    assert_nothing_secret_stored(store)


def test_an_attempt_an_older_operator_journaled_is_scanned_before_it_runs_again(store: Store) -> None:
    jd = job_dir(store, "uid-o", planted())
    # What an operator before the scan journaled before a kill: no "scanned", its digest of the staged bytes.
    jd.write(PROMOTION, {"state": "started", "size": None, "sha256": None, "before": None,
                         "temp": "current.jsonl.1.1.aaaaaaaaaaaa.incoming", "lock": "lock.1.aaaaaaaaaaaa"})
    result = promote_once(store.settings, jd, host(), None, job="job-o", secrets=host().secrets)
    assert result.promoted and result.redacted == 5
    assert_nothing_secret_stored(store)
