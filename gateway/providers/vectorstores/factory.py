"""The vector store the settings name: Pinecone when a key is set, else the embedded LanceDB."""

from __future__ import annotations

from gateway.providers.vectorstores.base import VectorStore
from gateway.providers.vectorstores.lance import LanceVectorStore
from gateway.settings import VectorStoreSettings


async def open_vector_store(settings: VectorStoreSettings, dimensions: int) -> VectorStore:
    """Pinecone's client is imported only when it is used: a gateway on LanceDB never loads it."""
    if settings.pinecone_api_key is not None:
        from gateway.providers.vectorstores.pinecone_store import PineconeVectorStore

        return await PineconeVectorStore.open(
            api_key=settings.pinecone_api_key.get_secret_value(),
            index_host=settings.pinecone_index_host,
            index_name=settings.pinecone_index,
            dimensions=dimensions,
        )
    return await LanceVectorStore.open(settings.path, dimensions, settle_after_s=settings.settle_after_s)
