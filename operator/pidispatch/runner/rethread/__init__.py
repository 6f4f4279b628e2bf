"""Rethreading in the job (docs/architecture.md#rethreading): pack a handoff at the end, unpack one at the start.

**Pack.** After pi's run, when the conversation's measured context use is at or above
``PI_SESSION_RETHREAD_PCT`` (default 70, 0 = never), the runner continues the same session with one
pack turn: pi is started again with the handoff tool (``handoff.ts``, loaded by ``-e``) as its only
tool, and the agent writes its letter and ledger entry through one call. If it does not, a side call
(``pi -p --no-session --no-tools``, the same model) writes them from the transcript, marked as a
summary. Either way the result is ``/session/handoff.json``, which the operator validates and renders
beside the transcript when the job is promoted (``store/handoff.py``).

**Unpack.** When the operator staged a letter (the gates refused for a lineage reason,
``PI_SESSION_RETHREAD=<reason>``), the session file is given a header whose ``parentSession`` names
the old session, and the first message carries the letter, the ledger and the new event and asks for a
three-line readback. A job that unpacked and was already over the bound right after its readback does
not pack again: the handoff would only copy itself forward (no loop).

**Prompts** are Markdown templates beside this file, overridable per repository by
``.pi/rethread/{pack,unpack,summary}.md`` in the checked-out commit: read from git by object id (a
regular blob, at most 16 KiB, UTF-8), never from the working tree and never executed.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from pidispatch.events import emit
from pidispatch.runner.checkout import git_argv, git_env
from pidispatch.runner.prompt import fence
from pidispatch.store import fsio
from pidispatch.store.handoff import (
    ENTRY_FIELDS,
    HANDOFF,
    LEDGER,
    LETTER,
    LETTER_FIELDS,
    TRUST_FIELDS,
    HandoffError,
    parse_handoff,
)
from pidispatch.store.handoffdir import read_text

TOOL = "rethread_handoff"
EXTENSION = "handoff.ts"
TEMPLATES = ("pack", "unpack", "summary")
TEMPLATE_MAX_BYTES = 16 * 1024
TRANSCRIPT_FOR_SUMMARY_CHARS = 48 * 1024
TOOL_OUTPUT_CHARS = 600
SIDE_CALL_TIMEOUT_S = 600.0
_PLACEHOLDER = re.compile(r"\{\{([a-z]+)\}\}")
_OVERRIDE_MODES = ("100644", "100755")


# -- templates ---------------------------------------------------------------------------------------------

def default_template(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.md").read_text(encoding="utf-8")


def repository_template(name: str, workspace: str, commit: str | None, env: Mapping[str, str]) -> str | None:
    """``.pi/rethread/<name>.md`` of ``commit``, read by object id; ``None`` when absent or not a plain file."""
    if commit is None:
        return None
    git = git_argv(workspace)
    genv = git_env(env, None)
    try:
        listed = subprocess.run([*git, "ls-tree", "-z", commit, "--", f".pi/rethread/{name}.md"], env=genv,
                                capture_output=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
        if listed.returncode != 0 or not listed.stdout:
            return None
        meta, _, _path = listed.stdout.rstrip(b"\0").partition(b"\t")
        mode, kind, oid = meta.decode("ascii", "replace").split(" ")
        if kind != "blob" or mode not in _OVERRIDE_MODES or not re.fullmatch(r"[0-9a-f]{40,64}", oid):
            emit("rethread_template_refused", template=name, mode=mode, kind=kind)
            return None  # a link or a submodule is never read
        blob = subprocess.run([*git, "cat-file", "blob", oid], env=genv, capture_output=True, timeout=60,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if blob.returncode != 0 or len(blob.stdout) > TEMPLATE_MAX_BYTES:
        emit("rethread_template_refused", template=name, reason="unreadable or larger than 16 KiB")
        return None
    try:
        text = blob.stdout.decode("utf-8")
    except UnicodeDecodeError:
        return None
    emit("rethread_template_overridden", template=name, blob=oid)
    return text


def template(name: str, workspace: str, commit: str | None, env: Mapping[str, str]) -> str:
    return repository_template(name, workspace, commit, env) or default_template(name)


def fill(text: str, values: Mapping[str, str]) -> str:
    """Each ``{{name}}`` with its value, in one pass (a value is never expanded again); unknown ones stay."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


# -- unpack ------------------------------------------------------------------------------------------------

def _read_staged(session_dir: str, name: str, limit: int = 256 * 1024) -> str | None:
    """A file the operator staged beside the session file, read as the store reads (no link, regular, capped)."""
    try:
        dir_fd = os.open(session_dir, fsio.DIR_FLAGS)
    except OSError:
        return None
    try:
        return read_text(name, dir_fd, limit)
    finally:
        os.close(dir_fd)


def _without_metadata(text: str) -> str:
    """Our own metadata lines (HTML comments the operator wrote) are for machines, not for the model."""
    return "\n".join(line for line in text.split("\n") if not line.startswith("<!-- ")).strip()


