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
the router's default among equals, and whether the named-documents rule (a question asking about two documents by
title routes ``multi_hop``) keeps deciding the questions it covers or leaves them to that threshold; an operator
applies it (the curation API or ``python -m gateway.curation
recalibrate``), never the gateway on its own.

Probabilities belong to the router that computed them: a new release may retrain it (other training data, other
signals), and the same question then gets another ``p(multi_hop)``. Every outcome and calibration therefore records
the router version (``KnowledgeModel.version``); a recalibration reads only the outcomes of the router in use and is
stored for it, the report counts the others apart, and the query service sets aside a calibration made for another
version (the router's default routes that tenant until an operator recalibrates).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.errors import ClientError
from gateway.query import QueryRequest, QueryResponse
from pipelines.shared import PlanHop, SearchHop
from routes.knowledge_router import DEFAULT_MULTI_HOP_THRESHOLD, threshold_applies

Verdict = Literal["right", "over_routed", "under_routed"]
VERDICTS: tuple[Verdict, ...] = ("right", "over_routed", "under_routed")
DAY_S = 86_400.0
# Outcomes of questions naming two documents a recalibration needs before it may turn the named-documents rule off:
# the rule misrouted none of the router's 410 single-hop training questions, so one or two answers from one page are
# not enough to overturn it for a tenant.
MIN_NAMED_OUTCOMES = 5


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
    # The router version that computed ``p_multi_hop`` (None: the LLM classifier decided, or recorded before versions
    # were); last, with a default, so outcomes built without a router (offline evaluations) stay as they are written.
    router_version: str | None = None
    # The question asked about two of the tenant's documents by title (the named-documents rule's condition): the rule
    # decided, unless the tenant's calibration had turned it off. Kept apart from the threshold's own outcomes.
    named_documents: bool = False

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
        router_version=response.router_version,
        named_documents=response.named_documents,
    )


@dataclass(frozen=True, slots=True)
class Calibration:
    """A proposed (or applied) threshold and named-documents rule, with how well they and the current ones agree with
    the outcomes, and the router version whose probabilities they were fitted to (None: unknown, made before versions
    were recorded): it applies to that version only."""

    tenant: str
    outcomes: int
    current_threshold: float
    multi_hop_threshold: float
    accuracy_before: float
    accuracy_after: float
    router_version: str | None
    # The named-documents rule: on (the router's default) or turned off, before and as proposed; ``named_outcomes`` of
    # the ``outcomes`` asked about two documents by title and decide it.
    current_named_documents: bool = True
    named_documents: bool = True
    named_outcomes: int = 0

    def stale_for(self, router_version: str | None) -> bool:
        """Whether this calibration was made for a router other than ``router_version`` (the one routing now): then
        it does not apply. One without a version is stale for every router: nothing says which it was made for."""
        return not threshold_applies(self.router_version, router_version)


def accuracy(outcomes: Sequence[RouteOutcome]) -> float | None:
    """The share of outcomes whose route was right; None without any."""
    if not outcomes:
        return None
    return sum(o.verdict == "right" for o in outcomes) / len(outcomes)


def counts(outcomes: Sequence[RouteOutcome]) -> dict[str, int]:
    found = Counter(o.verdict for o in outcomes)
    return {verdict: found.get(verdict, 0) for verdict in VERDICTS}


def _routed_right(points: Sequence[tuple[float, bool]], threshold: float) -> int:
    return sum((p >= threshold) == multi for p, multi in points)


def _agreement(points: Sequence[tuple[float, bool]], threshold: float) -> float:
    return _routed_right(points, threshold) / len(points)


def of_router(outcomes: Sequence[RouteOutcome], router_version: str | None) -> list[RouteOutcome]:
    """The outcomes recorded under ``router_version``: the only ones whose probabilities and verdicts say anything
    about the router routing now."""
    return [o for o in outcomes if o.router_version == router_version]


