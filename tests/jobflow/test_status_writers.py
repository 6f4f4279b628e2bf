"""One status writer per kind (issue 41 item 2), held by reading the job flow's source.

Every status write in the operator goes through ``jobflow/status_patch.py`` (the resourceVersion, the retry on
a conflict, the one "changed?" rule); a SessionKey's status is judged by ``summarize_sessionkey`` alone and a
Trigger's by ``summarize_trigger`` alone, so no status field is set by one writer and emptied by another (the
mysql-operator anti-pattern docs/architecture.md#status-writing names).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.views import TriggerView
from pidispatch.jobflow.status_patch import changes, merged, write_status
from pidispatch.kubeapi import ApiError
from testkit.memoryapi import TRIGGERS, MemoryApi

ROOT = Path(__file__).resolve().parents[2] / "operator" / "pidispatch"
HELPER = ROOT / "jobflow" / "status_patch.py"
# A path ending in the status subresource: ``cluster.crd("jobs", name, "status")`` and the like.
STATUS_PATH = re.compile(r"""crd\([^()]*,\s*["']status["']\s*\)|/status["']""")


def sources() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "store" not in p.relative_to(ROOT).parts[:1])


def test_every_status_write_goes_through_the_one_patch_helper() -> None:
    """A ``.patch(`` on a ``.../status`` path is the helper's alone: anywhere else it is a second writer."""
    found = []
    for path in sources():
        if path == HELPER:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "patch":
                text = ast.unparse(node)
                if STATUS_PATH.search(text):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text[:100]}")
    assert not found, "status patched outside jobflow/status_patch.py:\n" + "\n".join(found)


def written_fields(path: Path, fields: tuple[str, ...]) -> set[str]:
    """The ``fields`` that ``path`` writes: as a key of a dict literal (``{"failedResumes": None}``) or by an
    assignment to a subscript (``status["failedResumes"] = None``)."""
    hits: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        keys: list[ast.expr | None] = []
        if isinstance(node, ast.Dict):
            keys = list(node.keys)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            keys = [node.slice]
        hits |= {key.value for key in keys if isinstance(key, ast.Constant) and isinstance(key.value, str)
                 and key.value in fields}
    return hits


def test_the_lifecycle_fields_of_a_sessionkey_have_one_writer() -> None:
    """``failedResumes`` and ``retired`` are set and emptied in ``summarize_sessionkey`` only (not by quarantine,
    retirement and the promotion facts each)."""
    lifecycle_fields = ("failedResumes", "retired", "usage", "rethreadedBy", "lastPromotedAt")
    writers = {str(p.relative_to(ROOT)): sorted(written_fields(p, lifecycle_fields))
               for p in sorted((ROOT / "jobflow").glob("*.py"))}
    writers = {name: fields for name, fields in writers.items() if fields}
    assert writers == {"jobflow/summarize_sessionkey.py": sorted(lifecycle_fields)}, writers


def test_a_triggers_schedule_and_conditions_have_one_summarize() -> None:
    """The cron step's record (``schedule``) and the Trigger's conditions are both turned into status by
    ``summarize_trigger``."""
    fields = ("schedule", "lastSlot", "nextSlot", "missed", "bounds")
    writers = {str(p.relative_to(ROOT)): sorted(written_fields(p, fields))
               for p in sorted((ROOT / "jobflow").glob("*.py"))}
    writers = {name: found for name, found in writers.items() if found}
    assert writers == {"jobflow/summarize_trigger.py": sorted(fields)}, writers


# -- the helper's rules, on MemoryApi --------------------------------------------------------------------------
CHANGES = [
    ("a null for a field that is absent is no change", {}, {"reason": None}, {}),
    ("a null for a field that is there deletes it", {"reason": "x"}, {"reason": None}, {"reason": None}),
    ("an object whose nulls the apiserver dropped already", {"session": {"resumed": True}},
     {"session": {"resumed": True, "bytes": None}}, {}),
    ("an object merges: members it does not name stay", {"session": {"resumed": True, "bytes": 3}},
     {"session": {"resumed": True}}, {}),
    ("a member that differs", {"session": {"resumed": True}}, {"session": {"resumed": False}},
     {"session": {"resumed": False}}),
    ("a list replaces", {"jobs": ["a", "b"]}, {"jobs": ["a"]}, {"jobs": ["a"]}),
    ("only the fields that change", {"a": 1, "b": 2}, {"a": 1, "b": 3}, {"b": 3}),
]


@pytest.mark.parametrize(("stored", "wanted", "sent"), [c[1:] for c in CHANGES], ids=[c[0] for c in CHANGES])
def test_one_changed_rule(stored: dict[str, Any], wanted: dict[str, Any], sent: dict[str, Any]) -> None:
    assert changes(stored, wanted) == sent
    assert merged(stored, sent) == merged(stored, wanted), "what is not sent would not have changed anything"


def test_a_conflict_reads_again_and_judges_again() -> None:
    api = MemoryApi()
    path = f"{TRIGGERS}/t"
    api.create(TRIGGERS, {"metadata": {"name": "t"}, "status": {"count": 1}})
    stale = TriggerView.of(api.get(path))
    api.patch(f"{path}/status", {"status": {"count": 2}})  # another writer, after ``stale`` was read
    seen: list[int] = []

    def judge(view: TriggerView) -> dict[str, int]:
        seen.append(view.stored_status["count"])
        return {"count": view.stored_status["count"] + 1}

    written = write_status(api, f"{path}/status", stale, judge,  # type: ignore[arg-type]
                           reread=lambda: TriggerView.of(api.get(path)))
    assert seen == [1, 2] and written is not None and api.get(path)["status"]["count"] == 3
    with pytest.raises(ApiError) as refused:  # no re-read: the conflict is the caller's
        write_status(api, f"{path}/status", stale, judge)  # type: ignore[arg-type]
    assert refused.value.status == 409
    assert write_status(api, f"{path}/status", TriggerView.of(api.get(path)),  # type: ignore[arg-type]
                        lambda view: {"count": 3}) is None, "nothing changes: nothing is written"
