"""Traces from the chart's default settings reach an OTLP receiver: chart, exporter and collector protocol agree.

The chart is rendered with its default values plus the two a working install needs (``otel.enabled``
with the collector's ``otel.endpoint``, and ``auth.allowOpenAccess`` since no client keys are set). The
gateway then starts with exactly the environment the Deployment gives its container, except where the
test must differ: the endpoint's host and port point at a real OTLP/HTTP receiver on loopback (scheme,
path, protocol, service name and sampler stay the chart's), and the vector store, router cache and LLM
URL point at test places. A request's spans must arrive there, decoded from protobuf.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from gateway.settings import Settings
from tests.deploy.chart_tools import FULLNAME, deep_merge, gateway_env, render
from tests.deploy.conftest import KUBE_VERSIONS, OTEL_COLLECTOR
from tests.otlp_receiver import PROTOBUF, TRACES_PATH, otlp_receiver

# What an operator sets on top of values.yaml to export traces from a gateway without client keys.
TRACES_ON = {"otel": {"enabled": True, "endpoint": OTEL_COLLECTOR}, "auth": {"allowOpenAccess": True}}


def point_at(endpoint: str, netloc: str) -> str:
    """The same URL (scheme, path) with another host and port: only where the collector lives changes."""
    return urlsplit(endpoint)._replace(netloc=netloc).geturl()


def chart_environment(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The process environment becomes the container's: nothing from the runner's OTEL_*/Redis settings leaks in."""
    for name in list(os.environ):
        if name.startswith(("OTEL_", "GATEWAY_")) or name in {"REDIS_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY"}:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_default_chart_exports_over_otlp_http_to_port_4318(
    helm: Path, work: Path, default_values: dict[str, Any]
) -> None:
    env = gateway_env(render(helm, deep_merge(default_values, TRACES_ON), work, KUBE_VERSIONS[-1]))
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert urlsplit(env["OTEL_EXPORTER_OTLP_ENDPOINT"]).port == 4318
    assert "OTEL_SDK_DISABLED" not in env
    # Tracing off (the default): the SDK is disabled and nothing names a collector.
    off = gateway_env(render(helm, default_values, work, KUBE_VERSIONS[-1]))
    assert off["OTEL_SDK_DISABLED"] == "true"
    assert not any(name.startswith("OTEL_EXPORTER_OTLP") for name in off)


async def test_traces_from_the_chart_defaults_reach_an_otlp_receiver(
    helm: Path,
    work: Path,
    tmp_path: Path,
    default_values: dict[str, Any],
    router_cache_dir: Path,
    make_client: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = gateway_env(render(helm, deep_merge(default_values, TRACES_ON), work, KUBE_VERSIONS[-1]))
    with otlp_receiver() as receiver:
        chart_environment(env, monkeypatch)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", point_at(env["OTEL_EXPORTER_OTLP_ENDPOINT"], receiver.netloc))
        # The pod's /data volume and the hosted LLM: test places instead (the scripted model answers).
        monkeypatch.setenv("GATEWAY_VECTOR_STORE_PATH", str(tmp_path / "lancedb"))
        monkeypatch.setenv("GATEWAY_CURATION_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'curation.db'}")
        monkeypatch.setenv("GATEWAY_ROUTER_CACHE_DIR", str(router_cache_dir))
        monkeypatch.setenv("GATEWAY_LLM_BASE_URL", "http://127.0.0.1:9/v1")
        async with make_client(settings_override=Settings()) as (client, _):
            response = await client.post("/v1/query", json={"query": "Hello!", "route": "direct"})
            assert response.status_code == 200, response.text
            trace_id = response.json()["trace_id"]
        # Leaving the client ran the lifespan's shutdown, which flushed the batch processor.
        exports = receiver.exports
        spans = receiver.spans()

    assert exports, "no OTLP export reached the receiver"
    assert {(e.path, e.content_type) for e in exports} == {(TRACES_PATH, PROTOBUF)}
    assert {s.service_name for s in spans} == {env["OTEL_SERVICE_NAME"]} == {FULLNAME}
    request_spans = {s.span.name: s.span for s in spans if s.span.trace_id.hex() == trace_id}
    server = request_spans["POST /v1/query"]
    assert server.kind == Span.SpanKind.SPAN_KIND_SERVER
    assert request_spans["gateway.answer"].parent_span_id == server.span_id
