"""The console over HTTP (Litestar's test client, scripted model): sign-in, cookies, CSRF, tenant isolation, the
playground's result and the knowledge pages' changes. The browser test (tests/browser/test_console.py) drives the
same pages in Chromium."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

from litestar.testing import AsyncTestClient

from gateway.settings import ApiKeyConfig, Settings
from tests.sample_files import FACTS, sample

KEYS = {"acme-admin": "acme", "globex-admin": "globex", "acme-reader": "acme"}


def key_config(name: str, secret: str | None = None, scopes: tuple[str, ...] = ("query", "admin")) -> ApiKeyConfig:
    return ApiKeyConfig(
        name=name,
        key_sha256=hashlib.sha256((secret or f"key-of-{name}").encode()).hexdigest(),
        tenant=KEYS[name],
        scopes=list(scopes if name != "acme-reader" else ("query",)),
    )


def keyed(settings: Settings, **replaced: str) -> Settings:
    keys = [key_config(name, replaced.get(name.replace("-", "_"))) for name in KEYS]
    return settings.replace(access={"api_keys": keys}, console={"secret": None})


def csrf(page: str) -> str:
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
    assert found is not None, "the page carries no CSRF token"
    return found.group(1)


async def sign_in(client: AsyncTestClient[Any], key: str) -> str:
    """Signs ``client`` in with ``key``; the CSRF token its pages carry."""
    page = await client.get("/console/sign-in")
    reply = await client.post(
        "/console/sign-in", data={"key": key, "_csrf_token": csrf(page.text)}, follow_redirects=False
    )
    assert reply.status_code == 303, reply.text
    return csrf((await client.get("/console/knowledge/")).text)


async def upload(client: AsyncTestClient[Any], token: str, name: str, data: bytes) -> Any:
    return await client.post(
        "/console/knowledge/files",
        files=[("files", (name, data))],
        headers={"x-csrftoken": token, "accept": "application/json"},
    )


async def test_a_page_without_a_session_sends_the_browser_to_sign_in(
    make_client: Callable[..., Any], settings: Settings
) -> None:
    async with make_client(settings_override=keyed(settings)) as (client, _):
        page = await client.get("/console/knowledge/", follow_redirects=False)
        assert page.status_code == 302
        assert page.headers["location"] == "/console/sign-in?next=/console/knowledge"
        document = await client.get("/console/knowledge/document?id=notes.md", follow_redirects=False)
        assert document.headers["location"] == "/console/sign-in?next=/console/knowledge/document%3Fid%3Dnotes.md"
        # Anything but a page view is refused outright, as the API refuses it
        refused = await client.post(
            "/console/knowledge/delete", data={"doc_id": "x"}, headers={"accept": "application/json"}
        )
        assert refused.status_code in (401, 403)


async def test_signing_in_sets_an_http_only_strict_cookie_and_a_wrong_key_is_refused(
    make_client: Callable[..., Any], settings: Settings
) -> None:
    async with make_client(settings_override=keyed(settings)) as (client, _):
        page = await client.get("/console/sign-in")
        wrong = await client.post("/console/sign-in", data={"key": "nope", "_csrf_token": csrf(page.text)})
        assert wrong.status_code == 401
        assert "That key is not valid." in wrong.text
        assert "gateway_console=" not in wrong.headers.get("set-cookie", "")

        right = await client.post(
            "/console/sign-in",
            data={"key": "key-of-acme-admin", "_csrf_token": csrf(page.text)},
            follow_redirects=False,
        )
        assert right.status_code == 303
        cookie = next(c for c in right.headers.get_list("set-cookie") if c.startswith("gateway_console="))
        attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/console"} <= attributes
        assert "key-of-acme-admin" not in cookie  # the key itself never leaves in the cookie (it is encrypted)
        home = await client.get("/console/playground/")
        assert home.status_code == 200
        assert '<code id="tenant">acme</code>' in home.text


async def test_a_form_without_its_csrf_token_changes_nothing(
    make_client: Callable[..., Any], settings: Settings
) -> None:
    async with make_client(settings_override=keyed(settings)) as (client, _):
        token = await sign_in(client, "key-of-acme-admin")
        assert (await upload(client, token, "notes.md", b"# Notes\n\nThe lab opens at 9.\n")).status_code == 200
        forged = await client.post("/console/knowledge/delete", data={"doc_id": "notes.md"})
        assert forged.status_code == 403
        forged = await client.post("/console/knowledge/delete", data={"doc_id": "notes.md", "_csrf_token": "x" * 40})
        assert forged.status_code == 403
        listing = await client.get("/console/knowledge/")
        assert 'data-id="notes.md"' in listing.text


async def test_tenants_never_see_each_others_documents(make_client: Callable[..., Any], settings: Settings) -> None:
    async with make_client(settings_override=keyed(settings)) as (acme, _):
        token = await sign_in(acme, "key-of-acme-admin")
        name, data = sample("md", "en")
        assert (await upload(acme, token, f"acme/{name}", data)).status_code == 200
        async with AsyncTestClient(acme.app) as globex:
            globex_token = await sign_in(globex, "key-of-globex-admin")
            listing = await globex.get("/console/knowledge/")
            assert "acme/" not in listing.text
            opened = await globex.get("/console/knowledge/document", params={"id": f"acme/{name}"})
            assert opened.status_code == 404
            deleted = await globex.post(
                "/console/knowledge/delete", data={"doc_id": f"acme/{name}", "_csrf_token": globex_token}
            )
            assert deleted.status_code == 404
            searched = await globex.get("/console/knowledge/", params={"q": FACTS["en"].answer})
            assert "acme/" not in searched.text
            asked = await globex.post(
                "/console/playground/",
                data={"query": FACTS["en"].question, "route": "single_hop", "_csrf_token": globex_token},
            )
            assert asked.status_code == 200
            assert f"acme/{name}" not in asked.text
        assert f'data-id="acme/{name}"' in (await acme.get("/console/knowledge/")).text


async def test_a_query_key_may_ask_and_read_but_not_change_the_knowledge_base(
    make_client: Callable[..., Any], settings: Settings
) -> None:
    """What it may read is its reader's (tests/unit/test_console_readers.py); here, which pages it may use."""
    async with make_client(settings_override=keyed(settings)) as (client, _):
        page = await client.get("/console/sign-in")
        assert 'name="user_token"' not in page.text  # no identity provider: no token to sign in with
        await client.post("/console/sign-in", data={"key": "key-of-acme-reader", "_csrf_token": csrf(page.text)})
        assert (await client.get("/console/playground/")).status_code == 200
        knowledge = await client.get("/console/knowledge/")
        assert knowledge.status_code == 200
        token = csrf(knowledge.text)
        assert (await upload(client, token, "notes.md", b"# Notes\n\nText.\n")).status_code == 403
        deleted = await client.post("/console/knowledge/delete", data={"doc_id": "notes.md", "_csrf_token": token})
        assert deleted.status_code == 403
        assert (await client.get("/console/review/")).status_code == 403


