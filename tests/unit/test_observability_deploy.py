"""The dashboard and the alert rules use only metrics the running app exports; promtool accepts the rules."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import Settings
from tests.unit.corrective_support import K2_QUESTION
from tests.unit.observability_support import ask, scrape, traced_app
from tests.unit.promql import base_name, metric_names

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "gateway-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yaml"
ALERT_TESTS = Path(__file__).parent / "data" / "alerts_test.yaml"
# The issue's panel list: every topic has a panel whose title names it.
PANEL_TOPICS = [
    "open knowledge gaps",
    "evaluation suite scores",
    "request rate",
    "error rate",
    "latency per route",
    "route mix",
    "cost per hour",
    "cost per request",
    "tokens per route",
    "cache hit ratio",
    "retrieval verdict",
    "escalations",
    "corrective loops",
    "llm latency per node",
]
ALERTS = {
    "GatewayHighErrorRate",
    "GatewayLatencyP95OverObjective",
    "GatewayCostBurnOverBudget",
    "GatewayCacheErrorSpike",
    "GatewayLLMEndpointDown",
}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in loaded["groups"] for rule in group["rules"]]


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (route) (rate(gateway_requests_total{route=~"$route"}[$__rate_interval]))',
            {"gateway_requests_total"},
        ),
        (
            "histogram_quantile(0.95, sum by (le) (rate(gateway_request_duration_seconds_bucket[5m]))) > 1e-3",
            {"gateway_request_duration_seconds_bucket"},
        ),
        ('a_total{x="by (y)"} / on (route) group_left() b unless c offset 5m', {"a_total", "b", "c"}),
        ("sum(rate(x[1h])) * 3600 > 5 and up == 0", {"x", "up"}),
    ],
)
def test_promql_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_deploy_files_are_links_to_the_chart_files() -> None:
    """One source of truth: the Helm chart embeds helm/files/*, deploy/ links to them."""
    for link, target in [(DASHBOARD, "gateway-dashboard.json"), (RULES, "alerts.yaml")]:
        assert link.is_symlink()
        assert not Path(link.readlink()).is_absolute()
        assert link.resolve() == (ROOT / "helm" / "files" / target).resolve()


def test_dashboard_is_importable_grafana_json() -> None:
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert board["uid"]
    assert board["title"]
    assert board["schemaVersion"] >= 36
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]
        assert panel["targets"], panel["title"]
        assert all(t["expr"].strip() and t["refId"] for t in panel["targets"]), panel["title"]
    titles = " | ".join(p["title"].lower() for p in panels())
    missing = [topic for topic in PANEL_TOPICS if topic not in titles]
    assert not missing, f"no panel for {missing}: {titles}"


def test_alert_rules_cover_the_issue() -> None:
    loaded = rules()
    assert {r["alert"] for r in loaded} >= ALERTS
    for rule in loaded:
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]
    latency_routes = {r["labels"].get("route") for r in loaded if r["alert"] == "GatewayLatencyP95OverObjective"}
    assert latency_routes == {"direct", "single_hop", "multi_hop"}


def test_promtool_accepts_the_rules() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: `make test` installs it (Debian package prometheus)")
    result = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_alerts_fire_on_the_series_they_are_meant_for() -> None:
    """promtool's rule unit tests (tests/unit/data/alerts_test.yaml): fire, stay quiet, exact labels and summaries."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: `make test` installs it (Debian package prometheus)")
    result = subprocess.run(
        [promtool, "test", "rules", str(ALERT_TESTS)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ALERT_TESTS.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


async def test_every_metric_used_is_exported(settings: Settings, embeddings: USEEmbeddings) -> None:
    async with traced_app(settings, embeddings) as (client, _, _):
        await ask(client, K2_QUESTION, "multi_hop")
        await client.get("/readyz")
        _, exported = await scrape(client)
    used = {name for expr in [*dashboard_exprs(), *(r["expr"] for r in rules())] for name in metric_names(expr)}
    assert used, "no metric names found"
    unknown = sorted(used - exported)
    assert not unknown, f"used in the dashboard or the rules but not exported at /metrics: {unknown}"
    # Histograms are queried through their series, never by the bare family name.
    assert all(base_name(name) in {base_name(e) for e in exported} for name in used)
    assert {"gateway_requests_total", "gateway_request_duration_seconds_bucket", "gateway_cost_usd_total"} <= used
