"""Writes the pi session samples the transcript and store tests read, by running the pinned real pi.

    make transcripts                                   # tests/data/transcripts/pi-<pinned version>/
    .venv/bin/python -m testkit.gen_transcripts --out DIR

Every file is what ``e2e/pi/node_modules/.bin/pi`` (``make pi``) wrote while talking to the scripted model
(``testkit/scripted_model.py``: provider ``fake``, model ``fake-model``, ``contextWindow`` 32000, pi's default
retry and compaction settings), with one change: each session header's ``cwd`` (a temporary directory) is
rewritten to ``/workspace``, the runner's working directory. The edge cases are files damaged on purpose and
then handed to pi, to record what pi does with them. ``context.json`` holds pi's own ``get_session_stats``
figures for each file, and ``README.md`` says how each file was made.

The folder is named after the pinned pi version (``e2e/pi/package.json``), so bumping pi and rerunning this
writes a new folder (the default run removes the folders of other versions);
``tests/transcript/test_transcripts_current.py``
fails until that is done, and compares a fresh run with the committed files. Ids and timestamps are random and
the token counts depend on pi's system prompt (it names the clone's path), so a rerun changes values but not
structure: the tests read the values they assert from these files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testkit.pitool import installed_version, pi_binary, pi_env, pinned_version, run_pi
from testkit.scripted_model import DEFAULT_CONTEXT_WINDOW, ScriptedModel, Usage, error_step, write_agent_dir

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "tests" / "data" / "transcripts"
WORKSPACE = "/workspace"
PI_TIMEOUT_S = 120.0  # a loaded CI machine; a run normally takes a few seconds (s7's retries about 15)

# What each file shows; README.md is built from these and the measured figures. Order: as the tests read them.
MAIN: dict[str, tuple[str, str]] = {
    "s1_after_turn1.jsonl": (
        "`pi -p` on a new path, prompt `first question`",
        "a new session: header, `model_change`, `thinking_level_change`, user, assistant",
    ),
    "s1_after_turn2.jsonl": (
        "a second `pi -p` on the same file, prompt `second question`",
        "a resume: the first file's lines unchanged, a user and an assistant line appended (the user's "
        "`parentId` is the previous last entry); no new `model_change`",
    ),
    "s2_tool_call.jsonl": (
        "`pi -p` on a new path, prompt `run echo`; the model calls `bash` with `echo hello-from-tool` "
        "(id `call_abc123`), then replies `The command printed hello-from-tool.`",
        "an assistant `toolCall` (`stopReason: \"toolUse\"`), a `toolResult` with the command's real output, "
        "the final assistant reply",
    ),
    "s3_json_then_rpc_then_json.jsonl": (
        "`pi --mode json` on a new path (`json mode question`), then `pi --mode rpc` with one `prompt` command "
        "(`rpc question`), then `pi --mode json` again (`json resume`), all on the same file",
        "json and rpc modes write the session file exactly as `-p` does",
    ),
    "s4_cached_tokens.jsonl": (
        "`pi -p` on a new path, prompt `cache test`; the model reports prompt 1000, cached 300, completion 7",
        "the usage mapping: `input` 700, `cacheRead` 300, `output` 7, `totalTokens` 1007",
    ),
    "s5_auto_compaction_then_resume.jsonl": (
        "a copy of `s1_after_turn2`; `pi -p` prompt `make it big` answered `big answer` with usage prompt 20000, "
        "completion 50 (over the threshold 32000 - 16384), so pi compacted in the same run and the model wrote "
        "the summary `## Goal\\nSUMMARY FROM FAKE`; then `pi -p` prompt `prompt for n_compaction_resume`",
        "a `compaction` entry (`summary`, `firstKeptEntryId`, `tokensBefore` 20050, `details`, `fromHook`) and "
        "a resumed turn after it; cut right after the `compaction` line, the context is unknown (null)",
    ),
    "s6_http400_error.jsonl": (
        "`pi -p` on a new path, prompt `trigger 400`; the model answers HTTP 400 `bad request from fake`",
        "pi exits 1 but writes the file: the last entry is an assistant with `content: []`, "
        "`stopReason: \"error\"` and an `errorMessage`",
    ),
    "s7_http500_retries_then_resume.jsonl": (
        "`pi -p` on a new path, prompt `trigger 500`; the model answers HTTP 500 until pi gives up (default "
        "retry settings); then `pi -p` prompt `prompt for k_err500_resume` answered normally",
        "one chained `error` assistant entry per attempt of pi's agent (each attempt is several HTTP requests), "
        "then a normal turn; error entries are not replayed to the model",
    ),
    "s8_sigkill_midturn.jsonl": (
        "a copy of `s1_after_turn2`; `pi -p` prompt `will be killed`, SIGKILLed while it waits for the model",
        "a trailing user line with no assistant reply; the next resume sends two user messages in a row",
    ),
}
EDGE: dict[str, tuple[str, str]] = {
    "edge/b_empty.before.jsonl": ("an empty file (0 bytes)", "what `b_empty.after2runs` started from"),
    "edge/b_empty.after2runs.jsonl": (
        "`pi -p` on `b_empty.before` (`prompt for b_empty`), then a resume (`prompt for b_empty_resume`)",
        "a new session with the **header written twice**; the resume works and ignores the duplicate",
    ),
    "edge/c_garbage_first.before.jsonl": (
        "a non-JSON line `this is not json {{{`, then the entries of `s1_after_turn2` without its header",
        "a first line that is not JSON",
    ),
    "edge/c_garbage_first.after.jsonl": (
        "`pi -p` on `c_garbage_first.before` (`prompt for c_garbage_first`)",
        "pi **truncated the whole file**: a new session id, the old history lost, a duplicate header",
    ),
    "edge/c2_no_header.before.jsonl": ("`s1_after_turn2` without its header line", "no session header"),
    "edge/c2_no_header.after.jsonl": (
        "`pi -p` on `c2_no_header.before` (`prompt for c2_no_header`)", "the same as `c_garbage_first.after`",
    ),
    "edge/d_torn_last.before.jsonl": (
        "`s1_after_turn2` with its last line cut mid-JSON (before `,\"cost\":`), no trailing newline",
        "a torn last line",
    ),
    "edge/d_torn_last.after1run.jsonl": (
        "`pi -p` on `d_torn_last.before` (`prompt for d_torn_last`)",
        "pi appended the new user entry **onto the fragment** (line 7 holds both and is invalid); the new "
        "assistant's `parentId` names an entry inside that invalid line",
    ),
    "edge/d_torn_last.after2runs.jsonl": (
        "`pi -p` on `d_torn_last.after1run` (`prompt for d_torn_last_resume2`)",
        "the active chain starts at the orphaned assistant reply: all earlier history is gone from the model's "
        "context; pi also appended a fresh `thinking_level_change` before the new user message",
    ),
    "edge/d2_no_trailing_newline.before.jsonl": (
        "`s1_after_turn2` with its final newline removed", "an unterminated last line",
    ),
    "edge/d2_no_trailing_newline.after.jsonl": (
        "`pi -p` on `d2_no_trailing_newline.before` (`prompt for d2_no_trailing_newline`)",
        "the run works, but the new user line is glued onto the last line (line 7 holds two JSON objects); "
        "the next resume would orphan as in `d_torn_last`",
    ),
    "edge/e_header_only.before.jsonl": ("the header line of `s1_after_turn2` alone", "a header and no entries"),
    "edge/e_header_only.after.jsonl": (
        "`pi -p` on `e_header_only.before` (`prompt for e_header_only`)",
        "pi kept the header's id but wrote a **second copy of the header**, then `model_change`, "
        "`thinking_level_change` and the turn",
    ),
}
FILES: tuple[str, ...] = (*MAIN, *EDGE)
CONTEXT = "context.json"
README = "README.md"
WRITTEN: tuple[str, ...] = (*FILES, CONTEXT, README)  # everything a run writes into its folder


def samples_dir(version: str | None = None) -> Path:
    """The committed folder of pi ``version`` (default: the version ``e2e/pi/package.json`` pins)."""
    return ROOT / f"pi-{version or pinned_version()}"


class GenerationError(RuntimeError):
    """pi did not do what a recipe needs (the sample would not show what its README line says)."""


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


@dataclass
class _Pi:
    """The pinned pi wired to one scripted model, with its own agent dir, HOME and working directory."""

    model: ScriptedModel
    agent: Path
    home: Path
    cwd: Path
    log: list[str] = field(default_factory=list)

    def run(self, session: Path, prompt: str, *, mode: str | None = None, exit_code: int = 0) -> str:
        """``pi -p`` (or ``--mode MODE``) on ``session``; its stdout. Any other exit code than expected fails."""
        args = ["--mode", mode] if mode else ["-p"]
        done = run_pi(*args, "--session", str(session), prompt, agent_dir=self.agent, home=self.home, cwd=self.cwd,
                      timeout=PI_TIMEOUT_S)
        self.log.append(f"pi {' '.join(args)} {prompt!r}: exit {done.returncode}")
        if done.returncode != exit_code:
            raise GenerationError(f"pi {' '.join(args)} on {session.name} ({prompt!r}) exited {done.returncode}, "
                                  f"expected {exit_code}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
        return done.stdout

    def _popen(self, *args: str, stdin: int | None) -> subprocess.Popen[str]:
        return subprocess.Popen([str(pi_binary()), *args], stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=self.cwd, env=pi_env(self.agent, self.home))

    def rpc_prompt(self, session: Path, prompt: str) -> None:
        """One ``prompt`` command to ``pi --mode rpc``; waits for ``agent_end``, then closes stdin (pi exits)."""
        proc = self._popen("--mode", "rpc", "--session", str(session), stdin=subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps({"id": "p1", "type": "prompt", "message": prompt}) + "\n")
            proc.stdin.flush()
            seen: list[str] = []
            for line in proc.stdout:
                seen.append(line)
                event = json.loads(line) if line.startswith("{") else {}
                if event.get("type") == "response" and event.get("id") == "p1" and not event.get("success"):
                    raise GenerationError(f"pi --mode rpc refused the prompt: {line}")
                if event.get("type") == "agent_end":
                    break
            else:
                raise GenerationError(f"pi --mode rpc ended without agent_end:\n{''.join(seen)}")
            proc.stdin.close()
            code = proc.wait(PI_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.log.append(f"pi --mode rpc prompt {prompt!r}: exit {code}")
        if code != 0:
            raise GenerationError(f"pi --mode rpc exited {code}: {proc.stderr.read() if proc.stderr else ''}")

    def killed_midturn(self, session: Path, prompt: str) -> None:
        """``pi -p`` SIGKILLed once its request reached the model and its user line is on disk."""
        before = len(_lines(session.read_bytes()))
        self.model.reply("never sent: pi is killed first", delay=PI_TIMEOUT_S)
        asked = len(self.model.requests) + 1
        proc = self._popen("-p", "--session", str(session), prompt, stdin=subprocess.DEVNULL)
        try:
            self.model.wait_for_requests(asked, timeout=PI_TIMEOUT_S)
            deadline = time.monotonic() + PI_TIMEOUT_S
            while len(_lines(session.read_bytes())) <= before:
                if time.monotonic() > deadline:
                    raise GenerationError(f"pi did not write the user line of {prompt!r} before the model answered")
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.communicate()
        if proc.returncode != -signal.SIGKILL:
            raise GenerationError(f"pi was to die of SIGKILL but exited {proc.returncode}")
        self.model.replace_script([])  # the delayed reply is spent; nothing else queued
        self.log.append(f"pi -p {prompt!r}: SIGKILL while waiting for the model")

    def stats(self, session: Path) -> dict[str, Any] | None:
        """pi's ``get_session_stats`` ``contextUsage`` for ``session`` (run on a copy: pi may rewrite a damaged
        file when it opens it); None when pi reports none."""
        scratch = session.with_name(session.name + ".stats")
        shutil.copyfile(session, scratch)
        command = json.dumps({"id": "stats", "type": "get_session_stats"}) + "\n"
        done = subprocess.run([str(pi_binary()), "--mode", "rpc", "--session", str(scratch)], input=command,
                              capture_output=True, text=True, cwd=self.cwd, timeout=PI_TIMEOUT_S,
                              env=pi_env(self.agent, self.home))
        scratch.unlink()
        for line in done.stdout.splitlines():
            message = json.loads(line) if line.startswith("{") else {}
            if message.get("id") == "stats" and message.get("type") == "response":
                if not message.get("success"):
                    raise GenerationError(f"get_session_stats failed on {session.name}: {line}")
                usage = message["data"].get("contextUsage")
                return None if usage is None else dict(usage)
        raise GenerationError(f"pi --mode rpc gave no get_session_stats answer for {session.name}:\n"
                              f"{done.stdout}\n{done.stderr}")


def structure(data: bytes) -> list[str]:
    """What a file is made of, line by line: the entry ``type`` (a message's ``type:role``, an assistant's
    ``type:role:stopReason``), or ``invalid`` for a line that is not one JSON object. Two runs of the same recipe
    give the same structure; ids, timestamps and token counts differ."""
    shape: list[str] = []
    for line in data.split(b"\n"):
        if not line and len(shape) == data.count(b"\n"):
            break  # the end of the last terminated line
        try:
            entry = json.loads(line)
        except ValueError:
            shape.append("invalid")
            continue
        if not isinstance(entry, dict):
            shape.append("invalid")
            continue
        parts = [str(entry.get("type"))]
        message = entry.get("message")
        if isinstance(message, dict):
            parts.append(str(message.get("role")))
            if message.get("role") == "assistant":
                parts.append(str(message.get("stopReason")))
        shape.append(":".join(parts))
    return shape


def _torn(data: bytes) -> bytes:
    """``data`` with its last line cut mid-JSON, before the usage's ``cost`` (a write cut short)."""
    head, last = data.rstrip(b"\n").rsplit(b"\n", 1)
    cut = last.find(b',"cost":')
    if cut < 0:
        raise GenerationError("the last line of s1_after_turn2 has no usage cost to cut before")
    return head + b"\n" + last[:cut]


