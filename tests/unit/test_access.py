"""API keys, tenants from keys, scopes and (per-process) rate limits through both API families."""

from __future__ import annotations

import io
import sys
from typing import Any

import openai
import pytest
from litestar.routes import HTTPRoute

from gateway.access.__main__ import main as access_cli
from gateway.access.guard import RequireScope
from gateway.access.keys import KeyRing, OpenAccessError, check_exposure, hash_key
from gateway.access.sessions import ConsoleAccess
from gateway.app import create_app
from gateway.settings import AccessSettings, ApiKeyConfig, Settings
from tests.chat_support import ACME_ADMIN_KEY, ACME_KEY, GLOBEX_KEY, bearer, chat_model, keyed, openai_client

PROBLEM = "application/problem+json"
LEAVE = {"documents": [{"id": "leave", "text": "Acme employees get 25 days of annual leave per year."}]}
ASK = {"query": "How many days of annual leave do Acme employees get?", "route": "single_hop"}


async def test_chat_needs_a_valid_key(make_client: Any, settings: Settings) -> None:
    async with make_client(chat_model(), settings_override=keyed(settings)) as (client, model):
        missing = await client.post(
            "/v1/chat/completions", json={"model": "gateway-direct", "messages": [{"role": "user", "content": "hi"}]}
        )
        with pytest.raises(openai.AuthenticationError) as caught:
            await openai_client(client, "rgw-wrong-key").chat.completions.create(
                model="gateway-direct", messages=[{"role": "user", "content": "hi"}]
            )
        assert isinstance(caught.value.body, dict)
        assert caught.value.body["code"] == "invalid_api_key"
        assert caught.value.body["message"] == "The API key is not valid."
        with pytest.raises(openai.AuthenticationError):
            await openai_client(client, "rgw-wrong-key").models.list()
        ok = await openai_client(client, ACME_KEY).chat.completions.create(
            model="gateway-direct", messages=[{"role": "user", "content": "hi"}]
        )
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"]["code"] == "invalid_api_key"
    assert "Authorization: Bearer" in missing.json()["error"]["message"]
    assert ok.choices[0].message.content == "Direct answer to: hi"
    assert len(model.calls) == 1  # refused requests never reached the model


@pytest.mark.parametrize(
    "headers", [{}, bearer("rgw-wrong-key"), {"x-api-key": "rgw-wrong-key"}, {"Authorization": "Basic abc"}]
)
async def test_native_endpoints_answer_401_problems(
    make_client: Any, settings: Settings, headers: dict[str, str]
) -> None:
    async with make_client(chat_model(), settings_override=keyed(settings)) as (client, _):
        for method, path, body in (
            ("POST", "/v1/query", ASK),
            ("POST", "/v1/route", {"query": "hi"}),
            ("POST", "/v1/documents", LEAVE),
            ("DELETE", "/v1/documents/leave", None),
        ):
            response = await client.request(method, path, json=body, headers=headers)
            assert response.status_code == 401, (path, response.text)
            assert response.headers["content-type"].startswith(PROBLEM)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["status"] == 401


async def test_probes_metrics_and_schema_stay_open(make_client: Any, settings: Settings) -> None:
    async with make_client(chat_model(), settings_override=keyed(settings)) as (client, _):
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code == 200
        assert (await client.get("/schema/openapi.json")).status_code == 200
        metrics = await client.get("/metrics")  # Prometheus scrapes without a client key
        assert metrics.status_code == 200
        assert metrics.headers["content-type"].count("charset") == 1
        assert "gateway_requests_total" in metrics.text


async def test_x_api_key_header_is_accepted(make_client: Any, settings: Settings) -> None:
    async with make_client(chat_model(), settings_override=keyed(settings)) as (client, _):
        response = await client.post("/v1/route", json={"query": "hi"}, headers={"x-api-key": ACME_KEY})
    assert response.status_code == 200, response.text


