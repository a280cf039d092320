"""The route table: what each route runs, and the policies between routes.

``direct`` runs the direct node; ``single_hop`` runs plain RAG and, when its LLM-free retrieval
check says *Incorrect*, escalates to the corrective graph instead of answering "I don't know";
``multi_hop`` runs the corrective graph. The route reported is the one that answered.

The graphs are compiled once, here, when the table is built at start-up; each run is handed its
graph's runtime context (clients, policies, telemetry), also built once, at invoke time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphRecursionError
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StreamMode, StreamWriter

from pipelines.corrective import CorrectiveContext, CorrectiveState
from pipelines.corrective import build_graph as build_corrective
from pipelines.direct import DirectContext
from pipelines.direct import run as run_direct
from pipelines.shared import (
    DEFAULT_ASSISTANT,
    NO_TELEMETRY,
    Assistant,
    ChatClient,
    Escalate,
    LLMCall,
    Passage,
    PipelineEvent,
    PipelineState,
    PipelineTelemetry,
    Stop,
    StopReason,
    Visibility,
    Withhold,
)
from pipelines.single_hop import SingleHopContext, SingleHopState
from pipelines.single_hop import build_graph as build_single_hop
from routes.probe import Probe, ProbeFirstRetriever
from routes.types import Route

RECURSION_LIMIT_ANSWER = "The corrective pipeline hit its step limit before finishing; please rephrase the question."


@dataclass(frozen=True, slots=True)
class RoutePolicy:
    default_top_k: int
    max_top_k: int
    multi_hop_top_k: int
    escalate_on_incorrect: bool = True
    recursion_limit: int = 40


@dataclass(frozen=True, slots=True)
class PipelineContexts:
    """Each graph's runtime context: what its nodes run on."""

    direct: DirectContext
    single_hop: SingleHopContext
    corrective: CorrectiveContext


@dataclass(frozen=True, slots=True)
class RunProfile:
    """Who answers one request, and on which model: the tenant's assistant profile, resolved by the gateway.

    ``llms`` maps a route to the chat client of the model the profile names for it; a route it leaves out
    runs on the context's own client (the gateway's default model). The whole route uses that client, its
    graders and critics included: a route's model is what the route costs.
    """

    assistant: Assistant = DEFAULT_ASSISTANT
    llms: Mapping[Route, ChatClient] = field(default_factory=dict)


DEFAULT_RUN = RunProfile()


@dataclass(frozen=True, slots=True)
class StepTime:
    """When one step of a run started and ended (``time.perf_counter`` seconds), and how many of the run's events
    it added: a graph node's task, as LangGraph's ``tasks`` stream reports it, or the table's own step between
    graphs. The events of a run are the steps' events in this order, so a step's events are the next ``events``."""

    name: str
    started: float
    ended: float
    events: int


@dataclass(slots=True)
class RouteResult:
    route: Route
    answer: str
    sources: list[Passage]
    abstained: bool
    events: list[PipelineEvent] = field(default_factory=list)
    llm_calls: list[LLMCall] = field(default_factory=list)
    context: list[Passage] = field(default_factory=list)
    stop_reason: StopReason | None = None
    escalated_from: Route | None = None
    steps: list[StepTime] = field(default_factory=list)


