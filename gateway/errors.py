"""One error hierarchy for the gateway, rendered as RFC 9457 problem details in one place.

Client errors (4xx) are the caller's to fix; provider errors (5xx) say which upstream failed so an
operator knows where to look. Adapters translate upstream exceptions into these at the boundary.
"""

from __future__ import annotations

import logging
import math
from http import HTTPStatus
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi import ResponseSpec
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from pipelines.shared import StructuredOutputError

logger = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"


class GatewayError(Exception):
    status_code = HTTP_500_INTERNAL_SERVER_ERROR
    title = "Internal error"
    headers: dict[str, str] = {}

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class CalibrationUnavailableError(GatewayError):
    """The gateway cannot start: its embedder has no calibration and fitting one failed (``gateway.query.calibration``).
    Raised at start-up only, never on a request: scorers fitted for another embedder would misjudge every cosine."""

    title = "Calibration unavailable"


class ClientError(GatewayError):
    status_code = 400
    title = "Invalid request"


class NotFoundError(ClientError):
    status_code = 404
    title = "Not found"


class AuthenticationError(ClientError):
    status_code = 401
    title = "Unauthorized"
    headers = {"WWW-Authenticate": "Bearer"}


class UserTokenError(AuthenticationError):
    """The end user's token (not the API key) is missing what it must prove: bad, expired or unverifiable."""

    title = "Invalid user token"
    headers = {"WWW-Authenticate": 'Bearer realm="end-user", error="invalid_token"'}

    def __init__(self, detail: str) -> None:
        super().__init__(detail, code="invalid_user_token")


class PermissionDeniedError(ClientError):
    status_code = 403
    title = "Forbidden"


class TenantForbiddenError(PermissionDeniedError):
    """The body names a tenant other than the API key's."""


class PersonalDataBlockedError(ClientError):
    """The tenant's policy refuses personal data in a request: the detail names categories, never values."""

    status_code = 422
    title = "Personal data not allowed"

    def __init__(self, categories: list[str]) -> None:
        names = ", ".join(categories)
        super().__init__(
            f"The request contains personal data ({names}), which this tenant's policy does not allow to be sent "
            "to the model. Remove it and ask again.",
            code="personal_data_blocked",
            categories=categories,
        )


class InvalidReaderError(ClientError):
    """A user or groups named for someone to read as (an evaluation suite's ``run_as``) that the access model
    cannot take: a group name the access tags reserve, or a user id out of bounds. Well-formed JSON, so a 422."""

    status_code = 422
    title = "Invalid user or groups"

    def __init__(self, detail: str, *, field: str) -> None:
        super().__init__(detail, code="invalid_reader", field=field)


class PromptInjectionError(ClientError):
    """An instruction aimed at the model was found where the tenant's policy refuses it (prompt or passage)."""

    status_code = 422
    title = "Prompt injection refused"

    def __init__(self, source: str, kinds: list[str]) -> None:
        where = "the request" if source == "prompt" else "a retrieved passage"
        super().__init__(
            f"Instructions aimed at the model were found in {where} ({', '.join(kinds)}); this tenant's policy "
            "refuses such requests.",
            code="prompt_injection",
            source=source,
            kinds=kinds,
        )


class RouteNotAllowedError(PermissionDeniedError):
    """The caller forced a route the tenant's assistant profile does not allow."""


class RateLimitedError(ClientError):
    status_code = 429
    title = "Too many requests"

    def __init__(self, detail: str, *, retry_after_s: int, **extra: Any) -> None:
        super().__init__(detail, retry_after_s=retry_after_s, **extra)
        self.headers = {"Retry-After": str(retry_after_s)}


class ProviderError(GatewayError):
    """An upstream (LLM, embeddings, vector store, cache, search) failed."""

    status_code = 502
    title = "Upstream provider failed"
    # When the upstream said to come back later (``Retry-After``), in seconds: retries wait that long.
    retry_after_s: float | None = None

    def __init__(self, detail: str, *, provider: str, **extra: Any) -> None:
        super().__init__(detail, provider=provider, **extra)
        self.provider = provider


class MalformedOutputError(ProviderError, StructuredOutputError):
    """The model answered, but not in the requested structure: callers may degrade instead of failing."""


class ProviderUnavailableError(ProviderError):
    status_code = 503
    title = "Upstream provider unavailable"


class ProviderTimeoutError(ProviderError):
    status_code = 504
    title = "Upstream provider timed out"


class StreamInterruptedError(ProviderUnavailableError):
    """A streamed answer broke off after part of it reached the client: neither a retry nor a fallback can
    continue it without repeating text, so the stream ends with an error event."""

    title = "Upstream stream interrupted"


