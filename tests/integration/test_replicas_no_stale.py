"""Two gateway instances sharing the real Redis and one LanceDB directory (two replicas on an RWX claim):
no answer computed before an acknowledged knowledge change is served after it, on either instance,
whether Redis fails before the change, during it, or a slow request finishes after it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings, embedding_dimensions
from gateway.providers.vectorstores.base import ChunkRecord, VectorStore
from gateway.providers.vectorstores.lance import LanceVectorStore
from gateway.settings import Settings
from pipelines.shared.deps import Passage
from pipelines.shared.visibility import Visibility
from tests.fakes.scripted_chat import ScriptedChatModel
from tests.redis_proxy import ThreadedProxy
from tests.scripted import answer_with_first_passage

pytestmark = pytest.mark.redis

REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")
BACKOFF_S = 0.2
QUESTION = {"tenant": "acme", "query": "How many days of annual leave?", "route": "single_hop"}


def leave(days: int) -> dict[str, Any]:
    text = f"Acme employees get {days} days of annual leave."
    return {"tenant": "acme", "documents": [{"id": "leave", "title": "Leave", "text": text}]}


class HookedStore(VectorStore):
    """A real LanceDB store with two test hooks: run something just before a write reaches the store,
    and hold a search after it has read the store (a slow request that read the old documents)."""

    name = "lancedb"

    def __init__(self, inner: LanceVectorStore) -> None:
        self._inner = inner
        self.before_write: Callable[[], None] | None = None
        self.after_search: Callable[[], Awaitable[None]] | None = None

    async def replace_document(self, tenant: str, doc_id: str, chunks: Sequence[ChunkRecord]) -> None:
        if self.before_write is not None:
            self.before_write()
        await self._inner.replace_document(tenant, doc_id, chunks)

    async def delete_document(self, tenant: str, doc_id: str) -> bool:
        if self.before_write is not None:
            self.before_write()
        return await self._inner.delete_document(tenant, doc_id)

    async def search(self, tenant: str, vector: Sequence[float], k: int, *, visibility: Visibility) -> list[Passage]:
        found = await self._inner.search(tenant, vector, k, visibility=visibility)
        if self.after_search is not None:
            await self.after_search()
        return found

    async def ping(self) -> None:
        await self._inner.ping()

    async def close(self) -> None:
        await self._inner.close()


@pytest.fixture
def replica_settings(settings: Settings, proxy: ThreadedProxy) -> Settings:
    """Both replicas: one Redis (through the cuttable proxy), one cache prefix, one LanceDB directory.

    Dense retrieval, so a request reads the store once (the router's probe serves retrieval): the race test
    holds that one read while the other replica changes the documents."""
    return settings.replace(
        redis={"url": proxy.url_for(REDIS_TEST_URL), "backoff_s": BACKOFF_S, "timeout_s": 0.5},
        cache={"prefix": f"test-{uuid.uuid4().hex[:8]}"},
        retrieval={"hybrid_search": False},
    )


Replica = tuple[AsyncTestClient[Any], HookedStore]


@pytest.fixture
async def replicas(replica_settings: Settings, embeddings: USEEmbeddings) -> AsyncIterator[tuple[Replica, Replica]]:
    """Two apps, each with its own Redis client, cache objects and LanceDB connection, as two pods would."""
    async with contextlib.AsyncExitStack() as stack:
        started: list[Replica] = []
        for _ in range(2):
            inner = await LanceVectorStore.open(replica_settings.vector_store.path, embedding_dimensions(embeddings))
            store = HookedStore(inner)
            model = ScriptedChatModel(responder=answer_with_first_passage)
            app = create_app(
                replica_settings, ProviderOverrides(chat_model=model, embeddings=embeddings, vector_store=store)
            )
            client = await stack.enter_async_context(AsyncTestClient(app))
            started.append((client, store))
        yield started[0], started[1]


async def ask(client: AsyncTestClient[Any]) -> dict[str, Any]:
    response = await client.post("/v1/query", json=QUESTION)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def seed_and_warm(a: AsyncTestClient[Any], b: AsyncTestClient[Any]) -> None:
    """25 days of leave, upserted through A; both replicas have the answer cached (B is served what A computed)."""
    assert (await a.post("/v1/documents", json=leave(25))).status_code == 200
    first, second = await ask(a), await ask(b)
    assert "25 days" in first["answer"]
    assert (first["cached"], second["cached"], second["answer"]) == (False, True, first["answer"])


@contextlib.contextmanager
def redis_dies_at_the_write(store: HookedStore, proxy: ThreadedProxy) -> Iterator[None]:
    store.before_write = proxy.stop
    try:
        yield
    finally:
        store.before_write = None


async def reconnect(*clients: AsyncTestClient[Any]) -> None:
    """Past the backoff, and every replica's pooled connection to the old Redis retired by a probe, so the
    next query reads Redis instead of bypassing it (a bypass would answer fresh and prove nothing)."""
    await asyncio.sleep(BACKOFF_S + 0.1)
    for client in clients:
        for _ in range(5):
            if (await client.get("/readyz")).json()["status"] == "ready":
                break
            await asyncio.sleep(BACKOFF_S + 0.1)


async def test_a_change_while_redis_is_down_is_refused_and_its_retry_reaches_every_replica(
    replicas: tuple[Replica, Replica], proxy: ThreadedProxy
) -> None:
    (a, _), (b, _) = replicas
    await seed_and_warm(a, b)

    proxy.stop()  # Redis is gone before the change
    change = await a.post("/v1/documents", json=leave(30))
    during = [await ask(a), await ask(b)]
    proxy.start()
    await reconnect(a, b)
    next_answers = [await ask(b), await ask(a)]  # B first: it never saw the change
    retried = await a.post("/v1/documents", json=leave(30))
    after = [await ask(b), await ask(a)]

    served_stale = [body["answer"] for body in next_answers if "25 days" in body["answer"]]
    assert change.status_code != 200 or not served_stale, f"acknowledged, then served from before it: {served_stale}"
    assert change.status_code == 503
    assert change.headers["retry-after"] == "5"
    assert change.json()["title"] == "Knowledge change not acknowledged"
    assert all("25 days" in body["answer"] and not body["cached"] for body in during)  # nothing was written
    assert all("25 days" in body["answer"] for body in next_answers)  # still the truth: nothing changed
    assert next_answers[0]["cached"] is True
    assert retried.status_code == 200
    assert all("30 days" in body["answer"] for body in after)
    assert (after[0]["cached"], after[1]["cached"]) == (False, True)  # B recomputed; A is served B's new answer


async def test_redis_failing_during_a_change_never_acknowledges_it_and_no_replica_serves_the_old_answer_after(
    replicas: tuple[Replica, Replica], proxy: ThreadedProxy
) -> None:
    (a, store_a), (b, _) = replicas
    await seed_and_warm(a, b)

    with redis_dies_at_the_write(store_a, proxy):  # after the first bump, before the write lands
        refused = await a.post("/v1/documents", json=leave(30))
    during = await ask(b)  # the write did land: a replica answering uncached already sees it
    proxy.start()
    await reconnect(a, b)
    retried = await a.post("/v1/documents", json=leave(30))  # the client retries the unacknowledged change
    after = [await ask(b), await ask(a)]

    assert refused.status_code == 503
    assert "not acknowledged" in refused.json()["detail"]
    assert ("30 days" in during["answer"], during["cached"]) == (True, False)
    assert retried.status_code == 200
    assert all("30 days" in body["answer"] for body in after)
    assert after[0]["cached"] is False


async def test_the_replica_that_saw_the_failure_applies_the_bump_itself_when_redis_returns(
    replicas: tuple[Replica, Replica], proxy: ThreadedProxy
) -> None:
    """Even if the client never retries, the pending bump lands on the next request of the replica that saw it."""
    (a, store_a), (b, _) = replicas
    await seed_and_warm(a, b)

    with redis_dies_at_the_write(store_a, proxy):
        assert (await a.post("/v1/documents", json=leave(30))).status_code == 503
    proxy.start()
    await reconnect(a, b)
    on_a = await ask(a)  # retries the pending bump before reading its version
    on_b = await ask(b)

    assert ("30 days" in on_a["answer"], on_a["cached"]) == (True, False)
    assert ("30 days" in on_b["answer"], on_b["cached"]) == (True, True)


async def test_a_delete_while_redis_is_down_is_refused_and_its_retry_reaches_every_replica(
    replicas: tuple[Replica, Replica], proxy: ThreadedProxy
) -> None:
    (a, store_a), (b, _) = replicas
    await seed_and_warm(a, b)

    with redis_dies_at_the_write(store_a, proxy):  # the delete lands, its bump does not
        refused = await a.delete("/v1/documents/leave", params={"tenant": "acme"})
    proxy.start()
    await reconnect(a, b)
    retried = await b.delete("/v1/documents/leave", params={"tenant": "acme"})
    after = await ask(b)

    assert refused.status_code == 503
    assert retried.status_code == 404  # the first attempt deleted it; the retry still invalidated
    assert "25 days" not in after["answer"]
    assert after["cached"] is False


async def test_a_slow_answer_computed_before_a_change_is_never_served_after_it(
    replicas: tuple[Replica, Replica],
) -> None:
    """The write-after-bump race: A reads version v and the old documents, B changes them and bumps,
    then A finishes and stores its answer; that answer sits under v, which no one reads any more.

    The test client serves each app on its own thread and blocks its caller until the response, so the
    slow request runs on a thread of its own and the store holds it with thread events."""
    (a, store_a), (b, _) = replicas
    assert (await b.post("/v1/documents", json=leave(25))).status_code == 200
    searched, release = threading.Event(), threading.Event()

    async def hold() -> None:
        searched.set()
        await asyncio.to_thread(release.wait, 30)

    store_a.after_search = hold
    slow: list[dict[str, Any]] = []
    request = threading.Thread(target=lambda: slow.append(asyncio.run(ask(a))))
    request.start()
    assert await asyncio.to_thread(searched.wait, 30)
    store_a.after_search = None
    changed = await b.post("/v1/documents", json=leave(30))
    release.set()
    await asyncio.to_thread(request.join, 30)
    after = [await ask(a), await ask(b)]

    assert changed.status_code == 200
    assert "25 days" in slow[0]["answer"]  # in flight during the change: it answers from what it read
    assert all("30 days" in body["answer"] for body in after)
    assert after[0]["cached"] is False  # computed anew, not the slow answer stored after the change


async def test_a_change_right_after_redis_returns_is_acknowledged(
    replicas: tuple[Replica, Replica], proxy: ThreadedProxy
) -> None:
    """Inside the shared client's fail-fast window, and over a pooled connection that died with the old Redis,
    the bump that acknowledges a change still reaches the Redis that is back: no needless 503."""
    (a, _), (b, _) = replicas
    await seed_and_warm(a, b)
    proxy.stop()
    await ask(a)  # fails over the cut connection: the client backs off
    proxy.start()
    changed = await a.post("/v1/documents", json=leave(30))  # at once: inside the backoff
    await reconnect(b)
    after = await ask(b)

    assert changed.status_code == 200
    assert ("30 days" in after["answer"], after["cached"]) == (True, False)