def to_workspace(data: bytes, cwd: str) -> bytes:
    """``data`` with the ``cwd`` of every session header line rewritten to ``/workspace``; nothing else changes,
    and the temporary path must not appear anywhere else."""
    real = b'"cwd":' + json.dumps(cwd).encode()
    lines = [line.replace(real, b'"cwd":' + json.dumps(WORKSPACE).encode()) if line.startswith(b'{"type":"session"')
             else line for line in _lines(data)]
    out = b"\n".join(lines)
    if cwd.encode() in out:
        raise GenerationError(f"the working directory {cwd} appears outside a session header")
    return out


def _recipes(pi: _Pi, work: Path) -> dict[str, bytes]:
    """Run every recipe; the bytes of each file of ``FILES`` as pi left it (header cwd not yet rewritten)."""
    out: dict[str, bytes] = {}
    model = pi.model

    def snap(name: str, path: Path) -> bytes:
        out[name] = path.read_bytes()
        return out[name]

    def fresh(name: str, data: bytes | None = None) -> Path:
        path = work / name
        if path.exists():
            raise GenerationError(f"{name} exists already")
        if data is not None:
            path.write_bytes(data)
        return path

    s1 = fresh("s1.jsonl")
    pi.run(s1, "first question")
    snap("s1_after_turn1.jsonl", s1)
    pi.run(s1, "second question")
    s1_turn2 = snap("s1_after_turn2.jsonl", s1)

    model.tool_call("bash", {"command": "echo hello-from-tool"}, call_id="call_abc123")
    model.reply("The command printed hello-from-tool.")
    s2 = fresh("s2.jsonl")
    pi.run(s2, "run echo")
    snap("s2_tool_call.jsonl", s2)

    s3 = fresh("s3.jsonl")
    pi.run(s3, "json mode question", mode="json")
    pi.rpc_prompt(s3, "rpc question")
    pi.run(s3, "json resume", mode="json")
    snap("s3_json_then_rpc_then_json.jsonl", s3)

    model.reply("cached", usage=Usage(prompt_tokens=1000, completion_tokens=7, cached_tokens=300))
    s4 = fresh("s4.jsonl")
    pi.run(s4, "cache test")
    snap("s4_cached_tokens.jsonl", s4)

    model.reply("big answer", usage=Usage(prompt_tokens=20000, completion_tokens=50))
    model.reply("## Goal\nSUMMARY FROM FAKE")  # the summary pi asks for when it compacts
    s5 = fresh("s5.jsonl", s1_turn2)
    pi.run(s5, "make it big")
    if b'"type":"compaction"' not in s5.read_bytes():
        raise GenerationError("pi did not compact after a reply of 20050 tokens in a 32000 window")
    pi.run(s5, "prompt for n_compaction_resume")
    snap("s5_auto_compaction_then_resume.jsonl", s5)

    model.error(400, {"error": {"message": "bad request from fake", "type": "invalid_request_error", "code": 400}})
    s6 = fresh("s6.jsonl")
    pi.run(s6, "trigger 400", exit_code=1)
    snap("s6_http400_error.jsonl", s6)

    # More 500s than pi's retries can use up (each agent attempt is several HTTP requests); the rest is dropped.
    model.script([error_step(500) for _ in range(40)])
    s7 = fresh("s7.jsonl")
    pi.run(s7, "trigger 500", exit_code=1)
    if model.pending == 0:
        raise GenerationError("pi was still retrying when the scripted 500s ran out")
    model.replace_script([])
    pi.run(s7, "prompt for k_err500_resume")
    snap("s7_http500_retries_then_resume.jsonl", s7)

    s8 = fresh("s8.jsonl", s1_turn2)
    pi.killed_midturn(s8, "will be killed")
    snap("s8_sigkill_midturn.jsonl", s8)

    (work / "edge").mkdir()
    lines = _lines(s1_turn2)
    header = lines[0] + b"\n"
    edge: list[tuple[str, bytes, list[tuple[str, str]]]] = [
        ("b_empty", b"", [("prompt for b_empty", ""), ("prompt for b_empty_resume", "after2runs")]),
        ("c_garbage_first", b"this is not json {{{\n" + b"\n".join(lines[1:]),
         [("prompt for c_garbage_first", "after")]),
        ("c2_no_header", b"\n".join(lines[1:]), [("prompt for c2_no_header", "after")]),
        ("d_torn_last", _torn(s1_turn2),
         [("prompt for d_torn_last", "after1run"), ("prompt for d_torn_last_resume2", "after2runs")]),
        ("d2_no_trailing_newline", s1_turn2.removesuffix(b"\n"), [("prompt for d2_no_trailing_newline", "after")]),
        ("e_header_only", header, [("prompt for e_header_only", "after")]),
    ]
    for case, before, runs in edge:
        path = fresh(f"edge/{case}.jsonl", before)
        snap(f"edge/{case}.before.jsonl", path)
        for prompt, stage in runs:
            pi.run(path, prompt)
            if stage:
                snap(f"edge/{case}.{stage}.jsonl", path)
    missing = set(FILES) - set(out)
    if missing or len(out) != len(FILES):
        raise GenerationError(f"recipes and FILES disagree: missing {sorted(missing)}, made {sorted(out)}")
    return out


