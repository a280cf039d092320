"""Wire types of the documents API (msgspec structs, validated natively by Litestar)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from gateway.providers.vectorstores.base import TENANT_PATTERN

Tenant = Annotated[str, Meta(pattern=TENANT_PATTERN, description="Tenant id: letters, digits, '_' or '-'.")]
DocumentId = Annotated[str, Meta(min_length=1, max_length=256)]


class DocumentIn(msgspec.Struct, kw_only=True):
    id: DocumentId
    text: Annotated[str, Meta(min_length=1)]
    title: Annotated[str, Meta(max_length=512)] | None = None
    metadata: dict[str, Any] | None = None


class DocumentsRequest(msgspec.Struct, kw_only=True):
    tenant: Tenant = "default"
    documents: Annotated[list[DocumentIn], Meta(min_length=1)]


class DocumentsResponse(msgspec.Struct):
    upserted: int
    chunks: int


class DeleteResponse(msgspec.Struct):
    deleted: str
    tenant: str
