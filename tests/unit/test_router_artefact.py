"""The image-build step that trains the router: it writes the artefact the app looks up at start-up."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from gateway.router_artefact import build_artefact
from gateway.settings import Settings
from routes.examples import load_examples
from routes.logistic_router import LogisticModel, artefact_path


def test_build_artefact_writes_what_start_up_loads(tmp_path: Path) -> None:
    settings = Settings().replace(router_artefact={"cache_dir": tmp_path / "router"}, embeddings={"model": "fake-64"})
    path = build_artefact(settings, DeterministicFakeEmbedding(size=64))

    train = [e for e in load_examples() if e.split == "train"]
    assert path == artefact_path(settings.router_artefact.cache_dir, train, settings.embeddings.model)
    model = LogisticModel.load(path)
    assert sorted(model.classes) == ["direct", "multi_hop", "single_hop"]

    # A second run (an image rebuild with the layer cached) reuses the artefact instead of retraining.
    written = path.stat().st_mtime_ns
    assert build_artefact(settings, DeterministicFakeEmbedding(size=64)) == path
    assert path.stat().st_mtime_ns == written


def test_build_artefact_fails_loudly_when_it_cannot_write(tmp_path: Path) -> None:
    """The image build must stop here, not ship an image that trains on every pod start."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    settings = Settings().replace(router_artefact={"cache_dir": blocker / "router"}, embeddings={"model": "fake-64"})
    with pytest.raises(RuntimeError, match="not written"):
        build_artefact(settings, DeterministicFakeEmbedding(size=64))
