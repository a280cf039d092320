"""``POST /v1/query`` and ``POST /v1/route``."""

from __future__ import annotations

import msgspec
from litestar import Controller, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from gateway.access import BEARER, Access, Principal, Reader, require
from gateway.errors import problem_responses
from gateway.query.schemas import QueryRequest, QueryResponse, RouteRequestBody, RouteResponse
from gateway.query.service import QueryService
from gateway.query.validation import clean_query
from gateway.settings import Settings


class QueryController(Controller):
    path = "/v1"
    tags = ["query"]
    before_request = require("query")
    security = [{BEARER: []}]

    @post(
        "/query",
        status_code=200,
        summary="Answer a query on the route the router picks (or the one asked for)",
        responses=problem_responses(400, 401, 403, 413, 422, 429, 502, 503, 504),
    )
    async def query(
        self,
        data: JSONBody[QueryRequest],
        query_service: NamedDependency[QueryService],
        settings: NamedDependency[Settings],
        principal: NamedDependency[Principal],
        access: NamedDependency[Access],
        reader: NamedDependency[Reader],
    ) -> QueryResponse:
        tenant = principal.tenant_for(data.tenant)

        def admit(request: QueryRequest) -> QueryRequest:
            """The request travels whole: only what the edge decides (the cleaned query, the key's tenant) changes."""
            return msgspec.structs.replace(request, query=clean_query(request.query, settings.limits), tenant=tenant)

        response = await query_service.answer(data, admit, reader=reader)
        await access.limiter.charge(principal, response.usage.input_tokens + response.usage.output_tokens)
        return response

    @post(
        "/route",
        status_code=200,
        summary="The router's decision alone, without running a pipeline",
        responses=problem_responses(400, 401, 403, 413, 422, 429, 502, 503, 504),
    )
    async def route(
        self,
        data: JSONBody[RouteRequestBody],
        query_service: NamedDependency[QueryService],
        settings: NamedDependency[Settings],
        principal: NamedDependency[Principal],
        reader: NamedDependency[Reader],
    ) -> RouteResponse:
        tenant = principal.tenant_for(data.tenant)
        return await query_service.route(clean_query(data.query, settings.limits), tenant, reader=reader)
