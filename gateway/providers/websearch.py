"""CRAG's search-more provider on the web: Tavily, when ``TAVILY_API_KEY`` is set.

Without it (offline there is no web) the step searches the tenant's own store again with the rewritten query
(:class:`gateway.knowledge.service.LocalStoreSearch`).
"""

from __future__ import annotations

import httpx
import numpy as np
from langchain_core.embeddings import Embeddings

from gateway.errors import ProviderError, ProviderTimeoutError, ProviderUnavailableError
from pipelines.shared import Passage, Visibility

PROVIDER = "web_search"
TAVILY_URL = "https://api.tavily.com/search"


class TavilySearch:
    """Tavily's search API; results are scored by cosine to the query like store passages."""

    name = "tavily"

    def __init__(
        self, http: httpx.AsyncClient, api_key: str, embeddings: Embeddings, *, timeout_s: float = 10.0
    ) -> None:
        self._http = http
        self._api_key = api_key
        self._embeddings = embeddings
        self._timeout = timeout_s

    async def search(self, tenant: str, query: str, k: int, *, visibility: Visibility) -> list[Passage]:
        """The public web: open to every reader, so ``visibility`` filters nothing here."""
        payload = {"query": query, "max_results": k, "search_depth": "basic", "include_answer": False}
        headers = {"Authorization": f"Bearer {self._api_key}"}
        try:
            response = await self._http.post(TAVILY_URL, json=payload, headers=headers, timeout=self._timeout)
        except httpx.TimeoutException as exc:
            raise ProviderTimeoutError("web search timed out", provider=PROVIDER) from exc
        except httpx.HTTPError as exc:
            raise ProviderUnavailableError(f"web search unreachable: {exc!r}", provider=PROVIDER) from exc
        if response.status_code >= 400:
            raise ProviderError(f"web search answered HTTP {response.status_code}", provider=PROVIDER)
        results = [r for r in response.json().get("results", []) if r.get("content")]
        if not results:
            return []
        vectors = np.asarray(
            await self._embeddings.aembed_documents([query, *[r["content"] for r in results]]), dtype=np.float32
        )
        cosines = (
            vectors[1:]
            @ vectors[0]
            / np.maximum(np.linalg.norm(vectors[1:], axis=1) * np.linalg.norm(vectors[0]), 1e-12)
        )
        return [
            Passage(
                chunk_id=r.get("url") or f"web#{i}",
                doc_id=r.get("url") or f"web#{i}",
                title=r.get("title") or r.get("url") or "web result",
                text=r["content"],
                score=float(cos),
                metadata={"source": "tavily"},
            )
            for i, (r, cos) in enumerate(zip(results, cosines, strict=True))
        ]
