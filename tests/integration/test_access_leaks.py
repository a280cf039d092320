"""Every path a document's words can take out of the gateway, walked by two users of one tenant and by a request
naming nobody: ``hr-user`` (group ``hr``) and ``eng-user`` (group ``eng``) each own documents holding a secret word
the other must never receive, and one document is open to the whole tenant.

A leak is judged on the whole response body (the other's secret word or document id anywhere: answer, sources,
passages, evidence, probe, timeline, events, the chat chunks and their ``gateway`` object, curation rows) and on the
document ids the response names (within what the user may read). Each path that should also hands the user their
own secret, or the negative checks would pass on an app that answers nothing. The ledger counts the (path, user)
checks and must end with as many as planned and no problem.

The app runs behind a real server (the folder sync is a separate HTTP client), on the scripted model that answers
with the first passage it was given, with Redis (db 15, a prefix of its own) as the exact and semantic cache, over
LanceDB and over the repo's Pinecone fake.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from langchain_core.messages import BaseMessage
from pydantic import SecretStr

from gateway.app import create_app
from gateway.ingest.cli import main as ingest_main
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import Settings
from tests.fakes.identity_provider import AUDIENCE, ISSUER, JwksServer, jwks_server, rsa_key, token
from tests.fakes.pinecone_server import FAKE_API_KEY, running_fake_pinecone
from tests.fakes.scripted_chat import ScriptedChatModel
from tests.integration.conftest import REDIS_TEST_URL
from tests.reader_support import admin_and_chatbot_keys
from tests.scripted import answer_with_first_passage, structured_reply
from tests.served_app import served_app

TENANT = "acme"
USERS = {"hr-user": "hr", "eng-user": "eng"}
NOBODY = "nobody"
OTHER = {"hr": "eng", "eng": "hr"}

DOCUMENTS: list[dict[str, Any]] = [
    {
        "id": "hr-comp-memo",
        "title": "Compensation memo",
        "text": "The salary review codeword is PERIWINKLE. Salary bands are reviewed every March by the committee.",
        "access": ["hr"],
    },
    {
        "id": "eng-bridge-runbook",
        "title": "Incident runbook",
        "text": "The incident bridge passphrase is TANGERINE. The on-call rota for the bridge changes every Monday.",
        "access": ["eng"],
    },
    {
        "id": "handbook",
        "title": "Company handbook",
        "text": "The handbook says office hours run from 9 to 17 for everyone at the company.",
        "access": "tenant",
    },
]
OPEN_QUESTION = "When do office hours run?"
OPEN_ANSWER = "9 to 17"

# Per group: how each of its documents was ingested, the question that finds it and the secret word it holds.
SECRETS: dict[str, list[tuple[str, str, str]]] = {
    "hr": [
        ("documents", "What is the salary review codeword?", "PERIWINKLE"),
        ("files", "What is the bonus pool codeword?", "MARIGOLD"),
        ("sync", "What is the relocation allowance codeword?", "CINNAMON"),
    ],
    "eng": [
        ("documents", "What is the incident bridge passphrase?", "TANGERINE"),
        ("files", "What is the deploy signing passphrase?", "OBSIDIAN"),
        ("sync", "What is the staging database passphrase?", "VERMILION"),
    ],
}
UPLOADS = {
    "hr": ("uploads/hr-bonus.md", b"# Bonus pool\n\nThe bonus pool codeword is MARIGOLD, paid out in April.\n"),
    "eng": (
        "uploads/eng-signing.md",
        b"# Deploy signing\n\nThe deploy signing passphrase is OBSIDIAN, rotated yearly.\n",
    ),
}
SYNCED = {
    "hr": ("relocation.md", "# Relocation\n\nThe relocation allowance codeword is CINNAMON, for moves abroad.\n"),
    "eng": ("staging.md", "# Staging\n\nThe staging database passphrase is VERMILION, shared with on-call.\n"),
}
# The multi-hop planner always goes looking for both groups' secrets: the second hop is where a leak would enter.
GREEDY_HOP = {"found": "a codeword", "next_query": "incident bridge passphrase salary review codeword"}


def responder(messages: list[BaseMessage], kwargs: dict[str, Any]) -> str:
    reply = structured_reply(kwargs, {"NextHop": GREEDY_HOP})
    return reply if reply is not None else answer_with_first_passage(messages, kwargs)


@dataclass
class Ledger:
    """Every (path, user) check made, and what went wrong in any (a leak, or a user denied their own words)."""

    readable: dict[str, set[str]]  # group (or NOBODY) -> document ids it may read
    owner: dict[str, str] = field(default_factory=dict)  # restricted document id -> its group
    checks: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def forbidden(self, group: str) -> tuple[set[str], set[str]]:
        """The secret words and document ids ``group`` must never receive."""
        others = {g for g in SECRETS if g != group}
        words = {secret for g in others for _, _, secret in SECRETS[g]}
        return words, {doc for doc, g in self.owner.items() if g in others}

    def check(self, path: str, user: str, body: str, documents: set[str], *, own: str | None = None) -> None:
        """One check: ``body`` is the whole response text, ``documents`` the ids it names, ``own`` a secret that
        must be in it (None: this path owes nothing)."""
        group = USERS.get(user, NOBODY)
        self.checks.append((path, user))
        words, ids = self.forbidden(group)
        for word in sorted(words):
            if word.lower() in body.lower():
                self.problems.append(f"LEAK {path} {user}: secret {word}")
        for doc in sorted(ids):
            if doc in body:
                self.problems.append(f"LEAK {path} {user}: document id {doc}")
        outside = documents - self.readable[group]
        if outside:
            self.problems.append(f"LEAK {path} {user}: documents {sorted(outside)}")
        if own is not None and own.lower() not in body.lower():
            self.problems.append(f"MISS {path} {user}: own {own!r} not received")


def named_documents(payload: dict[str, Any]) -> set[str]:
    """The document ids a query response (or a chat completion's ``gateway`` object) names."""
    found = {s["id"] for s in payload.get("sources", [])} | {s["id"] for s in payload.get("evidence", [])}
    found |= {p["doc_id"] for p in payload.get("passages") or []}
    probe = payload.get("probe")
    if probe:
        found |= {d["id"] for d in probe["documents"]} | set(probe["covering_documents"])
    return found


def user_headers(user: str) -> dict[str, str]:
    headers = {"Authorization": "Bearer chatbot-key"}
    if user != NOBODY:
        headers |= {"X-Gateway-User": user, "X-Gateway-User-Groups": USERS[user]}
    return headers


ADMIN = {"Authorization": "Bearer admin-key"}


@asynccontextmanager
async def served(settings: Settings, embeddings: USEEmbeddings) -> AsyncIterator[str]:
    """The app on the scripted model behind a real uvicorn server in this event loop (the folder sync is a
    blocking HTTP client of its own)."""
    model = ScriptedChatModel(responder=responder)
    app = create_app(settings, ProviderOverrides(chat_model=model, embeddings=embeddings))
    async with served_app(app) as url:
        yield url


@contextmanager
def store_settings(kind: str, base: Settings, dimension: int) -> Iterator[Settings]:
    if kind == "lancedb":
        yield base
        return
    with running_fake_pinecone(dimension=dimension) as fake:
        yield base.replace(
            vector_store={"pinecone_api_key": SecretStr(FAKE_API_KEY), "pinecone_index_host": fake.url},
        )


# The local identity provider's key: token_paths names its users by tokens signed with it.
IDP_KEY = rsa_key("leak-walk-key")


@pytest.fixture
def idp() -> Iterator[JwksServer]:
    with jwks_server(IDP_KEY) as server:
        yield server


def leak_settings(settings: Settings, prefix: str, idp: JwksServer) -> Settings:
    keys = admin_and_chatbot_keys(TENANT)
    return settings.replace(
        redis={"url": REDIS_TEST_URL, "timeout_s": 0.5},
        cache={"enabled": True, "prefix": prefix},
        semantic_cache={"enabled": True},
        access={"api_keys": keys},
        identity={"unset_documents": "closed", "issuer": ISSUER, "audience": AUDIENCE, "jwks_url": idp.url},
    )


async def ingest_everything(client: httpx.AsyncClient, url: str, root: Path, *, lists_files: bool) -> dict[str, str]:
    """The documents API, a file upload per group (``access`` form field), a folder sync with ``.access`` files:
    restricted document id -> its group."""
    upserted = await client.post("/v1/documents", json={"tenant": TENANT, "documents": DOCUMENTS}, headers=ADMIN)
    assert upserted.status_code == 200, upserted.text
    for group, (name, data) in UPLOADS.items():
        files = [("files", (name, data, "text/markdown"))]
        uploaded = await client.post(f"/v1/files?tenant={TENANT}", data={"access": group}, files=files, headers=ADMIN)
        assert uploaded.status_code == 200, uploaded.text
    synced = root / "sync"
    for group, (name, text) in SYNCED.items():
        (synced / group).mkdir(parents=True)
        (synced / group / ".access").write_text(f"{group}\n")
        (synced / group / name).write_text(text)
    code = await asyncio.to_thread(ingest_main, [str(synced), "--tenant", TENANT, "--url", url, "--key", "admin-key"])
    assert code == 0
    listing = (await client.get(f"/v1/files?tenant={TENANT}", headers=ADMIN)).json()["files"]
    owner = {"hr-comp-memo": "hr", "eng-bridge-runbook": "eng"}  # as DOCUMENTS tags them
    by_file = {f["file"]: f for f in listing}
    expected = {UPLOADS[g][0]: g for g in UPLOADS} | {f"sync/{g}/{SYNCED[g][0]}": g for g in SYNCED}
    if not lists_files:
        # Pinecone cannot export a namespace, so the gateway lists no files: a one-section Markdown file is one
        # document named by its path (what LanceDB's listing shows). Were that wrong, the user's own documents
        # would fall outside what the ledger lets them read, and the test would fail, not pass.
        assert listing == []
        return owner | {name: group for name, group in expected.items()}
    assert set(by_file) == set(expected), by_file
    for name, group in expected.items():
        assert by_file[name]["access"] == [group], by_file[name]
        assert by_file[name]["documents"] == [name], by_file[name]
        owner |= {doc: group for doc in by_file[name]["documents"]}
    return owner


def readable(owner: dict[str, str]) -> dict[str, set[str]]:
    return {g: {d for d, o in owner.items() if o == g} | {"handbook"} for g in SECRETS} | {NOBODY: {"handbook"}}


def chat_body(question: str, route: str, stream: bool) -> dict[str, Any]:
    return {
        "model": f"gateway-{route.replace('_', '-')}",
        "stream": stream,
        "tenant": TENANT,
        "messages": [{"role": "user", "content": question}],
    }


@pytest.mark.redis
@pytest.mark.parametrize("kind", ["lancedb", "pinecone"])
async def test_no_path_hands_a_user_words_of_a_document_they_may_not_read(
    kind: str, settings: Settings, embeddings: USEEmbeddings, prefix: str, tmp_path: Path, idp: JwksServer
) -> None:
    with store_settings(kind, leak_settings(settings, prefix, idp), embeddings.dimensions) as configured:
        async with served(configured, embeddings) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
            owner = await ingest_everything(client, url, tmp_path, lists_files=kind == "lancedb")
            ledger = Ledger(readable(owner), owner)
            await walk(client, ledger)

    print(f"{kind}: {len(ledger.checks)} (path, user) checks, {len(ledger.problems)} problems")
    for problem in ledger.problems:
        print(problem)
    assert ledger.problems == []
    assert len(ledger.checks) == EXPECTED_CHECKS, len(ledger.checks)
    assert {user for _, user in ledger.checks} == {*USERS, NOBODY}


QUERY_ROUTES = ("single_hop", "multi_hop", "auto")
CHAT_ROUTES = QUERY_ROUTES
QUESTIONS = [(question, secret, group) for group, rows in SECRETS.items() for _, question, secret in rows]
PER_USER = len(QUESTIONS) * (len(QUERY_ROUTES) + 1 + 2 * len(CHAT_ROUTES))  # query routes, route, chat x2


async def walk(client: httpx.AsyncClient, ledger: Ledger) -> None:
    await cache_paths(client, ledger)  # first: the matrix's answers would be semantic hits for these questions
    for user in (*USERS, NOBODY):
        group = USERS.get(user, NOBODY)
        for question, secret, owner in QUESTIONS:
            own = secret if owner == group else None
            await ask_every_path(client, ledger, user, question, own)
    await curation_paths(client, ledger)
    await open_document(client, ledger)
    await console_paths(client, ledger)
    await token_paths(client, ledger)


async def query(client: httpx.AsyncClient, user: str, question: str, route: str = "auto") -> dict[str, Any]:
    body = {"query": question, "tenant": TENANT, "route": route, "include_passages": True}
    response = await client.post("/v1/query", json=body, headers=user_headers(user))
    assert response.status_code == 200, response.text
    payload: dict[str, Any] = response.json()
    return payload


async def ask_every_path(client: httpx.AsyncClient, ledger: Ledger, user: str, question: str, own: str | None) -> None:
    for route in QUERY_ROUTES:
        payload = await query(client, user, question, route)
        ledger.check(f"query/{route}", user, json.dumps(payload), named_documents(payload), own=own)

    routed = await client.post("/v1/route", json={"query": question, "tenant": TENANT}, headers=user_headers(user))
    assert routed.status_code == 200, routed.text
    probe = routed.json().get("probe") or {}
    probed = {d["id"] for d in probe.get("documents", [])} | set(probe.get("covering_documents", []))
    own_doc = own is not None and bool(probed & {d for d, g in ledger.owner.items() if g == USERS[user]})
    ledger.check("route", user, routed.text, probed)
    if own is not None and not own_doc:
        ledger.problems.append(f"MISS route {user}: own document not among the probe's {sorted(probed)}")

    for route in CHAT_ROUTES:
        whole = await client.post(
            "/v1/chat/completions", json=chat_body(question, route, False), headers=user_headers(user)
        )
        assert whole.status_code == 200, whole.text
        ledger.check(f"chat/{route}", user, whole.text, named_documents(whole.json()["gateway"]), own=own)

        streamed = await client.post(
            "/v1/chat/completions", json=chat_body(question, route, True), headers=user_headers(user)
        )
        assert streamed.status_code == 200, streamed.text
        chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
        finals = [c["gateway"] for c in chunks if c.get("choices") and c["choices"][0].get("finish_reason")]
        assert len(finals) == 1, streamed.text
        content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
        assert own is None or own in content, (user, question, content)  # the words arrived as content, not only
        ledger.check(f"chat-stream/{route}", user, streamed.text, named_documents(finals[0]), own=own)


async def cache_paths(client: httpx.AsyncClient, ledger: Ledger) -> None:
    """The exact cache: a question asked by one user, then the other, then the first again (a hit, or the other's
    miss proves nothing); the semantic cache: the first user's paraphrase hits, the other's never gets it."""
    cases = {
        "hr-user": ("Which codeword does the salary review use?", "What codeword does the salary review use?"),
        "eng-user": ("Which passphrase does the incident bridge use?", "What passphrase does the incident bridge use?"),
    }
    secrets = {"hr-user": "PERIWINKLE", "eng-user": "TANGERINE"}
    for first, (question, paraphrase) in cases.items():
        other = next(u for u in USERS if u != first)
        asked = await query(client, first, question)
        ledger.check("cache/first", first, json.dumps(asked), named_documents(asked), own=secrets[first])
        replay = await query(client, other, question)
        ledger.check("cache/exact-replay", other, json.dumps(replay), named_documents(replay))
        again = await query(client, first, question)
        ledger.check("cache/exact-hit", first, json.dumps(again), named_documents(again), own=secrets[first])
        if (asked["cached"], replay["cached"], again["cached"]) != (False, False, True):
            ledger.problems.append(f"cache {first}: cached flags {asked['cached'], replay['cached'], again['cached']}")

        hit = await query(client, first, paraphrase)
        ledger.check("cache/semantic-hit", first, json.dumps(hit), named_documents(hit), own=secrets[first])
        if not hit["cached"]:
            ledger.problems.append(f"cache {first}: the paraphrase missed, so the other's check proves nothing")
        theirs = await query(client, other, paraphrase)
        ledger.check("cache/semantic-other", other, json.dumps(theirs), named_documents(theirs))


# Per group: a verified document a curator adds to resolve its user's gap (open to that group alone), the words the
# re-run's answer must then give, and the rule that proves it.
VERIFIED: dict[str, tuple[dict[str, Any], str]] = {
    "hr": (
        {
            "id": "hr-salary-bands-2025",
            "title": "Who reviews the salary bands",
            "text": "The salary bands are reviewed by the pay committee; the review codeword stays PERIWINKLE.",
            "access": ["hr"],
        },
        "pay committee",
    ),
    "eng": (
        {
            "id": "eng-bridge-rota-2025",
            "title": "How often the bridge on-call rota changes",
            "text": "The bridge on-call rota changes every second Monday; the bridge passphrase stays TANGERINE.",
            "access": ["eng"],
        },
        "every second Monday",
    ),
}

EXPECTED_CHECKS = (
    (len(USERS) + 1) * PER_USER  # the matrix, nobody included
    + 3 * len(USERS)  # exact cache: first asker, the other user, first asker again
    + 2 * len(USERS)  # semantic paraphrase: first asker, the other user
    + 6 * len(USERS)  # curation: gaps by user and unfiltered, a resolution, pairs by user and unfiltered, a suite
    + 3  # nobody: the tenant-open document, by query, route and chat
    # console: the playground, the list and its searches, every document's page (the verified ones included)
    + (len(USERS) + 1) * (2 * (len(QUESTIONS) + 1) + 3 + len(QUESTIONS) + len(VERIFIED) + 1)
    + len(USERS) * (PER_USER + len(QUESTIONS))  # users named by tokens: the matrix's paths, and the direct model
)
SUITE_CASES = [rows[0][1] for rows in SECRETS.values()]  # each group's first secret question
POLL_S, POLL_LIMIT_S = 0.05, 60.0


def gap_documents(gaps: list[dict[str, Any]]) -> set[str]:
    """The document ids gaps' evidence names (what a search read, what changed)."""
    found: set[str] = set()
    for gap in gaps:
        evidence = gap["evidence"]
        found |= {p["document"] for p in evidence.get("best_passages", [])}
        found |= {c["document"] for c in evidence.get("changed_documents", [])}
    return found


def pair_documents(rows: list[dict[str, Any]]) -> set[str]:
    return {doc for row in rows for doc in (*row["positive_ids"], *row["negative_ids"])}


async def finished_run(client: httpx.AsyncClient, location: str) -> dict[str, Any]:
    """A suite run polled as its API says (202, then its Location until it is done or failed), within a bound."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + POLL_LIMIT_S
    while True:
        polled = await client.get(location, headers=ADMIN)
        assert polled.status_code == 200, polled.text
        run: dict[str, Any] = polled.json()
        if run["state"] != "running":
            return run
        assert loop.time() < deadline, f"suite run still running after {POLL_LIMIT_S}s: {run}"
        await asyncio.sleep(POLL_S)


async def curation_paths(client: httpx.AsyncClient, ledger: Ledger) -> None:
    """Each user rates one of their answers down with the answer they expected. Then, per user: the gaps filtered by
    that user, and the gaps their questions formed in the unfiltered list, whose evidence searched only what they may
    read (the answers only the other group's documents hold are ``restricted``, said by access tags alone); a
    resolution of their gap with a verified document of their group, re-run as them; the training pairs filtered by
    them and their rows of the unfiltered export; an evaluation suite run as them."""
    asked = {
        "hr-user": "Who reviews the salary bands?",
        "eng-user": "How often does the bridge on-call rota change?",
    }
    rated: dict[str, str] = {}
    for user, question in asked.items():
        answer = await query(client, user, question, "single_hop")
        rated[user] = answer["response_id"]
        response = await client.post(
            "/v1/feedback",
            json={"tenant": TENANT, "response_id": answer["response_id"], "rating": "down", "expected_answer": "x"},
            headers=user_headers(user),
        )
        assert response.status_code == 202, response.text
        assert response.json()["recorded"], response.text

    unfiltered = await client.get("/v1/knowledge-gaps", params={"tenant": TENANT}, headers=ADMIN)
    assert unfiltered.status_code == 200, unfiltered.text
    every_gap = unfiltered.json()["gaps"]
    resolvable: dict[str, str] = {}
    for user, question in asked.items():
        group = USERS[user]
        gaps = await client.get("/v1/knowledge-gaps", params={"tenant": TENANT, "user": user}, headers=ADMIN)
        assert gaps.status_code == 200, gaps.text
        # A gap is of one visibility: returned whole, each of these holds this user's questions and no one else's.
        shown = gaps.json()["gaps"]
        ledger.check("knowledge-gaps", user, gaps.text, gap_documents(shown), own=question)
        if not shown or any({r["user_id"] for r in g["records"]} != {user} for g in shown):
            ledger.problems.append(f"gaps {user}: a gap holding another asker's question: {gaps.text}")
        theirs = [g for g in every_gap if any(r["user_id"] == user for r in g["records"])]
        ledger.check("knowledge-gaps/all", user, json.dumps(theirs), gap_documents(theirs), own=question)
        if [g["id"] for g in theirs] != [g["id"] for g in shown]:
            ledger.problems.append(f"gaps {user}: the unfiltered list forms other gaps of their questions")
        # The other group's secret questions this user asked in the matrix found nothing they may read: the tenant
        # holds the answer, closed to them, and the gap says so by the other group's access tag.
        closed = [g for g in theirs if g["diagnosis"] == "restricted"]
        if not any(OTHER[group] in g["evidence"]["outside_visibility"]["access"] for g in closed):
            ledger.problems.append(f"MISS gaps {user}: no restricted gap naming {OTHER[group]!r}: {json.dumps(theirs)}")
        (mine,) = [g for g in theirs if any(r["id"] == rated[user] for r in g["records"])]
        resolvable[user] = mine["id"]

    for user, gap_id in resolvable.items():
        group = USERS[user]
        document, words = VERIFIED[group]
        ledger.owner[document["id"]] = group
        ledger.readable[group].add(document["id"])
        resolved = await client.post(
            f"/v1/knowledge-gaps/{gap_id}/resolution",
            json={"tenant": TENANT, "documents": [document], "rules": [{"kind": "must_contain", "value": words}]},
            headers=ADMIN,
        )
        assert resolved.status_code == 200, resolved.text
        result = resolved.json()
        named = {d["id"] for c in result["cases"] for d in c["before_documents"]}
        named |= {d for c in result["cases"] for d in c["after_documents"]} | set(result["document_ids"])
        # Re-run as the recorded reader: the verified document is theirs alone, so only they could answer from it.
        ledger.check("resolution", user, resolved.text, named, own=words)
        if not result["closed"] or {c["user_id"] for c in result["cases"]} != {user}:
            ledger.problems.append(f"resolution {user}: not closed, or re-run as another: {resolved.text}")

    every_row = await client.get("/v1/training-pairs", params={"tenant": TENANT}, headers=ADMIN)
    assert every_row.status_code == 200, every_row.text
    all_rows = [json.loads(line) for line in every_row.text.splitlines()]
    for user, question in asked.items():
        pairs = await client.get("/v1/training-pairs", params={"tenant": TENANT, "user": user}, headers=ADMIN)
        assert pairs.status_code == 200, pairs.text
        rows = [json.loads(line) for line in pairs.text.splitlines()]
        ledger.check("training-pairs", user, pairs.text, pair_documents(rows), own=question)
        if not rows or {r["user_id"] for r in rows} != {user}:
            ledger.problems.append(f"pairs {user}: rows of {sorted({str(r['user_id']) for r in rows})}")
        if VERIFIED[USERS[user]][0]["id"] not in {d for r in rows for d in r["positive_ids"]}:
            ledger.problems.append(f"MISS training-pairs {user}: the resolution's verified document not positive")
        theirs = [r for r in all_rows if r["user_id"] == user]
        ledger.check("training-pairs/all", user, json.dumps(theirs), pair_documents(theirs), own=question)

    for case in SUITE_CASES:
        added = await client.post(
            "/v1/eval-suites/leaks/cases", json={"tenant": TENANT, "question": case, "rules": []}, headers=ADMIN
        )
        assert added.status_code == 201, added.text
    for user in USERS:
        run_as = {"user_id": user, "groups": [USERS[user]]}
        started = await client.post(
            "/v1/eval-suites/leaks/runs", json={"tenant": TENANT, "run_as": run_as}, headers=ADMIN
        )
        assert started.status_code == 202, started.text
        run = await finished_run(client, started.headers["location"])
        own = next(secret for _, q, secret in SECRETS[USERS[user]] if q in SUITE_CASES)
        ledger.check("eval-suite", user, json.dumps(run), set(), own=own)
        if run["state"] != "done" or run["run_as"] != run_as:
            ledger.problems.append(f"eval-suite {user}: {run['state']} as {run['run_as']}: {run.get('error')}")


async def open_document(client: httpx.AsyncClient, ledger: Ledger) -> None:
    """A request naming nobody reads the tenant-open document (and, by the matrix, nothing else)."""
    answer = await query(client, NOBODY, OPEN_QUESTION, "single_hop")
    ledger.check("open/query", NOBODY, json.dumps(answer), named_documents(answer), own=OPEN_ANSWER)
    if "handbook" not in named_documents(answer):
        ledger.problems.append("MISS open/query: the handbook not among the sources")
    routed = await client.post(
        "/v1/route", json={"query": OPEN_QUESTION, "tenant": TENANT}, headers=user_headers(NOBODY)
    )
    probe = routed.json().get("probe") or {}
    probed = {d["id"] for d in probe.get("documents", [])}
    ledger.check("open/route", NOBODY, routed.text, probed)
    if "handbook" not in probed:
        ledger.problems.append(f"MISS open/route: the handbook not among the probe's {sorted(probed)}")
    chat = await client.post(
        "/v1/chat/completions", json=chat_body(OPEN_QUESTION, "single_hop", False), headers=user_headers(NOBODY)
    )
    ledger.check("open/chat", NOBODY, chat.text, named_documents(chat.json()["gateway"]), own=OPEN_ANSWER)


async def console_paths(client: httpx.AsyncClient, ledger: Ledger) -> None:
    """The console, signed in with the chatbot key and each user named in the trusted headers on every request (an
    ingress in front of it): the playground's page (answer, evidence, probe, timeline) for every question and the
    open one, the knowledge list, its search, and every document's page. The user's own documents show, the other's
    never; a document they may not read answers exactly as a missing one. A store that cannot list (Pinecone) shows
    no documents to anyone, and says so."""
    lists = bool((await client.get("/v1/files", params={"tenant": TENANT}, headers=ADMIN)).json()["files"])
    own_word = {"hr": "codeword", "eng": "passphrase"}  # in each of the group's documents, in no other
    for user in (*USERS, NOBODY):
        group = USERS.get(user, NOBODY)
        named = {name: value for name, value in user_headers(user).items() if name != "Authorization"}
        async with httpx.AsyncClient(base_url=client.base_url, timeout=60, headers=named) as browser:
            page = await browser.get("/console/sign-in")
            token = re.search(r'name="csrf-token" content="([^"]+)"', page.text)
            assert token is not None, page.text
            csrf = token.group(1)
            signed = await browser.post("/console/sign-in", data={"key": "chatbot-key", "_csrf_token": csrf})
            assert signed.status_code == 303, signed.text
            says = "documents open to the whole tenant" if user == NOBODY else f'id="reader-user">{user}</code>'
            asked = [(q, secret if owner == group else None) for q, secret, owner in QUESTIONS]
            for question, own in [*asked, (OPEN_QUESTION, OPEN_ANSWER)]:
                for route in ("single_hop", "multi_hop"):
                    form = {"query": question, "route": route, "_csrf_token": csrf}
                    answered = await browser.post("/console/playground/", data=form)
                    assert answered.status_code == 200, answered.text
                    shown = {unquote(d) for d in re.findall(r'/console/knowledge/document\?id=([^"]+)"', answered.text)}
                    covering = re.search(r"Covering documents: ([^<]*)</p>", answered.text)
                    shown |= set(covering.group(1).split(", ")) - {"none"} if covering else set()
                    ledger.check(f"console/playground/{route}", user, answered.text, shown, own=own)
                    if says not in answered.text:
                        ledger.problems.append(f"console/playground {user}: the page does not say it reads as them")

            listing = await browser.get("/console/knowledge/")
            assert listing.status_code == 200, listing.text
            listed = set(re.findall(r'<tr class="document" data-id="([^"]+)">', listing.text))
            ledger.check("console/knowledge", user, listing.text, listed)
            if lists and listed != ledger.readable[group]:
                ledger.problems.append(f"MISS console/knowledge {user}: listed {sorted(listed)}")
            if not lists and 'id="cannot-list"' not in listing.text:
                ledger.problems.append(f"console/knowledge {user}: a store that cannot list listed {sorted(listed)}")
            for word in own_word.values():
                found = await browser.get("/console/knowledge/", params={"q": word})
                matched = set(re.findall(r'<tr class="document" data-id="([^"]+)">', found.text))
                ledger.check("console/knowledge-search", user, found.text, matched)
                wanted = {d for d, g in ledger.owner.items() if g == group} if own_word.get(group) == word else set()
                if lists and matched != wanted:
                    ledger.problems.append(f"console/knowledge-search {user} {word!r}: {sorted(matched)}")

            missing = await browser.get("/console/knowledge/document", params={"id": "no-such-document"})
            for doc in [*sorted(ledger.owner), "handbook"]:
                opened = await browser.get("/console/knowledge/document", params={"id": doc})
                if doc in ledger.readable[group]:
                    ledger.check("console/document", user, opened.text, {doc} if lists else set())
                    words = [OPEN_ANSWER] if doc == "handbook" else [secret for _, _, secret in SECRETS[group]]
                    if lists and (opened.status_code != 200 or not any(w in opened.text for w in words)):
                        ledger.problems.append(f"MISS console/document {user}: {doc} ({opened.status_code})")
                    continue
                # The id the user sent comes back in the page (as it does for a missing one): not a leak of it.
                ledger.check("console/document-hidden", user, opened.text.replace(doc, ""), set())
                as_missing = opened.text.replace(doc, "ID") == missing.text.replace("no-such-document", "ID")
                if opened.status_code != missing.status_code or not as_missing:
                    ledger.problems.append(f"ORACLE console/document {user}: {doc} answers unlike a missing one")


async def token_paths(client: httpx.AsyncClient, ledger: Ledger) -> None:
    """The matrix's paths (the query API on each route, the route alone, chat whole and streamed) and the chat model
    ``gateway-direct`` (the LLM alone), with each user named by an OIDC token the gateway verifies against the local
    identity provider instead of by headers. Their groups come as Keycloak's mapper sends them (hr-user's as full
    paths), each with a group no document names, so their visibility, hence their cache entries, are not the header
    users': every answer here is computed for them. "//eng" and "//hr" name no group: were more than one "/"
    dropped, each would read the other's words."""
    claimed = {"hr-user": ["/hr", "/staff", "//eng"], "eng-user": ["eng", "staff", "//hr"]}
    for user, groups in claimed.items():
        signed = token(IDP_KEY, subject=user, groups=groups)
        headers = {"Authorization": "Bearer chatbot-key", "X-Gateway-User-Token": signed}
        mine = {doc for doc, group in ledger.owner.items() if group == USERS[user]}
        for question, secret, owner in QUESTIONS:
            own = secret if owner == USERS[user] else None
            for route in QUERY_ROUTES:
                body = {"query": question, "tenant": TENANT, "route": route, "include_passages": True}
                answered = await client.post("/v1/query", json=body, headers=headers)
                assert answered.status_code == 200, answered.text
                ledger.check(f"token/query/{route}", user, answered.text, named_documents(answered.json()), own=own)

            routed = await client.post("/v1/route", json={"query": question, "tenant": TENANT}, headers=headers)
            assert routed.status_code == 200, routed.text
            probe = routed.json().get("probe") or {}
            probed = {d["id"] for d in probe.get("documents", [])} | set(probe.get("covering_documents", []))
            ledger.check("token/route", user, routed.text, probed)
            if own is not None and not probed & mine:
                ledger.problems.append(f"MISS token/route {user}: own document not among the probe's {sorted(probed)}")

            for route in (*CHAT_ROUTES, "direct"):
                expected = None if route == "direct" else own  # the LLM alone reads no document, the user's neither
                whole = await client.post(
                    "/v1/chat/completions", json=chat_body(question, route, False), headers=headers
                )
                assert whole.status_code == 200, whole.text
                named = named_documents(whole.json()["gateway"])
                ledger.check(f"token/chat/{route}", user, whole.text, named, own=expected)
                if route == "direct":
                    continue
                streamed = await client.post(
                    "/v1/chat/completions", json=chat_body(question, route, True), headers=headers
                )
                assert streamed.status_code == 200, streamed.text
                chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
                finals = [c["gateway"] for c in chunks if c.get("choices") and c["choices"][0].get("finish_reason")]
                assert len(finals) == 1, streamed.text
                content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
                assert own is None or own in content, (user, question, content)
                ledger.check(f"token/chat-stream/{route}", user, streamed.text, named_documents(finals[0]), own=own)
