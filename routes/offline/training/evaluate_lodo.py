"""Leave one dataset out: does the router route sets it never saw?

    python -m routes.offline.training.evaluate_lodo [--data-dir ../shared/data/dev] [--jsquad-sample 200] [--classifier
    both]

The held-back split of ``routes.offline.training.evaluate`` comes from the same datasets the router trains on, so it
measures how well the router learnt each dataset's style. Here every source is excluded from training
in turn (its questions *and* its documents: :class:`routes.corpus.Case` records both) and the router
is measured on it alone: the recall of its true class, and where the rest went, per language. The
JSQuAD sample is never training data and is tested against the router trained on everything.

Each test question is asked of its own set's passages ingested as a tenant (chunked with the
gateway's default chunker, "title + chunk" embedded, top-k by cosine), exactly as production probes a
tenant's store. The written knowledge base is split by document group (``org`` / ``place``, see
:mod:`routes.corpus`): each group is one excluded set. SKR/NQ questions have no passages: a
knowledge-aware router should send them ``direct`` when the tenant holds nothing on them, so they are
measured against the SQuAD Normans tenant (unrelated: gold ``direct``) and, for information, against
the HotpotQA corpus (random Wikipedia paragraphs: some may hold an answer, so no gold there).

``--encoder e5`` embeds with multilingual-e5-small instead of USE (questions with its ``query:`` side, the tenants'
passages with ``passage:``, as the gateway's store embeds documents) and retrains every router on its vectors; the
vectors are kept on disk (:mod:`routes.offline.training.encoders`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pipelines.shared import Passage
from routes.corpus import REDUNDANT_FILES, Case, CorpusTenant, SourceDocument, all_cases, load_tenants
from routes.examples import Example, load_examples
from routes.knowledge_router import DEFAULT_ROUTING, KnowledgeRouter, TenantRouting, case_signals, fit_knowledge
from routes.logistic_router import LogisticRouter, fit
from routes.offline.training.encoders import ENCODERS, Encoder, VectorCache, encoder
from routes.probe import PROBE_DEPTH, probe_of
from routes.types import ROUTES, Route, RouteDecision
from routes.written_kb import load_written_kb

FloatMatrix = np.ndarray[Any, np.dtype[np.float32]]
Decide = Callable[[Case, TenantRouting], RouteDecision]
EMBED_BATCH = 64


class Embedder:
    """Embeds in batches and remembers every vector for the run: training folds share most texts. Calling it
    embeds questions; ``passages`` embeds what a tenant holds (the same function unless the encoder has two sides,
    as e5 has)."""

    def __init__(
        self,
        embed_array: Callable[[list[str]], np.ndarray],
        passages: Callable[[list[str]], np.ndarray] | None = None,
    ) -> None:
        self._embed_array = embed_array
        self._cache: dict[str, np.ndarray] = {}
        self.passages: Embedder = self if passages is None else Embedder(passages)

    def __call__(self, texts: list[str]) -> FloatMatrix:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        for start in range(0, len(missing), EMBED_BATCH):
            batch = missing[start : start + EMBED_BATCH]
            for text, vector in zip(batch, self._embed_array(batch), strict=True):
                self._cache[text] = np.asarray(vector, dtype=np.float32)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.vstack([self._cache[t] for t in texts])


def ingest(tenants: dict[str, CorpusTenant], embed: Embedder) -> None:
    """Every tenant's passages embedded now with the passage side: the router's training
    (:func:`routes.knowledge_router.case_signals`) searches tenants with the one function it is given, and then
    finds them ingested, as the gateway's store holds passages embedded as documents and probes them with a query."""
    width = embed.passages(["dimension probe"]).shape[1]
    for tenant in tenants.values():
        tenant.search(embed.passages, np.zeros(width, dtype=np.float32), 1)


@dataclass(frozen=True)
class Source:
    """One excluded set: its test questions (each naming its tenant) and what leaving it out drops."""

    name: str
    cases: tuple[Case, ...]
    excludes: str | None  # a source tag of routes.corpus.Case; None for a test-only set


class Classifier(Protocol):
    """A router under evaluation: sees the question, its embedding and the tenant probe."""

    name: str

    def classify(self, question: str, vector: np.ndarray, probe: Sequence[Passage]) -> Route: ...


