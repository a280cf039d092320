"""The limits every knowledge write obeys, checked at the edge before anything is embedded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.errors import ClientError
from gateway.knowledge.permissions import document_tags
from gateway.knowledge.schemas import DocumentIn
from gateway.knowledge.service import NewDocument
from gateway.settings import RequestLimits


def check_limits(sizes: Mapping[str, int], limits: RequestLimits) -> None:
    """Raise ``ClientError`` unless documents of these text sizes (by id) meet the limits every knowledge write
    obeys: how many in one request, how long each, none empty."""
    if len(sizes) > limits.max_documents_per_request:
        raise ClientError(
            f"{len(sizes)} documents in one request; the maximum is "
            f"{limits.max_documents_per_request}. Send them in batches."
        )
    for doc_id, size in sizes.items():
        if not size:
            raise ClientError(f"Document {doc_id!r} has no text.")
        if size > limits.max_document_chars:
            raise ClientError(
                f"Document {doc_id!r} has {size} characters; the maximum is "
                f"{limits.max_document_chars}. Split it into several documents."
            )


def valid_documents(documents: Sequence[DocumentIn], limits: RequestLimits) -> list[NewDocument]:
    """The documents to ingest, once they meet the limits every knowledge write obeys: the documents API and a
    curator's gap resolution alike."""
    ids = [d.id for d in documents]
    if len(set(ids)) != len(ids):
        raise ClientError("The same document id appears twice in one request; send each id once.")
    check_limits({d.id: len(d.text) if d.text.strip() else 0 for d in documents}, limits)
    return [
        NewDocument(
            id=d.id,
            text=d.text,
            title=d.title or "",
            metadata=d.metadata or {},
            access=document_tags(d.access, what=f"document {d.id!r}"),
        )
        for d in documents
    ]
