"""A real node's bridge, iptables chain, cgroup root and subnet are its state directory's own, so the demo's node
and a test run's node run side by side on one machine (no root, no cluster needed: names only)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.realnode import RealNode
from e2e.framework.realnodekit import NODE_NETWORKS, bridge_name, choose_subnet, node_tag

Net = ipaddress.IPv4Network


def backend(state_dir: Path) -> RealNode:
    node = RealNode()
    Cluster(state_dir=state_dir, backend=node)
    return node


def test_two_state_directories_name_everything_apart(tmp_path: Path) -> None:
    demo, tests = backend(tmp_path / "cluster"), backend(tmp_path / "pytest-1" / "realnode0")
    for what in ("bridge", "chain", "cgroup_root", "cni_network"):
        assert getattr(demo, what) != getattr(tests, what), what


def test_one_state_directory_names_the_same_each_time(tmp_path: Path) -> None:
    assert backend(tmp_path / "cluster").bridge == backend(tmp_path / "cluster").bridge == bridge_name(
        node_tag(tmp_path / "cluster"))


@pytest.mark.parametrize("state_dir", ["/root/.cache/pidispatch/cluster", "/tmp/pytest-of-root/pytest-7/realnode0",
                                       "/" + "very-long-directory-name/" * 20])
def test_the_bridge_name_fits_linux_interface_names(state_dir: str) -> None:
    assert len(bridge_name(node_tag(Path(state_dir)))) <= 15


@pytest.mark.parametrize(("tag", "taken", "expected"), [
    pytest.param("00000005", [], "10.244.5.0/24", id="the-tag's-own-subnet-when-free"),
    pytest.param("00000005", [Net("10.244.5.0/24")], "10.244.6.0/24", id="the-next-one-when-another-node-has-it"),
    pytest.param("00000005", [Net("10.244.5.0/25"), Net("10.244.6.7/32")], "10.244.7.0/24",
                 id="any-overlap-counts"),
    pytest.param("000000ff", [Net("10.244.255.0/24")], "10.244.0.0/24", id="wraps-around"),
    pytest.param("00000005", [Net("127.0.0.0/8"), Net("192.0.2.0/24")], "10.244.5.0/24",
                 id="other-networks-do-not-matter"),
])
def test_the_subnet_is_one_nothing_else_on_the_machine_uses(tag: str, taken: list[Net], expected: str) -> None:
    assert choose_subnet(tag, taken) == Net(expected)


def test_a_machine_with_every_subnet_taken_is_told_so() -> None:
    with pytest.raises(RuntimeError, match="in use"):
        choose_subnet("00000005", [NODE_NETWORKS])