class RouteTable:
    def __init__(
        self,
        contexts: PipelineContexts,
        policy: RoutePolicy,
        telemetry: PipelineTelemetry = NO_TELEMETRY,
        corrective_scope: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> None:
        """``corrective_scope`` is entered around every corrective run, asked for or escalated to: the gateway
        makes the pipeline's time budget a deadline there, which every LLM call (and retry) inside respects."""
        self._contexts = contexts
        self._corrective_scope = corrective_scope
        self._single_hop = build_single_hop()
        self._corrective = build_corrective()
        self._policy = policy
        self._telemetry = telemetry

    def _k(self, requested: int | None, floor: int) -> int:
        return min(max(requested or floor, 1), self._policy.max_top_k)

    async def run(
        self,
        route: Route,
        *,
        query: str,
        tenant: str,
        top_k: int | None,
        query_vector: list[float] | None,
        visibility: Visibility,
        allow_escalation: bool = True,
        probe: Probe | None = None,
        profile: RunProfile = DEFAULT_RUN,
        writer: StreamWriter | None = None,
    ) -> RouteResult:
        """``visibility``: the reader's, carried in each graph's state so that every retrieval of the run (the
        first, each hop's, search-more's) searches only what they may see. ``probe`` is the router's search of the
        tenant's store: the first retrieval of single_hop and of the corrective pipeline is served from it (when it
        was the same reader's), so a request searches the store once for both. ``profile``: the
        tenant's assistant and models, set on each graph's context for this run. ``writer``: a streamed request's
        sink for the answer's text as each graph clears it (:class:`~pipelines.shared.events.AnswerText`), taken
        from LangGraph's ``custom`` stream."""
        result = await self._run(
            route,
            query=query,
            tenant=tenant,
            top_k=top_k,
            query_vector=query_vector,
            visibility=visibility,
            allow_escalation=allow_escalation,
            probe=probe,
            profile=profile,
            writer=writer,
        )
        for event in result.events:
            if isinstance(event, Withhold):
                self._telemetry.sentence_withheld(result.route, event.reason)
        return result

    async def _run(
        self,
        route: Route,
        *,
        query: str,
        tenant: str,
        top_k: int | None,
        query_vector: list[float] | None,
        visibility: Visibility,
        allow_escalation: bool = True,
        probe: Probe | None = None,
        profile: RunProfile = DEFAULT_RUN,
        writer: StreamWriter | None = None,
    ) -> RouteResult:
        live = writer is not None
        if route == "direct":
            direct = self._contexts.direct
            llm = profile.llms.get("direct", direct.llm)
            direct = replace(direct, llm=llm, assistant=profile.assistant, live=live)
            with self._telemetry.route("direct"):
                # One node, no branch: run without LangGraph's loop, which would add ~1.3 ms of CPU to a ~9 ms miss
                # (routes/README.md says how that was measured).
                started = time.perf_counter()
                state = await run_direct(query, tenant, direct, writer)
            return _result(route, state, [StepTime("direct", started, time.perf_counter(), len(state.events))])
        multi_hop_k = self._k(top_k, self._policy.multi_hop_top_k)
        if route == "multi_hop":
            return await self._run_corrective(
                query, tenant, multi_hop_k, query_vector, visibility, probe, profile, writer
            )
        with self._telemetry.route("single_hop"):
            initial = {
                "query": query,
                "tenant": tenant,
                "top_k": self._k(top_k, self._policy.default_top_k),
                "query_vector": query_vector,
                "visibility": visibility,
                "allow_escalation": allow_escalation and self._policy.escalate_on_incorrect,
            }
            single_hop = self._contexts.single_hop
            llm = profile.llms.get("single_hop", single_hop.llm)
            single_hop = replace(single_hop, llm=llm, assistant=profile.assistant, live=live)
            if probe is not None:
                single_hop = replace(single_hop, retriever=ProbeFirstRetriever(single_hop.retriever, probe))
            final, steps = await _run_graph(self._single_hop, initial, single_hop, None, writer)
            plain_state = SingleHopState(**final)
        plain = _result("single_hop", plain_state, steps)
        if not plain_state.escalate:
            return plain
        self._telemetry.escalation("single_hop", "multi_hop", "retrieval_incorrect")
        escalated_at = time.perf_counter()
        corrective = await self._run_corrective(
            query, tenant, multi_hop_k, query_vector, visibility, probe, profile, writer
        )
        escalate = Escalate(from_route="single_hop", to_route="multi_hop", reason="retrieval_incorrect")
        corrective.events = [*plain.events, escalate, *corrective.events]
        corrective.steps = [*plain.steps, StepTime("escalate", escalated_at, escalated_at, 1), *corrective.steps]
        corrective.llm_calls = [*plain.llm_calls, *corrective.llm_calls]
        corrective.escalated_from = "single_hop"
        return corrective

    async def _run_corrective(
        self,
        query: str,
        tenant: str,
        top_k: int,
        query_vector: list[float] | None,
        visibility: Visibility,
        probe: Probe | None,
        profile: RunProfile,
        writer: StreamWriter | None,
    ) -> RouteResult:
        context = self._contexts.corrective
        llm = profile.llms.get("multi_hop", context.llm)
        context = replace(context, llm=llm, assistant=profile.assistant, live=writer is not None)
        if probe is not None:
            context = replace(context, retriever=ProbeFirstRetriever(context.retriever, probe))
        initial = {
            "query": query,
            "tenant": tenant,
            "top_k": top_k,
            "query_vector": query_vector,
            "visibility": visibility,
            "started_at": context.clock(),
        }
        config = RunnableConfig(recursion_limit=self._policy.recursion_limit)
        started = time.perf_counter()
        try:
            with self._telemetry.route("multi_hop"), self._corrective_scope():
                final, steps = await _run_graph(self._corrective, initial, context, config, writer)
                state = CorrectiveState(**final)
        except GraphRecursionError:
            # Budgets end every loop first; reaching this means a routing bug, so say so plainly.
            return RouteResult(
                route="multi_hop",
                answer=RECURSION_LIMIT_ANSWER,
                sources=[],
                abstained=True,
                events=[Stop(reason="recursion_limit")],
                stop_reason="recursion_limit",
                steps=[StepTime("stop", started, time.perf_counter(), 1)],
            )
        return _result("multi_hop", state, steps, stop_reason=state.stop_reason)


async def _run_graph(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    initial: dict[str, Any],
    context: object,
    config: RunnableConfig | None,
    writer: StreamWriter | None,
) -> tuple[dict[str, Any], list[StepTime]]:
    """The graph's final state and when each of its nodes ran; with ``writer``, what its nodes write (``custom``)
    handed on as it comes.

    LangGraph's ``tasks`` stream says when a node's task starts (its input) and ends (its writes): the waterfall of
    a run is read from it as it happens, the nodes left as they are.
    """
    modes: list[StreamMode] = ["tasks", "values", "custom"] if writer is not None else ["tasks", "values"]
    state: dict[str, Any] = {}
    started: dict[str, float] = {}
    steps: list[StepTime] = []
    async for mode, chunk in graph.astream(initial, context=context, config=config, stream_mode=modes):
        if mode == "custom" and writer is not None:
            writer(chunk)
        elif mode == "values" and isinstance(chunk, dict):
            state = chunk
        elif mode == "tasks" and isinstance(chunk, dict):
            if "input" in chunk:
                started[chunk["id"]] = time.perf_counter()
            elif chunk.get("id") in started:
                added = (chunk.get("result") or {}).get("events")
                steps.append(
                    StepTime(
                        chunk["name"],
                        started.pop(chunk["id"]),
                        time.perf_counter(),
                        len(added) if isinstance(added, list) else 0,
                    )
                )
    return state, steps


def _result(
    route: Route, state: PipelineState, steps: list[StepTime], stop_reason: StopReason | None = None
) -> RouteResult:
    return RouteResult(
        route=route,
        answer=state.answer,
        sources=state.sources,
        abstained=state.abstained,
        events=state.events,
        llm_calls=state.llm_calls,
        context=state.context,
        stop_reason=stop_reason,
        steps=steps,
    )
