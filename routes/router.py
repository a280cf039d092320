"""The front router: an explicit route wins, otherwise the configured classifier decides.

Every decision that may lead to retrieval starts with one probe of the tenant's store, searched with
the query vector the request already computed: the knowledge-aware classifier reads its signals, the
LLM classifier is shown them, and the probe travels on the decision (``decision.probe``) so the
retrieving routes reuse its passages instead of searching again.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.shared import LLMCall, Retriever, Visibility
from routes.features import active_cues
from routes.knowledge_router import DEFAULT_ROUTING, KnowledgeRouter, TenantRouting
from routes.llm_router import LLMRouter
from routes.probe import PROBE_DEPTH, Probe, probe_of, question_terms
from routes.types import RouteDecision, RouteRequest


class FrontRouter:
    def __init__(
        self, knowledge: KnowledgeRouter, llm: LLMRouter, mode: str, retriever: Retriever, depth: int = PROBE_DEPTH
    ) -> None:
        self._knowledge = knowledge
        self._llm = llm
        self._retriever = retriever
        self.mode = mode
        self.depth = depth

    @property
    def version(self) -> str | None:
        """The version of the model behind ``p(multi_hop)`` (:attr:`KnowledgeRouter.version`), which a tenant's
        recalibrated threshold must have been made for; None when the LLM classifier decides: then no threshold
        applies and no probability is recorded."""
        return None if self.mode == "llm" else self._knowledge.version

    @property
    def classifier_name(self) -> str:
        return self._llm.name if self.mode == "llm" else self._knowledge.name

    async def probe(self, tenant: str, query: str, vector: Sequence[float], visibility: Visibility) -> Probe:
        """The reader's probe: routing reads the knowledge they may see (a question about documents hidden from
        them is routed as the tenant holding only theirs would route it), and retrieval reuses it for them."""
        passages = await self._retriever.search(tenant, query, self.depth, visibility=visibility, vector=list(vector))
        return probe_of(tenant, query, passages, self.depth, visibility)

    def read_question(self, query: str, requested: RouteRequest) -> None:
        """Reads now what the decision reads of the question's text alone (its terms and names for the probe's
        signals; the classifier's cues when ``requested`` is ``auto``); both are kept per text
        (:func:`~routes.probe.question_terms`, :func:`~routes.features.active_cues`), so the decision that follows
        finds them. The request path calls this
        while the query vector is still on its way, so that the event loop does it in a wait rather than after it
        (~0.1 ms of an ``auto`` miss's path)."""
        question_terms(query)
        if requested == "auto" and self.mode != "llm":  # a forced route is not classified
            active_cues(query)

    @staticmethod
    def reads_vector(requested: RouteRequest) -> bool:
        """Whether deciding ``requested`` reads the query vector: every decision probes the store by it, except a
        caller's forced ``direct``, which needs neither a probe nor retrieval. The request path embeds a query
        only when something reads the vector, so a forced-direct request (semantic cache off) embeds nothing."""
        return requested != "direct"

    async def decide(
        self,
        query: str,
        requested: RouteRequest,
        vector: Sequence[float] | None,
        tenant: str,
        routing: TenantRouting | None = None,
        *,
        visibility: Visibility,
    ) -> tuple[RouteDecision, list[LLMCall]]:
        """``vector`` may be None only when :meth:`reads_vector` says the decision does not read it.
        ``routing``: the tenant's recalibrated routing, for the knowledge-aware classifier (None: the router's
        defaults)."""
        if requested == "direct":
            return RouteDecision(requested, 1.0, "route requested by the caller", "override"), []
        if vector is None:
            raise ValueError(
                f"deciding route {requested!r} probes the store by the query vector: embed the query first"
            )
        probe = await self.probe(tenant, query, vector, visibility)
        if requested != "auto":
            return RouteDecision(requested, 1.0, "route requested by the caller", "override", probe), []
        if self.mode == "llm":
            decision, call = await self._llm.classify(query, probe)
            return decision, [call]
        return self._knowledge.classify(query, probe, routing or DEFAULT_ROUTING), []
