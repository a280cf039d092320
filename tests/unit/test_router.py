"""The labelled examples, the question-only logistic model (the leave-one-dataset-out baseline), the LLM
router's schema and the structural features. The knowledge-aware router: test_knowledge_router.py."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.llm import LLMClient
from gateway.settings import ModelPrice
from routes.examples import HELD_BACK_PERCENT, Example, load_examples
from routes.features import NAMES, active_cues, features
from routes.llm_router import LLMRouter
from routes.logistic_router import LogisticModel, LogisticRouter, artefact_path, fit, load_or_train
from routes.types import ROUTES, RouteDecision
from tests.fakes.scripted_chat import ScriptedChatModel

MIN_HELD_BACK_ACCURACY = 0.85


@pytest.fixture(scope="module")
def examples() -> list[Example]:
    return load_examples()


@pytest.fixture(scope="module")
def train(examples: list[Example]) -> list[Example]:
    return [e for e in examples if e.split == "train"]


@pytest.fixture(scope="module")
def held_back(examples: list[Example]) -> list[Example]:
    return [e for e in examples if e.split == "test"]


@pytest.fixture(scope="module")
def model(train: list[Example], embeddings: USEEmbeddings) -> LogisticModel:
    return fit(train, embeddings.embed_array)


@pytest.fixture(scope="module")
def logistic(model: LogisticModel) -> LogisticRouter:
    return LogisticRouter(model)


def scripted_llm(answer: str) -> tuple[LLMClient, ScriptedChatModel]:
    chat_model = ScriptedChatModel(responder=lambda _messages, _kwargs: answer)
    return LLMClient(chat_model, model_name="scripted-router", price=ModelPrice()), chat_model


# --- the labelled examples and their split -------------------------------------------------------


def test_split_depends_only_on_the_text() -> None:
    text = "When was the VPN policy updated?"
    variants = [
        Example(text=text, route="single_hop", lang="en", source="a"),
        Example(text=text, route="multi_hop", lang="ja", source="b"),
        Example(text=text, route="direct", lang="en", source="written_examples"),
    ]
    assert len({v.split for v in variants}) == 1
    # Same text, recomputed from scratch: the same answer every time.
    assert all(Example(text, "direct", "en", "x").split == variants[0].split for _ in range(5))


def test_split_is_pinned_for_known_texts(examples: list[Example]) -> None:
    """The split never moves: these texts were in these splits when the router was first trained."""
    by_text = {e.text: e.split for e in examples}
    assert by_text["hi"] == "train"
    assert by_text["Hello there!"] == "train"
    assert by_text["good morning :)"] == "test"
    assert by_text["yo"] == "test"
    # Reloading gives the same assignment for every example.
    assert {e.text: e.split for e in load_examples()} == by_text


def test_about_a_fifth_of_examples_are_held_back(examples: list[Example], held_back: list[Example]) -> None:
    assert len(examples) > 500
    share = len(held_back) / len(examples)
    assert HELD_BACK_PERCENT == 20
    assert 0.15 <= share <= 0.25, share


def test_every_route_has_train_and_held_back_examples(train: list[Example], held_back: list[Example]) -> None:
    train_routes = Counter(e.route for e in train)
    test_routes = Counter(e.route for e in held_back)
    for route in ROUTES:
        assert train_routes[route] >= 20, (route, train_routes)
        assert test_routes[route] >= 10, (route, test_routes)


def test_japanese_examples_exist_for_every_route(examples: list[Example]) -> None:
    japanese = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
    ja_routes = Counter(e.route for e in examples if e.lang == "ja")
    for route in ROUTES:
        assert ja_routes[route] > 0, route
    assert all(japanese.search(e.text) for e in examples if e.lang == "ja")


def test_example_texts_are_unique(examples: list[Example]) -> None:
    """A duplicated text would sit in both the train and test sets' statistics."""
    assert len({e.text for e in examples}) == len(examples)


# --- the logistic model ---------------------------------------------------------------------------


def test_held_back_accuracy_per_class(
    logistic: LogisticRouter, held_back: list[Example], embeddings: USEEmbeddings
) -> None:
    vectors = embeddings.embed_array([e.text for e in held_back])
    right: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for example, vector in zip(held_back, vectors, strict=True):
        decision = logistic.classify_vector(example.text, vector)
        total[example.route] += 1
        right[example.route] += decision.route == example.route
    accuracy = {route: right[route] / total[route] for route in ROUTES}
    assert set(total) == set(ROUTES)
    for value in accuracy.values():
        assert value >= MIN_HELD_BACK_ACCURACY, accuracy