async def test_tenant_comes_from_the_key(make_client: Any, settings: Settings) -> None:
    async with make_client(chat_model(), settings_override=keyed(settings)) as (client, _):
        ingest = await client.post("/v1/documents", json=LEAVE, headers=bearer(ACME_ADMIN_KEY))
        assert ingest.status_code == 200, ingest.text
        acme = (await client.post("/v1/query", json=ASK, headers=bearer(ACME_KEY))).json()
        globex = (await client.post("/v1/query", json=ASK, headers=bearer(GLOBEX_KEY))).json()
        chat_acme = await openai_client(client, ACME_KEY).chat.completions.create(
            model="gateway-single-hop", messages=[{"role": "user", "content": ASK["query"]}]
        )
        chat_globex = await openai_client(client, GLOBEX_KEY).chat.completions.create(
            model="gateway-single-hop", messages=[{"role": "user", "content": ASK["query"]}]
        )
    assert [s["id"] for s in acme["sources"]] == ["leave"]
    assert "25 days" in acme["answer"]
    assert globex["sources"] == []  # globex's key never sees acme's document
    assert "25 days" not in globex["answer"]
    assert (chat_acme.model_extra or {})["gateway"]["tenant"] == "acme"
    assert "25 days" in (chat_acme.choices[0].message.content or "")
    assert (chat_globex.model_extra or {})["gateway"]["tenant"] == "globex"
    assert "25 days" not in (chat_globex.choices[0].message.content or "")


async def test_naming_another_tenant_is_403(make_client: Any, settings: Settings) -> None:
    async with make_client(chat_model(), settings_override=keyed(settings)) as (client, model):
        native = await client.post("/v1/query", json={**ASK, "tenant": "acme"}, headers=bearer(GLOBEX_KEY))
        ingest = await client.post("/v1/documents", json={**LEAVE, "tenant": "globex"}, headers=bearer(ACME_ADMIN_KEY))
        delete = await client.delete("/v1/documents/leave", params={"tenant": "globex"}, headers=bearer(ACME_ADMIN_KEY))
        with pytest.raises(openai.PermissionDeniedError) as caught:
            await openai_client(client, GLOBEX_KEY).chat.completions.create(
                model="gateway-direct", messages=[{"role": "user", "content": "hi"}], extra_body={"tenant": "acme"}
            )
    for response in (native, ingest, delete):
        assert response.status_code == 403, response.text
        assert response.headers["content-type"].startswith(PROBLEM)
        assert "tenant" in response.json()["detail"]
    assert "tenant 'acme'" in caught.value.message
    assert model.calls == []


async def test_documents_need_the_admin_scope(make_client: Any, settings: Settings) -> None:
    async with make_client(chat_model(), settings_override=keyed(settings)) as (client, _):
        refused = await client.post("/v1/documents", json=LEAVE, headers=bearer(ACME_KEY))
        deleted = await client.delete("/v1/documents/leave", headers=bearer(ACME_KEY))
        allowed = await client.post("/v1/documents", json=LEAVE, headers=bearer(ACME_ADMIN_KEY))
        admin_queries = await client.post("/v1/query", json=ASK, headers=bearer(ACME_ADMIN_KEY))
    assert refused.status_code == 403
    assert "admin" in refused.json()["detail"]
    assert deleted.status_code == 403
    assert allowed.status_code == 200
    assert admin_queries.status_code == 200


async def test_open_mode_serves_without_keys(make_client: Any) -> None:
    async with make_client(chat_model()) as (client, _):
        response = await client.post("/v1/route", json={"query": "hi"})
        tenant_named = await client.post("/v1/documents", json={**LEAVE, "tenant": "globex"})
    assert response.status_code == 200
    assert tenant_named.status_code == 200  # without keys the body's tenant is used


async def test_per_minute_limit_is_429_with_retry_after(make_client: Any, settings: Settings) -> None:
    async with make_client(chat_model(), settings_override=keyed(settings, requests_per_minute=2)) as (client, _):
        api = openai_client(client, ACME_KEY)
        for _ in range(2):
            await api.chat.completions.create(model="gateway-direct", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.RateLimitError) as caught:
            await api.chat.completions.create(model="gateway-direct", messages=[{"role": "user", "content": "hi"}])
        native = await client.post("/v1/route", json={"query": "hi"}, headers=bearer(ACME_KEY))
        other_key = await client.post("/v1/route", json={"query": "hi"}, headers=bearer(GLOBEX_KEY))
    retry_after = int(caught.value.response.headers["retry-after"])
    assert 1 <= retry_after <= 60
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "rate_limit_exceeded"
    assert caught.value.body["type"] == "rate_limit_error"
    assert native.status_code == 429
    assert native.headers["content-type"].startswith(PROBLEM)
    assert 1 <= int(native.headers["retry-after"]) <= 60
    assert native.json()["retry_after_s"] == int(native.headers["retry-after"])
    assert other_key.status_code == 200  # limits are per key


