"""The credential scan decodes what it scans (the red-team finding "redaction misses escaped tokens"): a token
hidden by a JSON escape, wrapped by a newline, percent- or base64-encoded, or split between two tool results is
redacted in the scanned copy a promotion takes (``store/scanned.py``), which stays JSON of the same structure.
Real files on a real filesystem; every check reads the copy back and decodes it, as pi will."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from pidispatch.contract.digests import SecretDigest, digest_of
from pidispatch.store.scanned import make_scanned_copy
from testkit.store import sample

GH = "ghs_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zA0b1"
OWN = "Zq8Lr2Nv5Tx7Wb1Yd4Fh6Jk9Mp3Rs0Ug"  # a job's own secret of no known format
DIGESTS = [d for d in (digest_of(OWN),) if d is not None]  # GH is found by its format alone


def entry(role: str, text: str, n: int = 0) -> dict[str, Any]:
    return {"type": "message", "id": f"e{n}", "parentId": f"e{n - 1}", "timestamp": "2026-11-29T12:53:13.410Z",
            "message": {"role": role, "toolCallId": "call_1", "toolName": "bash",
                        "content": [{"type": "text", "text": text}], "isError": False}}


def as_line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def scanned(tmp_path: Path, data: bytes, secrets: list[SecretDigest] = DIGESTS) -> tuple[bytes, dict[str, int]]:
    """The scanned copy of a staged transcript ``data``, and the counts."""
    stage, job = tmp_path / "session", tmp_path / "job"
    stage.mkdir()
    job.mkdir()
    (stage / "current.jsonl").write_bytes(data)
    scan = make_scanned_copy(str(job), str(stage), secrets, max_bytes=0, refusal=lambda _: None)
    return (job / "scanned" / "current.jsonl").read_bytes(), scan.kinds


def shape(value: Any) -> Any:
    """The JSON structure without the strings' text: what a redaction must keep."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return "str" if isinstance(value, str) else value


def assert_gone(original: bytes, out: bytes, *values: str) -> None:
    """No value is in the copy, raw or once decoded; each line still parses, with the same structure."""
    before, after = original.splitlines(), out.splitlines()
    assert len(before) == len(after)
    for old, new in zip(before, after, strict=True):
        decoded = json.loads(new)
        assert shape(decoded) == shape(json.loads(old))
        flat = json.dumps(decoded, ensure_ascii=False)
        for value in values:
            assert value not in flat and value.encode() not in new, f"{value[:4]}… survives"


def escaped(text: str, secret: str) -> bytes:
    """A tool-result line holding ``text``, the first letter of ``secret`` in it written as a ``\\u`` escape."""
    hidden = b"\\u%04x" % ord(secret[0]) + secret[1:].encode()
    return as_line(entry("toolResult", text)).replace(secret.encode(), hidden)


@pytest.mark.parametrize(("secret", "kind"), [(GH, "github-token"), (OWN, "job-secret")], ids=["format", "own"])
def test_a_token_with_one_letter_written_as_a_unicode_escape_is_redacted(tmp_path: Path, secret: str,
                                                                         kind: str) -> None:
    data = escaped(f"TOKEN={secret} done", secret)
    assert secret.encode() not in data and secret in json.loads(data)["message"]["content"][0]["text"]
    out, kinds = scanned(tmp_path, data)
    assert_gone(data, out, secret)
    assert kinds == {kind: 1}
    assert json.loads(out)["message"]["content"][0]["text"] == f"TOKEN=[REDACTED:{kind}] done"


@pytest.mark.parametrize(("secret", "kind"), [(GH, "github-token"), (OWN, "job-secret")], ids=["format", "own"])
def test_a_token_wrapped_by_an_escaped_newline_is_redacted(tmp_path: Path, secret: str, kind: str) -> None:
    data = as_line(entry("toolResult", f"TOKEN={secret[:11]}\n{secret[11:]}\nNEXT=1"))
    assert b"\\n" in data
    out, kinds = scanned(tmp_path, data)
    assert_gone(data, out, secret[:11] + "\n" + secret[11:], secret[11:])
    assert kinds == {kind: 1}
    assert json.loads(out)["message"]["content"][0]["text"] == f"TOKEN=[REDACTED:{kind}]\nNEXT=1"


@pytest.mark.parametrize("encoded", [
    "".join(f"%{b:02X}" for b in OWN.encode()),  # every byte
    "%" + OWN.encode()[:1].hex() + OWN[1:],  # one letter
    f"q=a%20{OWN}",  # a space encoded right before it (the raw run is 20<secret>)
    f"q=a+{OWN}&x=1",
], ids=["every-byte", "one-letter", "after-%20", "after-plus"])
def test_the_job_s_own_secret_percent_encoded_is_redacted(tmp_path: Path, encoded: str) -> None:
    data = as_line(entry("toolResult", f"GET https://example.test/?{encoded} 200"))
    out, kinds = scanned(tmp_path, data)
    assert_gone(data, out, OWN, OWN[8:])
    assert kinds == {"job-secret": 1}


