"""``POST /v1/query`` and ``POST /v1/route``."""

from __future__ import annotations

from litestar import Controller, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from gateway.schemas import QueryRequest, QueryResponse, RouteRequestBody, RouteResponse
from gateway.service import QueryService, to_route_response


class QueryController(Controller):
    path = "/v1"
    tags = ["query"]

    @post(
        "/query",
        status_code=200,
        summary="Answer a query on the route the router picks (or the one asked for)",
    )
    async def query(self, data: JSONBody[QueryRequest], query_service: NamedDependency[QueryService]) -> QueryResponse:
        return await query_service.answer(data)

    @post("/route", status_code=200, summary="The router's decision alone, without running a pipeline")
    async def route(
        self, data: JSONBody[RouteRequestBody], query_service: NamedDependency[QueryService]
    ) -> RouteResponse:
        return to_route_response(await query_service.route(data.query))