async def test_daily_token_budget_is_checked_before_and_charged_after(make_client: Any, settings: Settings) -> None:
    async with make_client(chat_model(), settings_override=keyed(settings, daily_tokens=5)) as (client, _):
        api = openai_client(client, ACME_KEY)
        first = await api.chat.completions.create(model="gateway-direct", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.RateLimitError) as caught:
            await api.chat.completions.create(model="gateway-direct", messages=[{"role": "user", "content": "hi"}])
    assert first.usage is not None
    assert first.usage.total_tokens > 5  # the answer in flight may overshoot; the next request is refused
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "daily_token_budget_exceeded"
    assert int(caught.value.response.headers["retry-after"]) <= 86_400


@pytest.mark.parametrize("api", ["native", "chat", "chat-stream"])
async def test_every_answering_api_charges_the_token_budget(make_client: Any, settings: Settings, api: str) -> None:
    """One layer charges (the API handlers, once the answer is final): a spent budget refuses the next request."""
    async with make_client(chat_model(), settings_override=keyed(settings, daily_tokens=5)) as (client, _):
        if api == "native":
            answered = await client.post("/v1/query", json={"query": "hi", "route": "direct"}, headers=bearer(ACME_KEY))
            assert answered.status_code == 200, answered.text
            assert answered.json()["usage"]["input_tokens"] + answered.json()["usage"]["output_tokens"] > 5
        else:
            messages = [{"role": "user", "content": "hi"}]
            stream = await openai_client(client, ACME_KEY).chat.completions.create(
                model="gateway-direct", messages=messages, stream=api == "chat-stream"
            )
            if api == "chat-stream":
                assert [chunk async for chunk in stream]  # type: ignore[union-attr]
        refused = await client.post("/v1/route", json={"query": "hi"}, headers=bearer(ACME_KEY))
    assert refused.status_code == 429, refused.text
    assert refused.json()["code"] == "daily_token_budget_exceeded"


def test_keys_are_matched_by_digest_only() -> None:
    entry = ApiKeyConfig(name="bot", key_sha256=hash_key("secret-1"), tenant="acme")
    ring = KeyRing([entry])
    principal = ring.lookup("secret-1")
    assert principal is not None
    assert (principal.name, principal.tenant, principal.scopes) == ("bot", "acme", frozenset({"query"}))
    assert ring.lookup("secret-2") is None
    assert ring.lookup("") is None
    assert "secret-1" not in repr(entry) + repr(principal)


def test_duplicate_key_names_are_refused() -> None:
    entry = ApiKeyConfig(name="bot", key_sha256=hash_key("a"), tenant="acme")
    with pytest.raises(ValueError, match="unique"):
        KeyRing([entry, entry.model_copy(update={"key_sha256": hash_key("b")})])


def test_api_keys_load_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    digest = hash_key("k")
    monkeypatch.setenv(
        "GATEWAY_API_KEYS",
        f'[{{"name": "bot", "key_sha256": "{digest}", "tenant": "acme", "scopes": ["query", "admin"], '
        '"requests_per_minute": 600, "daily_tokens": 2000000}]',
    )
    settings = Settings()
    assert settings.access.api_keys[0].key_sha256 == digest
    assert settings.access.api_keys[0].requests_per_minute == 600


def test_plain_keys_are_not_accepted_as_digests() -> None:
    with pytest.raises(ValueError, match="key_sha256"):
        ApiKeyConfig(name="bot", key_sha256="my-plain-key", tenant="acme")


@pytest.mark.parametrize(
    ("host", "keys", "allow", "refused"),
    [
        ("127.0.0.1", False, False, False),
        ("::1", False, False, False),
        ("localhost", False, False, False),
        ("0.0.0.0", False, False, True),
        ("10.1.2.3", False, False, True),
        ("0.0.0.0", False, True, False),
        ("0.0.0.0", True, False, False),
    ],
)
def test_open_access_only_on_loopback_unless_allowed(host: str, keys: bool, allow: bool, refused: bool) -> None:
    api_keys = [ApiKeyConfig(name="bot", key_sha256=hash_key("k"), tenant="acme")] if keys else []
    access = AccessSettings(api_keys=api_keys, allow_open_access=allow)
    if refused:
        with pytest.raises(OpenAccessError, match="GATEWAY_API_KEYS"):
            check_exposure(access, host)
    else:
        check_exposure(access, host)


def test_cli_hashes_a_key_from_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("rgw-some-key\n"))
    assert access_cli(["hash-key"]) == 0
    assert capsys.readouterr().out.strip() == hash_key("rgw-some-key")


