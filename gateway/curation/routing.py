"""What a routed answer shows about its route afterwards, and a tenant's threshold recalibrated from it.

The router decides before anything is known; the answer then shows whether the route fitted:

- ``over_routed``: the router chose ``multi_hop`` and the corrective pipeline's planner found the first round
  sufficient (no second hop searched) and the answer cites one document: plain RAG would have done. Knowledge
  several documents *repeat* looks like knowledge *spread* across them to the router's probe; this is how it shows;
- ``under_routed``: the router chose ``single_hop`` and it escalated to the corrective pipeline;
- ``right``: ``single_hop`` answered without escalating, or ``multi_hop`` searched a second hop and cited two or
  more documents.

Anything else (abstentions, ``direct``, forced routes, cached answers) says nothing about the route and is not
recorded. Negative feedback marks a recorded outcome ``disliked``: reported, not used to recalibrate (a bad answer
has many causes besides its route).

:func:`recalibrate` chooses the ``p(multi_hop)`` threshold that agrees with most of a tenant's outcomes, nearest
the router's default among equals; an operator applies it (the curation API or ``python -m gateway.curation
recalibrate``), never the gateway on its own.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.errors import ClientError
from gateway.query.schemas import QueryRequest, QueryResponse
from pipelines.shared.events import PlanHop, SearchHop
from routes.knowledge_router import DEFAULT_MULTI_HOP_THRESHOLD

Verdict = Literal["right", "over_routed", "under_routed"]
VERDICTS: tuple[Verdict, ...] = ("right", "over_routed", "under_routed")
DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class RouteOutcome:
    id: str  # the response id
    tenant: str
    classified_route: str
    served_route: str
    verdict: Verdict
    p_multi_hop: float | None
    created_at: float
    disliked: bool = False

    @property
    def wanted_multi_hop(self) -> bool:
        """What the route should have been, as this outcome shows it."""
        if self.verdict == "right":
            return self.classified_route == "multi_hop"
        return self.verdict == "under_routed"


def route_outcome(request: QueryRequest, response: QueryResponse, at: float) -> RouteOutcome | None:
    """The outcome of one fresh answer the router decided; None when it says nothing about the route."""
    if request.route != "auto" or response.cached or not response.response_id or response.abstained:
        return None
    verdict: Verdict | None = None
    cited = {source.id for source in response.sources}
    if response.classified_route == "single_hop":
        verdict = "under_routed" if response.escalated_from == "single_hop" else "right"
    elif response.classified_route == "multi_hop" and response.route == "multi_hop":
        searched = any(isinstance(e, SearchHop) and e.new > 0 for e in response.events)
        first_round_enough = any(isinstance(e, PlanHop) and e.done and e.hop == 1 for e in response.events)
        if first_round_enough and not searched and len(cited) <= 1:
            verdict = "over_routed"
        elif searched and len(cited) >= 2:
            verdict = "right"
    if verdict is None:
        return None
    return RouteOutcome(
        id=response.response_id,
        tenant=request.tenant,
        classified_route=response.classified_route,
        served_route=response.route,
        verdict=verdict,
        p_multi_hop=response.p_multi_hop,
        created_at=at,
    )


@dataclass(frozen=True, slots=True)
class Calibration:
    """A proposed (or applied) threshold, with how well it and the current one agree with the outcomes."""

    tenant: str
    outcomes: int
    current_threshold: float
    multi_hop_threshold: float
    accuracy_before: float
    accuracy_after: float


def accuracy(outcomes: Sequence[RouteOutcome]) -> float | None:
    """The share of outcomes whose route was right; None without any."""
    if not outcomes:
        return None
    return sum(o.verdict == "right" for o in outcomes) / len(outcomes)


def counts(outcomes: Sequence[RouteOutcome]) -> dict[str, int]:
    found = Counter(o.verdict for o in outcomes)
    return {verdict: found.get(verdict, 0) for verdict in VERDICTS}


def _agreement(points: Sequence[tuple[float, bool]], threshold: float) -> float:
    return sum((p >= threshold) == multi for p, multi in points) / len(points)


def recalibrate(tenant: str, outcomes: Sequence[RouteOutcome], current: float | None) -> Calibration:
    """The threshold on ``p(multi_hop)`` that routes most of the outcomes the way they showed they wanted.

    Candidates are the midpoints between neighbouring recorded probabilities and beyond the lowest and highest
    (and the current threshold); among
    equally good ones the nearest to the router's default wins, so a few outcomes move it no further than they
    must. Outcomes without a probability (the LLM classifier decided) are left out.
    """
    now = DEFAULT_MULTI_HOP_THRESHOLD if current is None else current
    points = [(o.p_multi_hop, o.wanted_multi_hop) for o in outcomes if o.p_multi_hop is not None]
    if not points:
        return Calibration(tenant, 0, now, now, 0.0, 0.0)
    values = sorted({p for p, _ in points})
    candidates = {now, DEFAULT_MULTI_HOP_THRESHOLD, values[0] / 2, (values[-1] + 1.0) / 2}
    candidates.update((a + b) / 2 for a, b in itertools.pairwise(values))
    best = max(
        sorted(candidates),
        key=lambda t: (round(_agreement(points, t), 9), -abs(t - DEFAULT_MULTI_HOP_THRESHOLD)),
    )
    return Calibration(
        tenant=tenant,
        outcomes=len(points),
        current_threshold=now,
        multi_hop_threshold=min(max(best, 0.0), 1.0),
        accuracy_before=round(_agreement(points, now), 4),
        accuracy_after=round(_agreement(points, best), 4),
    )


class NotEnoughOutcomesError(ClientError):
    """Too few outcomes to move a tenant's threshold on: more traffic first (or a smaller minimum, knowingly)."""

    status_code = 409
    title = "Not enough route outcomes"


