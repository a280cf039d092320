"""Per-tenant knowledge versions: invalidation by moving on, never by finding and deleting.

Every response key embeds its tenant's version, so one atomic increment after a document change
makes every earlier answer unreachable (they expire on their own TTL). The bump must happen after
the store write completes: a query that read the old version may have seen old data and stays
keyed to the old version; a query that reads the new version started after the write.
"""

from __future__ import annotations

import logging

from gateway.cache.backend import CacheBackend, CacheUnavailableError
from gateway.cache.keys import DEFAULT_PREFIX, version_key

logger = logging.getLogger(__name__)


class KnowledgeVersions:
    """``bump`` on every upsert/delete, ``current`` when building a key.

    A bump that cannot reach the backend is not lost: the tenant is remembered as *pending*,
    ``current`` refuses to give it a version (so this process serves it no cached answer) and
    every later call retries the pending bumps first, so invalidation lands as soon as the backend
    answers again. Other replicas cannot know about a bump that never reached Redis; they see it
    once this process retries, and until then they are bounded by the entries' TTLs.
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

        Never raises for a cache failure: the document write it follows has already happened and
        must not be reported as failed because a cache was down.
        """
        key = version_key(self._prefix, tenant)
        try:
            version = await self._backend.incr_version(key)
        except CacheUnavailableError as exc:
            self.errors += 1
            self._pending.add(tenant)
            logger.warning("cache invalidation of tenant %r deferred: %s", tenant, exc.detail)
            return None
        self._pending.discard(tenant)
        return version

    async def current(self, tenant: str) -> int:
        """The version to put in ``tenant``'s keys.

        Raises ``CacheUnavailableError`` when the backend fails or the tenant still has an
        invalidation that could not be applied: the caller must then bypass the cache.
        """
        if self._pending:
            await self._retry_pending()
        if tenant in self._pending:
            raise CacheUnavailableError(f"tenant {tenant!r} has an invalidation the cache has not applied yet")
        return await self._backend.get_version(version_key(self._prefix, tenant))

    async def _retry_pending(self) -> None:
        """One attempt per pending tenant; a failure keeps it pending and blocks only that tenant."""
        for tenant in sorted(self._pending):
            try:
                await self._backend.incr_version(version_key(self._prefix, tenant))
            except CacheUnavailableError:
                self.errors += 1
                continue
            self._pending.discard(tenant)
            logger.info("deferred cache invalidation of tenant %r applied", tenant)
