"""The request's deadline, visible to every upstream call made on its behalf.

A retry that sleeps past the time the caller was promised an answer is worse than no retry: the
caller has given up, or a pipeline's budget is blown. The deadline travels in a context variable,
like the token sink, because LLM calls happen deep inside LangGraph nodes (tasks that copy the
context) and no signature between the request and the call should change for it. Nested scopes
only ever shorten it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_deadline: ContextVar[float | None] = ContextVar("gateway_deadline", default=None)


@contextmanager
def within(seconds: float) -> Iterator[float]:
    """Everything inside must be done ``seconds`` from now (or by the enclosing deadline, if sooner)."""
    deadline = time.monotonic() + seconds
    outer = _deadline.get()
    if outer is not None:
        deadline = min(deadline, outer)
    token = _deadline.set(deadline)
    try:
        yield deadline
    finally:
        _deadline.reset(token)


def deadline_after(seconds: float) -> float:
    """The monotonic time a call started now must end by: ``seconds`` from now, or the request's deadline."""
    own = time.monotonic() + seconds
    outer = _deadline.get()
    return own if outer is None else min(own, outer)