def test_model_round_trips_through_npz(
    model: LogisticModel, tmp_path: Path, embeddings: USEEmbeddings, held_back: list[Example]
) -> None:
    path = tmp_path / "nested" / "router.npz"
    model.save(path)
    assert path.exists()
    assert not list(path.parent.glob("*.tmp.npz"))  # the temporary file was renamed into place
    with np.load(path, allow_pickle=False) as data:  # no pickled objects in the artefact
        assert set(data.files) == {"coef", "intercept", "feature_mean", "feature_scale", "classes"}

    loaded = LogisticModel.load(path)
    assert loaded.classes == model.classes
    assert set(loaded.classes) == set(ROUTES)
    texts = [e.text for e in held_back[:25]]
    vectors = embeddings.embed_array(texts)
    cues = np.vstack([features(t) for t in texts])
    for row_a, row_b in zip(model.design(vectors, cues), loaded.design(vectors, cues), strict=True):
        np.testing.assert_array_equal(model.probabilities(row_a), loaded.probabilities(row_b))


def test_load_or_train_trains_once_then_loads(tmp_path: Path, embeddings: USEEmbeddings, train: list[Example]) -> None:
    # A small but complete training set keeps this fast.
    subset = [e for route in ROUTES for e in [x for x in train if x.route == route][:15]]
    embedded: list[int] = []

    def counting_embed(texts: list[str]) -> np.ndarray:
        embedded.append(len(texts))
        return embeddings.embed_array(texts)

    first = load_or_train(tmp_path, subset, counting_embed, "use-multilingual-v3")
    assert embedded == [len(subset)]
    artefacts = list(tmp_path.glob("*.npz"))
    assert artefacts == [artefact_path(tmp_path, subset, "use-multilingual-v3")]

    second = load_or_train(tmp_path, subset, counting_embed, "use-multilingual-v3")
    assert embedded == [len(subset)]  # loaded, not retrained
    assert second.classes == first.classes
    np.testing.assert_array_equal(second.coef, first.coef)
    np.testing.assert_array_equal(second.intercept, first.intercept)
    assert list(tmp_path.glob("*.npz")) == artefacts

    # Another embedding model, or other examples, must not reuse that artefact.
    load_or_train(tmp_path, subset, counting_embed, "other/model")
    load_or_train(tmp_path, subset[:-1], counting_embed, "use-multilingual-v3")
    assert len(embedded) == 3
    assert len(list(tmp_path.glob("*.npz"))) == 3


# --- classification -------------------------------------------------------------------------------


def test_classify_vector_returns_a_logistic_decision(logistic: LogisticRouter, embeddings: USEEmbeddings) -> None:
    query = "When was the VPN policy updated?"
    decision = logistic.classify_vector(query, embeddings.embed_query(query))
    assert isinstance(decision, RouteDecision)
    assert decision.classifier == "logistic"
    assert 0.0 <= decision.confidence <= 1.0
    assert decision.reason.startswith("p(")
    probabilities = dict(re.findall(r"(\w+)=(\d\.\d\d)", decision.reason))
    assert set(probabilities) == set(ROUTES)
    assert math.isclose(sum(float(p) for p in probabilities.values()), 1.0, abs_tol=0.02)
    assert float(probabilities[decision.route]) == pytest.approx(decision.confidence, abs=0.006)
    assert "cues: wh_question" in decision.reason


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Hello!", "direct"),
        ("hi there, how are you?", "direct"),
        ("Translate 'good morning' into French.", "direct"),
        ("Which is older, the Tokyo office or the Osaka office?", "multi_hop"),
        ("Were the founders of both companies born in the same city?", "multi_hop"),
        ("When was the VPN policy updated?", "single_hop"),
        ("What is the expense claim deadline?", "single_hop"),
        ("こんにちは！", "direct"),
        ("ありがとうございます", "direct"),
        ("東京オフィスと大阪オフィスはどちらが古いですか？", "multi_hop"),
        ("東京オフィスの所長と大阪オフィスの所長はどちらが年上ですか？", "multi_hop"),
        ("VPNポリシーはいつ更新されましたか？", "single_hop"),
        ("経費精算の締め日はいつですか", "single_hop"),
    ],
)
def test_clear_cases_go_to_the_expected_route(
    logistic: LogisticRouter, embeddings: USEEmbeddings, query: str, expected: str
) -> None:
    decision = logistic.classify_vector(query, embeddings.embed_query(query))
    assert decision.route == expected, decision
    assert decision.confidence > 0.5, decision


