"""helm lint through helm-sdkpy (Helm's Go library): the chart lints clean, and a broken one does not."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart_tools import CHART, lint, run_helm

ERROR = 3  # helm's support.ErrorSev; 2 is a warning, 1 info (e.g. "icon is recommended")


def chart_copy(tmp_path: Path, values: dict[str, Any] | None = None) -> Path:
    copy = tmp_path / "helm"
    shutil.copytree(CHART, copy, symlinks=False)
    if values is not None:
        (copy / "values.yaml").write_text(yaml.safe_dump(values))
    return copy


def severities(result: dict[str, Any]) -> list[tuple[int, str]]:
    return [(m["Severity"], m["Path"]) for m in result["Messages"]]


def test_chart_lints_clean_with_default_values() -> None:
    result = lint(CHART)
    assert result["TotalChartsLinted"] == 1
    assert all(sev < 2 for sev, _ in severities(result)), severities(result)
    assert not result["Errors"]


def test_chart_lints_clean_with_every_flag_on(tmp_path: Path, all_flags_values: dict[str, Any]) -> None:
    result = lint(chart_copy(tmp_path, all_flags_values))
    assert all(sev < 2 for sev, _ in severities(result)), severities(result)


def test_lint_reports_a_broken_template(tmp_path: Path) -> None:
    copy = chart_copy(tmp_path)
    (copy / "templates" / "broken.yaml").write_text("kind: ConfigMap\n{{ if .Values.replicaCount }}\n")
    result = lint(copy)
    assert (ERROR, "templates/") in severities(result)
    assert result["Errors"]


def test_lint_reports_values_that_break_the_schema(tmp_path: Path, default_values: dict[str, Any]) -> None:
    result = lint(chart_copy(tmp_path, {**default_values, "replicaCount": "two"}))
    assert (ERROR, "values.yaml") in severities(result)


@pytest.mark.parametrize("flags", ["default", "all"])
def test_helm_cli_lint_strict(
    helm: Path, work: Path, flags: str, default_values: dict[str, Any], all_flags_values: dict[str, Any]
) -> None:
    """The same check with the CLI, strict (warnings fail), whose messages are readable in CI logs."""
    values = default_values if flags == "default" else all_flags_values
    proc = run_helm(helm, ["lint", str(CHART), "--strict", "--quiet"], values, work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