def _fit_threshold(points: Sequence[tuple[float, bool]], now: float) -> float:
    """The threshold that routes most ``points`` (probability, wanted multi_hop) right, nearest the router's default
    among equals; ``now`` without any."""
    if not points:
        return now
    values = sorted({p for p, _ in points})
    candidates = {now, DEFAULT_MULTI_HOP_THRESHOLD, values[0] / 2, (values[-1] + 1.0) / 2}
    candidates.update((a + b) / 2 for a, b in itertools.pairwise(values))
    best = max(
        sorted(candidates),
        key=lambda t: (round(_agreement(points, t), 9), -abs(t - DEFAULT_MULTI_HOP_THRESHOLD)),
    )
    return min(max(best, 0.0), 1.0)


def recalibrate(
    tenant: str,
    outcomes: Sequence[RouteOutcome],
    current: float | None,
    router_version: str | None = None,
    current_named_documents: bool = True,
) -> Calibration:
    """The threshold on ``p(multi_hop)`` for router ``router_version``, and whether the named-documents rule decides,
    that route most of its outcomes the way they showed they wanted.

    Only outcomes recorded under ``router_version`` count: another version's probabilities are on another scale.
    Candidates are the midpoints between neighbouring recorded probabilities and beyond the lowest and highest
    (and the current threshold); among equally good ones the nearest to the router's default wins, so a few
    outcomes move it no further than they must. Outcomes without a probability (the LLM classifier decided, or the
    rule before its decisions recorded one) are left out.

    With the rule on, its questions (those asking about two documents by title) all go ``multi_hop`` and the
    threshold is fitted on the others; with it off, the threshold is fitted on all of them. Whichever routes more of
    all the outcomes right is proposed; on a tie the rule stays as it is, and it is turned off only on at least
    ``MIN_NAMED_OUTCOMES`` outcomes of its questions.
    """
    now = DEFAULT_MULTI_HOP_THRESHOLD if current is None else current
    mine = [(o.p_multi_hop, o.wanted_multi_hop, o.named_documents) for o in of_router(outcomes, router_version)]
    scored = [(p, wanted, named) for p, wanted, named in mine if p is not None]
    unnamed = [(p, wanted) for p, wanted, named in scored if not named]
    every = [(p, wanted) for p, wanted, _ in scored]
    named_wanted = [wanted for _, wanted, named in scored if named]

    def right(threshold: float, rule: bool) -> int:
        if rule:
            return _routed_right(unnamed, threshold) + sum(named_wanted)
        return _routed_right(every, threshold)

    with_rule, without_rule = _fit_threshold(unnamed, now), _fit_threshold(every, now)
    on, off = right(with_rule, True), right(without_rule, False)
    # Turned back on wherever it routes better; turned off only on enough of its own questions.
    rule = current_named_documents
    if named_wanted and on != off and (on > off or len(named_wanted) >= MIN_NAMED_OUTCOMES):
        rule = on > off
    best = with_rule if rule else without_rule
    total = len(scored)
    return Calibration(
        tenant=tenant,
        outcomes=total,
        current_threshold=now,
        multi_hop_threshold=best,
        accuracy_before=round(right(now, current_named_documents) / total, 4) if total else 0.0,
        accuracy_after=round(right(best, rule) / total, 4) if total else 0.0,
        router_version=router_version,
        current_named_documents=current_named_documents,
        named_documents=rule,
        named_outcomes=len(named_wanted),
    )


class NotEnoughOutcomesError(ClientError):
    """Too few outcomes to move a tenant's threshold on: more traffic first (or a smaller minimum, knowingly)."""

    status_code = 409
    title = "Not enough route outcomes"


class NoRouterProbabilityError(ClientError):
    """The gateway routes with the LLM classifier: there is no ``p(multi_hop)`` to set a threshold on."""

    status_code = 409
    title = "No router probability to recalibrate"


