"""``POST /v1/files``: files of every type in one upload, each one's outcome; the readable ones indexed as one
knowledge change with their section paths in the evidence, the refused ones not at all; re-uploads replace."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from gateway.settings import Settings
from tests.chat_support import ACME_ADMIN_KEY, ACME_KEY, bearer, chat_model, keyed
from tests.sample_files import FACTS, sample

KINDS = ["md", "html", "txt", "pdf", "docx", "jsonl"]


async def upload(client: AsyncTestClient[Any], *files: tuple[str, bytes], tenant: str = "docs") -> Any:
    parts = [("files", (name, data, "application/octet-stream")) for name, data in files]
    return await client.post(f"/v1/files?tenant={tenant}", files=parts)


async def listing(client: AsyncTestClient[Any], tenant: str = "docs") -> dict[str, list[str]]:
    response = await client.get(f"/v1/files?tenant={tenant}")
    assert response.status_code == 200, response.text
    return {f["file"]: f["documents"] for f in response.json()["files"]}


async def test_every_type_in_one_upload_is_indexed_as_one_change(make_client: Callable[..., Any]) -> None:
    files = [sample(kind, lang) for kind in KINDS for lang in ("en", "ja")]
    async with make_client() as (client, _):
        before = (await upload(client, ("warm.md", b"# Warm\n\nup\n"))).json()["knowledge_version"]
        response = await upload(client, *files)
        assert response.status_code == 200, response.text
        body = response.json()
        indexed = await listing(client)
    assert (body["indexed"], body["rejected"]) == (12, 0)
    assert [f["status"] for f in body["files"]] == [200] * 12
    assert all(f["chunks"] >= 1 and f["sections"] >= 1 for f in body["files"])
    assert body["knowledge_version"] == before + 2  # one change (fenced by two bumps), not one per file
    assert indexed["en/handbook.pdf"] == ["en/handbook.pdf"]
    assert indexed["ja/handbook.jsonl"] == ["ja-billing", "ja-support"]


@pytest.mark.parametrize("lang", ["en", "ja"])
@pytest.mark.parametrize("kind", ["md", "html", "pdf", "docx"])
async def test_the_evidence_names_the_section_a_passage_came_from(
    make_client: Callable[..., Any], kind: str, lang: str
) -> None:
    fact = FACTS[lang]
    async with make_client() as (client, _):
        assert (await upload(client, sample(kind, lang))).status_code == 200
        response = await client.post(
            "/v1/query", json={"query": fact.question, "tenant": "docs", "route": "single_hop"}
        )
    assert response.status_code == 200, response.text
    best = response.json()["sources"][0]
    assert best["id"] == f"{lang}/handbook.{kind}"
    assert best["section"].startswith(f"{fact.chapter} › {fact.section}")


async def test_a_bad_file_in_a_batch_is_refused_whole_and_the_rest_indexed(make_client: Callable[..., Any]) -> None:
    good = sample("md", "en")
    corrupt = ("broken.pdf", sample("pdf", "en")[1][:300])
    unsupported = ("tool.exe", b"MZ\x90\x00")
    async with make_client() as (client, _):
        response = await upload(client, corrupt, good, unsupported)
        indexed = await listing(client)
    assert response.status_code == 200
    outcomes = {f["file"]: (f["status"], f["chunks"]) for f in response.json()["files"]}
    assert outcomes == {"broken.pdf": (422, 0), good[0]: (200, outcomes[good[0]][1]), "tool.exe": (415, 0)}
    assert set(indexed) == {good[0]}  # nothing of the refused files


@pytest.mark.parametrize(
    ("files", "status"),
    [
        ([("tool.exe", b"MZ")], 415),
        ([("broken.pdf", b"%PDF-1.7\nnot really")], 422),
        ([("a.exe", b"MZ"), ("b.zip", b"PK")], 415),
        ([("a.exe", b"MZ"), ("broken.pdf", b"%PDF-1.7\n")], 422),
    ],
)
async def test_an_upload_with_nothing_indexable_is_a_problem_naming_each_file(
    make_client: Callable[..., Any], files: list[tuple[str, bytes]], status: int
) -> None:
    async with make_client() as (client, _):
        response = await upload(client, *files)
        indexed = await listing(client)
    assert response.status_code == status
    problem = response.json()
    assert response.headers["content-type"].startswith("application/problem+json")
    assert [f["file"] for f in problem["files"]] == [name for name, _ in files]
    assert all(f["reason"] for f in problem["files"])
    assert indexed == {}


async def test_oversize_files_and_uploads_are_413(make_client: Callable[..., Any], settings: Settings) -> None:
    small = settings.replace(limits={"max_file_bytes": 2048, "max_upload_bytes": 64 * 1024})
    async with make_client(settings_override=small) as (client, _):
        one = await upload(client, ("big.md", b"# Big\n\n" + b"word " * 1000))
        whole = await upload(client, *[(f"f{i}.md", b"# F\n\n" + b"x" * 2000) for i in range(40)])
    assert one.status_code == 413
    assert one.json()["files"][0]["status"] == 413
    assert whole.status_code == 413


async def test_a_reupload_replaces_the_files_chunks(make_client: Callable[..., Any]) -> None:
    name, data = sample("md", "en")
    async with make_client() as (client, _):
        first = (await upload(client, (name, data))).json()
        changed = data.replace(b"four days", b"six days")
        second = (await upload(client, (name, changed))).json()
        files = (await client.get("/v1/files?tenant=docs")).json()["files"]
    assert first["files"][0]["chunks"] == second["files"][0]["chunks"]
    assert second["knowledge_version"] > first["knowledge_version"]
    # Every chunk of the file now carries the new content's hash: none of the first version is left.
    assert [(f["file"], f["sha256"]) for f in files] == [(name, hashlib.sha256(changed).hexdigest())]


async def test_a_tenant_admin_key_uploads_and_lists_only_its_own_tenant(
    make_client: Callable[..., Any], settings: Settings
) -> None:
    async with make_client(chat_model(), settings_override=keyed(settings)) as (client, _):
        own = await client.post("/v1/files", files=[("files", sample("md", "en"))], headers=bearer(ACME_ADMIN_KEY))
        listed = await client.get("/v1/files", headers=bearer(ACME_ADMIN_KEY))
        other = await client.get("/v1/files?tenant=globex", headers=bearer(ACME_ADMIN_KEY))
        chatbot = await client.post("/v1/files", files=[("files", sample("md", "en"))], headers=bearer(ACME_KEY))
    assert own.status_code == 200
    assert own.json()["tenant"] == "acme"
    assert [f["file"] for f in listed.json()["files"]] == ["en/handbook.md"]
    assert other.status_code == 403
    assert chatbot.status_code == 403  # a query key changes no knowledge


@pytest.mark.parametrize(
    "request_kwargs",
    [
        {},
        {"headers": {"content-type": "multipart/form-data; boundary=x"}, "content": b"--x--\r\n"},
        {"data": {"files": "not a file"}},
    ],
)
async def test_an_upload_without_file_parts_is_a_400_problem(
    make_client: Callable[..., Any], request_kwargs: dict[str, Any]
) -> None:
    async with make_client() as (client, _):
        response = await client.post("/v1/files?tenant=docs", **request_kwargs)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
