"""The Grafana dashboard and the alert rules exist once: in the chart, with deploy/ linking to them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.deploy.chart_tools import CHART, REPO

LINKED = [
    (REPO / "deploy" / "grafana" / "gateway-dashboard.json", CHART / "files" / "gateway-dashboard.json"),
    (REPO / "deploy" / "prometheus" / "alerts.yaml", CHART / "files" / "alerts.yaml"),
]


@pytest.mark.parametrize(("deploy_path", "chart_file"), LINKED, ids=lambda p: p.name)
def test_deploy_path_is_the_chart_file(deploy_path: Path, chart_file: Path) -> None:
    assert deploy_path.read_bytes() == chart_file.read_bytes(), f"{deploy_path} and {chart_file} differ"
    # Not a second copy that happens to match today: a relative link (valid in any clone) to the chart's file.
    assert deploy_path.is_symlink(), f"{deploy_path} must be a symlink to {chart_file}, not a copy"
    assert not os.path.isabs(os.readlink(deploy_path))
    assert deploy_path.resolve() == chart_file.resolve()
    assert not chart_file.is_symlink(), "the chart must hold the real file: Helm's .Files does not follow links out"


def test_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = json.loads((CHART / "files" / "gateway-dashboard.json").read_text())
    assert dashboard["title"]
    panels = dashboard.get("panels", [])
    exprs = [t.get("expr", "") for p in panels for t in p.get("targets", [])]
    exprs += [t.get("expr", "") for p in panels for q in p.get("panels", []) for t in q.get("targets", [])]
    assert any("gateway_" in e for e in exprs), "no panel queries a gateway_* metric"


def test_alert_file_is_a_prometheus_rule_file() -> None:
    rules = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert set(rules) == {"groups"}
    assert all(group["rules"] for group in rules["groups"])