class ProviderRetryLaterError(ProviderUnavailableError):
    """An upstream said when to come back (``Retry-After``): the caller is told the same, in whole seconds."""

    def __init__(self, detail: str, *, provider: str, retry_after_s: float | None, **extra: Any) -> None:
        if retry_after_s is None:  # the upstream did not say: neither do we
            super().__init__(detail, provider=provider, **extra)
            return
        seconds = max(1, math.ceil(retry_after_s))
        super().__init__(detail, provider=provider, retry_after_s=seconds, **extra)
        self.retry_after_s = retry_after_s
        self.headers = {"Retry-After": str(seconds)}


class ProviderRateLimitedError(ProviderRetryLaterError):
    """The upstream answered 429 and retrying within the request's budget did not get through. A 503,
    not a 429: the caller did not exceed its own limits, the gateway's upstream did."""

    title = "Upstream provider rate limited"


class CircuitOpenError(ProviderRetryLaterError):
    """The upstream failed repeatedly moments ago: refused without calling it until the breaker's cool-down."""

    title = "Upstream provider circuit open"


class AccessUnavailableError(ProviderUnavailableError):
    """Limits cannot be checked (Redis down) and the operator chose to fail closed."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail, provider="rate_limiter")
        self.headers = {"Retry-After": "5"}


def problem(
    status: int, title: str, detail: str, instance: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> Response[dict[str, Any]]:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": instance,
        **extra,
    }
    return Response(content=body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _validation_errors(exc: ValidationException) -> list[dict[str, Any]]:
    extra = exc.extra
    if isinstance(extra, list):
        return [e if isinstance(e, dict) else {"message": str(e)} for e in extra]
    if isinstance(extra, dict):
        return [extra]
    return []


def handle_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """The single mapping from any exception to a problem-details response."""
    path = request.url.path
    if isinstance(exc, GatewayError):
        if isinstance(exc, ProviderError):
            logger.warning("provider error from %s: %s", exc.provider, exc.detail)
        return problem(exc.status_code, exc.title, exc.detail, path, headers=exc.headers or None, **exc.extra)
    if isinstance(exc, ValidationException):
        errors = _validation_errors(exc)
        detail = "; ".join(f"{e.get('key', 'body')}: {e.get('message', '')}".strip() for e in errors) or exc.detail
        return problem(400, "Invalid request", detail, path, errors=errors)
    if isinstance(exc, HTTPException):
        if _caused_by_bad_json(exc):
            detail = f"The request body is not valid JSON ({exc.detail}). Send a JSON object."
            return problem(400, "Malformed JSON", detail, path)
        return problem(exc.status_code, _title_for(exc.status_code), exc.detail, path)
    if _too_deep_to_decode(exc):
        detail = "The request body nests arrays or objects too deeply to decode. Send a flatter JSON object."
        return problem(400, "Malformed JSON", detail, path)
    logger.exception("unhandled error on %s", path, exc_info=exc)
    return problem(500, "Internal error", "The gateway failed unexpectedly; the error was logged.", path)


def _too_deep_to_decode(exc: BaseException) -> bool:
    """A body nested past the JSON decoder's depth: msgspec raises RecursionError (not a DecodeError) while reading
    it, which Litestar passes on as it is. Bad input, so a 400; any other RecursionError stays a 500."""
    return isinstance(exc, RecursionError) and "while deserializing" in str(exc)


def _caused_by_bad_json(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, msgspec.DecodeError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _title_for(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


# --- the same problems as the OpenAPI document describes them --------------------------------------------


class ProblemDetails(msgspec.Struct, kw_only=True):
    """RFC 9457 body of every native-endpoint error (extension members vary by error)."""

    type: str
    title: str
    status: int
    detail: str
    instance: str


DESCRIPTIONS = {
    400: "Invalid request: what to fix is in 'detail'",
    401: "Missing or invalid API key, or an end user's token that is bad, expired or unverifiable",
    403: "The key lacks the scope, names an end user it may not, or the body names another tenant than the key's",
    404: "Not found",
    413: "Request body larger than GATEWAY_MAX_BODY_BYTES",
    422: "Refused by the tenant's guardrails: personal data (categories named, never values) or injections",
    429: "Rate limit or daily token budget exceeded; see the Retry-After header",
    502: "An upstream provider failed",
    503: "An upstream provider is unavailable",
    504: "An upstream provider timed out",
}


def problem_responses(*statuses: int, described: dict[int, str] | None = None) -> dict[int, ResponseSpec]:
    """The problem responses an operation documents; ``described`` says what a status means there, where that
    differs from the rest of the API (a file upload's 413 and 422)."""
    descriptions = {**DESCRIPTIONS, **(described or {})}
    return {
        status: ResponseSpec(
            ProblemDetails, description=descriptions[status], media_type=PROBLEM_JSON, generate_examples=False
        )
        for status in statuses
    }
