"""The calibration: fitted for the embedder in use, reproducing under USE the values the service used before, its
own values (and artefact) for another embedder, overridden by the environment, and a start that fails cleanly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.errors import CalibrationUnavailableError
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.query.calibration import USE_VALUES, EmbeddingsEncoder, contrast_guard, load_calibration
from gateway.settings import (
    CorrectiveSettings,
    CurationSettings,
    GroundingSettings,
    RetrievalSettings,
    SemanticCacheSettings,
    Settings,
)
from routes.calibration import Calibration, calibration_key
from routes.calibration import model as calibration_model
from routes.calibration.artefact import artefact_path, load_or_fit
from routes.calibration.data import SHARED_SOURCES, load_calibration_set
from routes.calibration.fit import TARGETS, Fitted, fit_calibration
from tests.calibration_support import USE_FINGERPRINT

# Probabilities sit on a steep part of their distributions: a page more or less on one side moves them less than
# this. The cosine thresholds are tighter.
PROBABILITY_TOLERANCE = 0.01
COSINE_TOLERANCE = 0.005
COSINES = ("min_relevance", "semantic_threshold", "gap_similarity")


def test_the_use_fit_reproduces_the_values_the_service_used(calibration: Calibration) -> None:
    fitted = calibration.thresholds()
    assert set(fitted) == set(USE_VALUES)
    for name, before in USE_VALUES.items():
        tolerance = COSINE_TOLERANCE if name in COSINES else PROBABILITY_TOLERANCE
        assert fitted[name] == pytest.approx(before, abs=tolerance), name
    assert calibration.fingerprint == USE_FINGERPRINT
    assert calibration.key == calibration_key(USE_FINGERPRINT)


class OffsetEncoder:
    """USE's vectors moved by one common direction and renormalised: every cosine pulled up towards 1 (as e5's run
    high), and with it every threshold on a cosine, while the order of any two cosines is kept. Another embedder."""

    def __init__(self, embeddings: USEEmbeddings, weight: float = 0.9) -> None:
        self._embeddings = embeddings
        self._offset = weight * np.ones(512, dtype=np.float32) / np.sqrt(512)
        self.calls = 0

    def _moved(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        vectors = self._embeddings.embed_array(texts) + self._offset
        return np.asarray(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))

    def queries(self, texts: list[str]) -> np.ndarray:
        return self._moved(texts)

    def passages(self, texts: list[str]) -> np.ndarray:
        return self._moved(texts)


OFFSET_FINGERPRINT = "test:use-offset"


@pytest.fixture(scope="module")
def offset_fit(tmp_path_factory: pytest.TempPathFactory, embeddings: USEEmbeddings) -> tuple[Fitted, Path]:
    directory = tmp_path_factory.mktemp("calibration")
    fitted = fit_calibration(OffsetEncoder(embeddings), load_calibration_set(), OFFSET_FINGERPRINT, contrast_guard)
    return fitted, directory


def test_another_embedder_gets_its_own_values_at_the_same_operating_points(
    offset_fit: tuple[Fitted, Path], calibration: Calibration
) -> None:
    fitted = offset_fit[0].calibration
    assert fitted.fingerprint == OFFSET_FINGERPRINT
    assert fitted.key != calibration.key
    # Its cosines run higher, so do the thresholds on them, well past any tolerance.
    for name in COSINES:
        assert getattr(fitted, name) > getattr(calibration, name) + 0.05, name
    assert fitted.relevance != calibration.relevance
    assert fitted.judge != calibration.judge
    # ... and the floor drops the share of answering pages it is defined by, as USE's does.
    data = load_calibration_set()
    shared = [r for r in data.rounds if r.source in SHARED_SOURCES]
    encoder = OffsetEncoder(USEEmbeddings())
    answering = [(r.question, f"{p.title}\n{p.text}") for r in shared for p in r.pages if p.label == 1.0]
    questions = encoder.queries([q for q, _ in answering])
    pages = encoder.passages([t for _, t in answering])
    cosines = (questions * pages).sum(axis=1)
    assert float((cosines < fitted.min_relevance).mean()) == pytest.approx(TARGETS.min_relevance_dropped, abs=0.002)
    # The semantic cache serves the same share of paraphrases, and no contrast the guard lets through.
    served = {}
    for kind in ("paraphrase", "contrast"):
        pairs = [p for p in data.pairs if p.kind == kind and (kind == "paraphrase" or not contrast_guard(p.a, p.b))]
        similarity = (encoder.queries([p.a for p in pairs]) * encoder.queries([p.b for p in pairs])).sum(axis=1)
        served[kind] = float((similarity >= fitted.semantic_threshold).mean())
    assert served == {"paraphrase": pytest.approx(TARGETS.semantic_paraphrase_served, abs=0.01), "contrast": 0.0}


def test_the_question_centre_is_where_the_embedders_questions_cluster(
    offset_fit: tuple[Fitted, Path], calibration: Calibration
) -> None:
    """The semantic cache's LSH hashes from this centre: it must be the embedder's own, and for an embedder whose
    questions crowd one direction it must sit in that direction, or the LSH's planes would miss the cone."""
    offset = offset_fit[0].calibration
    for fitted in (calibration, offset):
        centre = np.asarray(fitted.query_centre)
        assert centre.shape == (512,)
        assert 0.0 < float(np.linalg.norm(centre)) < 1.0  # a mean of unit vectors that do not all coincide
    direction = np.ones(512) / np.sqrt(512)
    # The offset encoder moves every vector towards one direction: its centre lies far along it, USE's does not.
    assert float(np.asarray(offset.query_centre) @ direction) > 0.6
    assert abs(float(np.asarray(calibration.query_centre) @ direction)) < 0.3
    assert Calibration.from_json(json.loads(json.dumps(offset.to_json()))) == offset


