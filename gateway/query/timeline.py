"""A response's waterfall and its numbered passages: what the console's playground (and any client that asks)
reads to see where a request's time went and what each citation points to.

Times are the gateway's ``time.perf_counter`` readings made relative to the request's arrival; each step owns the
events it added, by index into the response's ``events``, so the typed events stay the one record of what happened.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.query.schemas import Passage, TimedStep
from pipelines.shared import Passage as Retrieved
from routes.table import StepTime


def waterfall(started: float, steps: Sequence[StepTime]) -> list[TimedStep]:
    """``steps`` in the order their events appear in the response: the gateway's (lookup, route), then the route
    table's; ``started``: when the service took the request."""
    timed: list[TimedStep] = []
    index = 0
    for step in steps:
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