# (training cases, the labelled examples left after the exclusion, embed, tenants) -> classifier
Trainer = Callable[[Sequence[Case], Sequence[Example], Embedder, dict[str, CorpusTenant]], Classifier]


class CurrentLogistic:
    """The question-only router (before the knowledge probe): logistic regression over the embedding and cues."""

    name = "question-only logistic (before)"

    def __init__(
        self, cases: Sequence[Case], examples: Sequence[Example], embed: Embedder, tenants: dict[str, CorpusTenant]
    ) -> None:
        self._router = LogisticRouter(fit(examples, embed))

    def classify(self, question: str, vector: np.ndarray, probe: Sequence[Passage]) -> Route:
        return self._router.classify_vector(question, vector.tolist()).route


class KnowledgeAware:
    """The knowledge-aware router (after): probe signals and structure cues, no embedding."""

    name = "knowledge-aware (after)"

    def __init__(
        self, cases: Sequence[Case], examples: Sequence[Example], embed: Embedder, tenants: dict[str, CorpusTenant]
    ) -> None:
        self._router = KnowledgeRouter(fit_knowledge(cases, case_signals(cases, tenants, embed)))

    def classify(self, question: str, vector: np.ndarray, probe: Sequence[Passage]) -> Route:
        return self._router.classify(question, probe_of("eval", question, probe, PROBE_DEPTH)).route


def _example_source(example: Example) -> str:
    if example.source == "written_examples":
        return f"written_direct_{example.lang}" if example.route == "direct" else "written_examples"
    return example.source


def _jsquad(data_dir: Path, sample: int, split: Callable[[str], list[str]]) -> tuple[CorpusTenant, Source]:
    from routes.offline.eval.datasets import load_squad_v2  # deferred: the gateway's reader of the shared format

    dataset = load_squad_v2(data_dir / "jsquad_valid_sample.json")
    # JSQuAD paragraphs start with "title [SEP] "; the title is kept as the passage's title.
    docs = tuple(SourceDocument(d["id"], d["title"], d["text"].split(" [SEP] ", 1)[-1]) for d in dataset.documents)
    cases = [
        Case(q.text.strip(), "single_hop", "ja", "jsquad", frozenset({"jsquad"}), tuple(sorted(q.gold_doc_ids)))
        for q in dataset.questions
    ]
    if 0 < sample < len(cases):
        cases = random.Random(13).sample(cases, sample)
    return CorpusTenant("jsquad", docs, split), Source("JSQuAD sample (test only)", tuple(cases), None)


def _heldout(path: Path, split: Callable[[str], list[str]]) -> tuple[CorpusTenant, Source]:
    """A written multi-hop set no router was trained on (``routes/offline/eval/data``): new documents, new entities,
    asked of their own tenant, as a new user's knowledge base would be."""
    kb = load_written_kb(path)
    docs = tuple(SourceDocument(d.id, d.title, d.text) for d in kb.documents)
    cases = tuple(
        Case(q.question, q.route, q.lang, "heldout", frozenset({"heldout"}), q.supporting) for q in kb.questions
    )
    return CorpusTenant("heldout", docs, split), Source("written held-out multi-hop set (test only)", cases, None)


