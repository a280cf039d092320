"""Leave one dataset out: does the router route sets it never saw?

    python -m routes.evaluate_lodo [--data-dir ../shared/data/dev] [--jsquad-sample 200] [--k 8] [--out report.json]

The held-back split of ``routes.evaluate`` comes from the same datasets the router trains on, so it
measures how well the router learnt each dataset's style. Here every source is excluded from
training in turn and the router is measured on it alone: the recall of its true class, and where
the rest went, per language. Sources that are not training data at all (the JSQuAD sample, the
written knowledge base's questions) are tested against the router trained on everything.

Each test question also carries a probe of its own set's passages ingested as a tenant (top-k by
cosine, as production would search the tenant's store), so a router that routes on the tenant's
knowledge plugs in through the same :class:`Classifier` protocol; today's logistic router ignores
the probe, and the probe is only computed for classifiers that ask for it.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gateway.eval.datasets import Dataset, load_hotpotqa, load_squad_v2
from routes.examples import Example, load_examples
from routes.logistic_router import LogisticRouter, fit
from routes.types import ROUTES, Route
from routes.written_kb import load_written_kb

FloatMatrix = np.ndarray[Any, np.dtype[np.float32]]
EMBED_BATCH = 64
DEFAULT_K = 8


class Embedder:
    """Embeds in batches and remembers every vector for the run: training folds share most texts."""

    def __init__(self, embed_array: Callable[[list[str]], np.ndarray]) -> None:
        self._embed_array = embed_array
        self._cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: list[str]) -> FloatMatrix:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        for start in range(0, len(missing), EMBED_BATCH):
            batch = missing[start : start + EMBED_BATCH]
            for text, vector in zip(batch, self._embed_array(batch), strict=True):
                self._cache[text] = np.asarray(vector, dtype=np.float32)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.vstack([self._cache[t] for t in texts])


@dataclass(frozen=True, slots=True)
class Passage:
    id: str
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class ProbeHit:
    """One passage of the top-k probe: what a knowledge-aware router may look at."""

    passage: Passage
    score: float


@dataclass
class Tenant:
    """A set's own passages, ingested once per run; searched by cosine like the tenant's store."""

    name: str
    passages: tuple[Passage, ...]
    _vectors: FloatMatrix | None = field(default=None, repr=False)

    def probe(self, embed: Embedder, query_vector: np.ndarray, k: int) -> tuple[ProbeHit, ...]:
        if not self.passages:
            return ()
        if self._vectors is None:
            self._vectors = embed([f"{p.title}\n{p.text}" for p in self.passages])
        scores = self._vectors @ np.asarray(query_vector, dtype=np.float32)
        top = np.argsort(-scores)[:k]
        return tuple(ProbeHit(self.passages[int(i)], float(scores[int(i)])) for i in top)


@dataclass(frozen=True, slots=True)
class Case:
    text: str
    route: Route
    lang: str
    gold: tuple[str, ...] = ()  # ids of the tenant passages that answer it, where the set says


@dataclass(frozen=True)
class Source:
    """One excluded set: its test questions, the training examples it contributes, its tenant."""

    name: str
    cases: tuple[Case, ...]
    contributes: Callable[[Example], bool]  # always False for a test-only source
    tenant: Tenant | None


class Classifier(Protocol):
    """A router under evaluation: sees the question, its embedding and the tenant probe."""

    name: str
    uses_probe: bool

    def classify(self, question: str, vector: np.ndarray, probe: Sequence[ProbeHit]) -> Route: ...


Trainer = Callable[[Sequence[Example], Embedder], Classifier]


class CurrentLogistic:
    """Today's router: logistic regression over the query embedding and structure cues; no probe."""

    name = "logistic"
    uses_probe = False

    def __init__(self, examples: Sequence[Example], embed: Embedder) -> None:
        self._router = LogisticRouter(fit(examples, embed))

    def classify(self, question: str, vector: np.ndarray, probe: Sequence[ProbeHit]) -> Route:
        return self._router.classify_vector(question, vector.tolist()).route


def _never(_: Example) -> bool:
    return False


def _from(source: str) -> Callable[[Example], bool]:
    return lambda example: example.source == source


def _tenant(dataset: Dataset) -> Tenant:
    # JSQuAD paragraphs start with "title [SEP] "; the title is kept as the passage's title.
    return Tenant(
        dataset.name,
        tuple(Passage(d["id"], d["title"], d["text"].split(" [SEP] ", 1)[-1]) for d in dataset.documents),
    )


def _cases(dataset: Dataset, route: Route, lang: str) -> tuple[Case, ...]:
    return tuple(Case(q.text.strip(), route, lang, tuple(sorted(q.gold_doc_ids))) for q in dataset.questions)


def _squad(data_dir: Path) -> Source:
    dataset = load_squad_v2(data_dir / "squad_v2_dev_normans.json")
    return Source("SQuAD v2 Normans", _cases(dataset, "single_hop", "en"), _from("squad_v2"), _tenant(dataset))


def _jsquad(data_dir: Path, sample: int) -> Source:
    dataset = load_squad_v2(data_dir / "jsquad_valid_sample.json")
    cases = _cases(dataset, "single_hop", "ja")
    if 0 < sample < len(cases):
        cases = tuple(random.Random(13).sample(cases, sample))
    return Source("JSQuAD sample (test only)", cases, _never, _tenant(dataset))


def _hotpot(data_dir: Path) -> Source:
    dataset = load_hotpotqa(data_dir / "hotpotqa_train.json", data_dir / "hotpotqa_train_corpus.json")
    return Source("HotpotQA", _cases(dataset, "multi_hop", "en"), _from("hotpotqa"), _tenant(dataset))