@dataclass(frozen=True, slots=True)
class RouteReport:
    """A tenant's route outcomes over a window: the estimate of its route accuracy, and its threshold."""

    tenant: str
    since: float
    counts: dict[str, int]
    disliked: int
    accuracy: float | None
    multi_hop_threshold: float  # the tenant's current one (the router's default unless recalibrated)
    calibrated: bool


async def route_report(store: RouteOutcomeStore, tenant: str, days: float, now: float) -> RouteReport:
    since = now - days * DAY_S
    outcomes = await store.route_outcomes(tenant, since)
    applied = await store.calibration(tenant)
    return RouteReport(
        tenant=tenant,
        since=since,
        counts=counts(outcomes),
        disliked=sum(o.disliked for o in outcomes),
        accuracy=accuracy(outcomes),
        multi_hop_threshold=applied.multi_hop_threshold if applied else DEFAULT_MULTI_HOP_THRESHOLD,
        calibrated=applied is not None,
    )


async def recalibrate_tenant(
    store: RouteOutcomeStore, tenant: str, *, days: float, min_outcomes: int, apply: bool, now: float
) -> Calibration:
    """The threshold the tenant's outcomes of the last ``days`` ask for; stored only with ``apply``."""
    outcomes = await store.route_outcomes(tenant, now - days * DAY_S)
    applied = await store.calibration(tenant)
    calibration = recalibrate(tenant, outcomes, applied.multi_hop_threshold if applied else None)
    if calibration.outcomes < min_outcomes:
        raise NotEnoughOutcomesError(
            f"Tenant {tenant!r} has {calibration.outcomes} route outcome(s) with a router probability in the last "
            f"{days:g} days; recalibrating takes at least {min_outcomes}."
        )
    if apply:
        await store.set_calibration(calibration)
    return calibration


class RouteOutcomeStore(Protocol):
    """What recalibration reads and writes (the curation store)."""

    async def route_outcomes(self, tenant: str, since: float) -> list[RouteOutcome]: ...

    async def calibration(self, tenant: str) -> Calibration | None: ...

    async def set_calibration(self, calibration: Calibration) -> None: ...
