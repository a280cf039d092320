from .calibration import load_calibration
from .controller import QueryController
from .factory import open_query_service
from .router_artefact import router_version
from .schemas import Passage, QueryRequest, QueryResponse, RouteResponse, Source
from .service import QueryService
from .steps import RewriteFollowup, StepEvent, render_steps, step_text
from .validation import clean_query

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
