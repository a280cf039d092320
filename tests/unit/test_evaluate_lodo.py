"""The leave-one-dataset-out harness: folds exclude their source, probes search the set's own tenant."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from routes.evaluate_lodo import Case, Embedder, Passage, ProbeHit, Source, Tenant, evaluate, probe_recall
from routes.examples import Example
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


def test_tenant_probe_returns_the_top_k_by_cosine() -> None:
    raw = CountingEmbed()
    embed = Embedder(raw)
    tenant = Tenant(
        "t",
        (Passage("a", "Castle", "castle walls"), Passage("b", "River", "river banks"), Passage("c", "Bill", "billing")),
    )
    hits = tenant.probe(embed, _one_hot(["river"])[0], k=2)
    assert hits[0].passage.id == "b"
    assert hits[0].score > hits[1].score
    assert len(hits) == 2
    tenant.probe(embed, _one_hot(["castle"])[0], k=2)
    assert sum(len(c) for c in raw.calls) == 3  # passages embedded once, not per query
    assert Tenant("empty", ()).probe(embed, _one_hot(["castle"])[0], k=2) == ()


class Recorder:
    """A classifier that records what it was trained on and routes by its probe's best passage."""

    name = "recorder"
    trained_on: list[str] = []

    def __init__(self, examples: Sequence[Example], embed: Embedder) -> None:
        Recorder.trained_on = [e.source for e in examples]
        self.uses_probe = True

    def classify(self, question: str, vector: np.ndarray, probe: Sequence[ProbeHit]) -> Route:
        if not probe or probe[0].score < 0.5:
            return "direct"
        return "multi_hop" if "and" in question else "single_hop"


def test_a_fold_trains_without_its_source_and_counts_per_language_and_class() -> None:
    examples = [
        Example("hello", "direct", "en", "written_examples"),
        Example("castle?", "single_hop", "en", "squad_v2"),
        Example("river?", "single_hop", "en", "skr_nq"),
    ]
    tenant = Tenant("t", (Passage("a", "Castle", "castle"), Passage("b", "River", "river")))
    source = Source(
        "squad",
        (
            Case("castle?", "single_hop", "en", ("a",)),
            Case("castle and river?", "single_hop", "en", ("a",)),
            Case("お城 castle", "single_hop", "ja", ("a",)),
            Case("billing", "single_hop", "en", ("b",)),
        ),
        lambda e: e.source == "squad_v2",
        tenant,
    )
    rows = evaluate(Recorder, examples, source, Embedder(_one_hot), k=1)
    assert Recorder.trained_on == ["written_examples", "skr_nq"]
    by_lang = {row.lang: row for row in rows}
    assert by_lang["en"].counts == {"single_hop": 1, "multi_hop": 1, "direct": 1}
    assert by_lang["en"].recall == 1 / 3
    assert by_lang["ja"].counts == {"single_hop": 1}
    assert by_lang["en"].train_size == 2


def test_probe_recall_counts_any_and_all_gold_passages() -> None:
    tenant = Tenant("t", (Passage("a", "Castle", "castle"), Passage("b", "River", "river")))
    source = Source(
        "s",
        (Case("castle", "multi_hop", "en", ("a", "b")), Case("river", "single_hop", "en", ("b",))),
        lambda e: False,
        tenant,
    )
    assert probe_recall(source, Embedder(_one_hot), k=1) == (2, 1.0, 0.5)
    assert probe_recall(Source("none", source.cases, lambda e: False, None), Embedder(_one_hot), k=1) is None
