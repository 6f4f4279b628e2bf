"""The chart's Grafana dashboard: every query names metrics the operator exports, and the optional ConfigMap
carries the dashboard under the sidecar's label."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from pidispatch import metrics
from testkit.chart import CHART, NAMESPACE, kinds, render

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
