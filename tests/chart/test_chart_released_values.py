"""Every released chart's values still pass HEAD's values schema, so the documented upgrade
(``helm upgrade --reuse-values``, docs/upgrading.md) is never refused for a key a release had and HEAD dropped.

Offline, with the pinned helm: each release's ``values.yaml`` as ``git show`` has it, rendered with HEAD's chart.
``e2e/test_upgrade.py`` runs the whole upgrade from the last release on a real apiserver; this checks every
release, and runs on a clone without tags too (``testkit.chart.RELEASES``: the releases' commits).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from testkit.chart import RELEASES, git, released, render

Helm = Callable[..., subprocess.CompletedProcess[str]]


def test_the_history_holds_at_least_the_first_release() -> None:
    assert set(released()) & ({*RELEASES, *RELEASES.values()}), "no release is in HEAD's history"


@pytest.mark.parametrize("release", released())
def test_a_released_values_file_passes_head_s_schema(helm: Helm, release: str, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(git("show", f"{release}:charts/pi-dispatch/values.yaml"))
    docs = render(helm, None, "--values", str(values))
    assert any(d["kind"] == "Deployment" for d in docs), f"{release}'s values rendered no Deployment"


def test_the_removed_peering_value_is_accepted_and_ignored(helm: Helm, tmp_path: Path) -> None:
    """0.1.0's ``peering.name`` named a KopfPeering; leader election moved to a Lease and the value means nothing."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"peering": {"name": "pi-dispatch"}}))
    docs = render(helm, None, "--values", str(values))
    assert not [d for d in docs if d["kind"] == "KopfPeering"]
    assert "PI_DISPATCH_PEERING" not in yaml.safe_dump_all(docs)