def sources(
    cases: Sequence[Case], examples: Sequence[Example], jsquad: Source, heldout: Source | None = None
) -> list[Source]:
    def own(tag: str) -> tuple[Case, ...]:
        return tuple(c for c in cases if c.sources == {tag} and c.tenant == tag)

    def direct(lang: str) -> tuple[Case, ...]:
        tag = f"written_direct_{lang}"
        return tuple(c for c in cases if c.sources == {tag, "written_org"})

    skr = [e for e in examples if e.source == "skr_nq"]
    return [
        Source("SQuAD v2 Normans", own("squad_v2"), "squad_v2"),
        jsquad,
        Source("HotpotQA", own("hotpotqa"), "hotpotqa"),
        Source("written KB, org group", own("written_org"), "written_org"),
        Source("written KB, place group", own("written_place"), "written_place"),
        Source("written redundant KB EN", own("redundant_en"), "redundant_en"),
        Source("written redundant KB JA", own("redundant_ja"), "redundant_ja"),
        Source("written direct EN (asked of the org tenant)", direct("en"), "written_direct_en"),
        Source("written direct JA (asked of the org tenant)", direct("ja"), "written_direct_ja"),
        *([heldout] if heldout is not None else []),
        Source(
            "SKR/NQ vs the unrelated Normans tenant",
            tuple(Case(e.text, "direct", "en", "squad_v2", frozenset({"skr_nq"})) for e in skr),
            "skr_nq",
        ),
        Source(
            "SKR/NQ vs the HotpotQA corpus (no gold: for information)",
            tuple(Case(e.text, "direct", "en", "hotpotqa", frozenset({"skr_nq"})) for e in skr),
            "skr_nq",
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


def evaluate(
    trainer: Trainer,
    cases: Sequence[Case],
    examples: Sequence[Example],
    source: Source,
    embed: Embedder,
    tenants: dict[str, CorpusTenant],
    k: int = PROBE_DEPTH,
) -> list[Row]:
    excluded = source.excludes
    train = [c for c in cases if excluded not in c.sources]
    kept = [e for e in examples if _example_source(e) != excluded]
    classifier = trainer(train, kept, embed, tenants)
    vectors = embed([c.text for c in source.cases])
    predicted: dict[tuple[str, Route], Counter[str]] = {}
    for case, vector in zip(source.cases, vectors, strict=True):
        probe = tenants[case.tenant].search(embed.passages, vector, k)
        route = classifier.classify(case.text, vector, probe)
        predicted.setdefault((case.lang, case.route), Counter())[route] += 1
    return [
        Row(source.name, lang, gold, len(train), dict(counts)) for (lang, gold), counts in sorted(predicted.items())
    ]


def tenant_recalibration(
    cases: Sequence[Case], sources_: Sequence[Source], embed: Embedder, tenants: dict[str, CorpusTenant]
) -> list[str]:
    """What a tenant's recalibration (``gateway.curation.routing``) does on questions it never saw: for each written
    redundant set, the router trained without it; its questions split in two by a hash of the text; the first
    half's routes become outcomes (``multi_hop`` on a single-hop question: over_routed, as the planner shows it; the
    rest right), the threshold is recalibrated on them and the second half is routed with it. The same threshold
    applied to the multi-hop sets shows why it stays the tenant's own."""
    from gateway.curation import RouteOutcome, recalibrate  # deferred: the gateway's recalibration

    multi = [c for c in cases if c.route == "multi_hop"]
    lines = [
        "| set (router trained without it) | calibrated on | threshold | single_hop recall, held-out half: "
        "before -> after | multi-hop sets' recall with it (if it were global) |",
        "|---|---|---|---|---|",
    ]
    for source in sources_:
        if source.excludes not in REDUNDANT_FILES:
            continue
        train = [c for c in cases if source.excludes not in c.sources]
        router = KnowledgeRouter(fit_knowledge(train, case_signals(train, tenants, embed)))

        def decide(case: Case, routing: TenantRouting, router: KnowledgeRouter = router) -> RouteDecision:
            vector = embed([case.text])[0]
            passages = tenants[case.tenant].search(embed.passages, vector, PROBE_DEPTH)
            return router.classify(case.text, probe_of("eval", case.text, passages, PROBE_DEPTH), routing)

        def recall(tested: Sequence[Case], routing: TenantRouting, decide: Decide = decide) -> float:
            return sum((decide(c, routing).route == "multi_hop") == (c.route == "multi_hop") for c in tested) / len(
                tested
            )

        halves = [c for c in source.cases if hash_half(c.text) == 0], [c for c in source.cases if hash_half(c.text)]
        # Each single-hop question routed multi_hop was over_routed (the planner shows it), any other route right.
        outcomes = [
            RouteOutcome(
                str(i),
                "t",
                d.route,
                "",
                "over_routed" if d.route == "multi_hop" else "right",
                d.p_multi_hop,
                0.0,
                named_documents=d.named_documents,
            )
            for i, c in enumerate(halves[0])
            for d in [decide(c, DEFAULT_ROUTING)]
        ]
        found = recalibrate("t", outcomes, None)
        tuned = TenantRouting(found.multi_hop_threshold, found.named_documents)
        t = found.multi_hop_threshold
        lines.append(
            f"| {source.name} | {len(outcomes)} | {t:.3f} | {recall(halves[1], DEFAULT_ROUTING):.3f} -> "
            f"{recall(halves[1], tuned):.3f} | {recall(multi, DEFAULT_ROUTING):.3f} -> {recall(multi, tuned):.3f} |"
        )
    return lines


def hash_half(text: str) -> int:
    """0 or 1, stable across runs (Python's own ``hash`` of a string is not)."""
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % 2


def probe_recall(
    source: Source, embed: Embedder, tenants: dict[str, CorpusTenant], k: int = PROBE_DEPTH
) -> tuple[int, float, float] | None:
    """How often the tenant probe holds any / all of a question's gold documents (a knowledge-aware
    router can only see evidence the probe returns)."""
    cases = [c for c in source.cases if c.gold]
    if not cases:
        return None
    vectors = embed([c.text for c in cases])
    any_hit = all_hit = 0
    for case, vector in zip(cases, vectors, strict=True):
        found = {p.doc_id for p in tenants[case.tenant].search(embed.passages, vector, k)}
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


@dataclass(frozen=True)
class Setup:
    """What every fold reads: the embedder, the labelled examples and cases, the tenants (ingested) and the sets."""

    embed: Embedder
    examples: list[Example]
    cases: list[Case]
    tenants: dict[str, CorpusTenant]
    sources: list[Source]


def setup(encoder: Encoder, data_dir: Path, jsquad_sample: int = 200, heldout_path: Path | None = None) -> Setup:
    from gateway.knowledge import Chunker  # deferred: the evaluation ingests like the gateway does
    from gateway.settings import ChunkingSettings

    chunking = ChunkingSettings()
    split = Chunker(chunking.size, chunking.overlap).split
    embed = Embedder(encoder.queries, encoder.passages)
    examples = load_examples()
    cases = all_cases()
    tenants = load_tenants(split)
    jsquad_tenant, jsquad = _jsquad(data_dir, jsquad_sample, split)
    tenants["jsquad"] = jsquad_tenant
    heldout: Source | None = None
    if heldout_path is not None and heldout_path.exists():
        tenants["heldout"], heldout = _heldout(heldout_path, split)
    ingest(tenants, embed)
    return Setup(embed, examples, cases, tenants, sources(cases, examples, jsquad, heldout))


def lodo_rows(chosen: Setup, trainer: Trainer) -> list[Row]:
    """Every set left out in turn, the router trained without it and measured on it."""
    rows: list[Row] = []
    for source in chosen.sources:
        rows.extend(evaluate(trainer, chosen.cases, chosen.examples, source, chosen.embed, chosen.tenants))
    return rows


HELDOUT = Path(__file__).resolve().parents[1] / "eval" / "data" / "multihop_heldout.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    parser.add_argument(
        "--heldout",
        type=Path,
        default=HELDOUT,
        help="a written multi-hop set never trained on, routed as a test-only set",
    )
    parser.add_argument("--jsquad-sample", type=int, default=200, help="JSQuAD questions to test (0: all)")
    parser.add_argument("--classifier", choices=("before", "after", "both"), default="both")
    parser.add_argument("--encoder", choices=ENCODERS, default="use", help="the dense encoder (default: USE)")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--probe-recall", action="store_true", help="also report what the tenant probe finds")
    parser.add_argument("--recalibration", action="store_true", help="also measure a tenant's recalibration")
    args = parser.parse_args()

    chosen = setup(encoder(args.encoder, cache=VectorCache()), args.data_dir, args.jsquad_sample, args.heldout)
    embed, cases, tenants, all_sources = chosen.embed, chosen.cases, chosen.tenants, chosen.sources
    before: list[Trainer] = [CurrentLogistic] if args.classifier in ("before", "both") else []
    trainers = before + ([KnowledgeAware] if args.classifier in ("after", "both") else [])
    report: dict[str, list[dict[str, Any]]] = {}
    for trainer in trainers:
        rows = lodo_rows(chosen, trainer)
        name = str(getattr(trainer, "name", trainer))
        print(render(rows, name) + "\n")
        report[name] = [{**asdict(row), "recall": row.recall} for row in rows]
    if args.probe_recall:
        print(f"Tenant probe (top {PROBE_DEPTH} by cosine): questions whose gold documents it holds")
        print("| set | n | any gold | all gold |\n|---|---|---|---|")
        for source in all_sources:
            found = probe_recall(source, embed, tenants)
            if found is not None:
                print(f"| {source.name} | {found[0]} | {found[1]:.3f} | {found[2]:.3f} |")
    if args.recalibration:
        print("Per-tenant recalibration on held-out halves (router trained without the set)")
        print("\n".join(tenant_recalibration(cases, all_sources, embed, tenants)))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
