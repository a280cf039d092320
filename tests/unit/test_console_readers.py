"""Whom the console reads for (Litestar's test client, scripted model, a JWKS served on loopback): a key acting for
users signs in with the user's token, a key trusting user headers names the user on every request, an admin naming
nobody reads every document, a query key naming nobody reads what is open to the whole tenant. The playground's
answer and the knowledge pages follow that reader; a document the reader may not see is answered as a missing one.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta, tzinfo
from typing import Any

import jwt
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.access.keys import hash_key
from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import ApiKeyConfig, Settings
from tests.fakes.identity_provider import AUDIENCE, ISSUER, JwksServer, SigningKey, jwks_server, rsa_key, token
from tests.fakes.scripted_chat import ScriptedChatModel
from tests.scripted import answer_with_first_passage

TENANT = "acme"
ADMIN_KEY = "console-admin"  # admin, names nobody
READER_KEY = "console-reader"  # query, acts for nobody
CHATBOT_KEY = "console-chatbot"  # query, acts for users by token
INGRESS_KEY = "console-ingress"  # query, acts for users, trusts the user headers
PREVIEW_KEY = "console-admin-preview"  # admin, acts for users, trusts the user headers

DOCUMENTS = [
    {"id": "hr-memo", "title": "Salary memo", "text": "The salary review codeword is PERIWINKLE.", "access": ["hr"]},
    {
        "id": "eng-runbook",
        "title": "Bridge runbook",
        "text": "The incident bridge passphrase is TANGERINE.",
        "access": ["eng"],
    },
    {"id": "handbook", "title": "Handbook", "text": "Office hours run from 9 to 17 for everyone.", "access": "tenant"},
]
HR_QUESTION = "What is the salary review codeword?"
ENG_QUESTION = "What is the incident bridge passphrase?"
ALL_IDS = {"hr-memo", "eng-runbook", "handbook"}


def console_keys() -> list[ApiKeyConfig]:
    def key(secret: str, scopes: list[str], **marks: bool) -> ApiKeyConfig:
        return ApiKeyConfig(name=secret, key_sha256=hash_key(secret), tenant=TENANT, scopes=scopes, **marks)

    return [
        key(ADMIN_KEY, ["admin"]),
        key(READER_KEY, ["query"]),
        key(CHATBOT_KEY, ["query"], acts_for_users=True),
        key(INGRESS_KEY, ["query"], acts_for_users=True, trusts_user_headers=True),
        key(PREVIEW_KEY, ["admin"], acts_for_users=True, trusts_user_headers=True),
    ]


@pytest.fixture(scope="module")
def signing() -> SigningKey:
    return rsa_key("console-idp-key")


@pytest.fixture
def idp(signing: SigningKey) -> Iterator[JwksServer]:
    with jwks_server(signing) as server:
        yield server


class Console:
    """The app's one test client (one lifespan); each test signs it in as it needs, and again as someone else."""

    def __init__(self, client: AsyncTestClient[Litestar], exporter: InMemorySpanExporter) -> None:
        self.client = client
        self.exporter = exporter

    def readers_on_trace(self, path: str, method: str = "POST") -> list[dict[str, Any]]:
        """The attributes of the finished request spans of ``method path`` that carry a reader."""
        return [
            dict(s.attributes)
            for s in self.exporter.get_finished_spans()
            if s.attributes
            and s.attributes.get("url.path") == path
            and s.attributes.get("http.request.method") == method
            and "gateway.reader.source" in s.attributes
        ]


@pytest.fixture
async def console(settings: Settings, embeddings: USEEmbeddings, idp: JwksServer) -> AsyncIterator[Console]:
    configured = settings.replace(
        access={"api_keys": console_keys()},
        identity={"issuer": ISSUER, "audience": AUDIENCE, "jwks_url": idp.url},
        console={"secret": None},
    )
    exporter = InMemorySpanExporter()
    model = ScriptedChatModel(responder=answer_with_first_passage)
    app = create_app(configured, ProviderOverrides(chat_model=model, embeddings=embeddings, span_exporter=exporter))
    async with AsyncTestClient(app) as client:
        stored = await client.post(
            "/v1/documents",
            json={"tenant": TENANT, "documents": DOCUMENTS},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        )
        assert stored.status_code == 200, stored.text
        yield Console(client, exporter)


def csrf(page: str) -> str:
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
    assert found is not None, "the page carries no CSRF token"
    return found.group(1)


