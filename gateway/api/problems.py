"""OpenAPI descriptions of the problem-details error responses of the native endpoints."""

from __future__ import annotations

import msgspec
from litestar.openapi import ResponseSpec

from gateway.errors import PROBLEM_JSON


class ProblemDetails(msgspec.Struct, kw_only=True):
    """RFC 9457 body of every native-endpoint error (extension members vary by error)."""

    type: str
    title: str
    status: int
    detail: str
    instance: str


DESCRIPTIONS = {
    400: "Invalid request: what to fix is in 'detail'",
    401: "Missing or invalid API key",
    403: "The key lacks the scope, or the body names another tenant than the key's",
    404: "Not found",
    413: "Request body larger than GATEWAY_MAX_BODY_BYTES",
    422: "Refused by the tenant's guardrails: personal data (categories named, never values) or injections",
    429: "Rate limit or daily token budget exceeded; see the Retry-After header",
    502: "An upstream provider failed",
    503: "An upstream provider is unavailable",
    504: "An upstream provider timed out",
}


def problem_responses(*statuses: int) -> dict[int, ResponseSpec]:
    return {
        status: ResponseSpec(
            ProblemDetails, description=DESCRIPTIONS[status], media_type=PROBLEM_JSON, generate_examples=False
        )
        for status in statuses
    }
