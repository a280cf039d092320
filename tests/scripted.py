"""Helpers for scripted models: tell structured calls apart and answer them per schema."""

from __future__ import annotations

import json
from typing import Any


def schema_name(kwargs: dict[str, Any]) -> str | None:
    """The JSON schema a structured call asked for (``Grade``, ``RouteChoice``, ...), else None."""
    response_format = kwargs.get("response_format")
    if not isinstance(response_format, dict):
        return None
    name = response_format.get("json_schema", {}).get("name")
    return str(name) if name else None


AGREEABLE: dict[str, dict[str, Any]] = {
    "Grade": {"fact": "none", "relevant": True},
    "GroundednessCheck": {"unsupported_claims": []},
    "UsefulnessCheck": {"useful": True, "missing": ""},
    "RouteChoice": {"route": "single_hop", "confidence": 0.8, "reason": "scripted"},
}


def structured_reply(kwargs: dict[str, Any], overrides: dict[str, dict[str, Any]] | None = None) -> str | None:
    """JSON for a structured call (agreeable defaults, per-schema overrides), None for free text."""
    name = schema_name(kwargs)
    if name is None:
        return None
    return json.dumps({**AGREEABLE, **(overrides or {})}[name])