async def sign_in(client: AsyncTestClient[Any], key: str, user_token: str = "") -> Any:
    page = await client.get("/console/sign-in")
    form = {"key": key, "user_token": user_token, "_csrf_token": csrf(page.text)}
    return await client.post("/console/sign-in", data=form, follow_redirects=False)


async def signed_in(console: Console, key: str, user_token: str = "") -> AsyncTestClient[Any]:
    """The console's client with a fresh session of ``key`` (and ``user_token``), and no other."""
    client = console.client
    client.cookies.clear()
    reply = await sign_in(client, key, user_token)
    assert reply.status_code == 303, reply.text
    return client


async def ask(client: AsyncTestClient[Any], question: str, headers: dict[str, str] | None = None) -> Any:
    page = await client.get("/console/playground/", headers=headers)
    form = {"query": question, "route": "single_hop", "_csrf_token": csrf(page.text)}
    return await client.post("/console/playground/", data=form, headers=headers)


async def listed(client: AsyncTestClient[Any], headers: dict[str, str] | None = None, search: str = "") -> set[str]:
    page = await client.get("/console/knowledge/", params={"q": search} if search else None, headers=headers)
    assert page.status_code == 200, page.text
    return set(re.findall(r'<tr class="document" data-id="([^"]+)">', page.text))


def detail(page: str) -> str:
    found = re.search(r'<p id="problem-detail">([^<]*)</p>', page)
    assert found is not None, page
    return found.group(1)


async def opened(client: AsyncTestClient[Any], doc_id: str, headers: dict[str, str] | None = None) -> Any:
    return await client.get("/console/knowledge/document", params={"id": doc_id}, headers=headers)


async def assert_as_missing(client: AsyncTestClient[Any], doc_id: str, headers: dict[str, str] | None = None) -> None:
    """A document the reader may not see answers exactly as one that does not exist: 404, the same words."""
    hidden = await opened(client, doc_id, headers)
    missing = await opened(client, "no-such-document", headers)
    assert hidden.status_code == missing.status_code == 404
    assert detail(hidden.text).replace(doc_id, "ID") == detail(missing.text).replace("no-such-document", "ID")


def reading_as(page: str) -> str:
    found = re.search(r'<span class="muted" id="reader" data-kind="([a-z]+)">(.*?)</span>\s*\n', page, re.S)
    assert found is not None, "the page does not say whom it reads as"
    return f"{found.group(1)}: {re.sub(r'<[^>]+>', '', found.group(2)).split('reading', 1)[1].strip()}"


async def test_a_query_key_naming_nobody_no_longer_reads_restricted_documents(console: Console) -> None:
    """The playground answered every key signed in as an admin would: a query key read the whole tenant."""
    client = await signed_in(console, READER_KEY)
    page = await ask(client, HR_QUESTION)
    assert page.status_code == 200, page.text
    assert "PERIWINKLE" not in page.text
    assert "hr-memo" not in page.text
    assert "9 to 17" in (await ask(client, "When do office hours run?")).text  # what it may read, it reads
    assert reading_as(page.text) == "tenant: documents open to the whole tenant"

    assert await listed(client) == {"handbook"}
    assert await listed(client, search="codeword") == set()
    for doc_id in ("hr-memo", "eng-runbook"):
        await assert_as_missing(client, doc_id)
    handbook = await opened(client, "handbook")
    assert handbook.status_code == 200
    assert "9 to 17" in handbook.text

    # Reading is open to it; changing the knowledge base is not, and its page offers neither.
    knowledge = await client.get("/console/knowledge/")
    assert 'id="upload"' not in knowledge.text
    assert 'class="delete"' not in knowledge.text
    assert 'id="version"' not in knowledge.text
    token = csrf(knowledge.text)
    headers = {"x-csrftoken": token, "accept": "application/json"}
    upload = await client.post("/console/knowledge/files", files=[("files", ("a.md", b"# A\n\nx\n"))], headers=headers)
    assert upload.status_code == 403
    deleted = await client.post("/console/knowledge/delete", data={"doc_id": "handbook", "_csrf_token": token})
    assert deleted.status_code == 403
    assert await listed(client) == {"handbook"}
    assert console.readers_on_trace("/console/playground")[-1]["gateway.reader.source"] == "none"


async def test_an_admin_naming_nobody_reads_every_document(console: Console) -> None:
    client = await signed_in(console, ADMIN_KEY)
    page = await ask(client, HR_QUESTION)
    assert "PERIWINKLE" in page.text
    assert reading_as(page.text) == "everything: every document (admin)"
    assert await listed(client) == ALL_IDS
    assert "TANGERINE" in (await opened(client, "eng-runbook")).text
    knowledge = await client.get("/console/knowledge/")
    assert 'id="upload"' in knowledge.text
    assert 'id="version"' in knowledge.text
    spans = console.readers_on_trace("/console/playground")
    assert spans[-1]["gateway.reader.source"] == "system"
    assert spans[-1]["gateway.reader.visibility"] == "all"


