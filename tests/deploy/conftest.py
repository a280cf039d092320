"""Fixtures for the chart and container checks: the Helm CLI, default values and "every flag on"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart_tools import CHART, deep_merge, helm_binary

# sha256 of "test": a digest, never a key, is what the chart carries.
API_KEY_SHA256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

# A collector's OTLP/HTTP base URL (4318: OTLP/HTTP; the gateway ships no gRPC exporter for 4317).
OTEL_COLLECTOR = "http://otel-collector.monitoring:4318"

# Every optional part of the chart switched on, with the values those parts need.
ALL_FLAGS: dict[str, Any] = {
    "autoscaling": {"enabled": True, "customMetric": {"enabled": True}},
    "metrics": {
        "multiprocess": True,
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True},
    },
    "dashboard": {"enabled": True, "namespace": "monitoring"},
    "networkPolicy": {"enabled": True},
    "ingress": {
        "enabled": True,
        "className": "nginx",
        "hosts": ["gateway.example.com"],
        "tls": [{"secretName": "gateway-tls", "hosts": ["gateway.example.com"]}],
    },
    "podDisruptionBudget": {"enabled": True},
    "topologySpread": {"enabled": True},
    "serviceAccount": {"create": True},
    "redis": {"enabled": True, "persistence": {"enabled": True, "storageClassName": "standard"}},
    "llamaCpp": {"enabled": True, "model": {"existingClaim": "gguf-models"}, "extraArgs": ["--parallel", "2"]},
    "auth": {"allowOpenAccess": True},
    "otel": {"enabled": True, "endpoint": OTEL_COLLECTOR},
    "vectorStore": {"existingClaim": "lancedb"},
    "secrets": {
        "openaiApiKey": "sk-test-openai-0123456789",
        "pineconeApiKey": "pc-test-0123456789",
        "tavilyApiKey": "tvly-test-0123456789",
        "apiKeys": [
            {
                "name": "chatbot",
                "key_sha256": API_KEY_SHA256,
                "tenant": "acme",
                "scopes": ["query", "admin"],
                "requests_per_minute": 60,
                "daily_tokens": 1_000_000,
            }
        ],
    },
    "extraEnv": [{"name": "GATEWAY_LOG_EXTRA", "value": "1"}],
}

KUBE_VERSIONS = ["1.27.0", "1.33.0"]  # the chart's minimum (Chart.yaml kubeVersion) and a current one


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return helm_binary(tmp_path_factory.getbasetemp() / "helm-bin")


@pytest.fixture(scope="session")
def default_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


@pytest.fixture(scope="session")
def all_flags_values(default_values: dict[str, Any]) -> dict[str, Any]:
    return deep_merge(default_values, ALL_FLAGS)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path
