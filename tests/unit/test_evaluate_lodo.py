"""The leave-one-dataset-out harness: folds drop a source's questions and documents, probes search
each question's own tenant."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipelines.shared.deps import Passage
from routes.corpus import Case, CorpusTenant, SourceDocument, all_cases, own_cases
from routes.examples import Example, load_examples
from routes.offline.training.evaluate_lodo import Embedder, Source, evaluate, probe_recall, sources
from routes.types import Route

_AXES = ("castle", "river", "billing", "hello")


def _one_hot(texts: list[str]) -> np.ndarray:
    """A vector per text from the topic words it contains: enough to make cosine order predictable."""
    rows = []
    for text in texts:
        row = np.asarray([1.0 if axis in text.lower() else 0.0 for axis in _AXES], dtype=np.float32)
        norm = float(np.linalg.norm(row))
        rows.append(row / norm if norm else row)
    return np.vstack(rows)


class CountingEmbed:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return _one_hot(texts)


def test_embedder_embeds_each_text_once_in_batches() -> None:
    raw = CountingEmbed()
    embed = Embedder(raw)
    texts = [f"castle {i}" for i in range(70)]
    first = embed(texts)
    again = embed([*texts[:3], "river"])
    assert [len(c) for c in raw.calls] == [64, 6, 1]
    assert first.shape == (70, 4)
    assert np.allclose(again[0], first[0])


def _tenant() -> CorpusTenant:
    docs = (SourceDocument("a", "Castle", "castle walls"), SourceDocument("b", "River", "river banks"))
    return CorpusTenant("t", (*docs, SourceDocument("c", "Bill", "billing")))


def test_tenant_search_returns_the_top_k_chunks_by_cosine_and_embeds_once() -> None:
    raw = CountingEmbed()
    embed = Embedder(raw)
    tenant = _tenant()
    hits = tenant.search(embed, _one_hot(["river"])[0], k=2)
    assert hits[0].doc_id == "b"
    assert hits[0].score > hits[1].score
    assert hits[0].title == "River"
    tenant.search(embed, _one_hot(["castle"])[0], k=2)
    assert sum(len(c) for c in raw.calls) == 3  # passages embedded once, not per query
    assert CorpusTenant("empty", ()).search(embed, _one_hot(["castle"])[0], k=2) == []


def test_tenant_chunks_documents_like_ingestion() -> None:
    tenant = CorpusTenant("t", (SourceDocument("a", "Castle", "castle one. castle two."),), lambda t: t.split(". "))
    hits = tenant.search(Embedder(_one_hot), _one_hot(["castle"])[0], k=5)
    assert [h.chunk_id for h in hits] == ["a:0", "a:1"]
    assert {h.doc_id for h in hits} == {"a"}


class Recorder:
    """A classifier that records what it was trained on and routes by its probe's best passage."""

    name = "recorder"
    trained_on: list[frozenset[str]] = []
    examples_seen: list[str] = []

    def __init__(
        self, cases: Sequence[Case], examples: Sequence[Example], embed: Embedder, tenants: dict[str, CorpusTenant]
    ) -> None:
        Recorder.trained_on = [c.sources for c in cases]
        Recorder.examples_seen = [e.source for e in examples]

    def classify(self, question: str, vector: np.ndarray, probe: Sequence[Passage]) -> Route:
        if not probe or probe[0].score < 0.5:
            return "direct"
        return "multi_hop" if "and" in question else "single_hop"


def test_a_fold_drops_the_source_questions_and_documents_and_counts_per_language_and_class() -> None:
    cases = [
        Case("castle?", "single_hop", "en", "t", frozenset({"squad_v2"})),
        Case("hello", "direct", "en", "t", frozenset({"written_direct_en", "t"})),
        Case("river?", "direct", "en", "t", frozenset({"skr_nq", "squad_v2"})),  # the set's tenant: dropped too
        Case("river?", "direct", "en", "t", frozenset({"skr_nq", "other"})),
    ]
    examples = [Example("castle?", "single_hop", "en", "squad_v2"), Example("hi", "direct", "en", "written_examples")]
    test = Source(
        "squad",
        (
            Case("castle?", "single_hop", "en", "t", frozenset({"squad_v2"})),
            Case("castle and river?", "single_hop", "en", "t", frozenset({"squad_v2"})),
            Case("お城 castle", "single_hop", "ja", "t", frozenset({"squad_v2"})),
            Case("hello", "single_hop", "en", "t", frozenset({"squad_v2"})),
        ),
        "squad_v2",
    )
    rows = evaluate(Recorder, cases, examples, test, Embedder(_one_hot), {"t": _tenant()}, k=1)
    assert Recorder.trained_on == [frozenset({"written_direct_en", "t"}), frozenset({"skr_nq", "other"})]
    assert Recorder.examples_seen == ["written_examples"]
    by_lang = {row.lang: row for row in rows}
    assert by_lang["en"].counts == {"single_hop": 1, "multi_hop": 1, "direct": 1}
    assert by_lang["en"].recall == 1 / 3
    assert by_lang["ja"].counts == {"single_hop": 1}
    assert by_lang["en"].train_size == 2


def test_probe_recall_counts_any_and_all_gold_documents() -> None:
    source = Source(
        "s",
        (
            Case("castle", "multi_hop", "en", "t", frozenset({"s"}), ("a", "b")),
            Case("river", "single_hop", "en", "t", frozenset({"s"}), ("b",)),
        ),
        None,
    )
    tenants = {"t": _tenant()}
    assert probe_recall(source, Embedder(_one_hot), tenants, k=1) == (2, 1.0, 0.5)
    assert (
        probe_recall(Source("none", (Case("x", "direct", "en", "t", frozenset()),), None), Embedder(_one_hot), tenants)
        is None
    )


def test_every_held_out_set_is_asked_of_its_own_tenant_and_left_out_whole() -> None:
    examples, cases = load_examples(), all_cases()
    jsquad = Source("JSQuAD", (Case("x", "single_hop", "ja", "jsquad", frozenset({"jsquad"})),), None)
    found = {s.name: s for s in sources(cases, examples, jsquad)}
    assert found["HotpotQA"].cases
    assert all(c.tenant == "hotpotqa" for c in found["HotpotQA"].cases)
    org, place = found["written KB, org group"], found["written KB, place group"]
    assert {c.route for c in org.cases} == {c.route for c in place.cases} == {"single_hop", "multi_hop"}
    assert {c.lang for c in org.cases} == {c.lang for c in place.cases} == {"en", "ja"}
    assert len(org.cases) + len(place.cases) == len([c for c in own_cases(examples) if c.tenant.startswith("written")])
    # Leaving the org group out leaves none of its questions in training, under any tenant.
    org_questions = {c.text for c in org.cases}
    assert not [c for c in cases if "written_org" not in c.sources and c.text in org_questions]
    assert all(c.route == "direct" for c in found["written direct JA (asked of the org tenant)"].cases)