async def test_a_key_replaced_under_its_name_ends_its_sessions(
    make_client: Callable[..., Any], settings: Settings
) -> None:
    async with make_client(settings_override=keyed(settings)) as (client, _):
        await sign_in(client, "key-of-acme-admin")
        cookies = dict(client.cookies)
    async with make_client(settings_override=keyed(settings, acme_admin="a-new-secret")) as (client, _):
        client.cookies.update(cookies)
        page = await client.get("/console/knowledge/", follow_redirects=False)
        assert page.status_code == 302  # same secret, same name, another key: sign in again


async def test_uploads_and_deletes_show_the_new_knowledge_version_and_chunks_under_their_sections(
    make_client: Callable[..., Any], settings: Settings
) -> None:
    async with make_client(settings_override=keyed(settings)) as (client, _):
        token = await sign_in(client, "key-of-acme-admin")
        before = await client.get("/console/knowledge/")
        version = re.search(r'<strong id="version">([^<]+)</strong>', before.text)
        assert version is not None
        name, data = sample("pdf", "ja")
        reply = await upload(client, token, name, data)
        assert reply.status_code == 200, reply.text
        outcome = reply.json()
        assert outcome["files"][0]["chunks"] > 0
        fact = FACTS["ja"]
        document = await client.get("/console/knowledge/document", params={"id": name})
        assert document.status_code == 200
        assert f"{fact.chapter} › {fact.section}" in document.text
        refused = await upload(client, token, "tool.exe", b"MZ\x90\x00")
        assert refused.status_code == 415
        assert refused.json()["files"][0]["reason"]
        deleted = await client.post(
            "/console/knowledge/delete", data={"doc_id": name, "_csrf_token": token}, follow_redirects=False
        )
        assert deleted.status_code == 303
        after = await client.get(deleted.headers["location"])
        assert f'data-id="{name}"' not in after.text
        assert f"Deleted <code>{name}</code>" in after.text
        if outcome["knowledge_version"] is not None:
            shown = re.search(r'<strong id="version">(\d+)</strong>', after.text)
            assert shown is not None
            assert int(shown.group(1)) > outcome["knowledge_version"]