@dataclass(frozen=True, slots=True)
class RouteReport:
    """A tenant's route outcomes over a window under the router in use: the estimate of its route accuracy, and its
    threshold. Outcomes of another router version are only counted (``stale_outcomes``): they describe a router
    that no longer decides."""

    tenant: str
    since: float
    router_version: str | None  # the router in use
    counts: dict[str, int]
    disliked: int
    accuracy: float | None
    stale_outcomes: int
    multi_hop_threshold: float  # the one routing uses (the router's default unless a current calibration applies)
    calibrated: bool  # an operator applied a calibration
    calibration_stale: bool  # ... for another router version: set aside, the default routes instead
    # The named-documents rule as routing uses it (on unless a current calibration turned it off), and the outcomes of
    # questions it covers, with the share of them whose route was right.
    named_documents_rule: bool = True
    named_outcomes: int = 0
    named_accuracy: float | None = None


def _in_use(applied: Calibration | None, router_version: str | None) -> Calibration | None:
    """The applied calibration when it was made for ``router_version``; None where the router's defaults route."""
    if applied is None or applied.stale_for(router_version):
        return None
    return applied


async def route_report(
    store: RouteOutcomeStore, tenant: str, days: float, now: float, router_version: str | None
) -> RouteReport:
    """``router_version``: the router routing now (``FrontRouter.version``)."""
    since = now - days * DAY_S
    outcomes = await store.route_outcomes(tenant, since)
    current = of_router(outcomes, router_version)
    applied = await store.calibration(tenant)
    in_use = _in_use(applied, router_version)
    named = [o for o in current if o.named_documents]
    return RouteReport(
        tenant=tenant,
        since=since,
        router_version=router_version,
        counts=counts(current),
        disliked=sum(o.disliked for o in current),
        accuracy=accuracy(current),
        stale_outcomes=len(outcomes) - len(current),
        multi_hop_threshold=DEFAULT_MULTI_HOP_THRESHOLD if in_use is None else in_use.multi_hop_threshold,
        calibrated=applied is not None,
        calibration_stale=applied is not None and applied.stale_for(router_version),
        named_documents_rule=True if in_use is None else in_use.named_documents,
        named_outcomes=len(named),
        named_accuracy=accuracy(named),
    )


async def recalibrate_tenant(
    store: RouteOutcomeStore,
    tenant: str,
    *,
    days: float,
    min_outcomes: int,
    apply: bool,
    now: float,
    router_version: str | None,
) -> Calibration:
    """The threshold and named-documents rule the tenant's outcomes of the last ``days`` under router
    ``router_version`` (the one routing now) ask for, made for that version; stored only with ``apply``. The current
    ones they are compared with are those routing uses: a calibration made for another version is not in use."""
    if router_version is None:
        raise NoRouterProbabilityError(
            "The gateway routes with the LLM classifier (GATEWAY_ROUTER_CLASSIFIER=llm): it has no p(multi_hop) for "
            "a threshold to apply to."
        )
    outcomes = await store.route_outcomes(tenant, now - days * DAY_S)
    applied = await store.calibration(tenant)
    in_use = _in_use(applied, router_version)
    current, rule = (None, True) if in_use is None else (in_use.multi_hop_threshold, in_use.named_documents)
    calibration = recalibrate(tenant, outcomes, current, router_version, rule)
    if calibration.outcomes < min_outcomes:
        stale = len(outcomes) - len(of_router(outcomes, router_version))
        other = f" ({stale} more were recorded under another router version and do not count)" if stale else ""
        raise NotEnoughOutcomesError(
            f"Tenant {tenant!r} has {calibration.outcomes} route outcome(s) with a probability of router "
            f"{router_version} in the last {days:g} days{other}; recalibrating takes at least {min_outcomes}."
        )
    if apply:
        await store.set_calibration(calibration)
    return calibration


class RouteOutcomeStore(Protocol):
    """What recalibration reads and writes (the curation store)."""

    async def route_outcomes(self, tenant: str, since: float) -> list[RouteOutcome]: ...

    async def calibration(self, tenant: str) -> Calibration | None: ...

    async def set_calibration(self, calibration: Calibration) -> None: ...
