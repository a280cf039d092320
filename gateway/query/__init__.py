"""Questions: the query API, the service every answer path goes through, and the front router and route table it
is built on.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from gateway.query.calibration import load_calibration
from gateway.query.controller import QueryController
from gateway.query.factory import open_query_service
from gateway.query.router_artefact import router_version
from gateway.query.schemas import Passage, QueryRequest, QueryResponse, RouteResponse, Source
from gateway.query.service import QueryService
from gateway.query.steps import RewriteFollowup, StepEvent, render_steps, step_text
from gateway.query.validation import clean_query

__all__ = [
    "Passage",
    "QueryController",
    "QueryRequest",
    "QueryResponse",
    "QueryService",
    "RewriteFollowup",
    "RouteResponse",
    "Source",
    "StepEvent",
    "clean_query",
    "load_calibration",
    "open_query_service",
    "render_steps",
    "router_version",
    "step_text",
]