@pytest.mark.parametrize("value", [OWN, OWN + "\n"], ids=["echo-n", "echo"])
@pytest.mark.parametrize("alphabet", [base64.b64encode, base64.urlsafe_b64encode], ids=["std", "urlsafe"])
def test_the_job_s_own_secret_base64_encoded_whole_is_redacted(tmp_path: Path, value: str, alphabet: Any) -> None:
    encoded = alphabet(value.encode()).decode()
    data = as_line(entry("toolResult", f"$ echo $KEY | base64\n{encoded}\n"))
    out, kinds = scanned(tmp_path, data)
    assert_gone(data, out, encoded.rstrip("="))
    assert kinds == {"job-secret": 1}


def test_the_job_s_own_secret_split_between_two_tool_results_is_redacted(tmp_path: Path) -> None:
    lines = [entry("toolResult", f"$ cut -c1-13\n{OWN[:13]}\n", 1),
             entry("assistant", "Now the rest of it.", 2),  # another channel: in between, yet not in the way
             entry("toolResult", f"{OWN[13:]}\n$ ", 3)]
    data = b"".join(as_line(e) for e in lines)
    out, kinds = scanned(tmp_path, data)
    assert_gone(data, out, OWN[:13], OWN[13:])
    assert kinds == {"job-secret": 1}, "one secret, counted once"
    texts = [json.loads(raw)["message"]["content"][0]["text"] for raw in out.splitlines()]
    assert texts == ["$ cut -c1-13\n[REDACTED:job-secret]\n", "Now the rest of it.", "[REDACTED:job-secret]\n$ "]


def test_a_split_secret_between_two_parts_of_one_message_is_redacted(tmp_path: Path) -> None:
    value = entry("assistant", f"the key is {OWN[:20]}")
    value["message"]["content"].append({"type": "text", "text": OWN[20:]})
    data = as_line(value)
    out, kinds = scanned(tmp_path, data)
    assert_gone(data, out, OWN[:20], OWN[20:])
    assert kinds == {"job-secret": 1}


def test_an_authorization_header_as_a_json_key_and_value_is_still_one_header(tmp_path: Path) -> None:
    value = {"type": "toolCall", "arguments": {"headers": {"Authorization": "Bearer \u0061bcdefgh12345678"}}}
    data = as_line(value)
    out, kinds = scanned(tmp_path, data)
    assert kinds == {"authorization-header": 1}
    assert json.loads(out)["arguments"]["headers"] == {"Authorization": "Bearer [REDACTED:authorization-header]"}


def test_a_line_that_is_not_json_is_still_scanned_as_bytes_and_left_otherwise_as_it_was(tmp_path: Path) -> None:
    good = as_line(entry("toolResult", f"k={OWN}"))
    data = good + b'{"type":"message","text":"torn ' + GH.encode()
    out, kinds = scanned(tmp_path, data)
    assert kinds == {"job-secret": 1, "github-token": 1}
    assert out.endswith(b'{"type":"message","text":"torn [REDACTED:github-token]')


def test_escapes_elsewhere_in_a_redacted_line_keep_their_bytes_and_clean_lines_are_untouched(tmp_path: Path) -> None:
    clean = sample("s2_tool_call.jsonl")
    line = (b'{"type":"message","k":"caf\\u00e9 \\ud83d\\ude00","dup":1,"dup":2,"n":1.50E+3,'
            b'"text":"x ' + GH.encode() + b' \\"q\\""}\n')
    out, kinds = scanned(tmp_path, clean + line)
    assert kinds == {"github-token": 1}
    assert out == clean + line.replace(GH.encode(), b"[REDACTED:github-token]")


@pytest.mark.parametrize("name", ["s1_after_turn2.jsonl", "s2_tool_call.jsonl", "s3_json_then_rpc_then_json.jsonl",
                                  "s5_auto_compaction_then_resume.jsonl", "s8_sigkill_midturn.jsonl",
                                  "edge/c_garbage_first.after.jsonl", "edge/d_torn_last.after2runs.jsonl"])
def test_no_false_positive_on_real_pi_transcripts_when_every_form_is_searched(tmp_path: Path, name: str) -> None:
    data = sample(name)
    # Every candidate of these lengths is hashed: runs, wrapped runs, base64 runs, splits between values.
    out, kinds = scanned(tmp_path, data, [SecretDigest(n, "0" * 64) for n in (20, 24, 36, 40, 93)])
    assert kinds == {} and out == data


def test_a_quote_written_as_a_unicode_escape_never_reads_as_the_json_s_structure(tmp_path: Path) -> None:
    # \u0022 is a quote: decoded, it could open a fake "text" value or close the real one; it stays as written.
    data = (b'{"type":"message","message":{"role":"toolResult","content":[{"type":"text","text":'
            b'"a\\u0022,\\u0022text\\u0022:\\u0022' + OWN.encode()[:10] + b' \\u005c ' + GH.encode() + b'"}]}}\n')
    out, kinds = scanned(tmp_path, data)
    assert kinds == {"github-token": 1}
    assert_gone(data, out, GH)
    assert out == data.replace(GH.encode(), b"[REDACTED:github-token]")
