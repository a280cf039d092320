"""The image-build step that trains the router and fits the calibration: it writes the artefacts the app looks up at
start-up."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from gateway.query.calibration import calibration_path
from gateway.query.router_artefact import build_artefact
from gateway.settings import Settings
from routes import knowledge_router
from routes.calibration.artefact import load
from routes.corpus import all_cases
from routes.knowledge_router import artefact_path
from routes.logistic_router import LogisticModel


def test_build_artefact_writes_what_start_up_loads(tmp_path: Path) -> None:
    settings = Settings().replace(router_artefact={"cache_dir": tmp_path / "router"}, embeddings={"model": "fake-64"})
    paths = build_artefact(settings, DeterministicFakeEmbedding(size=64))

    directory, chunking, embedder = settings.router_artefact.cache_dir, "c700o100", settings.embeddings.fingerprint()
    expected = [artefact_path(directory, all_cases(), embedder, chunking, s) for s in ("retrieve", "spread")]
    # The calibration is fitted beside the router, for the same embedder.
    assert paths == [*expected, calibration_path(settings)]
    assert load(paths[2])[0].fingerprint == embedder
    assert sorted(LogisticModel.load(paths[0]).classes) == ["direct", "single_hop"]
    assert sorted(LogisticModel.load(paths[1]).classes) == ["multi_hop", "single_hop"]

    # A second run (an image rebuild with the layer cached) reuses the artefacts instead of retraining.
    written = [path.stat().st_mtime_ns for path in paths]
    assert build_artefact(settings, DeterministicFakeEmbedding(size=64)) == paths
    assert [path.stat().st_mtime_ns for path in paths] == written


def test_other_chunking_is_another_artefact(tmp_path: Path) -> None:
    """Training probes chunk the tenants like ingestion does: other chunking, other signals. The calibration reads
    whole pages, not chunks: one embedder, one calibration, whatever the chunking."""
    settings = Settings().replace(router_artefact={"cache_dir": tmp_path / "router"}, embeddings={"model": "fake-64"})
    *default, calibration = build_artefact(settings, DeterministicFakeEmbedding(size=64))
    *other, same = build_artefact(settings.replace(chunking={"size": 300}), DeterministicFakeEmbedding(size=64))
    assert set(default).isdisjoint(other)
    assert same == calibration


def test_an_embedder_with_other_vectors_is_another_artefact(tmp_path: Path) -> None:
    """Artefacts are keyed by the embedder's fingerprint, not its model's name: the same model asked with another
    prefix or input type gives other vectors, and a router fitted on one set of cosines must not read the other's."""
    settings = Settings().replace(router_artefact={"cache_dir": tmp_path / "router"}, embeddings={"model": "fake-64"})
    default = build_artefact(settings, DeterministicFakeEmbedding(size=64))
    prefixed = settings.replace(embeddings={"query_prefix": "query: ", "passage_prefix": "passage: "})
    typed = settings.replace(embeddings={"query_input_type": "query"})
    served = settings.replace(embeddings={"provider": "openai"})
    others = [build_artefact(other, DeterministicFakeEmbedding(size=64)) for other in (prefixed, typed, served)]
    names = {path.name for paths in [default, *others] for path in paths}
    assert len(names) == 12  # two router stages and the calibration each, none shared
    # What changes no vector shares the artefact.
    assert build_artefact(settings.replace(embeddings={"threads": 2}), DeterministicFakeEmbedding(size=64)) == default


def test_build_artefact_fails_loudly_when_it_cannot_write(tmp_path: Path) -> None:
    """The image build must stop here, not ship an image that trains on every pod start."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    settings = Settings().replace(router_artefact={"cache_dir": blocker / "router"}, embeddings={"model": "fake-64"})
    with pytest.raises(RuntimeError, match="not written"):
        build_artefact(settings, DeterministicFakeEmbedding(size=64))


def test_a_changed_knowledge_base_document_is_another_artefact(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The written documents are training tenants: editing one must retrain, not reuse the old artefact."""
    cases = all_cases()
    before = artefact_path(tmp_path, cases, "fake-64", "c700o100", "spread")
    passages, kb, *redundant = knowledge_router.training_files()
    edited = kb.replace("開発".encode(), b"dev")
    monkeypatch.setattr(knowledge_router, "training_files", lambda: [passages, edited, *redundant])
    assert artefact_path(tmp_path, cases, "fake-64", "c700o100", "spread") != before
    # A retelling edited in a redundant set is a change too (the stories teach repeated knowledge).
    ja = redundant[-1].replace("運休".encode(), "欠航".encode())
    assert ja != redundant[-1]
    monkeypatch.setattr(knowledge_router, "training_files", lambda: [passages, kb, *redundant[:-1], ja])
    assert artefact_path(tmp_path, cases, "fake-64", "c700o100", "spread") != before
