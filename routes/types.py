"""Route names and the router's decision; per-route metric labels come from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Route = Literal["direct", "single_hop", "multi_hop"]
ROUTES: tuple[Route, ...] = get_args(Route)
RouteRequest = Literal["auto", "direct", "single_hop", "multi_hop"]


@dataclass(frozen=True, slots=True)
class RouteDecision:
    route: Route
    confidence: float
    reason: str
    classifier: str