def test_the_artefact_is_keyed_by_the_fingerprint_and_loads_as_fitted(
    offset_fit: tuple[Fitted, Path], embeddings: USEEmbeddings
) -> None:
    fitted, directory = offset_fit
    encoders: list[OffsetEncoder] = []

    def encoder() -> OffsetEncoder:
        encoders.append(OffsetEncoder(embeddings))
        return encoders[-1]

    first, path = load_or_fit(directory, OFFSET_FINGERPRINT, encoder, contrast_guard)
    assert path == artefact_path(directory, OFFSET_FINGERPRINT) != artefact_path(directory, USE_FINGERPRINT)
    assert OFFSET_FINGERPRINT.replace(":", "-") in path.name
    assert first.key in path.name
    assert path.stat().st_mode & 0o777 == 0o644  # readable by the user the image serves as
    assert first == fitted.calibration  # the same fit, the same calibration
    loaded, _ = load_or_fit(directory, OFFSET_FINGERPRINT, encoder, contrast_guard)
    assert loaded == first
    assert len(encoders) == 1  # the second call loaded the artefact: no encoder was built
    assert [p.name for p in directory.iterdir()] == [path.name]  # no temporary file left behind


def test_an_unreadable_artefact_is_fitted_again(tmp_path: Path, embeddings: USEEmbeddings) -> None:
    path = artefact_path(tmp_path, OFFSET_FINGERPRINT)
    path.write_text("{not json", encoding="utf-8")
    calibration, _ = load_or_fit(tmp_path, OFFSET_FINGERPRINT, lambda: OffsetEncoder(embeddings), contrast_guard)
    assert calibration.fingerprint == OFFSET_FINGERPRINT
    assert Calibration.from_json(json.loads(path.read_text(encoding="utf-8"))["calibration"]) == calibration


OVERRIDES = {
    "GATEWAY_MIN_RELEVANCE": "0.33",
    "GATEWAY_ESCALATE_BELOW": "0.07",
    "GATEWAY_CRAG_UPPER": "0.61",
    "GATEWAY_CRAG_LOWER": "0.31",
    "GATEWAY_CRAG_EXPLORE_FLOOR": "0.21",
    "GATEWAY_STRIP_THRESHOLD": "0.25",
    "GATEWAY_CACHE_SEMANTIC_THRESHOLD": "0.93",
    "GATEWAY_CURATION_CLUSTER_SIMILARITY": "0.66",
}


def _resolved(calibration: Calibration) -> dict[str, float]:
    grounding = GroundingSettings().policy(calibration)
    corrective = CorrectiveSettings().policy(grounding, calibration)
    return {
        "min_relevance": grounding.min_relevance,
        "escalate_below": RetrievalSettings().escalate_threshold(calibration),
        "crag_upper": corrective.upper,
        "crag_lower": corrective.lower,
        "explore_floor": corrective.explore_floor,
        "strip_threshold": corrective.strip_threshold,
        "semantic_threshold": SemanticCacheSettings().similarity_threshold(calibration),
        "gap_similarity": CurationSettings().gap_threshold(calibration),
    }


