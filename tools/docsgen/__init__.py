"""The generated reference pages of the documentation site: the CRD fields from the API's pydantic models
(``crdref``) and the chart values from ``values.schema.json`` and ``values.yaml`` (``valuesref``).

``python -m tools.docsgen`` writes them into ``docs/reference/``; ``python -m tools.docsgen --check`` writes
nothing and fails naming each page that differs from a fresh generation (``tests/docs/test_docs_reference.py`` runs
the same comparison, and ``make docs`` regenerates them before it builds the site).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What regenerates the pages, run from the repository root (the tests' failure messages name it).
REGENERATE_COMMAND = "python -m tools.docsgen"
REFERENCE = ROOT / "docs" / "reference"


def pages() -> dict[Path, Callable[[], str]]:
    """Each generated page and the function that renders it."""
    from tools.docsgen import crdref, valuesref

    return {REFERENCE / "crds.md": crdref.render, REFERENCE / "values.md": valuesref.render}


def stale() -> list[Path]:
    """The generated pages whose committed text differs from a fresh generation (or that are missing)."""
    return [path for path, render in pages().items()
            if not path.is_file() or path.read_text(encoding="utf-8") != render()]


def write() -> list[Path]:
    """Write every generated page; the ones whose text changed."""
    changed = stale()
    for path, render in pages().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(), encoding="utf-8")
    return changed