async def test_signing_in_with_a_user_token_reads_as_that_user(console: Console, signing: SigningKey) -> None:
    console.client.cookies.clear()
    page = await console.client.get("/console/sign-in")
    assert 'name="user_token"' in page.text  # the identity provider is configured
    client = await signed_in(console, CHATBOT_KEY, token(signing, subject="alice", groups=["hr"]))
    mine = await ask(client, HR_QUESTION)
    assert "PERIWINKLE" in mine.text
    assert reading_as(mine.text) == "user: as alice, groups hr"
    theirs = await ask(client, ENG_QUESTION)
    assert "TANGERINE" not in theirs.text
    assert "eng-runbook" not in theirs.text
    assert await listed(client) == {"hr-memo", "handbook"}
    assert await listed(client, search="passphrase") == set()
    assert await listed(client, search="codeword") == {"hr-memo"}
    assert "PERIWINKLE" in (await opened(client, "hr-memo")).text
    await assert_as_missing(client, "eng-runbook")
    traced = console.readers_on_trace("/console/playground")[-1]
    assert (traced["enduser.id"], traced["gateway.reader.source"]) == ("alice", "token")

    # The key does not trust user headers: the API's 403. One that does may not name a second user in them when its
    # session signed in with a token.
    json = {"accept": "application/json"}
    untrusted = await client.get("/console/knowledge/", headers={"X-Gateway-User": "bob", **json})
    assert (untrusted.status_code, untrusted.json()["code"]) == (403, "user_headers_not_trusted")
    client = await signed_in(console, INGRESS_KEY, token(signing, subject="alice", groups=["hr"]))
    assert await listed(client) == {"hr-memo", "handbook"}
    named_twice = await client.get("/console/knowledge/", headers={"X-Gateway-User": "bob", **json})
    assert (named_twice.status_code, named_twice.json()["code"]) == (400, "user_named_twice")
    groups_alone = await client.get("/console/knowledge/", headers={"X-Gateway-User-Groups": "eng", **json})
    assert (groups_alone.status_code, groups_alone.json()["code"]) == (400, "user_named_twice")
    # An ingress naming the token's own user on every request (oauth2-proxy): the token's verified groups stand.
    ingress = {"X-Gateway-User": "alice", "X-Gateway-User-Groups": "eng"}
    assert await listed(client, headers=ingress) == {"hr-memo", "handbook"}
    assert reading_as((await ask(client, ENG_QUESTION, headers=ingress)).text) == "user: as alice, groups hr"


async def test_a_bad_user_token_at_sign_in_is_a_401_on_the_sign_in_page(console: Console, signing: SigningKey) -> None:
    client = console.client
    client.cookies.clear()
    unknown_key = rsa_key("not-published")
    refused = await sign_in(client, CHATBOT_KEY, token(unknown_key, groups=["hr"]))
    assert refused.status_code == 401
    assert "a key the identity provider does not publish" in refused.text
    assert 'id="sign-in-error"' in refused.text
    assert "gateway_console=" not in refused.headers.get("set-cookie", "")
    assert (await client.get("/console/playground/", follow_redirects=False)).status_code == 302

    garbage = await sign_in(client, CHATBOT_KEY, "not-a-jwt")
    assert garbage.status_code == 401
    assert "not a signed JWT" in garbage.text

    # A key that does not act for users may not bring a user: the API's 403, on the same page.
    plain = await sign_in(client, READER_KEY, token(signing, groups=["hr"]))
    assert plain.status_code == 403
    assert "does not act for users" in plain.text


