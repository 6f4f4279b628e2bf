"""The chart's Grafana dashboard: every query names metrics the operator exports, the optional ConfigMap
carries the dashboard under the sidecar's label, and what it carries passes Grafana's dashboard schema.

The schema check is ``dashcheck`` (e2e/controlplane/dashcheck/main.go, built by ``make controlplane`` into the
control plane's bin dir): the dashboard decoded strictly into the Go types that grafana-foundation-sdk generates
from Grafana's own dashboard schema, then its constraints checked. No Grafana runs here.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pidispatch import metrics
from testkit.chart import CHART, NAMESPACE, kinds, render
from testkit.pinned import bin_dir

DASHBOARD = CHART / "dashboards" / "pi-dispatch.json"
_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def exported() -> set[str]:
    """The series names ``/metrics`` shows for the operator's registry (a labelled metric before its first use
    included: its type says which names it will have)."""
    return {family.name + suffix for family in metrics.REGISTRY.collect() for suffix in _SUFFIXES[family.type]}


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def named(expr: str) -> set[str]:
    """The metric names in a PromQL expression (the project's names all start ``pidispatch_``)."""
    return set(re.findall(r"\bpidispatch_[a-z0-9_]+", expr))


def test_every_query_of_the_dashboard_names_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = exprs(dashboard)
    assert queries, "the dashboard has no queries"
    for expr in queries:
        assert named(expr), f"{expr!r} names no pi-dispatch metric"
        assert named(expr) <= exported(), f"{expr!r} names {sorted(named(expr) - exported())}, which nothing exports"
    titles = {p["title"] for p in dashboard["panels"]}
    for wanted in ("Resume rate by reason", "Tokens per job: resumed vs rethreaded vs cold", "Queue depth",
                   "Promotion latency"):
        assert wanted in titles


def datasource_variables_unknown(dashboard: dict[str, Any]) -> set[str]:
    """The ``${name}`` data source refs of panels and queries that name no data source variable of the
    dashboard (a cross-reference Grafana's schema does not make: dashcheck passes them)."""
    variables = {v["name"] for v in dashboard["templating"]["list"] if v["type"] == "datasource"}
    refs = [p.get("datasource", {}) for p in dashboard["panels"]]
    refs += [t.get("datasource", {}) for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {m for ref in refs for m in re.findall(r"^\$\{(\w+)\}$", ref.get("uid", ""))}
    return used - variables


def test_every_data_source_ref_names_the_dashboards_data_source_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert datasource_variables_unknown(dashboard) == set()
    dashboard["panels"][0]["targets"][0]["datasource"]["uid"] = "${prometheus}"
    assert datasource_variables_unknown(dashboard) == {"prometheus"}, "a ref to a variable that is not there"


def test_a_query_naming_an_unexported_metric_is_caught() -> None:
    assert not named("sum(rate(pidispatch_job_tokens[5m]))") <= exported(), "a counter is exported as _total"


def test_the_dashboard_configmap_is_off_by_default(helm: Any) -> None:
    assert [c for c in kinds(render(helm), "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")] == []


@pytest.mark.parametrize(("values", "label", "namespace"), [
    ({"dashboards.enabled": True}, ("grafana_dashboard", "1"), NAMESPACE),
    ({"dashboards.enabled": True, "dashboards.label": "grafana.io/dashboard", "dashboards.labelValue": "pi",
      "dashboards.namespace": "monitoring"}, ("grafana.io/dashboard", "pi"), "monitoring"),
], ids=["the sidecar's default label, in the release's namespace", "a label and namespace of one's own"])
def test_the_dashboard_configmap_carries_the_dashboard_under_the_sidecars_label(
        helm: Any, values: dict[str, Any], label: tuple[str, str], namespace: str) -> None:
    (configmap,) = [c for c in kinds(render(helm, values), "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]
    assert configmap["metadata"]["labels"][label[0]] == label[1]
    assert configmap["metadata"]["namespace"] == namespace
    assert json.loads(configmap["data"]["pi-dispatch.json"]) == json.loads(DASHBOARD.read_text())


# ---- Grafana's dashboard schema --------------------------------------------------------------------------------

def dashcheck() -> Path:
    """The built schema check; a missing one fails the test with the command that builds it (never a skip)."""
    binary = bin_dir(build=False) / "dashcheck"
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is missing: build it with `make controlplane` (e2e/controlplane/build.sh builds "
                    "only what is missing)")
    return binary


def schema_check(tmp_path: Path, dashboard: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "dashboard.json"
    path.write_text(json.dumps(dashboard))
    return subprocess.run([str(dashcheck()), str(path)], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def installed(helm: Any) -> dict[str, Any]:
    """The dashboard as the chart installs it: the ConfigMap's JSON, not the file it is read from (a test
    edits a copy)."""
    (configmap,) = [c for c in kinds(render(helm, {"dashboards.enabled": True}), "ConfigMap")
                    if c["metadata"]["name"].endswith("-dashboard")]
    return json.loads(configmap["data"]["pi-dispatch.json"])


def test_the_installed_dashboard_passes_grafanas_dashboard_schema(installed: dict[str, Any], tmp_path: Path) -> None:
    result = schema_check(tmp_path, installed)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), result.stdout + result.stderr


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit that sets the dotted ``path`` (list indexes as numbers) of the dashboard to ``value``."""
    *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]

    def edit(dashboard: dict[str, Any]) -> None:
        node: Any = dashboard
        for key in parents:
            node = node[key]
        node[last] = value
    return edit


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]

    def edit(dashboard: dict[str, Any]) -> None:
        node: Any = dashboard
        for key in parents:
            node = node[key]
        del node[last]
    return edit


def _without_datasource_types(dashboard: dict[str, Any]) -> None:
    panel = dashboard["panels"][0]
    del panel["datasource"]["type"], panel["targets"][0]["datasource"]["type"]


# id: (an edit of the installed dashboard, what dashcheck says about it: the SDK's words, or ours where the SDK
# cannot look in)
BROKEN: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "a gridPos that is a string": (
        _set("panels.0.gridPos", "0,0,12,8"), "panels[0].gridPos: json: cannot unmarshal string"),
    "a panel wider than the 24 columns": (_set("panels.0.gridPos.w", 30), "panels[0].Panel.gridPos.w: must be <= 24"),
    "an unknown top-level field": (_set("panelz", []), "Dashboard: unexpected field 'panelz'"),
    "an unknown panel field": (_set("panels.1.titel", "x"), "panels[1].Panel: unexpected field 'titel'"),
    "a panel of a kind the schema does not know": (
        _set("panels.2.type", "graph"), 'panels[2].type: "graph" is not a panel plugin the dashboard schema knows'),
    "a legend without showLegend": (
        _drop("panels.3.options.legend.showLegend"),
        "panels[3].options.legend.showLegend: required field is missing from input"),
    "an unknown option of the timeseries panel": (
        _set("panels.0.options.legnd", {}), "panels[0].options.Options: unexpected field 'legnd'"),
    "an unknown field config default": (
        _set("panels.1.fieldConfig.defaults.unitt", "s"),
        "panels[1].fieldConfig.defaults.FieldConfig: unexpected field 'unitt'"),
    "a unit that is a number": (
        _set("panels.1.fieldConfig.defaults.unit", 5),
        "panels[1].fieldConfig: json: cannot unmarshal number into Go struct field FieldConfig.defaults.unit"),
    "a datasource ref with an unknown field": (
        _set("panels.0.datasource.name", "prom"), "panels[0].datasource.DataSourceRef: unexpected field 'name'"),
    "a Prometheus query without expr": (
        _drop("panels.6.targets.0.expr"), "panels[6].targets[0].expr: required field is missing from input"),
    "a Prometheus query with an unknown field": (
        _set("panels.6.targets.1.exp", "x"), "panels[6].targets[1].Dataquery: unexpected field 'exp'"),
    "a query of no known data source": (
        _without_datasource_types, "panels[0].targets[0]: the query names no data source type the schema knows"),
    "no schemaVersion": (_drop("schemaVersion"), "schemaVersion: required field is missing from input"),
}


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
def test_grafanas_dashboard_schema_refuses_a_broken_dashboard(installed: dict[str, Any], tmp_path: Path,
                                                             case: str) -> None:
    edit, says = BROKEN[case]
    dashboard = copy.deepcopy(installed)
    edit(dashboard)
    result = schema_check(tmp_path, dashboard)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"dashboard.json: {says}" in result.stdout, result.stdout
