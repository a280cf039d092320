"""The OpenAI-compatible embeddings adapter against a scripted server (httpx's MockTransport): what it sends, how it
batches, and how an upstream's failures become gateway errors that the resilience layer retries and breaks on."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from pydantic import SecretStr

from gateway.errors import (
    CircuitOpenError,
    ProviderError,
    ProviderRateLimitedError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from gateway.providers.embeddings import BatchQueryEmbeddings, build_embeddings, embed_queries, embedding_dimensions
from gateway.providers.openai_embeddings import OpenAICompatibleEmbeddings
from gateway.settings import (
    EmbeddingEndpointSettings,
    EmbeddingSettings,
    LLMEndpointSettings,
    ResolvedEmbeddingEndpoint,
)
from gateway.system.factory import embeddings_check
from gateway.system.service import run_checks

BASE_URL = "http://embedder.test/v1"
# No waits between retries: the policy is the production one, its timing is test_resilience's.
QUICK = {"max_retries": 2, "retry_backoff_s": 0.0, "retry_max_backoff_s": 0.0, "breaker_failures": 3}
Reply = Callable[[httpx.Request], httpx.Response]


def vector_of(text: str, width: int = 4) -> list[float]:
    """A unit vector that names its text, so a test can tell which text a row belongs to."""
    digest = hashlib.sha256(text.encode()).digest()
    raw = np.frombuffer(digest[: 2 * width], dtype=np.uint16).astype(np.float64) + 1.0
    return (raw / np.linalg.norm(raw)).tolist()  # type: ignore[no-any-return]


def answer(request: httpx.Request, *, width: int = 4, scale: float = 1.0, reverse: bool = False) -> httpx.Response:
    """What an OpenAI-compatible server answers: one embedding per input string, with its index."""
    body = json.loads(request.content)
    data = [
        {"object": "embedding", "index": i, "embedding": [scale * x for x in vector_of(text, width)]}
        for i, text in enumerate(body["input"])
    ]
    if reverse:
        data.reverse()
    usage = {"prompt_tokens": 1, "total_tokens": 1}
    return httpx.Response(200, json={"object": "list", "data": data, "model": body["model"], "usage": usage})


class Server:
    """Scripted replies (then ``default``), and every request as received."""

    def __init__(self, *script: Reply, default: Reply = answer) -> None:
        self.script = list(script)
        self.default = default
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.script.pop(0) if self.script else self.default
        return reply(request)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests if r.method == "POST"]

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))


def status(code: int, **headers: str) -> Reply:
    return lambda _: httpx.Response(code, json={"error": {"message": "scripted"}}, headers=headers)


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def endpoint(**fields: Any) -> ResolvedEmbeddingEndpoint:
    return EmbeddingEndpointSettings(base_url=BASE_URL, api_key=SecretStr("k"), **{**QUICK, **fields}).resolved(
        LLMEndpointSettings()
    )


def adapter(server: Server, settings: EmbeddingSettings | None = None, **fields: Any) -> OpenAICompatibleEmbeddings:
    return OpenAICompatibleEmbeddings(
        settings or EmbeddingSettings(provider="openai", model="served-model"),
        endpoint(**fields),
        http_client=server.client(),
        sync_client=server.client,
    )


E5_SERVED = EmbeddingSettings(
    provider="openai",
    model="multilingual-e5-small",
    query_prefix="query: ",
    passage_prefix="passage: ",
    query_input_type="query",
    passage_input_type="passage",
)


async def test_strings_are_sent_as_they_are_with_float_encoding() -> None:
    server = Server()
    embeddings = adapter(server)
    vector = await embeddings.aembed_query("東京の天気は?")
    (body,) = server.bodies
    assert body == {"input": ["東京の天気は?"], "model": "served-model", "encoding_format": "float"}
    assert server.requests[0].url == "http://embedder.test/v1/embeddings"
    assert server.requests[0].headers["authorization"] == "Bearer k"
    assert vector == pytest.approx(vector_of("東京の天気は?"))
    assert embeddings.dimensions == 4  # learnt from the answer


async def test_queries_and_passages_get_their_own_prefix_and_input_type() -> None:
    server = Server()
    embeddings = adapter(server, E5_SERVED)
    query = await embeddings.aembed_query("how tall is it")
    passages = await embeddings.aembed_documents(["The tower is 333 m tall.", "It opened in 1958."])
    first, second = server.bodies
    assert (first["input"], first["input_type"]) == (["query: how tall is it"], "query")
    assert second["input"] == ["passage: The tower is 333 m tall.", "passage: It opened in 1958."]
    assert second["input_type"] == "passage"
    assert query == pytest.approx(vector_of("query: how tall is it"))
    assert passages[1] == pytest.approx(vector_of("passage: It opened in 1958."))


async def test_texts_go_in_batches_and_come_back_in_their_order() -> None:
    server = Server(default=lambda request: answer(request, reverse=True))  # a server may list them in any order
    embeddings = adapter(server, EmbeddingSettings(provider="openai", model="m", batch_size=2))
    texts = [f"text {i}" for i in range(5)]
    vectors = await embeddings.aembed_documents(texts)
    assert [body["input"] for body in server.bodies] == [["text 0", "text 1"], ["text 2", "text 3"], ["text 4"]]
    assert np.allclose(vectors, [vector_of(text) for text in texts])
    assert await embeddings.aembed_documents([]) == []
    assert len(server.bodies) == 3  # nothing to embed: no request


async def test_dimensions_are_sent_only_when_set_and_checked() -> None:
    server = Server(default=lambda request: answer(request, width=8))
    settings = EmbeddingSettings(provider="openai", model="text-embedding-3-small", dimensions=8)
    embeddings = adapter(server, settings)
    assert embedding_dimensions(embeddings) == 8  # known without a probe
    assert len(await embeddings.aembed_query("a")) == 8
    assert server.bodies[0]["dimensions"] == 8

    ignored = Server(default=lambda request: answer(request, width=4))  # a server that ignores the parameter
    with pytest.raises(ProviderError, match="4-d vectors, 8-d expected") as caught:
        await adapter(ignored, settings).aembed_query("a")
    assert caught.value.status_code == 502
    assert len(ignored.requests) == 1  # a wrong configuration is not retried


async def test_vectors_are_returned_unit_length() -> None:
    """The stores and the router score by dot product: a server that does not normalise is normalised here."""
    server = Server(default=lambda request: answer(request, scale=3.0))
    vector = np.asarray(await adapter(server).aembed_query("a"))
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-6)
    assert vector == pytest.approx(vector_of("a"), abs=1e-6)


async def test_server_errors_are_retried_then_answered() -> None:
    server = Server(status(503), status(500))
    vector = await adapter(server).aembed_query("a")
    assert len(server.requests) == 3
    assert vector == pytest.approx(vector_of("a"))


async def test_retries_are_bounded_and_the_last_error_is_the_gateways() -> None:
    server = Server(default=status(500))
    with pytest.raises(ProviderError) as caught:
        await adapter(server, max_retries=1).aembed_query("a")
    assert len(server.requests) == 2
    assert caught.value.provider == "embeddings"
    assert caught.value.extra["upstream_status"] == 500
    assert isinstance(caught.value.__cause__, Exception)  # raised from the SDK's error


async def test_a_rate_limit_is_retried_after_its_retry_after_and_reported_as_such() -> None:
    server = Server(status(429, **{"retry-after": "0"}))
    assert await adapter(server).aembed_query("a") == pytest.approx(vector_of("a"))
    assert len(server.requests) == 2

    limited = Server(default=status(429, **{"retry-after": "30"}))
    with pytest.raises(ProviderRateLimitedError) as caught:
        await adapter(limited, timeout_s=5.0).aembed_query("a")
    assert len(limited.requests) == 1  # 30 s does not fit the 5 s budget: fail fast, with the upstream's wait
    assert caught.value.headers == {"Retry-After": "30"}


async def test_a_client_error_is_not_retried() -> None:
    server = Server(default=status(400))
    with pytest.raises(ProviderError) as caught:
        await adapter(server).aembed_query("a")
    assert len(server.requests) == 1
    assert caught.value.extra["upstream_status"] == 400


async def test_refused_connections_are_unavailable_and_open_the_breaker() -> None:
    server = Server(default=refused)
    embeddings = adapter(server, max_retries=0)
    for _ in range(3):  # QUICK's threshold
        with pytest.raises(ProviderUnavailableError):
            await embeddings.aembed_query("a")
    with pytest.raises(CircuitOpenError):
        await embeddings.aembed_query("a")
    assert len(server.requests) == 3  # the fourth never reached the server
    assert embeddings.breaker_state == "open"
    with pytest.raises(ProviderUnavailableError, match="circuit open"):
        embeddings.check_breaker()


async def test_a_hanging_server_costs_the_budget() -> None:
    async def hang(request: httpx.Request) -> httpx.Response:
        await asyncio.Event().wait()  # never set: only the budget ends this
        raise AssertionError("unreachable")

    client = httpx.AsyncClient(transport=httpx.MockTransport(hang))
    embeddings = OpenAICompatibleEmbeddings(
        EmbeddingSettings(provider="openai", model="m"), endpoint(timeout_s=0.2), http_client=client
    )
    with pytest.raises(ProviderTimeoutError):
        await embeddings.aembed_query("a")


async def test_malformed_answers_are_provider_errors() -> None:
    short = Server(default=lambda _: httpx.Response(200, json={"object": "list", "data": [], "model": "m"}))
    with pytest.raises(ProviderError, match="0 vectors for 1 texts"):
        await adapter(short).aembed_query("a")


def test_the_sync_methods_run_the_same_path_on_a_client_of_their_own() -> None:
    """The router trains in a worker thread with the sync methods: same prefixes, types, batches and retries."""
    server = Server(status(502))
    embeddings = OpenAICompatibleEmbeddings(
        EmbeddingSettings(provider="openai", model="m", batch_size=2, passage_prefix="passage: ", query_prefix="q: "),
        endpoint(),
        sync_client=server.client,
    )
    documents = embeddings.embed_documents(["a", "b", "c"])
    assert embeddings.embed_query("x") == pytest.approx(vector_of("q: x"))
    # The offline fits (router training, calibration) batch their questions through the one protocol.
    assert isinstance(embeddings, BatchQueryEmbeddings)
    assert np.allclose(embed_queries(embeddings, ["x", "y"]), [vector_of("q: x"), vector_of("q: y")])
    assert np.allclose(documents, [vector_of(f"passage: {t}") for t in "abc"])
    assert [body["input"] for body in server.bodies] == [
        ["passage: a", "passage: b"],  # the 502, retried
        ["passage: a", "passage: b"],
        ["passage: c"],
        ["q: x"],
        ["q: x", "q: y"],
    ]


async def test_the_sync_methods_refuse_to_block_an_event_loop() -> None:
    with pytest.raises(RuntimeError, match="aembed_"):
        adapter(Server()).embed_query("a")


async def test_azure_openai_is_called_by_deployment_with_its_api_key_header() -> None:
    server = Server()
    embeddings = adapter(server, api_version="2024-10-21")
    await embeddings.aembed_query("a")
    (request,) = server.requests
    assert request.url.path == "/v1/openai/deployments/served-model/embeddings"
    assert request.url.params["api-version"] == "2024-10-21"
    assert request.headers["api-key"] == "k"
    assert "authorization" not in request.headers


async def test_readiness_pings_the_models_list() -> None:
    server = Server(default=lambda request: httpx.Response(200, json={"object": "list", "data": []}))
    embeddings = adapter(server)
    await embeddings.ping(server.client(), 1.0)
    assert server.requests[-1].url == "http://embedder.test/v1/models"
    down = Server(default=status(503))
    with pytest.raises(ProviderUnavailableError, match="HTTP 503"):
        await adapter(down).ping(down.client(), 1.0)


def test_the_endpoint_defaults_to_the_llms_and_build_embeddings_chooses_the_adapter() -> None:
    llm = LLMEndpointSettings(base_url="http://llm.test/v1", api_key=SecretStr("llm-key"), timeout_s=30, max_retries=4)
    shared = EmbeddingEndpointSettings().resolved(llm)
    assert (shared.base_url, shared.api_key.get_secret_value(), shared.timeout_s, shared.max_retries) == (
        "http://llm.test/v1",
        "llm-key",
        30,
        4,
    )
    own = EmbeddingEndpointSettings(base_url="http://e5.test/v1", api_key=SecretStr("e"), max_retries=0).resolved(llm)
    assert (own.base_url, own.api_key.get_secret_value(), own.timeout_s, own.max_retries) == (
        "http://e5.test/v1",
        "e",
        30,
        0,
    )
    built = build_embeddings(EmbeddingSettings(provider="openai"), own)
    assert isinstance(built, OpenAICompatibleEmbeddings)
    assert built.model == "text-embedding-3-small"  # the provider's default model
    assert built.resilience.policy.max_retries == 0
    with pytest.raises(ValueError, match="needs its endpoint"):
        build_embeddings(EmbeddingSettings(provider="openai"))


def test_the_fingerprint_names_every_field_that_changes_a_vector() -> None:
    base = EmbeddingSettings(provider="openai", model="m")
    assert base.fingerprint() == "openai:m"
    assert EmbeddingSettings().fingerprint() == "use:use-multilingual-v3"
    assert EmbeddingSettings(provider="e5").fingerprint() == "e5:multilingual-e5-small"
    changed = [
        base.model_copy(update=change).fingerprint()
        for change in (
            {"model": "n"},
            {"provider": "use", "model": "use-multilingual-v3"},
            {"dimensions": 256},
            {"query_prefix": "query: "},
            {"passage_prefix": "passage: "},
            {"query_input_type": "query"},
            {"passage_input_type": "passage"},
            {"query_prefix": "q", "passage_prefix": "p"},
            {"query_prefix": "p", "passage_prefix": "q"},  # the same strings, swapped: other vectors
        )
    ]
    assert len({base.fingerprint(), *changed}) == len(changed) + 1
    # What changes no vector leaves it alone (the endpoint's fields are another group: a key or URL never counts).
    for same in ({"threads": 4}, {"batch_size": 8}, {"piece_rows": 0}, {"number_rows": False}):
        assert base.model_copy(update=same).fingerprint() == base.fingerprint()


def test_e5_in_process_refuses_what_would_change_its_vectors_silently() -> None:
    with pytest.raises(ValueError, match="must be 'multilingual-e5-small'"):
        EmbeddingSettings(provider="e5", model="multilingual-e5-base")
    with pytest.raises(ValueError, match="takes no"):
        EmbeddingSettings(provider="e5", query_prefix="query: ")


async def test_readiness_reports_the_embedder_as_a_degradable_upstream() -> None:
    """``ok`` while the server answers its ``/models``; what went wrong when it does not, or while the breaker is
    open (the probe reports it, never raises)."""
    server = Server(default=lambda request: answer(request) if request.method == "POST" else httpx.Response(200))
    embeddings = adapter(server, max_retries=0)
    check = embeddings_check(embeddings, server.client(), 1.0)
    assert await run_checks({"embeddings": check}, 1.0) == {"embeddings": "ok"}

    server.default = status(503)
    for _ in range(3):  # QUICK's threshold of failed calls opens the breaker
        with pytest.raises(ProviderError):
            await embeddings.aembed_query("a")
    outcome = (await run_checks({"embeddings": check}, 1.0))["embeddings"]
    assert outcome.startswith("error: circuit open (probing again in ")

    down = Server(default=refused)
    outcome = (await run_checks({"embeddings": embeddings_check(adapter(down), down.client(), 1.0)}, 1.0))["embeddings"]
    assert outcome.startswith("error: embeddings endpoint http://embedder.test/v1/models unreachable")


async def test_an_unknown_dimension_is_learnt_by_a_probe_off_the_event_loop() -> None:
    """The store's schema needs the width before anything is embedded: the platform probes from a worker thread."""
    server = Server(default=lambda request: answer(request, width=6))
    embeddings = adapter(server)
    assert embeddings.dimensions is None
    assert await asyncio.to_thread(embedding_dimensions, embeddings) == 6
    assert server.bodies == [{"input": ["dimension probe"], "model": "served-model", "encoding_format": "float"}]