def test_cli_new_key_prints_a_usable_entry(capsys: pytest.CaptureFixture[str]) -> None:
    assert access_cli(["new-key", "--name", "bot", "--tenant", "acme", "--scope", "admin"]) == 0
    out = capsys.readouterr().out.splitlines()
    key = out[0].rsplit(" ", 1)[1]
    entry = ApiKeyConfig.model_validate_json(out[1].split(": ", 1)[1])
    assert entry.key_sha256 == hash_key(key)
    assert entry.scopes == ["admin"]


async def test_app_refuses_to_start_open_on_a_public_address(make_client: Any, settings: Settings) -> None:
    exposed = settings.replace(server={"host": "0.0.0.0"})
    with pytest.raises(BaseExceptionGroup) as caught:  # the test client's task group wraps lifespan errors
        async with make_client(chat_model(), settings_override=exposed):
            pass
    assert caught.group_contains(OpenAccessError, match="GATEWAY_ALLOW_OPEN_ACCESS")


def test_main_exits_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway import __main__ as entry

    monkeypatch.setenv("GATEWAY_HOST", "0.0.0.0")
    monkeypatch.delenv("GATEWAY_API_KEYS", raising=False)
    monkeypatch.delenv("GATEWAY_ALLOW_OPEN_ACCESS", raising=False)
    with pytest.raises(SystemExit, match="without API keys"):
        entry.main()


@pytest.mark.parametrize(
    ("path", "content"),
    [
        ("/v1/chat/completions", b'{"model": '),
        ("/v1/chat/completions", b'{"model": "nope", "messages": []}'),
        ("/v1/query", b'{"query": ""}'),
        ("/v1/documents", b"[]"),
    ],
)
async def test_401_comes_before_body_validation(
    make_client: Any, settings: Settings, path: str, content: bytes
) -> None:
    async with make_client(chat_model(), settings_override=keyed(settings)) as (client, _):
        response = await client.post(path, content=content, headers={"content-type": "application/json"})
    assert response.status_code == 401, response.text


async def test_keys_never_reach_the_logs(
    make_client: Any, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    async with make_client(chat_model(), settings_override=keyed(settings, requests_per_minute=1)) as (client, _):
        await client.post("/v1/route", json={"query": "hi"}, headers=bearer(ACME_KEY))
        limited = await client.post("/v1/route", json={"query": "hi"}, headers=bearer(ACME_KEY))
        wrong = await client.post("/v1/route", json={"query": "hi"}, headers=bearer("rgw-leaked-wrong-key"))
    assert (limited.status_code, wrong.status_code) == (429, 401)
    logged = caplog.text + limited.text + wrong.text
    for secret in (ACME_KEY, hash_key(ACME_KEY), "rgw-leaked-wrong-key"):
        assert secret not in logged
    assert "acme-chatbot" in limited.text  # the key's name identifies it instead


def test_every_api_route_checks_keys_before_it_reads_a_request(settings: Settings) -> None:
    """Keys are checked in each controller's ``before_request`` hook, and Litestar runs only the closest layer's hook:
    a handler or controller that set its own would switch the check off. Every route outside the open probes, metrics
    and schema must resolve to it, and none may use Litestar's response cache (read before the hook runs)."""
    app = create_app(keyed(settings))
    open_paths: set[str] = set()
    scopes: dict[str, set[str]] = {}
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            assert not handler.cache, route.path
            hook = handler.resolve_before_request()
            if isinstance(hook, RequireScope | ConsoleAccess):
                # Litestar adds an OPTIONS handler per path, under the controller's hook; it answers with the allowed
                # methods only. The scopes that matter are the methods' own (kept per path, in a route-order-free set).
                if handler.http_methods != {"OPTIONS"}:
                    scopes.setdefault(route.path, set()).add(hook.scope)
            else:
                assert hook is None, route.path
                open_paths.add(route.path)
    # The console's sign-in pages are open: they are how a browser gets a session.
    console_open = {"/console", "/console/sign-in", "/console/sign-out"}
    assert {p for p in open_paths if not p.startswith("/schema")} == {"/healthz", "/readyz", "/metrics", *console_open}
    assert scopes["/v1/chat/completions"] == scopes["/v1/query"] == scopes["/v1/models"] == {"query"}
    assert scopes["/v1/documents"] == scopes["/v1/assistant-profile"] == scopes["/console/review"] == {"admin"}
    assert scopes["/console/knowledge"] == scopes["/console/knowledge/document"] == {"query"}  # filtered by reader
    assert scopes["/console/knowledge/files"] == scopes["/console/knowledge/delete"] == {"admin"}
    assert scopes["/console/playground"] == {"query"}
