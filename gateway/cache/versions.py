"""Per-tenant knowledge versions: invalidation by moving on, never by finding and deleting.

Every response key embeds its tenant's version, so one atomic increment after a document change
makes every earlier answer unreachable (they expire on their own TTL).

The guarantee: no answer computed before an *acknowledged* knowledge change is served after it, on
any replica. Three rules give it:

* **The version is read before the answer is computed** (the response cache's lookup, and the semantic
  cache's ``version`` in ``QueryService``): a computation that started under version v, read the
  store before a change and finishes after the change's bump to v+1 stores under v, a key nobody
  reads any more. Storing it is harmless; no check-after-compute is needed.
* **A change is acknowledged only once its bump is recorded in the shared backend**
  (:meth:`KnowledgeVersions.acknowledge`). Redis being down when a document is written must not end
  in a 200: another replica, once Redis is back, would still read the old version and serve the
  answers cached under it until their TTL. So ``KnowledgeBase`` bumps once *before* touching the
  store (Redis down: 503, nothing changed) and once *after* (Redis died in between: 503, the change
  is not acknowledged, and the client's retry, an idempotent upsert or delete, bumps again). The
  503 carries ``Retry-After``. These bumps insist (``incr_version(insist=True)``): past the shared
  client's fail-fast window and once more on a fresh connection, so a change is refused only when
  Redis really is unreachable, not because a pooled connection died with a Redis that is back.
  Until the retry, the one process that saw the failure keeps the tenant *pending*: it serves that
  tenant nothing from the cache and re-applies the bump on every request until it lands, so the
  unacknowledged change still takes effect as soon as Redis answers.
* **A lost version key restarts above every version used before** (see ``CacheBackend``): a Redis
  restarted empty never brings an old key back to life. A Redis restored from a *snapshot older than
  the last bump* would (its old version and the answers keyed by it come back together), which is
  why the cache's Redis runs without persistence (the chart's default) or with ``appendfsync always``.

Rejected alternatives: a version stored with the documents in the vector store would survive any
Redis loss, but costs a vector-store round trip per query (Pinecone: a network call) to protect a
cache; tombstones per changed document do not cover answers whose retrieval the change would alter
without citing the changed document. Refusing to acknowledge costs only a retried write during a
Redis outage, which is rare and already a degraded state.

Without Redis (the in-process LRU) versions are per process: a change through one process never
reaches another's cache, so that mode is for one replica, one process; the Helm chart refuses to
render several replicas with a cache and no Redis.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from gateway.cache.backend import CacheBackend, CacheUnavailableError
from gateway.cache.keys import DEFAULT_PREFIX, version_key
from gateway.errors import ProviderUnavailableError

logger = logging.getLogger(__name__)

RETRY_AFTER_S = 5

# The versions one request has read (``KnowledgeVersions.snapshot``): a context variable because the readers (the
# exact cache's key, the semantic cache, the router's in-memory probe) sit at different depths of one request and
# the tasks the request starts (its single-flight computation) inherit it; None outside a request.
_REQUEST_VERSIONS: ContextVar[dict[str, int] | None] = ContextVar("request_knowledge_versions", default=None)


class ChangeNotAcknowledgedError(ProviderUnavailableError):
    """A knowledge change whose invalidation could not be recorded: 503, retry the same request.

    Either nothing was written (the bump before the write failed) or the write happened and its
    bump did not; both are safe to retry because upserts replace by id and deletes are idempotent.
    """

    title = "Knowledge change not acknowledged"

    def __init__(self, tenant: str, reason: str) -> None:
        super().__init__(
            f"The change to tenant {tenant!r} was not acknowledged: its cache invalidation could not be recorded "
            f"({reason}). Cached answers on other replicas could still reflect the old documents, so retry the same "
            "request; it is idempotent.",
            provider="cache",
            retry_after_s=RETRY_AFTER_S,
        )
        self.headers = {"Retry-After": str(RETRY_AFTER_S)}


class KnowledgeVersions:
    """``acknowledge`` around every upsert/delete; ``current`` (or ``known``, ``key`` and ``read`` for a lookup that
    reads the version itself) when building a key.

    A bump that cannot reach the backend is not lost: the tenant is remembered as *pending*,
    ``current`` refuses to give it a version (so this process serves it no cached answer) and
    every later call retries the pending bumps first, so invalidation lands as soon as the backend
    answers again. Other replicas cannot know about a bump that never reached Redis, which is why
    such a change is never acknowledged (``acknowledge`` raises).
    """

    def __init__(self, backend: CacheBackend, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._backend = backend
        self._prefix = prefix
        self._pending: set[str] = set()
        self.errors = 0

    @property
    def pending(self) -> frozenset[str]:
        """Tenants whose invalidation has not reached the backend yet."""
        return frozenset(self._pending)

    async def bump(self, tenant: str) -> int | None:
        """Invalidate every cached answer of ``tenant``; None when the backend was unavailable.

        Best effort, never raises: for a write that already failed (its error is what the client
        must see) and for callers that have nothing to acknowledge.
        """
        try:
            return await self._bump(tenant)
        except CacheUnavailableError as exc:
            logger.warning("cache invalidation of tenant %r deferred: %s", tenant, exc.detail)
            return None

    async def acknowledge(self, tenant: str) -> int:
        """Invalidate ``tenant``'s cached answers, or raise ``ChangeNotAcknowledgedError`` (503).

        A failure leaves the tenant pending, exactly like ``bump``: the change, if it was written,
        still invalidates as soon as the backend answers, whether or not the client retries.
        """
        try:
            return await self._bump(tenant, insist=True)
        except CacheUnavailableError as exc:
            logger.warning("knowledge change of tenant %r not acknowledged: %s", tenant, exc.detail)
            raise ChangeNotAcknowledgedError(tenant, exc.detail) from exc

    async def _bump(self, tenant: str, *, insist: bool = False) -> int:
        seen = _REQUEST_VERSIONS.get()
        if seen is not None:
            seen.pop(tenant, None)  # this scope changed the tenant: its next read is the new version
        try:
            version = await self._backend.incr_version(self.key(tenant), insist=insist)
        except CacheUnavailableError:
            self.errors += 1
            self._pending.add(tenant)
            raise
        self._pending.discard(tenant)
        return version

    @staticmethod
    @contextmanager
    def snapshot() -> Iterator[None]:
        """Within it, each tenant's version is read from the backend once and reused (one request's scope).

        A request read its tenant's version for the response cache's key and again for the router's in-memory
        probe (``gateway.knowledge.matrices``) and the semantic cache: a Redis round trip each. The first read is the
        one the guarantee above needs (before the answer is computed); the later ones now reuse it, so the key,
        the probe and the semantic lookup agree on one version. A change acknowledged in between is seen by the
        next request, as it would be if it had landed a moment later; what this request computes is stored under
        the old version's key, which nobody reads any more.
        """
        token = _REQUEST_VERSIONS.set({})
        try:
            yield
        finally:
            _REQUEST_VERSIONS.reset(token)

    async def current(self, tenant: str) -> int:
        """The version to put in ``tenant``'s keys (inside a :meth:`snapshot`, the one it read first).

        Raises ``CacheUnavailableError`` when the backend fails or the tenant still has an
        invalidation that could not be applied: the caller must then bypass the cache.
        """
        known = await self.known(tenant)
        if known is not None:
            return known
        version = await self._backend.get_version(self.key(tenant))
        self.read(tenant, version)
        return version

    async def known(self, tenant: str) -> int | None:
        """The version this request has read already (None: not yet), for a reader that reads it along with something
        else (the response cache's lookup: ``CacheBackend.lookup_versioned`` of :meth:`key`, then :meth:`read`).

        Raises ``CacheUnavailableError``, as ``current`` does, while the tenant has an invalidation not applied yet.
        """
        seen = _REQUEST_VERSIONS.get()
        if seen is not None and tenant in seen:
            return seen[tenant]
        if self._pending:
            await self._retry_pending()
        if tenant in self._pending:
            raise CacheUnavailableError(f"tenant {tenant!r} has an invalidation the cache has not applied yet")
        return None

    def key(self, tenant: str) -> str:
        """Where ``tenant``'s version lives in the backend."""
        return version_key(self._prefix, tenant)

    def read(self, tenant: str, version: int) -> None:
        """``version`` was read from the backend for this request: the request's later readers reuse it."""
        seen = _REQUEST_VERSIONS.get()
        if seen is not None:
            seen[tenant] = version

    async def _retry_pending(self) -> None:
        """One attempt per pending tenant; a failure keeps it pending and blocks only that tenant."""
        for tenant in sorted(self._pending):
            try:
                await self._bump(tenant)
            except CacheUnavailableError:
                continue
            logger.info("deferred cache invalidation of tenant %r applied", tenant)
