"""Fixtures of the corrective graph tests (their helpers are in :mod:`tests.unit.corrective_support`)."""

from __future__ import annotations

import pytest

from gateway.knowledge.service import KnowledgeBase
from gateway.providers.embeddings import USEEmbeddings
from tests.unit.corrective_support import AURORA, AURORA_DOCS, DOCS, TENANT, VPN_QUERY, FakeClock, make_knowledge


@pytest.fixture
async def knowledge(embeddings: USEEmbeddings) -> KnowledgeBase:
    """The five office documents (:data:`DOCS`) in the ``acme`` tenant."""
    return await make_knowledge(embeddings, TENANT, DOCS)


@pytest.fixture
async def aurora(embeddings: USEEmbeddings) -> KnowledgeBase:
    """The two-step Project Aurora corpus (:data:`AURORA_DOCS`) in the ``aurora`` tenant."""
    return await make_knowledge(embeddings, AURORA, AURORA_DOCS)


@pytest.fixture
def vpn_vector(embeddings: USEEmbeddings) -> list[float]:
    """A caller's query vector that retrieves the VPN document, whatever the question."""
    return embeddings.embed_query(VPN_QUERY)


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock for the corrective graph's context; ``clock.expire`` spends any time budget."""
    return FakeClock()