def _from_examples(
    name: str, examples: Sequence[Example], keep: Callable[[Example], bool], tenant: Tenant | None
) -> Source:
    cases = tuple(Case(e.text, e.route, e.lang) for e in examples if keep(e))
    return Source(name, cases, keep, tenant)


def _written_tenant() -> tuple[Tenant, list[Case], list[Case]]:
    kb = load_written_kb()
    tenant = Tenant("written_kb", tuple(Passage(d.id, d.title, d.text) for d in kb.documents))
    multi = [Case(q.question, q.route, q.lang, q.supporting) for q in kb.questions if q.route == "multi_hop"]
    single = [Case(q.question, q.route, q.lang, q.supporting) for q in kb.questions if q.route == "single_hop"]
    return tenant, multi, single


def sources(data_dir: Path, jsquad_sample: int) -> list[Source]:
    examples = load_examples()
    written, multi, single = _written_tenant()
    # Direct examples are asked of a tenant that has a knowledge base (the written one): a router must
    # not learn "empty probe means direct" from the evaluation itself.
    return [
        _squad(data_dir),
        _jsquad(data_dir, jsquad_sample),
        _from_examples("SKR / NQ (no passages)", examples, _from("skr_nq"), None),
        _hotpot(data_dir),
        Source("written KB multi-hop (test only)", tuple(multi), _never, written),
        Source("written KB single-hop (test only)", tuple(single), _never, written),
        _from_examples(
            "written direct EN",
            examples,
            lambda e: e.source == "written_examples" and e.route == "direct" and e.lang == "en",
            written,
        ),
        _from_examples(
            "written direct JA",
            examples,
            lambda e: e.source == "written_examples" and e.route == "direct" and e.lang == "ja",
            written,
        ),
    ]


@dataclass(frozen=True)
class Row:
    source: str
    lang: str
    gold: Route
    train_size: int
    counts: dict[str, int]

    @property
    def n(self) -> int:
        return sum(self.counts.values())

    @property
    def recall(self) -> float:
        return self.counts.get(self.gold, 0) / self.n if self.n else float("nan")


def evaluate(trainer: Trainer, all_examples: Sequence[Example], source: Source, embed: Embedder, k: int) -> list[Row]:
    train = [e for e in all_examples if not source.contributes(e)]
    classifier = trainer(train, embed)
    vectors = embed([c.text for c in source.cases])
    predicted: dict[tuple[str, Route], Counter[str]] = {}
    for case, vector in zip(source.cases, vectors, strict=True):
        probe: tuple[ProbeHit, ...] = ()
        if classifier.uses_probe and source.tenant is not None:
            probe = source.tenant.probe(embed, vector, k)
        route = classifier.classify(case.text, vector, probe)
        predicted.setdefault((case.lang, case.route), Counter())[route] += 1
    return [
        Row(source.name, lang, gold, len(train), dict(counts)) for (lang, gold), counts in sorted(predicted.items())
    ]


def probe_recall(source: Source, embed: Embedder, k: int) -> tuple[int, float, float] | None:
    """How often the tenant probe holds any / all of a question's gold passages (a knowledge-aware
    router can only see evidence the probe returns)."""
    cases = [c for c in source.cases if c.gold]
    if source.tenant is None or not cases:
        return None
    vectors = embed([c.text for c in cases])
    any_hit = all_hit = 0
    for case, vector in zip(cases, vectors, strict=True):
        found = {hit.passage.id for hit in source.tenant.probe(embed, vector, k)}
        any_hit += bool(found & set(case.gold))
        all_hit += set(case.gold) <= found
    return len(cases), any_hit / len(cases), all_hit / len(cases)


def render(rows: Sequence[Row], classifier: str) -> str:
    lines = [
        f"Leave-one-dataset-out, classifier: {classifier}",
        "",
        "| excluded set | lang | true class | trained on | n | -> direct | -> single_hop | -> multi_hop | recall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        routed = " | ".join(str(row.counts.get(r, 0)) for r in ROUTES)
        lines.append(
            f"| {row.source} | {row.lang} | {row.gold} | {row.train_size} | {row.n} | {routed} | {row.recall:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    parser.add_argument("--jsquad-sample", type=int, default=200, help="JSQuAD questions to test (0: all)")
    parser.add_argument("--k", type=int, default=DEFAULT_K, help="passages in the tenant probe")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--probe-recall", action="store_true", help="also report what the tenant probe finds")
    args = parser.parse_args()

    from gateway.providers.embeddings import USEEmbeddings  # deferred: loads the model's weights

    embed = Embedder(USEEmbeddings().embed_array)
    examples = load_examples()
    rows: list[Row] = []
    all_sources = sources(args.data_dir, args.jsquad_sample)
    for source in all_sources:
        rows.extend(evaluate(CurrentLogistic, examples, source, embed, args.k))
    print(render(rows, CurrentLogistic.name))
    if args.probe_recall:
        print(f"\nTenant probe (top {args.k} by cosine): questions whose gold passages it holds")
        print("| set | tenant passages | n | any gold | all gold |\n|---|---|---|---|---|")
        for source in all_sources:
            found = probe_recall(source, embed, args.k)
            if found is not None and source.tenant is not None:
                n, any_gold, all_gold = found
                print(f"| {source.name} | {len(source.tenant.passages)} | {n} | {any_gold:.3f} | {all_gold:.3f} |")
    if args.out:
        args.out.write_text(json.dumps([{**asdict(row), "recall": row.recall} for row in rows], indent=2))


if __name__ == "__main__":
    main()
