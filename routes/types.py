"""Route names and the router's decision; per-route metric labels come from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from routes.probe import Probe

Route = Literal["direct", "single_hop", "multi_hop"]
ROUTES: tuple[Route, ...] = get_args(Route)
RouteRequest = Literal["auto", "direct", "single_hop", "multi_hop"]


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """``probe`` is the tenant search the decision read (None when no search was made): its passages
    are the first retrieval of ``single_hop`` / ``multi_hop``, so a request searches the store once."""

    route: Route
    confidence: float
    reason: str
    classifier: str
    probe: Probe | None = None
    # The knowledge-aware classifier's probability that a second document holds a part of the question: what a
    # tenant's recalibrated threshold is compared with (None: another classifier decided).
    p_multi_hop: float | None = None
    # The version of the knowledge-aware router that decided (``KnowledgeModel.version``; None when another classifier
    # did): a threshold, or an outcome recorded with the probability, means something only for the version that
    # computed it.
    router_version: str | None = None
    # The question asks about two or more of the probe's documents by their titles: the named-documents rule's
    # condition, whether or not the tenant's calibration lets the rule decide. Recorded with the route's outcome, so a
    # recalibration can tell how the rule fares on the tenant's traffic.
    named_documents: bool = False
