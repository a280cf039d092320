"""A tenant's assistant profile, and what a request makes of it: the assistant that writes the answer,
the routes it may take, the model of each route, and the part of the answer cache key it decides."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from gateway.errors import ClientError, RouteNotAllowedError
from gateway.settings import AssistantSettings
from pipelines.shared import Assistant
from routes.types import ROUTES, Route

AUTO_LANGUAGE = "auto"

# A route the profile does not allow, when the router picks it, is replaced by the nearest allowed route,
# trying first those that do more work (an answer with more grounding, never less), then those that do less.
_CLAMP_ORDER: dict[Route, tuple[Route, ...]] = {
    "direct": ("single_hop", "multi_hop"),
    "single_hop": ("multi_hop", "direct"),
    "multi_hop": ("single_hop", "direct"),
}


@dataclass(frozen=True, slots=True)
class AssistantProfile:
    """``configured``: stored for the tenant (False: the gateway's default from ``GATEWAY_ASSISTANT_*``).
    ``version`` counts the tenant's stored changes; ``digest`` is what answers are keyed by."""

    tenant: str
    name: str
    persona: str = ""
    instructions: str = ""
    answer_language: str = AUTO_LANGUAGE
    allowed_routes: tuple[Route, ...] = ROUTES
    route_models: dict[Route, str] = field(default_factory=dict)
    allow_system_messages: bool = False
    # The tenant's routing as an operator recalibrated it from its route outcomes (gateway.curation.routing); None:
    # the router's defaults. Kept apart from the profile's own fields: writing a profile never resets it. Only the
    # query service, which owns the router, knows whether it was calibrated for the version routing now, and applies
    # it only then.
    routing: RoutingCalibration | None = None
    configured: bool = False
    version: int = 0
    updated_at: float | None = None

    digest: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Every field that shapes an answer, hashed once: two profiles that answer alike share cached answers,
        and any change (a renamed assistant, another model) starts fresh keys on every replica, with nothing to
        delete. A content digest rather than the version: a profile deleted and created again restarts its
        version, and would meet the answers of its namesake."""
        shaping: dict[str, object] = {
            "name": self.name,
            "persona": self.persona,
            "instructions": self.instructions,
            "answer_language": self.answer_language,
            "allowed_routes": sorted(self.allowed_routes),
            "route_models": dict(sorted(self.route_models.items())),
        }
        routing = self.routing
        if routing is not None:  # only when set: profiles without one keep their digests
            shaping["multi_hop_threshold"] = routing.multi_hop_threshold
            # Whether it applies depends on the version: the same value calibrated again for the router in use must
            # not meet answers routed while the old calibration was set aside.
            shaping["threshold_router_version"] = routing.router_version
            if not routing.named_documents_rule:  # only when off: calibrations keeping the rule keep their digests
                shaping["named_documents_rule"] = False
        encoded = json.dumps(shaping, sort_keys=True, ensure_ascii=True).encode()
        object.__setattr__(self, "digest", hashlib.sha256(encoded).hexdigest()[:16])

    def assistant(self, client_instructions: str = "") -> Assistant:
        language = None if self.answer_language == AUTO_LANGUAGE else self.answer_language
        return Assistant(
            name=self.name,
            persona=self.persona,
            instructions=self.instructions,
            language=language,
            client_instructions=client_instructions if self.allow_system_messages else "",
        )

    def allows(self, route: Route) -> bool:
        return route in self.allowed_routes

    def check_requested(self, route: str) -> None:
        """A route the caller forces (``route`` or a ``gateway-<route>`` model) must be allowed: 403 otherwise,
        never silently answered on another route than the one asked for."""
        if route != "auto" and route not in self.allowed_routes:
            raise RouteNotAllowedError(
                f"Tenant {self.tenant!r}'s assistant profile does not allow the {route!r} route; allowed: "
                f"{', '.join(self.allowed_routes)}. Ask with route 'auto' (model gateway-auto) or an allowed route.",
                field="route",
                code="route_not_allowed",
            )

    def clamp(self, route: Route) -> Route:
        """The route to run for the router's choice ``route``: itself when allowed, else the nearest allowed."""
        if route in self.allowed_routes:
            return route
        return next(r for r in _CLAMP_ORDER[route] if r in self.allowed_routes)

    def key_params(self, client_instructions: str) -> dict[str, str]:
        """What the answer cache key adds for this profile: its digest, and the client's instructions when they
        are used (a digest: keys stay short and hold no text)."""
        params = {"profile": self.digest}
        if client_instructions and self.allow_system_messages:
            params["instructions"] = hashlib.sha256(client_instructions.encode()).hexdigest()[:16]
        return params


@dataclass(frozen=True, slots=True)
class RoutingCalibration:
    """A tenant's recalibrated routing as stored: the threshold on ``p(multi_hop)``, the router version it was
    calibrated for (None: stored before calibrations recorded one, so for a router nobody can name any more), and
    whether the named-documents rule decides (a question asking about two of its pages by title routes multi_hop),
    kept on or turned off by the same calibration."""

    multi_hop_threshold: float
    router_version: str | None
    named_documents_rule: bool = True


def default_profile(tenant: str, settings: AssistantSettings) -> AssistantProfile:
    return AssistantProfile(tenant=tenant, name=settings.name, persona=settings.persona)


WARNING_HEADER = "X-Gateway-Warning"


def client_instructions(profile: AssistantProfile, text: str, max_chars: int) -> tuple[str, str | None]:
    """A chat client's system messages, as the profile takes them: ``(instructions, warning)``.

    Honoured (the profile allows them): the instructions, bounded like a profile's own, and no warning.
    Otherwise they are dropped, never silently: the warning goes back in ``X-Gateway-Warning``, decided
    before an answer starts so a stream's headers carry it too.
    """
    if not text:
        return "", None
    if not profile.allow_system_messages:
        return "", (
            f"system message ignored: the assistant profile of tenant {profile.tenant!r} does not allow client "
            "instructions (allow_system_messages=false)"
        )
    if len(text) > max_chars:
        raise ClientError(
            f"The system messages have {len(text)} characters together; this tenant takes at most {max_chars} "
            "(GATEWAY_PROFILE_MAX_INSTRUCTIONS_CHARS).",
            field="messages",
        )
    return text, None