def _readme(version: str, files: dict[str, bytes], context: dict[str, Any]) -> str:
    def row(name: str, how: str, what: str) -> str:
        usage = context["files"][name]
        figure = "—" if usage is None or usage.get("tokens") is None else f"{usage['tokens']} / {usage['percent']}"
        data = files[name]
        lines = data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))  # a torn last line counts
        return f"| `{name}` | {lines} | {how} | {what} | {figure} |"

    header = "| File | Lines | Made by | What it shows | Context (pi: tokens / %) |\n|---|---|---|---|---|"
    return "\n".join([
        f"# pi {version} session files (real output)",
        "",
        f"Written by `python -m testkit.gen_transcripts` (`make transcripts`): the pinned real pi {version} "
        "(`e2e/pi/node_modules/.bin/pi`, `make pi`) run with `pi -p --session <file> \"<prompt>\"` (or `--mode "
        "json` / `--mode rpc` where noted), stdin `/dev/null`, an isolated agent dir and HOME, against the "
        "scripted OpenAI-compatible model of `testkit/scripted_model.py` on 127.0.0.1: provider `fake`, model "
        f"`fake-model`, `contextWindow` {DEFAULT_CONTEXT_WINDOW}, pi's default retry and compaction settings. "
        "Do not edit these files by hand; rerun the generator (after a pi bump it writes a new folder).",
        "",
        "**One change from pi's output:** every session header's `cwd` (a temporary directory) is rewritten to "
        f"`{WORKSPACE}`, the runner's working directory. No other byte differs. Ids, timestamps and token counts "
        "change on every run (the scripted model counts ceil(characters / 4) of each request, and pi's system "
        "prompt names the clone's path), so the tests read the values they assert from these files.",
        "",
        "The model's default reply is `Scripted reply #<n> to: <prompt>`, `<n>` counting the requests of the "
        "whole run. `context.json` holds pi's own `get_session_stats` `contextUsage` for each file (window "
        f"{DEFAULT_CONTEXT_WINDOW}; null when pi reports none), taken by `pi --mode rpc` on a copy; for a file "
        "it cannot resume (`c_garbage_first.before`, `c2_no_header.before`) pi starts a new, empty session and "
        "reports that.",
        "",
        "## Main samples",
        "",
        header,
        *(row(name, how, what) for name, (how, what) in MAIN.items()),
        "",
        "## Edge cases (`edge/`)",
        "",
        "Each `*.before.jsonl` is a file handed to `pi -p --session <file>`; the `*.after*.jsonl` next to it is "
        "what pi left behind. Every one of these runs exited 0.",
        "",
        header,
        *(row(name, how, what) for name, (how, what) in EDGE.items()),
        "",
        "What the runner does about these before handing a file to pi: `normalise` in "
        "`operator/pidispatch/runner/session.py`.",
        "",
    ])


