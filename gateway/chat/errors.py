"""OpenAI-shaped error bodies for the OpenAI-compatible endpoints.

Status, wording and headers (``Retry-After``) come from the one problem-details mapping in
:mod:`gateway.errors`, so both API families agree on what went wrong; only the envelope differs:
``{"error": {"message", "type", "param", "code"}}``, which the ``openai`` client turns into its
typed exceptions (``AuthenticationError``, ``NotFoundError``, ``RateLimitError``, ...).
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response

from gateway.chat.schemas import OpenAIErrorBody, OpenAIErrorDetail
from gateway.errors import GatewayError, handle_exception

logger = logging.getLogger(__name__)

_TYPES = {403: "permission_error", 429: "rate_limit_error"}
_CODES = {401: "invalid_api_key", 403: "permission_denied", 413: "request_too_large", 429: "rate_limit_exceeded"}


def _envelope(status: int, problem: dict[str, Any]) -> OpenAIErrorBody:
    kind = _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    code = problem.get("code") or _CODES.get(status)
    param = problem.get("field")
    return OpenAIErrorBody(
        error=OpenAIErrorDetail(
            message=str(problem.get("detail", "")),
            type=kind,
            param=str(param) if param is not None else None,
            code=str(code) if code is not None else None,
        )
    )


def handle_openai_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[OpenAIErrorBody]:
    problem = handle_exception(request, exc)
    headers = {k: v for k, v in problem.headers.items() if k.lower() in ("retry-after", "www-authenticate")}
    status = problem.status_code or 500
    return Response(_envelope(status, problem.content), status_code=status, headers=headers)


def stream_error_body(exc: BaseException) -> OpenAIErrorBody:
    """The ``data:`` of the error event that ends a failed stream (the HTTP status is already 200)."""
    if isinstance(exc, GatewayError):
        return _envelope(exc.status_code, {"detail": exc.detail, **exc.extra})
    logger.error("chat stream failed unexpectedly", exc_info=exc)
    return _envelope(500, {"detail": "The gateway failed unexpectedly while streaming; the error was logged."})
