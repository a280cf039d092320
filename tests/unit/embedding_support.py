"""A LangChain ``Embeddings`` in front of the real model, for tests that watch what the request path embeds."""

from __future__ import annotations

from langchain_core.embeddings import Embeddings

from gateway.providers.embeddings import USEEmbeddings


class DelegatingEmbeddings(Embeddings):
    """Hands every call to ``inner``; subclasses note the query embeddings they are asked for."""

    def __init__(self, inner: USEEmbeddings) -> None:
        self.inner = inner
        self.dimensions = inner.dimensions

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await self.inner.aembed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await self.inner.aembed_query(text)
