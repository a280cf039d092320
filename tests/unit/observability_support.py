"""Helpers of the observability tests: an app whose spans land in memory, and /metrics as numbers."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.messages import BaseMessage
from litestar.testing import AsyncTestClient
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import Settings
from tests.conftest import Responder, grounded_or_direct
from tests.fakes.scripted_chat import ScriptedChatModel
from tests.scripted import structured_reply
from tests.unit.corrective_support import DOCS, TENANT

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def agreeable(messages: list[BaseMessage], kwargs: dict[str, Any]) -> str:
    """Structured calls get the agreeable verdicts, free text the plausible chat/grounded answer."""
    return structured_reply(kwargs) or grounded_or_direct(messages, kwargs)


@asynccontextmanager
async def traced_app(
    settings: Settings, embeddings: USEEmbeddings, responder: Responder = agreeable
) -> AsyncIterator[tuple[AsyncTestClient[Any], ScriptedChatModel, InMemorySpanExporter]]:
    """An app on the scripted model with the office documents (``DOCS``) in tenant ``acme``."""
    exporter = InMemorySpanExporter()
    model = ScriptedChatModel(responder=responder)
    app = create_app(settings, ProviderOverrides(chat_model=model, embeddings=embeddings, span_exporter=exporter))
    async with AsyncTestClient(app) as client:
        documents = [{"id": d.id, "title": d.title, "text": d.text} for d in DOCS]
        response = await client.post("/v1/documents", json={"tenant": TENANT, "documents": documents})
        assert response.status_code == 200, response.text
        # The server span ends as the response finishes sending, which a loaded machine can let happen after
        # the client already has the response: wait for it, so it is cleared rather than seen by the test.
        for _ in range(100):
            if any(s.name == "POST /v1/documents" for s in exporter.get_finished_spans()):
                break
            await asyncio.sleep(0.02)
        exporter.clear()
        yield client, model, exporter


async def ask(client: AsyncTestClient[Any], query: str, route: str = "auto", **extra: Any) -> dict[str, Any]:
    response = await client.post("/v1/query", json={"tenant": TENANT, "query": query, "route": route, **extra})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert response.headers["x-trace-id"] == body["trace_id"]
    return body


async def scrape(client: AsyncTestClient[Any]) -> tuple[Samples, set[str]]:
    """Every sample of ``/metrics`` keyed by (name, labels), and the exported sample names (HELP/TYPE included)."""
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse_exposition(response.text)


_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}


def parse_exposition(text: str) -> tuple[Samples, set[str]]:
    samples: Samples = {}
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples, names


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` (0 when there are none)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_of(spans: tuple[ReadableSpan, ...], span: ReadableSpan) -> ReadableSpan | None:
    if span.parent is None:
        return None
    found = [s for s in spans if s.context is not None and s.context.span_id == span.parent.span_id]
    return found[0] if found else None


HEX32 = re.compile(r"^[0-9a-f]{32}$")
