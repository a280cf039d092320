"""What pipelines and the route table report to the outside world: node timings, verdicts, loops.

A protocol here, implemented by :mod:`gateway.observability`, so the request still flows one way
(gateway -> routes -> pipelines) and graphs run without telemetry (unit tests, notebooks) pay
nothing: :data:`NO_TELEMETRY` does no work at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import Field
from typing import Any, ClassVar, Protocol, TypeVar

from langgraph.runtime import Runtime


class NodeScope(Protocol):
    def finish(self, update: Mapping[str, Any]) -> None:
        """The node's state update: the observer keeps bounded facts from it (counts, verdicts), never text."""
        ...


class PipelineTelemetry(Protocol):
    def node(self, pipeline: str, node: str) -> AbstractContextManager[NodeScope]: ...

    def route(self, route: str) -> AbstractContextManager[None]:
        """Everything inside (nodes, LLM calls) is attributed to ``route``."""
        ...

    def verdict(self, pipeline: str, verdict: str) -> None: ...

    def corrective_loop(self, reason: str) -> None: ...

    def groundedness_failure(self) -> None: ...

    def sentence_withheld(self, route: str, reason: str) -> None:
        """A sentence of the final answer the gate did not send (``reason``: a Withhold event's)."""
        ...

    def escalation(self, from_route: str, to_route: str, reason: str) -> None: ...


class _NoScope:
    def finish(self, update: Mapping[str, Any]) -> None:
        return None


_NO_SCOPE = _NoScope()


class NoTelemetry:
    """Observes nothing."""

    @contextmanager
    def node(self, pipeline: str, node: str) -> Iterator[NodeScope]:
        yield _NO_SCOPE

    @contextmanager
    def route(self, route: str) -> Iterator[None]:
        yield None

    def verdict(self, pipeline: str, verdict: str) -> None:
        return None

    def corrective_loop(self, reason: str) -> None:
        return None

    def groundedness_failure(self) -> None:
        return None

    def sentence_withheld(self, route: str, reason: str) -> None:
        return None

    def escalation(self, from_route: str, to_route: str, reason: str) -> None:
        return None


NO_TELEMETRY: PipelineTelemetry = NoTelemetry()


class Observed(Protocol):
    """A graph's runtime context (a dataclass, as LangGraph wants it) holding the telemetry its nodes report to."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def telemetry(self) -> PipelineTelemetry: ...


StateT = TypeVar("StateT", contravariant=True)
ContextT = TypeVar("ContextT", bound=Observed)


class Node(Protocol[StateT, ContextT]):
    """A graph node as LangGraph calls it: the state, and the run's :class:`Runtime` (named ``runtime``)."""

    def __call__(self, state: StateT, runtime: Runtime[ContextT]) -> Awaitable[dict[str, Any]]: ...


def instrument(pipeline: str, name: str, node: Node[StateT, ContextT]) -> Node[StateT, ContextT]:
    """``node`` timed and traced as ``pipeline/name`` by the telemetry of the run's context.

    Applied once per node when a graph is compiled; the telemetry is read per run, from the context.
    The wrapper takes an unannotated ``state`` so LangGraph reads the graph's own state schema, and a
    parameter named ``runtime`` so LangGraph hands it the run's :class:`Runtime`.
    """

    async def observed(state: Any, runtime: Runtime[ContextT]) -> dict[str, Any]:
        telemetry = runtime.context.telemetry
        if telemetry is NO_TELEMETRY:
            return await node(state, runtime)
        with telemetry.node(pipeline, name) as scope:
            update = await node(state, runtime)
            scope.finish(update)
            return update

    observed.__name__ = name
    observed.__qualname__ = f"{pipeline}.{name}"
    return observed