async def test_an_expired_user_token_ends_the_session(
    console: Console, signing: SigningKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's token is verified on every request: once it expires, a page sends the browser to sign in
    again and anything else is the 401, and no answer is read with it."""
    client = await signed_in(console, CHATBOT_KEY, token(signing, subject="alice", groups=["hr"]))
    assert (await client.get("/console/playground/")).status_code == 200
    form = {"query": HR_QUESTION, "route": "single_hop", "_csrf_token": csrf((await client.get("/console/")).text)}
    cookies = dict(client.cookies)

    class TwoHoursLater(datetime):
        """PyJWT's clock, two hours on: past the token's hour and the leeway."""

        @classmethod
        def now(cls, tz: tzinfo | None = None) -> datetime:
            return datetime.now(tz) + timedelta(hours=2)

    monkeypatch.setattr(jwt.api_jwt, "datetime", TwoHoursLater)
    page = await client.get("/console/playground/", follow_redirects=False)
    assert page.status_code == 302
    assert page.headers["location"] == "/console/sign-in?next=/console/playground"
    # The session is cleared: it does not come back once the token would verify again.
    monkeypatch.undo()
    assert (await client.get("/console/knowledge/", follow_redirects=False)).status_code == 302

    monkeypatch.setattr(jwt.api_jwt, "datetime", TwoHoursLater)
    client.cookies.clear()
    client.cookies.update(cookies)  # the same session, from before it was cleared
    asked = await client.post("/console/playground/", data=form, headers={"accept": "application/json"})
    assert asked.status_code == 401
    assert asked.json()["code"] == "invalid_user_token"
    assert "expired" in asked.json()["detail"]
    assert "PERIWINKLE" not in asked.text


async def test_trusted_headers_name_the_user_on_every_request(console: Console) -> None:
    bob = {"X-Gateway-User": "bob", "X-Gateway-User-Groups": "eng"}
    client = await signed_in(console, INGRESS_KEY)
    page = await ask(client, ENG_QUESTION, bob)
    assert "TANGERINE" in page.text
    assert reading_as(page.text) == "user: as bob, groups eng"
    assert "PERIWINKLE" not in (await ask(client, HR_QUESTION, bob)).text
    assert await listed(client, bob) == {"eng-runbook", "handbook"}
    await assert_as_missing(client, "hr-memo", bob)
    # Read per request: without the headers, the same session names nobody.
    assert await listed(client) == {"handbook"}
    assert "TANGERINE" not in (await ask(client, ENG_QUESTION)).text
    traced = console.readers_on_trace("/console/playground")
    assert [(t.get("enduser.id"), t["gateway.reader.source"]) for t in traced] == [
        ("bob", "header"),
        ("bob", "header"),
        (None, "none"),
    ]

    # An ingress presenting the key itself, no session: the same reading.
    presented = {"Authorization": f"Bearer {INGRESS_KEY}", **bob}
    client.cookies.clear()
    assert await listed(client, presented) == {"eng-runbook", "handbook"}


async def test_user_headers_from_a_key_not_trusting_them_are_the_apis_403(console: Console) -> None:
    client = await signed_in(console, READER_KEY)
    headers = {"X-Gateway-User": "bob", "X-Gateway-User-Groups": "eng", "accept": "application/json"}
    for path in ("/console/knowledge/", "/console/playground/"):
        refused = await client.get(path, headers=headers)
        assert refused.status_code == 403, refused.text
        assert refused.json()["code"] == "user_headers_not_trusted"
    page = await client.get("/console/knowledge/document", params={"id": "eng-runbook"}, headers=headers)
    assert page.status_code == 403
    assert "TANGERINE" not in page.text


async def test_an_admin_naming_a_user_previews_what_that_user_reads(console: Console) -> None:
    bob = {"X-Gateway-User": "bob", "X-Gateway-User-Groups": "eng"}
    client = await signed_in(console, PREVIEW_KEY)
    assert await listed(client, bob) == {"eng-runbook", "handbook"}
    await assert_as_missing(client, "hr-memo", bob)
    page = await ask(client, HR_QUESTION, bob)
    assert "PERIWINKLE" not in page.text
    assert reading_as(page.text) == "user: as bob, groups eng"
    assert await listed(client) == ALL_IDS  # naming nobody: every document


async def test_open_mode_still_reads_every_document(
    settings: Settings, embeddings: USEEmbeddings, idp: JwksServer
) -> None:
    model = ScriptedChatModel(responder=answer_with_first_passage)
    app = create_app(settings, ProviderOverrides(chat_model=model, embeddings=embeddings))
    async with AsyncTestClient(app) as client:
        stored = await client.post("/v1/documents", json={"tenant": TENANT, "documents": DOCUMENTS})
        assert stored.status_code == 200, stored.text
        page = await client.get("/console/sign-in")
        assert 'name="user_token"' not in page.text
        await client.post("/console/sign-in", data={"tenant": TENANT, "_csrf_token": csrf(page.text)})
        answered = await ask(client, HR_QUESTION)
        assert "PERIWINKLE" in answered.text
        assert reading_as(answered.text) == "everything: every document (admin)"
        assert await listed(client) == ALL_IDS
