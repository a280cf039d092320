"""Who is asking, through the real app (``create_app``, Litestar's test client): end users' tokens verified against
a JWKS served on loopback, trusted headers, and what the handlers and services are handed. Every refusal is checked
to carry no answer and to have reached no model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.access.identity import GROUPS_HEADER, TOKEN_HEADER, USER_HEADER, Reader
from gateway.access.keys import hash_key
from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import ApiKeyConfig, Settings
from pipelines.shared.visibility import Visibility
from tests.chat_support import bearer, chat_model, openai_client
from tests.fakes.identity_provider import (
    AUDIENCE,
    ISSUER,
    JwksServer,
    SigningKey,
    hmac_with_public_key,
    jwks_server,
    rsa_key,
    token,
    unsigned_token,
)
from tests.fakes.scripted_chat import ScriptedChatModel

CHATBOT_KEY = "rgw-acme-chatbot-for-users"  # acts for users: tokens
INGRESS_KEY = "rgw-acme-behind-ingress"  # acts for users and trusts the user headers
PLAIN_KEY = "rgw-acme-plain"  # acts for nobody
PROBLEM = "application/problem+json"
ASK = {"query": "How many days of annual leave do employees get?", "route": "direct"}
CHAT = {"model": "gateway-direct", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def first() -> SigningKey:
    return rsa_key("idp-key-1")


@pytest.fixture(scope="module")
def second() -> SigningKey:
    return rsa_key("idp-key-2")


@pytest.fixture
def idp(first: SigningKey) -> Iterator[JwksServer]:
    with jwks_server(first) as server:
        yield server


@dataclass
class Gateway:
    client: AsyncTestClient[Litestar]
    model: ScriptedChatModel
    # What QueryService.answer was handed, and the request span's attributes when it was.
    answered: list[tuple[Reader | None, dict[str, Any]]] = field(default_factory=list)

    def readers(self) -> list[Reader | None]:
        return [reader for reader, _ in self.answered]


def identity_settings(settings: Settings, idp: JwksServer) -> Settings:
    def key(name: str, secret: str, **marks: bool) -> ApiKeyConfig:
        return ApiKeyConfig(name=name, key_sha256=hash_key(secret), tenant="acme", scopes=["query"], **marks)

    keys = [
        key("acme-chatbot", CHATBOT_KEY, acts_for_users=True),
        key("acme-ingress", INGRESS_KEY, acts_for_users=True, trusts_user_headers=True),
        key("acme-plain", PLAIN_KEY),
    ]
    return settings.replace(
        access={"api_keys": keys},
        # No pause between fetches: rotation is seen at once here; the pause itself is tests/unit/test_identity.py's.
        identity={"issuer": ISSUER, "audience": AUDIENCE, "jwks_url": idp.url, "jwks_min_refetch_s": 0.0},
    )


@pytest.fixture
async def gateway(settings: Settings, embeddings: USEEmbeddings, idp: JwksServer) -> AsyncIterator[Gateway]:
    model = ScriptedChatModel(responder=chat_model())
    overrides = ProviderOverrides(chat_model=model, embeddings=embeddings, span_exporter=InMemorySpanExporter())
    app = create_app(identity_settings(settings, idp), overrides)
    async with AsyncTestClient(app) as client:
        gateway = Gateway(client, model)
        service = app.state.query_service
        answer = service.answer

        async def answer_and_note(*args: Any, **kwargs: Any) -> Any:
            """The real answer; noted first: the reader handed in and the request's span as it stands then."""
            span = trace.get_current_span()
            gateway.answered.append((kwargs.get("reader"), dict(getattr(span, "attributes", None) or {})))
            return await answer(*args, **kwargs)

        service.answer = answer_and_note  # the chat service answers through the same object
        yield gateway


def user_token(value: str) -> dict[str, str]:
    return {TOKEN_HEADER: value}


def assert_refused(response: Any, status: int, code: str, gateway: Gateway, *, openai_shape: bool = False) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert "answer" not in body
    assert "choices" not in body
    if openai_shape:
        assert body["error"]["code"] == code
    else:
        assert response.headers["content-type"].startswith(PROBLEM)
        assert (body["status"], body["code"]) == (status, code)
    assert gateway.answered == []  # no service was asked
    assert gateway.model.calls == []  # and no model


