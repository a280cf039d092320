"""What the cache layers report as they work: a hit, a miss or an error per lookup, and a span per lookup.

A protocol so the caches stay usable on their own (tests, the evaluation scripts) with
:data:`NO_CACHE_EVENTS`; the app passes its :class:`gateway.observability.recorder.Telemetry`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Literal, Protocol

Layer = Literal["exact", "semantic", "embedding"]
Result = Literal["hit", "miss", "error"]


class CacheEvents(Protocol):
    def cache_result(self, layer: str, result: str) -> None: ...

    def cache_lookup(self, layer: str) -> AbstractContextManager[None]: ...


class _NoCacheEvents:
    def cache_result(self, layer: str, result: str) -> None:
        return None

    @contextmanager
    def cache_lookup(self, layer: str) -> Iterator[None]:
        yield None


NO_CACHE_EVENTS: CacheEvents = _NoCacheEvents()
