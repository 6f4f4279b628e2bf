"""The cluster takes its node backend as a parameter: no backend imports the cluster, so there is no import cycle
(the real node used to subclass ``Cluster``, which built it in ``load``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parent.parent / "e2e" / "framework"


def imported(module: Path) -> set[str]:
    """Every module ``module`` imports, at any depth of its code (a function-level import counts too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("module", ["clusterkit.py", "testnode.py", "realnode.py", "multinode.py",
                                    *(f"kubelet/{p.name}" for p in sorted((E2E / "kubelet").glob("*.py")))])
def test_no_node_backend_imports_the_cluster(module: str) -> None:
    assert "e2e.framework.cluster" not in imported(E2E / module)


def test_the_cluster_names_its_backends_through_one_contract() -> None:
    from e2e.framework.cluster import Cluster
    from e2e.framework.multinode import MultiNode
    from e2e.framework.realnode import RealNode
    from e2e.framework.testnode import TestKubeletNode

    for backend in (TestKubeletNode(), RealNode(), MultiNode()):
        cluster = Cluster(state_dir=Path("/nonexistent/state"), backend=backend)
        assert cluster.backend is backend and cluster.node == backend.kind
        assert cluster.components == backend.components


def test_the_multi_node_backend_is_found_again_from_its_state(tmp_path: Path) -> None:
    """``cluster.json`` of a multi-node cluster loads as one (``make cluster-down`` stops every kubelet)."""
    from e2e.framework.cluster import Cluster
    from e2e.framework.multinode import NODE_NAMES, MultiNode

    Cluster(state_dir=tmp_path, backend=MultiNode()).save()
    loaded = Cluster.load(tmp_path)
    assert isinstance(loaded.backend, MultiNode) and loaded.node == "multi"
    assert loaded.components[-len(NODE_NAMES):] == NODE_NAMES
    assert "kube-scheduler" in loaded.components and "pv-provisioner" in loaded.components