def parent_of(letter_text: str) -> str | None:
    m = re.match(r"<!-- pi-dispatch letter v1 .*? session=(\S+) ", letter_text)
    return None if m is None or m.group(1) == "-" else m.group(1)


@dataclass(frozen=True)
class Unpack:
    """A staged handoff, read: the letter and ledger texts and the session they continue."""

    letter: str
    ledger: str
    parent: str | None


def read_unpack(session_file: str) -> Unpack | None:
    """The letter and ledger the operator staged beside the session file; ``None`` when there is no letter."""
    directory = os.path.dirname(session_file)
    letter = _read_staged(directory, LETTER)
    if not letter or not letter.strip():
        return None
    return Unpack(_without_metadata(letter), _without_metadata(_read_staged(directory, LEDGER) or "") or
                  "(the ledger is empty)", parent_of(letter))


def uuid7() -> str:
    """A UUIDv7 (time-ordered), as pi names its sessions."""
    ms = time.time_ns() // 1_000_000
    raw = bytearray(ms.to_bytes(6, "big") + secrets.token_bytes(10))
    raw[6] = (raw[6] & 0x0F) | 0x70
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_session_header(session_file: str, workspace: str, parent: str | None) -> bool:
    """Give the (empty) session file a v3 header whose ``parentSession`` names the old session.

    Only an empty file is written (the runner's own normalisation left it so on a cold start): pi then
    keeps this header, and the new conversation records where it came from. False when not written.
    """
    header: dict[str, Any] = {"type": "session", "version": 3, "id": uuid7(),
                              "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000Z",
                              "cwd": workspace}
    if parent:
        header["parentSession"] = parent
    directory, name = os.path.split(session_file)
    try:
        dir_fd = os.open(directory or "/", fsio.DIR_FLAGS)
    except OSError:
        return False
    try:
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        try:
            if os.fstat(fd).st_size != 0:
                return False
            fsio.write_all(fd, (json.dumps(header, separators=(",", ":")) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        return False
    finally:
        os.close(dir_fd)
    return True


def unpack_prompt(unpack: Unpack, *, target: str, reason: str, event_prompt: str, text: str) -> str:
    return fill(text, {"target": target, "reason": reason, "letter": unpack.letter, "ledger": unpack.ledger,
                       "event": event_prompt})


# -- pack --------------------------------------------------------------------------------------------------

def should_pack(pct: int, context: tuple[int, int] | None) -> bool:
    return pct > 0 and context is not None and context[1] > 0 and context[0] * 100 >= pct * context[1]


def extension_path() -> str:
    return str(resources.files(__package__).joinpath(EXTENSION))


def pack_command(pi_bin: str, session_file: str, model: str | None, prompt: str) -> list[str]:
    """The pack turn: the same session, the handoff tool as the only tool, nothing discovered."""
    command = [pi_bin, "-p", "--no-extensions", "-e", extension_path(), "--tools", TOOL, "--session", session_file]
    if model is not None:
        command += ["--model", model]
    return [*command, prompt]


def summary_command(pi_bin: str, model: str | None, prompt: str, session_file: str) -> list[str]:
    """The side call: no tools, no extensions; pi prints the answer on stdout. Its own scratch session file
    (not the job's) is written only so that the call's usage can be read and billed to the job."""
    command = [pi_bin, "-p", "--session", session_file, "--no-extensions", "--no-tools", "--no-context-files"]
    if model is not None:
        command += ["--model", model]
    return [*command, prompt]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") == "toolCall":
            parts.append(f"[tool call {block.get('name')}: {json.dumps(block.get('arguments'))[:TOOL_OUTPUT_CHARS]}]")
    return "\n".join(parts)


def transcript_text(final: bytes, limit: int = TRANSCRIPT_FOR_SUMMARY_CHARS) -> str:
    """The conversation as plain text for the summary call: user, assistant and tool lines, the newest kept."""
    lines: list[str] = []
    for raw in final.split(b"\n"):
        try:
            entry = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        message = entry.get("message") if isinstance(entry, dict) and entry.get("type") == "message" else None
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        text = _text_of(message.get("content"))
        if role == "toolResult":
            text = text[:TOOL_OUTPUT_CHARS]
        if text.strip():
            lines.append(f"[{role}]\n{text.strip()}")
    joined = "\n\n".join(lines)
    return joined if len(joined) <= limit else "[… earlier turns cut …]\n" + joined[-limit:]


_SUMMARY_HEADINGS = {title.split(":")[0].lower(): ("letter", name) for name, title in LETTER_FIELDS}
_SUMMARY_HEADINGS.update({title.lower(): ("entry", name) for name, title in (*TRUST_FIELDS, *ENTRY_FIELDS)})


def parse_summary(text: str) -> dict[str, Any] | None:
    """The side call's Markdown as a handoff object (writer ``summary``), or ``None`` when it has no sections."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.split("\n"):
        m = re.match(r"#{1,3}\s+(.+?)\s*$", line)
        if m:
            current = m.group(1).strip().rstrip(":").lower()
            sections.setdefault(current, [])
        elif current is not None:
            sections[current].append(line)
    if not sections:
        return None
    status_words = " ".join(sections.get("status", [])).lower().split()
    status = next((w.strip(".,") for w in status_words if w.strip(".,") in ("landed", "partial", "blocked")),
                  "partial")
    handoff: dict[str, Any] = {"writer": "summary", "status": status, "letter": {}, "entry": {}}
    found = 0
    for heading, lines in sections.items():
        where = _SUMMARY_HEADINGS.get(heading)
        body = "\n".join(lines).strip()
        if where is not None and body:
            handoff[where[0]][where[1]] = body
            found += 1
    return handoff if found else None


@dataclass(frozen=True)
class Packed:
    """How the pack went: who wrote the handoff (``None``: nobody could) and why not, when not."""

    writer: str | None
    detail: str | None = None
    side_call: bytes | None = None  # the summary call's scratch transcript, whatever it answered: its usage


def _clear(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _write_handoff(session_file: str, handoff: dict[str, Any]) -> None:
    """``/session/handoff.json``, replacing anything there (never through a link)."""
    directory = os.path.dirname(session_file)
    dir_fd = os.open(directory, fsio.DIR_FLAGS)
    try:
        temp = f".{HANDOFF}.runner-{os.getpid()}.tmp"
        fsio.clear_name(temp, dir_fd)
        fd = os.open(temp, fsio.CREATE_FLAGS, 0o600, dir_fd=dir_fd)
        try:
            # UTF-8, not \\u escapes: six bytes a character would pass the operator's read cap (store/handoff.py).
            fsio.write_all(fd, json.dumps(handoff, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
        finally:
            os.close(fd)
        fsio.clear_name(HANDOFF, dir_fd)
        os.rename(temp, HANDOFF, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def discard_handoff(session_file: str) -> None:
    """Remove a ``handoff.json`` the runner did not write this run (the agent can write into /session)."""
    try:
        dir_fd = os.open(os.path.dirname(session_file), fsio.DIR_FLAGS)
    except OSError:
        return
    try:
        fsio.clear_name(HANDOFF, dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _from_tool(path: str) -> dict[str, Any] | None:
    try:
        fd = os.open(path, fsio.READ_FLAGS)
    except OSError:
        return None
    try:
        data = os.read(fd, 256 * 1024)
    finally:
        os.close(fd)
    try:
        raw = json.loads(data)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    handoff = {"writer": "agent", "status": raw.get("status"), "letter": raw.get("letter"), "entry": raw.get("entry")}
    try:
        parse_handoff(handoff)
    except HandoffError as error:
        emit("rethread_handoff_refused", writer="agent", reason=str(error))
        return None
    return handoff


def pack(*, pi_bin: str, session_file: str, model: str | None, workspace: str, env: Mapping[str, str],
         pack_text: str, summary_text: str, pct: int, read_final: Any) -> Packed:
    """The pack turn, then the summary fallback; writes ``/session/handoff.json`` when either succeeds."""
    from pidispatch.runner.pi import run_pi  # the runner's own pi runner (signals forwarded)

    tool_file = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"pidispatch-handoff-{secrets.token_hex(8)}.json")
    _clear(tool_file)
    run = run_pi(pack_command(pi_bin, session_file, model, fill(pack_text, {"pct": str(pct)})), workspace,
                 {**env, "PI_RETHREAD_HANDOFF_FILE": tool_file})
    handoff = _from_tool(tool_file) if run.exit_code == 0 else None
    _clear(tool_file)
    if handoff is None:
        emit("rethread_pack_unanswered", exitCode=run.exit_code)
        final = read_final(session_file) or b""
        prompt = fill(summary_text, {"transcript": fence(transcript_text(final))})
        with tempfile.TemporaryDirectory(prefix="pi-summary-") as scratch:  # mode 0700, removed once read
            side_file = os.path.join(scratch, "summary.jsonl")
            try:
                done = subprocess.run(summary_command(pi_bin, model, prompt, side_file), cwd=workspace,
                                      env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=sys.stderr.fileno(), timeout=SIDE_CALL_TIMEOUT_S, check=False)
            except (OSError, subprocess.SubprocessError) as error:
                return Packed(None, f"the summary call failed: {type(error).__name__}", read_final(side_file))
            side = read_final(side_file)
        if done.returncode != 0:
            return Packed(None, f"the summary call exited {done.returncode}", side)
        handoff = parse_summary(done.stdout.decode("utf-8", "replace"))
        if handoff is None:
            return Packed(None, "the summary had none of the handoff's sections", side)
    else:
        side = None
    try:
        # What the operator will render, validated and cut here: the file's size is bounded whatever the agent sent.
        _write_handoff(session_file, parse_handoff(handoff).to_json())
    except (HandoffError, OSError) as error:
        return Packed(None, f"the handoff could not be kept: {error}", side)
    return Packed(str(handoff["writer"]), side_call=side)
