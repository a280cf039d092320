"""``POST /v1/documents`` (upsert by id) and ``DELETE /v1/documents/{id}``."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, delete, post
from litestar.di import NamedDependency
from litestar.params import JSONBody, PathParameter, QueryParameter

from gateway.access.guard import BEARER, require
from gateway.access.keys import Principal
from gateway.errors import NotFoundError, problem_responses
from gateway.knowledge.schemas import DeleteResponse, DocumentsRequest, DocumentsResponse
from gateway.knowledge.service import KnowledgeBase
from gateway.knowledge.validation import valid_documents
from gateway.providers.vectorstores.base import TENANT_PATTERN
from gateway.settings import Settings


class DocumentController(Controller):
    path = "/v1/documents"
    tags = ["documents"]
    before_request = require("admin")  # ingestion changes what every client of the tenant is told
    security = [{BEARER: []}]

    @post(
        "/",
        status_code=200,
        summary="Upsert documents by id; long texts are chunked",
        responses=problem_responses(400, 401, 403, 413, 429, 502, 503, 504),
    )
    async def upsert(
        self,
        data: JSONBody[DocumentsRequest],
        knowledge: NamedDependency[KnowledgeBase],
        settings: NamedDependency[Settings],
        principal: NamedDependency[Principal],
    ) -> DocumentsResponse:
        tenant = principal.tenant_for(data.tenant)
        result = await knowledge.ingest(tenant, valid_documents(data.documents, settings.limits))
        return DocumentsResponse(upserted=result.upserted, chunks=result.chunks)

    @delete(
        "/{doc_id:str}",
        status_code=200,
        summary="Delete a document and all its chunks",
        responses=problem_responses(400, 401, 403, 404, 429, 502, 503, 504),
    )
    async def remove(
        self,
        doc_id: Annotated[str, PathParameter(max_length=256)],
        knowledge: NamedDependency[KnowledgeBase],
        principal: NamedDependency[Principal],
        tenant: Annotated[str, QueryParameter(pattern=TENANT_PATTERN)] = "default",
    ) -> DeleteResponse:
        tenant = principal.tenant_for(tenant)
        if not await knowledge.delete(tenant, doc_id):
            raise NotFoundError(f"Tenant {tenant!r} has no document {doc_id!r}.")
        return DeleteResponse(deleted=doc_id, tenant=tenant)