def generate(out: Path) -> None:
    """Run every recipe with the pinned pi and write ``WRITTEN`` into ``out`` (created; must hold none of them)."""
    pi_binary()  # fails early, saying `make pi`, when pi is missing or another version
    version = installed_version()
    assert version is not None
    clashing = [name for name in WRITTEN if (out / name).exists()]
    if clashing:
        raise GenerationError(f"{out} already holds {clashing}: remove the folder first")
    # mkdtemp's names have a fixed length, so each run's prompts (and token counts) differ only by the clone path.
    with tempfile.TemporaryDirectory(prefix="pi-transcripts-") as tmp, ScriptedModel() as model:
        work = Path(tmp)
        cwd = work / "workspace"
        cwd.mkdir()
        runs = work / "runs"
        runs.mkdir()
        pi = _Pi(model, write_agent_dir(work / "agent", model.base_url, fast_fail=False), work / "home", cwd)
        raw = _recipes(pi, runs)
        files = {name: to_workspace(data, str(cwd)) for name, data in raw.items()}
        context: dict[str, Any] = {"pi": version, "window": DEFAULT_CONTEXT_WINDOW, "files": {}}
        for name, data in raw.items():
            copy = work / "stats.jsonl"
            copy.write_bytes(data)
            context["files"][name] = pi.stats(copy)
    for name, data in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    (out / CONTEXT).write_text(json.dumps(context, indent=2) + "\n")
    (out / README).write_text(_readme(version, files, context))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.gen_transcripts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help=f"write here instead of {ROOT.relative_to(REPO)}/pi-<pinned>/ "
                        "(the default replaces that folder and removes the folders of other pi versions)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        generate(args.out)
        target = args.out
    else:
        target = samples_dir()
        ROOT.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".pi-staging-", dir=ROOT))
        try:
            generate(staging)
            for old in ROOT.glob("pi-*"):
                shutil.rmtree(old)
                print(f"removed {old.relative_to(REPO)}", file=sys.stderr)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    print(f"wrote {len(WRITTEN)} files into {target} in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
