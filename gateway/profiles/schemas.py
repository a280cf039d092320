"""Wire types of ``/v1/assistant-profile`` and the edge check of a profile write.

The struct says what a type can (lengths, known routes, the language codes); :func:`valid_profile` adds
what is configured (``GATEWAY_PROFILE_*``) or spans fields, each a 400 naming the field to fix. Unknown
fields are refused: a misspelt ``alowed_routes`` silently ignored would allow every route.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from gateway.errors import ClientError
from gateway.knowledge import Tenant
from gateway.profiles.model import AssistantProfile
from gateway.settings import ProfileSettings
from routes.types import ROUTES, Route

ModelName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$", description="An LLM model name.")]
# "auto" and the codes of pipelines.shared.persona.LANGUAGES (a test keeps the two lists equal).
Language = Literal["auto", "en", "ja", "zh", "ko", "fr", "de", "es", "pt", "it", "nl", "ru", "vi", "th", "id"]
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ProfileRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    tenant: Tenant = "default"
    name: Annotated[
        str, Meta(min_length=1, max_length=64, description="The assistant's name, as it introduces itself.")
    ]
    persona: Annotated[
        str, Meta(max_length=500, description="Who it is, after its name: 'the HR help desk of Acme'.")
    ] = ""
    instructions: Annotated[
        str, Meta(description="Standing instructions for every answer (up to GATEWAY_PROFILE_MAX_INSTRUCTIONS_CHARS).")
    ] = ""
    answer_language: Annotated[
        Language, Meta(description="'auto': the question's language; or a fixed language, every answer in it.")
    ] = "auto"
    allowed_routes: Annotated[
        list[Route],
        Meta(
            min_length=1,
            description="Routes the tenant may use; the router's other choices run on the nearest allowed route, "
            "and forcing another is a 403.",
        ),
    ] = msgspec.field(default_factory=lambda: list(ROUTES))
    route_models: Annotated[
        dict[Route, ModelName], Meta(description="The LLM model per route; a route left out uses GATEWAY_LLM_MODEL.")
    ] = msgspec.field(default_factory=dict)
    allow_system_messages: Annotated[
        bool,
        Meta(
            description="Chat clients' system messages become extra instructions (and part of the answer's cache "
            "key); false: ignored, with an X-Gateway-Warning header."
        ),
    ] = False


class ProfileOut(msgspec.Struct, kw_only=True):
    tenant: str
    name: str
    persona: str
    instructions: str
    answer_language: str
    allowed_routes: list[str]
    route_models: dict[str, str]
    allow_system_messages: bool
    configured: Annotated[bool, Meta(description="False: no profile stored, the gateway's default answers.")]
    version: Annotated[int, Meta(description="Stored changes of this tenant's profile (0: the default).")]
    digest: Annotated[str, Meta(description="What answers shaped by this profile are cached under.")]
    updated_at: float | None = None


class ProfileDeleted(msgspec.Struct, kw_only=True):
    deleted: bool
    tenant: str


def profile_out(profile: AssistantProfile) -> ProfileOut:
    return ProfileOut(
        tenant=profile.tenant,
        name=profile.name,
        persona=profile.persona,
        instructions=profile.instructions,
        answer_language=profile.answer_language,
        allowed_routes=list(profile.allowed_routes),
        route_models={route: model for route, model in profile.route_models.items()},
        allow_system_messages=profile.allow_system_messages,
        configured=profile.configured,
        version=profile.version,
        digest=profile.digest,
        updated_at=profile.updated_at,
    )


def _one_line(value: str, field: str, what: str) -> str:
    cleaned = value.strip()
    if _CONTROL.search(cleaned):
        raise ClientError(f"{what} must be one line of text without control characters.", field=field)
    return cleaned


def valid_profile(data: ProfileRequest, tenant: str, settings: ProfileSettings) -> AssistantProfile:
    """The profile to store for ``tenant`` (the key's), once it meets every limit."""
    name = _one_line(data.name, "name", "The name")
    if not name:
        raise ClientError("The name is empty: give the assistant a name.", field="name")
    persona = _one_line(data.persona, "persona", "The persona")
    instructions = data.instructions.strip()
    if "\x00" in instructions:  # PostgreSQL text cannot hold it: a 400 here, not a failed write
        raise ClientError("instructions contains a NUL character.", field="instructions")
    if len(instructions) > settings.max_instructions_chars:
        raise ClientError(
            f"instructions has {len(instructions)} characters; the maximum is {settings.max_instructions_chars} "
            "(GATEWAY_PROFILE_MAX_INSTRUCTIONS_CHARS).",
            field="instructions",
        )
    if len(set(data.allowed_routes)) != len(data.allowed_routes):
        raise ClientError("allowed_routes names a route twice; name each once.", field="allowed_routes")
    for route, model in data.route_models.items():
        if route not in data.allowed_routes:
            raise ClientError(
                f"route_models sets a model for {route!r}, which allowed_routes leaves out.", field="route_models"
            )
        if settings.allowed_models and model not in settings.allowed_models:
            raise ClientError(
                f"route_models.{route} is {model!r}, not one of the models this gateway allows: "
                f"{', '.join(settings.allowed_models)} (GATEWAY_PROFILE_ALLOWED_MODELS).",
                field=f"route_models.{route}",
            )
    return AssistantProfile(
        tenant=tenant,
        name=name,
        persona=persona,
        instructions=instructions,
        answer_language=data.answer_language,
        allowed_routes=tuple(r for r in ROUTES if r in data.allowed_routes),
        route_models=dict(data.route_models),
        allow_system_messages=data.allow_system_messages,
    )
