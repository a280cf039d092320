"""A response's waterfall and its numbered passages: what the console's playground (and any client that asks)
reads to see where a request's time went and what each citation points to.

Times are the gateway's ``time.perf_counter`` readings made relative to the request's arrival; each step owns the
events it added, by index into the response's ``events``, so the typed events stay the one record of what happened.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.query.schemas import Passage, TimedStep
from pipelines.shared.deps import Passage as Retrieved
from routes.table import StepTime


def waterfall(started: float, route: StepTime, steps: Sequence[StepTime]) -> list[TimedStep]:
    """``route``: the router's step (its events come first in a response); ``steps``: the route table's, in order.

    Where the steps' event counts do not add up to the events (a step the table did not time), the steps keep their
    times and lose their event indexes rather than point at the wrong events.
    """
    timed: list[TimedStep] = []
    index = 0
    for step in (route, *steps):
        timed.append(
            TimedStep(
                name=step.name,
                start_ms=round((step.started - started) * 1000, 2),
                ms=round((step.ended - step.started) * 1000, 2),
                events=list(range(index, index + step.events)),
            )
        )
        index += step.events
    return timed


def numbered(context: Sequence[Retrieved]) -> list[Passage]:
    """The passages as the generator saw them: ``[n]`` in the answer is ``n`` here."""
    return [
        Passage(
            n=number,
            chunk_id=p.chunk_id,
            doc_id=p.doc_id,
            title=p.title,
            section=str(p.metadata.get("section", "")),
            score=round(p.score, 4),
            text=p.text,
        )
        for number, p in enumerate(context, start=1)
    ]