async def test_a_valid_token_reads_as_its_user(gateway: Gateway, first: SigningKey) -> None:
    headers = {**bearer(CHATBOT_KEY), **user_token(token(first))}
    response = await gateway.client.post("/v1/query", json=ASK, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["answer"]
    chat = await gateway.client.post("/v1/chat/completions", json={**CHAT, "user": "alice"}, headers=headers)
    assert chat.status_code == 200, chat.text
    expected = Reader(
        "alice", frozenset({"finance", "staff"}), Visibility.of({"finance", "staff"}, unset_open=True), "token"
    )
    assert gateway.readers() == [expected, expected]
    _, span = gateway.answered[0]
    assert span["enduser.id"] == "alice"
    assert span["gateway.reader.source"] == "token"
    assert span["gateway.reader.visibility"] == expected.visibility.key()


async def test_the_keys_are_fetched_before_the_first_request(
    gateway: Gateway, idp: JwksServer, first: SigningKey
) -> None:
    assert idp.fetched() == 1  # by the start-up, before any request
    headers = {**bearer(CHATBOT_KEY), **user_token(token(first))}
    response = await gateway.client.post("/v1/query", json=ASK, headers=headers)
    assert response.status_code == 200, response.text
    ready = await gateway.client.get("/readyz")
    assert ready.json()["checks"]["identity_provider"] == "ok"
    assert idp.fetched() == 1  # the token and the probe read the keys the start-up fetched


async def test_keycloak_group_paths_name_groups_in_tokens_and_headers(gateway: Gateway, first: SigningKey) -> None:
    """Keycloak's group mapper sends full paths: "/finance" is the group "finance", "/eng/platform" the group
    "eng/platform". A token's paths that name no group ("//staff", "/*") are dropped; the header's are a 400."""
    paths = ["/finance", "/eng/platform", "//staff", "/*"]
    by_token = await gateway.client.post(
        "/v1/query", json=ASK, headers={**bearer(CHATBOT_KEY), **user_token(token(first, groups=paths))}
    )
    assert by_token.status_code == 200, by_token.text
    headers = {**bearer(INGRESS_KEY), USER_HEADER: "carol", GROUPS_HEADER: "/finance,/eng/platform"}
    by_header = await gateway.client.post("/v1/query", json=ASK, headers=headers)
    assert by_header.status_code == 200, by_header.text
    groups = frozenset({"finance", "eng/platform"})
    assert gateway.readers() == [
        Reader("alice", groups, Visibility.of(groups, unset_open=True), "token"),
        Reader("carol", groups, Visibility.of(groups, unset_open=True), "header"),
    ]
    gateway.answered.clear()
    gateway.model.calls.clear()
    for refused in ("//finance", "/~", "/*"):
        bad = await gateway.client.post(
            "/v1/query", json=ASK, headers={**headers, GROUPS_HEADER: f"/finance,{refused}"}
        )
        assert_refused(bad, 400, "bad_groups", gateway)
        assert repr(refused) in bad.json()["detail"]


async def test_route_gets_the_reader_too(gateway: Gateway, first: SigningKey) -> None:
    headers = {**bearer(CHATBOT_KEY), **user_token(token(first, groups=None))}
    response = await gateway.client.post("/v1/route", json={"query": "hi"}, headers=headers)
    assert response.status_code == 200, response.text
    bad = await gateway.client.post("/v1/route", json={"query": "hi"}, headers={**headers, **user_token("x.y.z")})
    assert bad.status_code == 401, bad.text
    assert "route" not in bad.json()


@pytest.mark.parametrize(
    ("forge", "detail"),
    [
        (lambda key: token(key, exp=1_000_000, iat=999_000, nbf=999_000), "expired"),
        (lambda key: token(key, aud="another-service"), "not for this gateway"),
        (lambda key: token(key, iss="https://evil.example.test/"), "not issued by"),
        (lambda key: unsigned_token(key.kid), "'none' is not accepted"),
        (hmac_with_public_key, "'HS256' is not accepted"),
    ],
    ids=["expired", "wrong-audience", "wrong-issuer", "alg-none", "hs256-with-the-public-key"],
)
async def test_bad_tokens_are_401_with_no_answer(gateway: Gateway, first: SigningKey, forge: Any, detail: str) -> None:
    headers = {**bearer(CHATBOT_KEY), **user_token(forge(first))}
    native = await gateway.client.post("/v1/query", json=ASK, headers=headers)
    assert_refused(native, 401, "invalid_user_token", gateway)
    assert detail in native.json()["detail"]
    assert native.headers["www-authenticate"].startswith("Bearer")
    chat = await gateway.client.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert_refused(chat, 401, "invalid_user_token", gateway, openai_shape=True)
    with pytest.raises(openai.AuthenticationError) as caught:
        await openai_client(
            gateway.client, CHATBOT_KEY, default_headers=user_token(forge(first))
        ).chat.completions.create(model="gateway-direct", messages=[{"role": "user", "content": "hi"}])
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "invalid_user_token"
    assert gateway.model.calls == []


async def test_rotated_keys_through_the_app(
    gateway: Gateway, idp: JwksServer, first: SigningKey, second: SigningKey
) -> None:
    ok = await gateway.client.post("/v1/query", json=ASK, headers={**bearer(CHATBOT_KEY), **user_token(token(first))})
    assert ok.status_code == 200, ok.text
    idp.publish(second)  # rotated: the first key removed
    rotated = await gateway.client.post(
        "/v1/query", json=ASK, headers={**bearer(CHATBOT_KEY), **user_token(token(second, subject="bob"))}
    )
    assert rotated.status_code == 200, rotated.text
    assert idp.fetched() == 2  # the new key id was fetched
    gateway.answered.clear()
    gateway.model.calls.clear()
    removed = await gateway.client.post(
        "/v1/query", json=ASK, headers={**bearer(CHATBOT_KEY), **user_token(token(first))}
    )
    assert_refused(removed, 401, "invalid_user_token", gateway)
    assert "does not publish" in removed.json()["detail"]


async def test_no_groups_claim_reads_what_is_open_to_the_tenant(gateway: Gateway, first: SigningKey) -> None:
    headers = {**bearer(CHATBOT_KEY), **user_token(token(first, groups=None))}
    response = await gateway.client.post("/v1/query", json=ASK, headers=headers)
    assert response.status_code == 200, response.text
    assert gateway.readers() == [Reader("alice", frozenset(), Visibility.tenant_only(unset_open=True), "token")]


async def test_no_user_reads_what_is_open_to_the_tenant(gateway: Gateway) -> None:
    for key in (PLAIN_KEY, CHATBOT_KEY, INGRESS_KEY):
        response = await gateway.client.post("/v1/query", json=ASK, headers=bearer(key))
        assert response.status_code == 200, response.text
    nobody = Reader(None, frozenset(), Visibility.tenant_only(unset_open=True), "none")
    assert gateway.readers() == [nobody, nobody, nobody]
    _, span = gateway.answered[0]
    assert "enduser.id" not in span
    assert span["gateway.reader.source"] == "none"


async def test_trusted_headers_from_the_ingress_key(gateway: Gateway) -> None:
    headers = {**bearer(INGRESS_KEY), USER_HEADER: "carol", GROUPS_HEADER: "hr,staff"}
    response = await gateway.client.post("/v1/query", json=ASK, headers=headers)
    assert response.status_code == 200, response.text
    named = await gateway.client.post(
        "/v1/chat/completions", json={**CHAT, "user": "dave"}, headers=bearer(INGRESS_KEY)
    )
    assert named.status_code == 200, named.text
    assert gateway.readers() == [
        Reader("carol", frozenset({"hr", "staff"}), Visibility.of({"hr", "staff"}, unset_open=True), "header"),
        Reader("dave", frozenset(), Visibility.tenant_only(unset_open=True), "header"),
    ]


@pytest.mark.parametrize("key", [PLAIN_KEY, CHATBOT_KEY])
async def test_user_headers_from_an_untrusted_key_are_403(gateway: Gateway, key: str) -> None:
    headers = {**bearer(key), USER_HEADER: "carol", GROUPS_HEADER: "hr"}
    native = await gateway.client.post("/v1/query", json=ASK, headers=headers)
    assert_refused(native, 403, "user_headers_not_trusted", gateway)
    chat = await gateway.client.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert_refused(chat, 403, "user_headers_not_trusted", gateway, openai_shape=True)
    # A route that reads no documents refuses them too: the caller learns its headers are not trusted.
    models = await gateway.client.get("/v1/models", headers=headers)
    assert models.status_code == 403, models.text
    assert "data" not in models.json()


async def test_a_token_on_a_key_not_acting_for_users_is_403(
    gateway: Gateway, second: SigningKey, idp: JwksServer
) -> None:
    # Signed by a key not published: were its key looked up, the keys would be fetched again (no pause here).
    headers = {**bearer(PLAIN_KEY), **user_token(token(second))}
    fetched = idp.fetched()
    native = await gateway.client.post("/v1/query", json=ASK, headers=headers)
    assert_refused(native, 403, "key_does_not_act_for_users", gateway)
    chat = await gateway.client.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert_refused(chat, 403, "key_does_not_act_for_users", gateway, openai_shape=True)
    assert idp.fetched() == fetched  # refused before any key was looked up


async def test_the_chat_user_field_must_match_the_token(gateway: Gateway, first: SigningKey) -> None:
    headers = {**bearer(CHATBOT_KEY), **user_token(token(first))}
    chat = await gateway.client.post("/v1/chat/completions", json={**CHAT, "user": "mallory"}, headers=headers)
    assert_refused(chat, 403, "user_mismatch", gateway, openai_shape=True)
    assert chat.json()["error"]["param"] == "user"
    stream = await gateway.client.post(
        "/v1/chat/completions", json={**CHAT, "user": "mallory", "stream": True}, headers=headers
    )
    assert_refused(stream, 403, "user_mismatch", gateway, openai_shape=True)  # refused before a stream starts


async def test_the_open_mode_takes_the_user_it_is_told(
    make_client: Any, settings: Settings, idp: JwksServer, first: SigningKey
) -> None:
    """No keys: everyone is an admin already, so a user named in headers or by a token is taken as named."""
    open_settings = settings.replace(identity={"issuer": ISSUER, "audience": AUDIENCE, "jwks_url": idp.url})
    async with make_client(chat_model(), settings_override=open_settings) as (client, _):
        by_header = await client.post("/v1/query", json=ASK, headers={USER_HEADER: "carol", GROUPS_HEADER: "hr"})
        by_token = await client.post("/v1/query", json=ASK, headers=user_token(token(first)))
        expired = await client.post(
            "/v1/query", json=ASK, headers=user_token(token(first, exp=1_000_000, iat=0, nbf=0))
        )
    assert by_header.status_code == 200, by_header.text
    assert by_token.status_code == 200, by_token.text
    assert expired.status_code == 401, expired.text
    assert "answer" not in expired.json()
