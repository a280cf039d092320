"""``python -m gateway.ingest`` against a live gateway over HTTP: a folder in, a rerun that skips what landed, a
change and a deletion synced, and the refused files reported, never half-indexed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from gateway.ingest.cli import main
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import Settings
from tests.integration.test_checked_streaming import served
from tests.sample_files import sample


def folder(root: Path) -> Path:
    manuals = root / "manuals"
    for kind in ("md", "pdf", "docx"):
        for lang in ("en", "ja"):
            name, data = sample(kind, lang)
            (manuals / name).parent.mkdir(parents=True, exist_ok=True)
            (manuals / name).write_bytes(data)
    (manuals / "tool.exe").write_bytes(b"MZ")
    (manuals / ".hidden.md").write_text("# not synced\n")
    return manuals


async def listing(url: str) -> dict[str, str]:
    async with httpx.AsyncClient(base_url=url) as client:
        files = (await client.get("/v1/files?tenant=manuals")).json()["files"]
    return {f["file"]: f["sha256"] for f in files}


async def test_a_folder_synced_rerun_changed_and_pruned(
    settings: Settings, embeddings: USEEmbeddings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manuals = folder(tmp_path)
    (manuals / "broken.pdf").write_bytes(b"%PDF-1.7\nbroken")
    ingest = ["--tenant", "manuals"]
    async with served(settings, embeddings) as url:
        first = await asyncio.to_thread(main, [str(manuals), *ingest, "--url", url])
        first_out = capsys.readouterr().out
        after_first = await listing(url)
        again = await asyncio.to_thread(main, [str(manuals), *ingest, "--url", url])
        again_out = capsys.readouterr().out

        (manuals / "broken.pdf").unlink()
        (manuals / "en" / "handbook.md").write_text("# Handbook\n\n## Billing\n\nRetries now wait six days.\n")
        (manuals / "ja" / "handbook.docx").unlink()
        synced = await asyncio.to_thread(main, [str(manuals), *ingest, "--url", url, "--sync"])
        synced_out = capsys.readouterr().out
        after_sync = await listing(url)

    assert first == 2  # a file was refused
    assert "6 files indexed" in first_out
    assert "1 refused" in first_out
    assert "refused manuals/broken.pdf: 422" in first_out
    assert "skipped" in first_out
    assert "tool.exe" in first_out
    assert sorted(after_first) == sorted(
        f"manuals/{lang}/handbook.{k}" for k in ("md", "pdf", "docx") for lang in ("en", "ja")
    )
    assert again == 2  # the broken file, still there, is tried and refused again; nothing else is sent
    assert "0 files indexed" in again_out
    assert "6 unchanged" in again_out
    assert synced == 0
    assert "1 files indexed" in synced_out
    assert "4 unchanged" in synced_out
    assert "1 documents deleted" in synced_out
    assert "manuals/ja/handbook.docx" not in after_sync
    assert after_sync["manuals/en/handbook.md"] != after_first["manuals/en/handbook.md"]
    assert len(after_sync) == 5


async def test_sync_deletes_only_under_the_folders_it_was_given(
    settings: Settings, embeddings: USEEmbeddings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manuals = folder(tmp_path / "a")
    other = tmp_path / "b" / "faq"
    other.mkdir(parents=True)
    (other / "faq.md").write_text("# FAQ\n\n## Billing\n\nAsk support.\n")
    async with served(settings, embeddings) as url:
        assert await asyncio.to_thread(main, [str(other), "--tenant", "manuals", "--url", url]) == 0
        await asyncio.to_thread(main, [str(manuals), "--tenant", "manuals", "--url", url, "--sync"])
        capsys.readouterr()
        held = await listing(url)
    assert "faq/faq.md" in held  # another folder's file, untouched by this folder's sync


async def access_listing(url: str) -> dict[str, object]:
    async with httpx.AsyncClient(base_url=url) as client:
        files = (await client.get("/v1/files?tenant=manuals")).json()["files"]
    return {f["file"]: f["access"] for f in files}


async def test_access_files_set_who_may_read_a_folder_and_a_changed_one_resends_only_its_files(
    settings: Settings, embeddings: USEEmbeddings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``.access`` applies to its folder and below (the nearest wins); a file under none gets the tenant's
    default; changing a folder's ``.access`` sends its files again (re-tagged by the gateway), no other."""
    manuals = folder(tmp_path)
    (manuals / "en" / ".access").write_text("# who reads the English manuals\nhr, eng\n")
    (manuals / "ja" / ".access").write_text("tenant\n")
    ingest = [str(manuals), "--tenant", "manuals"]
    async with served(settings, embeddings) as url:
        assert await asyncio.to_thread(main, [*ingest, "--url", url]) == 0
        first = await access_listing(url)
        capsys.readouterr()
        (manuals / "en" / ".access").write_text("eng\n")
        assert await asyncio.to_thread(main, [*ingest, "--url", url]) == 0
        changed_out = capsys.readouterr().out
        second = await access_listing(url)
        (manuals / "ja" / ".access").write_text("*everyone\n")
        refused = await asyncio.to_thread(main, [*ingest, "--url", url])
        after_refusal = await access_listing(url)

    assert first == {
        **{f"manuals/en/handbook.{k}": ["eng", "hr"] for k in ("md", "pdf", "docx")},
        **{f"manuals/ja/handbook.{k}": "tenant" for k in ("md", "pdf", "docx")},
    }
    assert "3 files indexed" in changed_out
    assert "3 unchanged" in changed_out
    assert {name: access for name, access in second.items() if "/en/" in name} == {
        f"manuals/en/handbook.{k}": ["eng"] for k in ("md", "pdf", "docx")
    }
    assert refused == 1  # an invalid group stops the sync before anything is sent
    assert after_refusal == second
