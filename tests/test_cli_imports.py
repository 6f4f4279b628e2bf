"""What the store path's commands import (docs/cli.md#start-up-cost): each runs in a fresh interpreter, which
then lists the heavy modules it loaded; the list must be empty.

Pi-dispatch hosts sharing the store and the runner's own start pay this on every job, so a module that creeps
onto the path (the whole settings package, logging, the handoff modules) fails here, not in a benchmark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.store import KEY, PI, Store, sample

# Never on the store path: the Kubernetes and HTTP stacks, pydantic, the settings of everything but the store,
# the strict transcript parser and the context measure, logging and the thread pools that load it.
HEAVY = ("kopf", "kubernetes", "aiohttp", "pydantic", "pydantic_settings", "logging", "concurrent.futures",
         "pidispatch.settings.operator", "pidispatch.settings.github", "pidispatch.settings.gateway",
         "pidispatch.settings.gatewayserver", "pidispatch.settings.jobpod", "pidispatch.settings.staging",
         "pidispatch.settings.scheduling", "pidispatch.transcript.parser", "pidispatch.transcript.context")
HANDOFF = ("pidispatch.store.handoff", "pidispatch.store.handoffdir")  # a promotion without a handoff, a resolve


def loaded(argv: list[str], heavy: tuple[str, ...], env: dict[str, str]) -> tuple[int, list[str], str]:
    """Run ``pidispatch ARGV`` in a fresh interpreter: its exit status, the ``heavy`` modules it loaded, stderr."""
    code = ("import json, sys, pidispatch.cli as c; status = c.main(json.loads(sys.argv[1])); "
            "print(json.dumps([status, sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)]))")
    base = {k: v for k, v in os.environ.items() if not k.startswith("PI_SESSION")}
    result = subprocess.run([sys.executable, "-c", code, json.dumps(argv), json.dumps(heavy)], capture_output=True,
                            text=True, timeout=60, env={**base, **env}, stdin=subprocess.DEVNULL)
    status, modules = json.loads(result.stdout.strip().splitlines()[-1])
    return status, modules, result.stderr


@pytest.mark.parametrize("command", ["store resolve", "store promote", "store inspect", "store inspect KEY", "key"])
def test_the_store_path_loads_nothing_heavy(command: str, store: Store, tmp_path: Path) -> None:
    store.put()
    stage = tmp_path / "job" / "session"
    stage.mkdir(parents=True)
    (stage / "current.jsonl").write_bytes(sample("s1_after_turn2.jsonl"))
    argv, heavy, event = {
        "store resolve": (["store", "resolve", "--key", KEY, "--stage", str(tmp_path / "r"), "--pi-version", PI],
                          HEAVY + HANDOFF, "session_resolved"),
        "store promote": (["store", "promote", "--key", KEY, "--stage", str(stage), "--host-resume", "true",
                           "--pi-version", PI], HEAVY + HANDOFF, "session_promoted"),
        "store inspect": (["store", "inspect", "--json"], HEAVY, None),
        "store inspect KEY": (["store", "inspect", KEY], HEAVY, None),
        "key": (["key", "--forge", "github", "--repo", "o/r", "--issue", "1"], HEAVY + HANDOFF, None),
    }[command]
    status, modules, stderr = loaded(argv, heavy, {"PI_SESSIONS_DIR": str(store.root)})
    assert (status, modules) == (0, []), stderr
    if event is not None:  # written to stderr without logging, as the handler it stands for would write it
        (line,) = stderr.splitlines()
        assert json.loads(line)["event"] == event and line.startswith(f'{{"event":"{event}","key":"{KEY}",')


def test_store_commands_import_no_kubernetes_stack(store: Store, tmp_path: Path) -> None:
    """The store path stays cheap: no kopf, Kubernetes client, HTTP stack or pydantic is imported."""
    store.put()
    code = ("import sys, pidispatch.cli as c; c.main(['store','reap']);"
            f"c.main(['store','resolve','--key','{KEY}','--stage','{tmp_path}/s','--pi-version','{PI}']);"
            f"c.main(['store','promote','--key','{KEY}','--stage','{tmp_path}/s','--host-resume','true']);"
            f"c.main(['key','--forge','github','--repo','o/r','--issue','1']);"
            "print(sorted(m for m in ('kopf','kubernetes','aiohttp','pydantic','pydantic_settings') "
            "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PI_SESSIONS_DIR": str(store.root)})
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stderr


def test_transcript_check_imports_no_pydantic(tmp_path: Path) -> None:
    """`transcript check` stays cheap too: its strict models are plain dataclasses, not pydantic ones."""
    session = tmp_path / "session.jsonl"
    session.write_bytes(sample("s5_auto_compaction_then_resume.jsonl"))
    code = ("import sys, pidispatch.cli as c; status = c.main(['transcript','check',sys.argv[1]]);"
            "print(status, sorted(m for m in ('pydantic','pydantic_core','kopf','kubernetes','aiohttp') "
            "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code, str(session)], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip().splitlines()[-1] == "0 []", (result.stdout, result.stderr)
