"""How tests (and embedders of the gateway) inject fakes, the way httpx takes ``transport=``: the rest of the
wiring stays the production wiring."""

from __future__ import annotations

from dataclasses import dataclass

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from opentelemetry.sdk.trace.export import SpanExporter

from gateway.providers import VectorStore


@dataclass(frozen=True)
class ProviderOverrides:
    chat_model: BaseChatModel | None = None
    embeddings: Embeddings | None = None
    vector_store: VectorStore | None = None
    # Receives every span synchronously, besides any OTLP export: tests pass the SDK's in-memory exporter.
    span_exporter: SpanExporter | None = None
