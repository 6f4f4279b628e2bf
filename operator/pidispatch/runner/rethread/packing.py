"""Pack: the turn that writes the handoff when the conversation reached the bound, then the summary fallback.

pi is started again on the same session with the handoff tool (``handoff.ts``, loaded by ``-e``) as its only
tool; if the agent does not call it, a side call (``summary.py``) writes the handoff from the transcript. Either
way the result is ``/session/handoff.json``, validated and cut here.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from pidispatch.events import emit
from pidispatch.runner.prompt import fence
from pidispatch.runner.rethread.summary import parse_summary, summary_command, transcript_text
from pidispatch.runner.rethread.templates import fill
from pidispatch.store import fsio
from pidispatch.store.handoff import HANDOFF, HandoffError, parse_handoff

TOOL = "rethread_handoff"
EXTENSION = "handoff.ts"
SIDE_CALL_TIMEOUT_S = 600.0


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
