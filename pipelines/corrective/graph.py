"""The corrective graph: CRAG (evaluate, refine, rewrite, search more) + Self-RAG (IsSup, IsUse).

    retrieve -> evaluate -+-> refine -> generate -> check_grounded -+-> check_useful -+-> finish
                 ^        |                ^             |           |                 |
                 |        +-> rewrite_query <------------+-----------+-----------------+
                 +-- search_more <--+      (regenerate once, then cautious_answer)

Every loop is bounded three ways: ``max_rewrites``, the per-request LLM-call and time budget, and
LangGraph's recursion limit. The reason the run stopped is kept in ``stop_reason``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from pipelines.corrective.critique import (
    CITATIONS_ONLY,
    cautious_answer,
    check_grounded,
    check_useful,
    regeneration_note,
)
from pipelines.corrective.evaluator import evaluate_passages
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.refine import refine_evidence
from pipelines.corrective.rewrite import rewrite_query as llm_rewrite
from pipelines.corrective.state import CorrectiveState, StopReason
from pipelines.shared.deps import ChatClient, Embedder, Passage, Retriever, WebSearch
from pipelines.shared.generation import draft_answer
from pipelines.shared.telemetry import NO_TELEMETRY, PipelineTelemetry, instrument


@dataclass(frozen=True)
class CorrectiveDeps:
    llm: ChatClient
    retriever: Retriever
    search: WebSearch
    embedder: Embedder
    policy: CorrectivePolicy
    telemetry: PipelineTelemetry = NO_TELEMETRY


def expanded_query(question: str, evidence: list[Passage], chars: int = 300) -> str:
    """The question plus the most relevant evidence found so far (empty when there is none)."""
    if not evidence:
        return ""
    best = max(evidence, key=lambda p: p.score)
    return f"{question} {best.title}: {best.text[:chars]}"


def _merge(old: list[Passage], new: list[Passage]) -> list[Passage]:
    seen = {p.chunk_id for p in old}
    return [*old, *(p for p in new if p.chunk_id not in seen)]


def build_graph(deps: CorrectiveDeps) -> CompiledStateGraph[Any, Any, Any, Any]:
    policy = deps.policy
    telemetry = deps.telemetry

    def calls_left(state: CorrectiveState) -> int:
        return policy.max_llm_calls - len(state.get("llm_calls", []))

    def budget_stop(state: CorrectiveState, needed: int = 1) -> StopReason | None:
        if time.monotonic() - state["started_at"] >= policy.max_seconds:
            return "max_seconds"
        if calls_left(state) < needed:
            return "max_llm_calls"
        return None

    async def retrieve(state: CorrectiveState) -> dict[str, Any]:
        found = await deps.retriever.search(
            state["tenant"], state["query"], state["top_k"], vector=state.get("query_vector")
        )
        return {"candidates": found, "rewrites": 0, "steps": [f"retrieve(k={state['top_k']}, found={len(found)})"]}

    async def evaluate(state: CorrectiveState) -> dict[str, Any]:
        candidates = state.get("candidates", [])
        # Keep one call for the answer; grade nothing once the time budget is spent.
        grading_calls = 0 if budget_stop(state) == "max_seconds" else max(0, calls_left(state) - 1)
        round_query = state.get("search_query") or state["query"]
        result = await evaluate_passages(
            deps.llm, policy, state["query"], candidates, grading_calls, scoring_query=round_query
        )
        evidence = state.get("evidence", [])
        telemetry.verdict("corrective", result.verdict)
        # Correct and Ambiguous keep what they found; Incorrect discards this round's documents.
        return {
            "verdict": result.verdict,
            "verdicts": [*state.get("verdicts", []), result.verdict],
            "evidence": _merge(evidence, result.kept),
            "confirmed": [*state.get("confirmed", []), *(p.chunk_id for p in result.confirmed)],
            "seen": [*state.get("seen", []), *(p.chunk_id for p in candidates)],
            "steps": [result.describe(len(candidates))],
            "llm_calls": result.calls,
        }

    def after_evaluate(state: CorrectiveState) -> Literal["refine", "rewrite_query", "cautious_answer", "finish"]:
        wants_more = state["verdict"] != "correct" and state.get("rewrites", 0) < policy.max_rewrites
        if wants_more and budget_stop(state, needed=2) is None:
            telemetry.corrective_loop(f"retrieval_{state['verdict']}")
            return "rewrite_query"
        if state.get("answer") and len(state.get("evidence", [])) == state.get("answered_with", -1):
            # Nothing new was found since the last answer: another round would repeat it. An answer the
            # groundedness check rejected is never returned as it is.
            return "finish" if state.get("grounded") else "cautious_answer"
        return "refine"

    async def rewrite_query(state: CorrectiveState) -> dict[str, Any]:
        tried = [state["query"], *state.get("queries", [])]
        query, call = await llm_rewrite(
            deps.llm, state["query"], state.get("evidence", []), state.get("missing", ""), tried
        )
        if query.strip().lower() in {t.strip().lower() for t in tried}:
            pool = [*state.get("evidence", []), *state.get("candidates", [])]
            query = expanded_query(state["query"], pool) or query
        return {
            "search_query": query,
            # A new round of evidence gets its own first answer and its one regeneration.
            "regenerated": False,
            "unsupported_claims": [],
            "queries": [*state.get("queries", []), query],
            "rewrites": state.get("rewrites", 0) + 1,
            "steps": [f"rewrite_query({state.get('rewrites', 0) + 1}): {query[:120]}"],
            "llm_calls": [call],
        }

    async def search_more(state: CorrectiveState) -> dict[str, Any]:
        """Search with the rewrite and with the question expanded by the best evidence so far.

        The expansion carries the bridge entity of a two-step question (ITER-RETGEN's idea) even
        when a small model's rewrite is poor; both result lists are merged, best first.
        """
        queries = [state["search_query"]]
        # The last round's candidates count too: a bridge document is often judged "not relevant"
        # on its own (it names the entity, not the answer), yet it is what the next hop needs.
        expansion = expanded_query(state["query"], [*state.get("evidence", []), *state.get("candidates", [])])
        if expansion and expansion != queries[0]:
            queries.append(expansion)
        known = {p.chunk_id for p in state.get("evidence", [])} | set(state.get("seen", []))
        found: dict[str, Passage] = {}
        for query in queries:
            # Over-fetch by what is already known, or known chunks would crowd out the new ones.
            for passage in await deps.search.search(state["tenant"], query, state["top_k"] + len(known)):
                if passage.chunk_id not in known and passage.score > found.get(passage.chunk_id, passage).score - 1e-9:
                    found[passage.chunk_id] = passage
        fresh = sorted(found.values(), key=lambda p: -p.score)[: state["top_k"]]
        return {
            "candidates": fresh,
            "steps": [f"search_more({deps.search.name}, queries={len(queries)}, new={len(fresh)})"],
        }

    async def refine(state: CorrectiveState) -> dict[str, Any]:
        evidence = state.get("evidence", [])
        strips = await refine_evidence(
            deps.embedder.embed_texts,
            policy,
            state["query"],
            evidence,
            follow_ups=state.get("queries", []),
            confirmed=set(state.get("confirmed", [])),
        )
        step = f"refine(strips from {len(strips)}/{len(evidence)} passages)"
        return {"strips": strips, "steps": [step]}

    def after_refine(state: CorrectiveState) -> Literal["generate", "cautious_answer"]:
        if not state.get("strips"):
            return "cautious_answer"
        return "generate" if budget_stop(state) is None else "cautious_answer"

    async def generate(state: CorrectiveState) -> dict[str, Any]:
        feedback = regeneration_note(state.get("unsupported_claims", []))
        draft = await draft_answer(
            deps.llm,
            state["query"],
            state.get("strips", []),
            node="generate",
            feedback=feedback,
            max_tokens=policy.grounding.max_tokens,
        )
        return {
            "answer": draft.text,
            "sources": draft.cited,
            "context": state.get("strips", []),
            "abstained": not draft.found,
            "regenerated": bool(feedback),
            "answered_with": len(state.get("evidence", [])),
            "steps": ["regenerate_answer" if feedback else "generate_answer"],
            "llm_calls": [draft.call],
        }

    async def grounded(state: CorrectiveState) -> dict[str, Any]:
        if state.get("abstained"):
            return {"grounded": True, "steps": ["check_grounded: skipped (no answer found)"]}
        critique = await check_grounded(
            deps.llm,
            state["query"],
            state["answer"],
            state.get("strips", []),
            policy.grounding.min_support,
            calls_left(state),
        )
        step = "check_grounded: supported" if critique.ok else f"check_grounded: unsupported {critique.detail[:3]}"
        if not critique.ok:
            telemetry.groundedness_failure()
        if critique.ok and not state.get("best"):
            return {
                "grounded": True,
                "unsupported_claims": [],
                "steps": [step],
                "llm_calls": critique.calls,
                "best": _snapshot(state),
            }
        return {
            "grounded": critique.ok,
            "unsupported_claims": critique.detail,
            "steps": [step],
            "llm_calls": critique.calls,
        }

    def after_grounded(
        state: CorrectiveState,
    ) -> Literal["check_useful", "generate", "rewrite_query", "cautious_answer"]:
        if state.get("grounded"):
            return "check_useful"
        if not state.get("regenerated") and budget_stop(state) is None:
            telemetry.corrective_loop("unsupported_answer")
            return "generate"
        # Twice no supported answer from this evidence: it lacks the answer (typically the second hop of a
        # bridge question whose first hop the grader rightly found relevant), so search for it while rounds
        # remain; the cautious answer is for when they do not.
        # (Reached also when the budget refused the regeneration: then it refuses a new round too.)
        if state.get("rewrites", 0) < policy.max_rewrites and budget_stop(state, needed=3) is None:
            said_nothing = state.get("unsupported_claims") == [CITATIONS_ONLY]
            telemetry.corrective_loop("empty_answer" if said_nothing else "unsupported_answer")
            return "rewrite_query"
        return "cautious_answer"

    async def useful(state: CorrectiveState) -> dict[str, Any]:
        critique = await check_useful(deps.llm, state["query"], state["answer"], calls_left(state))
        missing = critique.detail[0] if critique.detail else ""
        if critique.skipped:
            step = f"check_useful: skipped ({missing})"
            missing = ""
        else:
            step = "check_useful: yes" if critique.ok else f"check_useful: no ({missing})"
        update: dict[str, Any] = {
            "useful": critique.ok,
            "missing": missing,
            "steps": [step],
            "llm_calls": critique.calls,
        }
        if critique.ok:
            update["best"] = _snapshot(state)
        return update

    def after_useful(state: CorrectiveState) -> Literal["rewrite_query", "finish"]:
        if state.get("useful") or state.get("rewrites", 0) >= policy.max_rewrites:
            return "finish"
        # A new round needs a rewrite, a generation and its checks.
        if budget_stop(state, needed=3) is not None:
            return "finish"
        telemetry.corrective_loop("answer_not_useful")
        return "rewrite_query"

    async def cautious(state: CorrectiveState) -> dict[str, Any]:
        best = state.get("best")
        if best:
            # Self-RAG returns the best answer so far: an earlier grounded answer beats a fallback.
            return {**best, "abstained": False, "steps": ["keep_best_answer"]}
        strips = state.get("strips", [])
        return {
            "answer": cautious_answer(state["query"], strips, state.get("unsupported_claims", [])),
            "fallback": True,
            "sources": strips[:3],
            "context": strips,
            "abstained": True,  # a statement of what the documents say, not an answer
            "steps": ["cautious_answer"],
        }

    async def finish(state: CorrectiveState) -> dict[str, Any]:
        reason = _stop_reason(state, policy, budget_stop)
        best = state.get("best")
        if best and not state.get("useful") and best["answer"] != state.get("answer"):
            return {**best, "abstained": False, "stop_reason": reason, "steps": ["keep_best_answer", f"stop: {reason}"]}
        return {"stop_reason": reason, "steps": [f"stop: {reason}"]}

    builder = StateGraph(CorrectiveState)
    for name, node in [
        ("retrieve", retrieve),
        ("evaluate", evaluate),
        ("rewrite_query", rewrite_query),
        ("search_more", search_more),
        ("refine", refine),
        ("generate", generate),
        ("check_grounded", grounded),
        ("check_useful", useful),
        ("cautious_answer", cautious),
        ("finish", finish),
    ]:
        builder.add_node(name, instrument(telemetry, "corrective", name, node))
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "evaluate")
    builder.add_conditional_edges("evaluate", after_evaluate)
    builder.add_edge("rewrite_query", "search_more")
    builder.add_edge("search_more", "evaluate")
    builder.add_conditional_edges("refine", after_refine)
    builder.add_edge("generate", "check_grounded")
    builder.add_conditional_edges("check_grounded", after_grounded)
    builder.add_conditional_edges("check_useful", after_useful)
    builder.add_edge("cautious_answer", "finish")
    builder.add_edge("finish", END)
    return builder.compile(name="corrective")


def _snapshot(state: CorrectiveState) -> dict[str, Any]:
    return {"answer": state["answer"], "sources": state.get("sources", []), "context": state.get("context", [])}


def _stop_reason(
    state: CorrectiveState, policy: CorrectivePolicy, budget_stop: Callable[[CorrectiveState, int], StopReason | None]
) -> StopReason:
    """Why the run ended, judged with the same conditions the routing functions used."""
    if not state.get("evidence"):
        return "no_evidence"
    if state.get("fallback"):
        # after_grounded falls back once a regenerated answer is still unsupported, else on budget.
        if state.get("regenerated") and not state.get("grounded"):
            return "unsupported"
        return budget_stop(state, 1) or "unsupported"
    if state.get("useful"):
        return "answered"
    if state.get("rewrites", 0) >= policy.max_rewrites:
        return "max_rewrites"
    # after_useful starts a new round only with three calls to spare.
    return budget_stop(state, 3) or "answered"
