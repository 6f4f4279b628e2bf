"""Tokens of the delivery after a long job: resumed, rethreaded, or cold (real pi, the runner, a scripted model).

Job 1 works for real: pi's ``read`` tool reads six source files (about 90 KiB in all) on the model's
scripted tool calls, then the runner's pack turn writes the handoff through pi's handoff tool. Then the
next delivery runs three ways, each a real ``pidispatch runner`` with the same event:

* **resumed**: job 1's transcript staged (``PI_SESSION_HOST_RESUME=true``), as the gates allow it;
* **rethreaded**: an empty transcript with job 1's letter and ledger, as after ``context-too-full``;
* **cold**: an empty transcript and nothing else, as today after any refusal.

Every token figure is the scripted model's usage of the requests pi really sent: ``prompt_tokens`` is
``ceil(characters / 4)`` of the request, a fixed rule, so the figures are exact and repeatable, and the
ratios are what count (a real tokenizer gives other absolute numbers). What a model does with less
context is not measured here; what a cold start needs to get back to where the work stood is estimated
by what job 1 paid to get there (its reads), which a cold start on the same work repeats.

    python bench/rethread.py [--markdown]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._common import machine, progress  # noqa: E402
from pidispatch.store.handoff import LedgerEntry, parse_handoff, render_entry, render_ledger, render_letter  # noqa: E402
from testkit.pitool import pi_binary, pi_env, pinned_version  # noqa: E402
from testkit.scripted_model import ScriptedModel, _estimate, _prompt_chars, write_agent_dir  # noqa: E402

FILES = 6
FILE_BYTES = 15 * 1024
WINDOW = 64000
HANDOFF = {"status": "partial", "letter": {
    "whereWeAre": "The cache race is in src/cache.py: Writer.flush() releases the lock before the index write. "
                  "A reproduction is in tests/test_cache.py::test_race (fails about 3 in 10 runs).",
    "doFirst": "Move the index write inside the lock in Writer.flush(); run pytest tests/test_cache.py -k race -x "
               "--count 50.",
    "watchOut": "The lock is re-entrant; Reader.get() takes it too, so do not call flush() from a reader.",
    "dontRedo": "Do not re-read src/store*.py: none of them touch the index. The bisect is done: abc1234.",
    "trust": "Verified: the test fails before the fix. Assumed: only Linux is affected (CI is Linux only)."},
    "entry": {"verified": "the race reproduces (3/10)", "assumed": "Linux only", "stillBroken": "test_race",
              "goal": "make tests/test_cache.py::test_race pass reliably", "done": "read the cache and store "
              "modules; wrote the reproduction", "decisions": "keep the lock re-entrant; order the writes",
              "files": "src/cache.py, tests/test_cache.py", "commands": "pytest tests/test_cache.py -k race",
              "openProblems": "Windows is not tested", "nextSteps": "fix flush(); run the test 50 times"}}


def source(n: int) -> str:
    lines = [f"# src/store{n}.py: part of the storage layer (generated for the benchmark)"]
    i = 0
    while sum(len(line) + 1 for line in lines) < FILE_BYTES:
        lines.append(f"def handler_{n}_{i}(request, cache, index):\n    value = cache.get(request.key)\n"
                     f"    if value is None:\n        value = index.lookup(request.key, shard={i % 7})\n"
                     f"    return value  # path {n}.{i}")
        i += 1
    return "\n".join(lines) + "\n"


class World:
    def __init__(self, root: Path, model: ScriptedModel) -> None:
        self.root, self.model = root, model
        self.agent = write_agent_dir(root / "agent", model.base_url, context_window=WINDOW)
        self.workspace = root / "workspace"
        (self.workspace / "src").mkdir(parents=True)
        for n in range(FILES):
            (self.workspace / "src" / f"store{n}.py").write_text(source(n))

    def run(self, session: bytes, *, extra: dict[str, str], staged: dict[str, str] | None = None) -> tuple[bytes, int]:
        """One runner; returns the session file after it and how many requests the model received."""
        sdir = self.root / f"session-{len(self.model.requests)}"
        sdir.mkdir(mode=0o700)
        (sdir / "current.jsonl").write_bytes(session)
        for name, text in (staged or {}).items():
            (sdir / name).write_text(text)
        spec = {"trigger": "fix", "forge": "github", "repository": "acme/widgets", "issue": 7,
                "comment": "@pi the review says: also cover the Windows runner", "sender": "alice"}
        env = {"PI_BIN": str(pi_binary()), "PI_WORKSPACE": str(self.workspace), "PI_JOB_NAME": "bench",
               "PI_TERMINATION_LOG": str(self.root / "termination"), "PI_JOB_SPEC": json.dumps(spec),
               "PI_REPOSITORY": "acme/widgets", "PI_ISSUE": "7", "PI_MODEL": "fake/fake-model",
               "PI_VERSION": pinned_version(), "PI_SESSION_FILE": str(sdir / "current.jsonl"), **extra}
        before = len(self.model.requests)
        done = subprocess.run([sys.executable, "-m", "pidispatch", "runner"], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300,
                              env=pi_env(self.agent, self.root / "home", env), cwd=self.root)
        if done.returncode != 0:
            raise SystemExit(f"the runner failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return (sdir / "current.jsonl").read_bytes(), len(self.model.requests) - before

    def prompt_tokens(self, first: int, count: int) -> list[int]:
        """The prompt tokens the scripted model reported for these requests (its own estimate of each)."""
        return [_estimate(_prompt_chars(body["messages"])) for body in self.model.requests[first:first + count]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ScriptedModel() as model:
        w = World(Path(tmp), model)
        progress(f"job 1: {FILES} reads of {FILE_BYTES // 1024} KiB each, then the pack turn")
        for n in range(FILES):
            model.tool_call("read", {"path": f"src/store{n}.py"})
        model.reply("The race is in Writer.flush(): it releases the lock before the index write.")
        model.tool_call("rethread_handoff", {k: HANDOFF[k] for k in ("status", "letter", "entry")})
        start = len(model.requests)
        job1, n1 = w.run(b"", extra={"PI_SESSION_HOST_RESUME": "false", "PI_SESSION_RETHREAD_PCT": "30"})
        job1_tokens = w.prompt_tokens(start, n1)
        handoff = json.loads((Path(tmp) / f"session-{start}" / "handoff.json").read_text())
        h = parse_handoff(handoff)
        letter = render_letter(h, job="bench-1", sha256="0" * 64, size=len(job1), session=None, now_s=0)
        ledger = render_ledger([LedgerEntry(render_entry(h, number=1, job="bench-1", sha256="0" * 64, now_s=0),
                                            1, 1, False)])
        figures: dict[str, Any] = {}
        for how, session, extra, staged in (
                ("resumed", job1, {"PI_SESSION_HOST_RESUME": "true"}, None),
                ("rethreaded", b"", {"PI_SESSION_HOST_RESUME": "false", "PI_SESSION_RETHREAD": "context-too-full"},
                 {"letter.md": letter, "ledger.md": ledger}),
                ("cold", b"", {"PI_SESSION_HOST_RESUME": "false"}, None)):
            progress(f"delivery 2, {how}")
            model.reply("Goal: fix the race\nFirst action: move the index write\nMain risk: the re-entrant lock")
            first = len(model.requests)
            _, n = w.run(session, extra={**extra, "PI_SESSION_RETHREAD_PCT": "0"}, staged=staged)
            figures[how] = w.prompt_tokens(first, n)[0]
    reads = sum(job1_tokens[:FILES + 1])  # the requests that carried the reads' results, up to the answer
    pack = job1_tokens[-1]
    rows = [("job 1: the reads and the answer (7 requests)", reads), ("job 1: the pack turn", pack),
            ("delivery 2 resumed: first request", figures["resumed"]),
            ("delivery 2 rethreaded: first request", figures["rethreaded"]),
            ("delivery 2 cold: first request", figures["cold"])]
    facts = machine(tempfile.gettempdir())
    out = [f"machine: {facts['cpus']} CPUs; load {facts['load']}; "
           f"pi {pinned_version()}; window {WINDOW}", ""]
    if args.markdown:
        out += ["| request | prompt tokens |", "|---|---:|"] + [f"| {name} | {tokens} |" for name, tokens in rows]
    else:
        out += [f"{name:<45} {tokens:>8}" for name, tokens in rows]
    out += ["", f"rethreaded / resumed first request: {figures['rethreaded'] / figures['resumed']:.3f}",
            f"rethreaded / cold first request:    {figures['rethreaded'] / figures['cold']:.2f}",
            f"cold start back to where job 1 stood (its first request + the reads it repeats) / rethreaded: "
            f"{(figures['cold'] + reads - job1_tokens[0]) / figures['rethreaded']:.1f}"]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