async def test_the_playground_shows_route_waterfall_evidence_and_linked_citations(
    make_client: Callable[..., Any], settings: Settings
) -> None:
    async with make_client(settings_override=keyed(settings)) as (client, model):
        token = await sign_in(client, "key-of-acme-admin")
        name, data = sample("md", "en")
        assert (await upload(client, token, name, data)).status_code == 200
        page = await client.post(
            "/console/playground/", data={"query": FACTS["en"].question, "route": "single_hop", "_csrf_token": token}
        )
        assert page.status_code == 200
        assert 'id="route">single_hop<' in page.text
        steps = re.findall(r'class="row step" data-step="([^"]+)"', page.text)
        assert steps[:3] == ["cache_lookup", "route", "retrieve"]
        assert "generate_answer" in steps
        assert re.search(r'<a class="cite" href="#passage-1">1</a>', page.text)
        assert 'id="passage-1"' in page.text
        assert FACTS["en"].chapter in page.text  # the passage's section path
        assert f"LLM calls <strong>{len(model.calls)}</strong>" in page.text
        escaped = await client.post(
            "/console/playground/",
            data={"query": "<script>alert(1)</script>?", "route": "direct", "_csrf_token": token},
        )
        assert "<script>alert(1)" not in escaped.text
        unknown = await client.post("/console/playground/", data={"query": "q", "route": "fast", "_csrf_token": token})
        assert unknown.status_code == 400
        assert "Unknown route" in unknown.text


async def test_open_mode_signs_in_to_a_chosen_tenant(make_client: Callable[..., Any], settings: Settings) -> None:
    async with make_client() as (client, _):
        page = await client.get("/console/sign-in")
        assert 'name="tenant"' in page.text
        assert 'name="key"' not in page.text
        bad = await client.post("/console/sign-in", data={"tenant": "../etc", "_csrf_token": csrf(page.text)})
        assert bad.status_code == 400
        await client.post("/console/sign-in", data={"tenant": "team-a", "_csrf_token": csrf(page.text)})
        assert '<code id="tenant">team-a</code>' in (await client.get("/console/playground/")).text


async def test_the_uploader_sends_who_may_read_the_files(make_client: Callable[..., Any], settings: Settings) -> None:
    """The upload form's "Readable by" field travels as the upload's ``access``: the files' chunks carry it, and a
    group name the API refuses is refused here too (422, nothing indexed)."""
    async with make_client(settings_override=keyed(settings)) as (client, _):
        token = await sign_in(client, "key-of-acme-admin")
        page = await client.get("/console/knowledge/")
        assert 'id="access"' in page.text
        headers = {"x-csrftoken": token, "accept": "application/json"}
        files = [("files", ("hr/leave.md", b"# Leave\n\nRequests are filed by 1 December.\n"))]
        reply = await client.post("/console/knowledge/files", files=files, data={"access": "hr"}, headers=headers)
        assert reply.status_code == 200, reply.text
        listing = (await client.get("/v1/files", headers={"Authorization": "Bearer key-of-acme-admin"})).json()
        assert [(f["file"], f["access"]) for f in listing["files"]] == [("hr/leave.md", ["hr"])]
        other = [("files", ("hr/other.md", b"# Other\n\nText.\n"))]
        refused = await client.post("/console/knowledge/files", files=other, data={"access": "~hr"}, headers=headers)
        assert refused.status_code == 422
        assert "'~hr'" in refused.json()["detail"]
