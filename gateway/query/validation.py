"""The native API's question limits, checked once at the edge, before anything is computed.

The schemas check what a type can say; these limits are configured (``RequestLimits``), so the handlers check
them with these functions. Everything behind the edge (``QueryService``, the pipelines) receives requests that
already passed and checks nothing again.
"""

from __future__ import annotations

from gateway.errors import ClientError
from gateway.settings import RequestLimits


def clean_query(text: str, limits: RequestLimits, *, field: str = "query", what: str = "The query") -> str:
    """The question without surrounding whitespace; a 400 naming ``field`` when empty or too long."""
    cleaned = text.strip()
    if not cleaned:
        raise ClientError(f"{what} is empty: send a question in the {field!r} field.", field=field)
    if len(cleaned) > limits.max_query_chars:
        raise ClientError(
            f"{what} has {len(cleaned)} characters; the maximum is {limits.max_query_chars}. "
            "Shorten it or raise GATEWAY_MAX_QUERY_CHARS.",
            field=field,
        )
    return cleaned
