"""The limits every knowledge write obeys, checked at the edge before anything is embedded."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.errors import ClientError
from gateway.knowledge.schemas import DocumentIn
from gateway.knowledge.service import NewDocument
from gateway.settings import RequestLimits


def valid_documents(documents: Sequence[DocumentIn], limits: RequestLimits) -> list[NewDocument]:
    """The documents to ingest, once they meet the limits every knowledge write obeys: the documents API and a
    curator's gap resolution alike."""
    if len(documents) > limits.max_documents_per_request:
        raise ClientError(
            f"{len(documents)} documents in one request; the maximum is "
            f"{limits.max_documents_per_request}. Send them in batches."
        )
    ids = [d.id for d in documents]
    if len(set(ids)) != len(ids):
        raise ClientError("The same document id appears twice in one request; send each id once.")
    for doc in documents:
        if not doc.text.strip():
            raise ClientError(f"Document {doc.id!r} has no text.")
        if len(doc.text) > limits.max_document_chars:
            raise ClientError(
                f"Document {doc.id!r} has {len(doc.text)} characters; the maximum is "
                f"{limits.max_document_chars}. Split it into several documents."
            )
    return [NewDocument(id=d.id, text=d.text, title=d.title or "", metadata=d.metadata or {}) for d in documents]