# --- the front router -----------------------------------------------------------------------------


async def test_llm_router_rejects_an_unknown_route() -> None:
    from gateway.errors import ProviderError

    client, _ = scripted_llm(json.dumps({"route": "sideways", "confidence": 0.5, "reason": "?"}))
    with pytest.raises(ProviderError):
        await LLMRouter(client).classify("hello")


# --- structural features --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "hi", "Which is older, the Tokyo office or the Osaka office?", "東京オフィスの所長は誰ですか？", "x" * 5000],
)
def test_features_are_a_finite_vector_of_the_named_length(text: str) -> None:
    vector = features(text)
    assert vector.shape == (len(NAMES),)
    assert np.all(np.isfinite(vector))


def test_features_mark_japanese_and_question_marks() -> None:
    english = dict(zip(NAMES, features("When was the VPN policy updated?"), strict=True))
    japanese = dict(zip(NAMES, features("VPNポリシーはいつ更新されましたか？"), strict=True))
    assert english["japanese"] == 0.0
    assert japanese["japanese"] == 1.0
    assert english["question_mark"] == japanese["question_mark"] == 1.0


@pytest.mark.parametrize(
    ("text", "cue"),
    [
        ("Which is older, the Tokyo office or the Osaka office?", "comparison"),
        ("Compare the travel policy versus the expense policy", "comparison"),
        ("東京オフィスと大阪オフィスはどちらが大きいですか", "comparison"),
        ("Hello, anyone there?", "greeting"),
        ("thank you so much", "greeting"),
        ("こんにちは、よろしくお願いします", "greeting"),
        ("Translate this sentence into Japanese: the meeting moved to Friday.", "transform"),
        ("Please summarize the following paragraph.", "transform"),
        ("この文を英語に翻訳してください", "transform"),
        ("What is 12 * 7?", "arithmetic"),
        ("what is five plus three", "arithmetic"),
        ("3足す4はいくつですか", "arithmetic"),
    ],
)
def test_active_cues_detect_structure(text: str, cue: str) -> None:
    assert cue in active_cues(text)


@pytest.mark.parametrize("text", ["When was the VPN policy updated?", "経費精算の締め日はいつですか"])
def test_plain_lookup_has_none_of_the_direct_or_comparison_cues(text: str) -> None:
    cues: Sequence[str] = active_cues(text)
    assert not {"comparison", "greeting", "transform", "arithmetic"} & set(cues), cues


def test_savers_of_one_artefact_at_once_each_succeed_and_leave_a_whole_file(tmp_path: Path) -> None:
    """Two gateways started together on a fresh cache both train and save the same artefact: neither may fail at
    start-up on the other's temporary file, and what is left loads."""
    rng = np.random.default_rng(0)
    model = LogisticModel(
        coef=rng.normal(size=(3, 520)),
        intercept=rng.normal(size=3),
        feature_mean=rng.normal(size=8),
        feature_scale=np.ones(8),
        classes=("direct", "single_hop", "multi_hop"),
    )
    path = tmp_path / "router.npz"
    with ThreadPoolExecutor(max_workers=8) as pool:
        for future in [pool.submit(model.save, path) for _ in range(64)]:
            future.result()
    np.testing.assert_array_equal(LogisticModel.load(path).coef, model.coef)
    assert [p.name for p in tmp_path.iterdir()] == ["router.npz"]


def test_a_saved_artefact_is_readable_by_the_user_the_image_serves_as(tmp_path: Path) -> None:
    """The image trains the artefact as root at build time and serves as an unprivileged user."""
    model = LogisticModel(np.zeros((3, 4)), np.zeros(3), np.zeros(2), np.ones(2), ("direct", "single_hop", "multi_hop"))
    model.save(tmp_path / "router.npz")
    assert (tmp_path / "router.npz").stat().st_mode & 0o777 == 0o644
