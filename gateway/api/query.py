"""``POST /v1/query`` and ``POST /v1/route``."""

from __future__ import annotations

from litestar import Controller, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from gateway.access.guard import BEARER, Access, require
from gateway.access.keys import Principal
from gateway.api.problems import problem_responses
from gateway.schemas import QueryRequest, QueryResponse, RouteRequestBody, RouteResponse
from gateway.service import QueryService, to_route_response


class QueryController(Controller):
    path = "/v1"
    tags = ["query"]
    guards = [require("query")]
    security = [{BEARER: []}]

    @post(
        "/query",
        status_code=200,
        summary="Answer a query on the route the router picks (or the one asked for)",
        responses=problem_responses(400, 401, 403, 413, 429, 502, 503, 504),
    )
    async def query(
        self,
        data: JSONBody[QueryRequest],
        query_service: NamedDependency[QueryService],
        principal: NamedDependency[Principal],
        access: NamedDependency[Access],
    ) -> QueryResponse:
        tenant = principal.tenant_for(data.tenant)
        if tenant != data.tenant:
            data = QueryRequest(
                query=data.query,
                tenant=tenant,
                route=data.route,
                top_k=data.top_k,
                allow_escalation=data.allow_escalation,
            )
        response = await query_service.answer(data)
        await access.limiter.charge(principal, response.usage.input_tokens + response.usage.output_tokens)
        return response

    @post(
        "/route",
        status_code=200,
        summary="The router's decision alone, without running a pipeline",
        responses=problem_responses(400, 401, 403, 413, 429, 502, 503, 504),
    )
    async def route(
        self,
        data: JSONBody[RouteRequestBody],
        query_service: NamedDependency[QueryService],
        principal: NamedDependency[Principal],
    ) -> RouteResponse:
        principal.tenant_for(data.tenant)
        return to_route_response(await query_service.route(data.query))