def test_unset_thresholds_are_the_calibrations(calibration: Calibration, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OVERRIDES:
        monkeypatch.delenv(name, raising=False)
    assert _resolved(calibration) == calibration.thresholds()
    policy = CorrectiveSettings().policy(GroundingSettings().policy(calibration), calibration)
    assert policy.relevance == calibration.relevance
    assert policy.judge == calibration.judge


def test_an_environment_value_overrides_the_calibration(
    calibration: Calibration, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in OVERRIDES.items():
        monkeypatch.setenv(name, value)
    expected = dict(zip(USE_VALUES, (float(v) for v in OVERRIDES.values()), strict=True))
    assert _resolved(calibration) == expected


def test_the_answer_namespace_changes_with_the_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings()
    before = settings.answer_fingerprint()
    assert settings.answer_fingerprint() == before  # stable: computed from the key, without fitting
    # Another embedder: through the embeddings group and the key alike.
    assert settings.replace(embeddings={"model": "use-multilingual-v3-int8"}).answer_fingerprint() != before
    # The same embedder, a calibration fitted by other code or on other data: only the key says so.
    monkeypatch.setattr(calibration_model, "FIT_VERSION", calibration_model.FIT_VERSION + 1)
    refitted = settings.answer_fingerprint()
    assert refitted != before
    monkeypatch.setattr(calibration_model, "data_digest", lambda: "other data")
    assert settings.answer_fingerprint() not in (before, refitted)


class UnreachableEmbeddings(Embeddings):
    """An embedder whose service cannot be reached (its dimension is configured, so the store opens)."""

    dimensions = 512

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise ConnectionError("embedder at http://127.0.0.1:9 refused the connection")

    def embed_query(self, text: str) -> list[float]:
        raise ConnectionError("embedder at http://127.0.0.1:9 refused the connection")


def test_a_failed_fit_says_why_and_what_to_run(tmp_path: Path) -> None:
    settings = Settings().replace(router_artefact={"cache_dir": tmp_path})
    with pytest.raises(CalibrationUnavailableError) as raised:
        load_calibration(settings, UnreachableEmbeddings())
    message = str(raised.value)
    assert settings.embeddings.fingerprint() in message
    assert "refused the connection" in message  # why
    assert "python -m gateway.query.calibration" in message  # what to run
    assert "python -m gateway.query.router_artefact" in message
    assert isinstance(raised.value.__cause__, ConnectionError)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


async def test_the_gateway_refuses_to_start_without_a_calibration(settings: Settings, tmp_path: Path) -> None:
    empty = settings.replace(router_artefact={"cache_dir": tmp_path / "empty"})
    app = create_app(empty, ProviderOverrides(embeddings=UnreachableEmbeddings()))
    client: AsyncTestClient[Any] = AsyncTestClient(app)
    with pytest.raises(BaseExceptionGroup) as caught:  # the test client's task group wraps lifespan errors
        await client.__aenter__()
    assert caught.group_contains(CalibrationUnavailableError, match="python -m gateway.query.calibration")


def test_the_shipped_calibration_set_holds_the_shared_rounds_near_misses_and_pairs() -> None:
    data = load_calibration_set()
    by_source: dict[str, list[Any]] = {}
    for r in data.rounds:
        by_source.setdefault(r.source, []).append(r)
    hotpot = by_source["hotpotqa"]
    assert len(hotpot) == 100
    assert all(sum(p.label == 1.0 for p in r.pages) == 2 for r in hotpot)  # the two supporting paragraphs
    assert sum(len(r.pages) == 10 for r in hotpot) == 99  # one question of the shared set has 4 paragraphs
    for source in ("squad", "jsquad"):
        assert all(len(r.pages) == 4 and [p.label for p in r.pages] == [1.0, 0.0, 0.0, 0.0] for r in by_source[source])
    assert len(by_source["squad"]) > 50
    assert len(by_source["jsquad"]) > 400
    assert len(by_source["near_miss_en"]) == len(by_source["near_miss_ja"]) == 72
    kinds = [p.kind for p in data.pairs]
    assert kinds.count("paraphrase") > 100
    assert kinds.count("contrast") > 100


SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "dev"


def test_the_builder_writes_the_shipped_rounds_from_the_shared_data() -> None:
    """The set ships in the package (the shared data is not in the image); rebuilt from the shared data it is the
    same, so the service fits on the rounds the offline fit reads."""
    if not (SHARED_DATA / "hotpotqa_train.json").is_file():
        pytest.skip(f"the shared dev data is not at {SHARED_DATA}")
    from routes.calibration.data import DATA, PASSAGES_FILE, ROUNDS_FILE
    from routes.offline.training.build_calibration_set import build

    rounds, passages = build(SHARED_DATA)
    shipped = [json.loads(line) for line in (DATA / ROUNDS_FILE).read_text(encoding="utf-8").splitlines()]
    assert rounds == shipped
    shipped_passages = [json.loads(line) for line in (DATA / PASSAGES_FILE).read_text(encoding="utf-8").splitlines()]
    assert passages == shipped_passages


class CountingEmbeddings(Embeddings):
    """Queries and documents told apart (as e5's prefixes do), every call counted."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append("documents")
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls.append("query")
        return [0.0, 1.0]


class BatchingEmbeddings(CountingEmbeddings):
    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.calls.append("queries")
        return [[0.0, 1.0] for _ in texts]


def test_questions_are_embedded_as_queries_in_one_call_where_the_provider_batches_them() -> None:
    for embeddings, calls in ((CountingEmbeddings(), ["query"] * 3), (BatchingEmbeddings(), ["queries"])):
        encoder = EmbeddingsEncoder(embeddings)
        assert encoder.queries(["a", "b", "c"]).tolist() == [[0.0, 1.0]] * 3
        assert embeddings.calls == calls
        assert encoder.passages(["a"]).tolist() == [[1.0, 0.0]]
