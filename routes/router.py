"""The front router: an explicit route wins, otherwise the configured classifier decides."""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.shared.deps import LLMCall
from routes.llm_router import LLMRouter
from routes.logistic_router import LogisticRouter
from routes.types import RouteDecision, RouteRequest


class FrontRouter:
    def __init__(self, logistic: LogisticRouter, llm: LLMRouter, mode: str) -> None:
        self._logistic = logistic
        self._llm = llm
        self.mode = mode

    @property
    def classifier_name(self) -> str:
        return self._llm.name if self.mode == "llm" else self._logistic.name

    async def decide(
        self, query: str, requested: RouteRequest, vector: Sequence[float]
    ) -> tuple[RouteDecision, list[LLMCall]]:
        if requested != "auto":
            return RouteDecision(requested, 1.0, "route requested by the caller", "override"), []
        if self.mode == "llm":
            decision, call = await self._llm.classify(query)
            return decision, [call]
        return self._logistic.classify_vector(query, vector), []
