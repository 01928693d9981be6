"""The Grafana dashboard (docs/grafana/gputui.json) asks only for what the exporter exports: every
metric name in its PromQL, and every label its selectors name, so it cannot drift from the code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from exported_metrics import LABEL, METRIC, TARGET_LABELS, exported

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "gputui.json"
def queries(dashboard: dict) -> list[str]:
    """Every PromQL expression: the panels' targets and the template variables' queries."""
    found = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["query"]["query"])
    return found


@pytest.fixture(scope="module")
def dashboard():
    return json.loads(DASHBOARD.read_text())


def test_every_metric_and_label_the_dashboard_asks_for_is_exported(dashboard):
    names = exported()
    asked = [(match.group(1), match.group(2) or "") for expr in queries(dashboard) for match in METRIC.finditer(expr)]
    assert len(asked) >= 25  # the parse found the queries
    for name, selector in asked:
        assert name in names, f"the dashboard asks for {name}, which gputui serve does not export"
        labels = set(LABEL.findall(selector))
        assert labels <= names[name] | TARGET_LABELS, f"{name} has no label {labels - names[name] - TARGET_LABELS}"


def test_the_dashboard_shows_devices_processes_and_the_probe(dashboard):
    asked = " ".join(queries(dashboard))
    for name in ("gputui_device_memory_used_bytes", "gputui_process_memory_bytes", "gputui_probe_memory_bytes",
                 "gputui_probe_leak_state"):
        assert name in asked


def test_the_dashboard_is_importable_anywhere(dashboard):
    """A $datasource variable rather than a datasource of the author's, and instance and uuid to choose by."""
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert {"instance", "uuid"} <= set(variables)
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_checker_sees_a_wrong_name():
    wrong = {"panels": [{"targets": [{"expr": 'gputui_device_memory_use_bytes{uuid="x"}'}]}],
             "templating": {"list": []}}
    (name, _), = [(m.group(1), m.group(2)) for expr in queries(wrong) for m in METRIC.finditer(expr)]
    assert name not in exported()
