"""Labelled questions, each asked of a tenant: what the knowledge-aware router trains and is measured on.

A question's route depends on the tenant it is asked of, so every labelled case names its tenant:

- SQuAD v2 "Normans" questions asked of the Normans paragraphs -> ``single_hop``;
- HotpotQA questions asked of the HotpotQA corpus -> ``multi_hop``;
- the written knowledge base's questions asked of their document group (``org``: the company, its
  policies and the Japanese SaaS manual; ``place``: the invented towns, rivers, painters and
  festivals) -> their labelled route. The two groups share no documents, so leaving one group out
  leaves out its questions *and* its documents;
- the written redundant sets' questions asked of their language's tenant -> ``single_hop``: each fact is told by
  2-4 documents in other words (outlets, a policy and its FAQ, manual editions), so several documents cover a
  question without any of them holding a *different* part of it;
- the written ``direct`` examples (conversation, transforms, arithmetic, general knowledge) asked of
  every tenant -> ``direct``;
- questions asked of a tenant that holds nothing on them -> ``direct``: the NQ-style SKR questions
  (which have no passages of their own) and each set's questions asked of another set's tenant.

Every case records the sources it involves (its question's and its tenant's), so leave-one-dataset-out
drops a source's questions and its documents together. Tenants are searched by cosine in memory, over
the same chunks (``split``) and the same "title + chunk" texts the gateway ingests.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from pipelines.shared import Passage
from routes.examples import Example, load_examples
from routes.types import Route
from routes.written_kb import load_written_kb

PASSAGES_FILE = "dataset_passages.jsonl"
REDUNDANT_FILES = {"redundant_en": "redundant_kb_en.json", "redundant_ja": "redundant_kb_ja.json"}
PLACE_DOCS = frozenset(
    {
        "en-aldern",
        "en-brinmoor",
        "en-caddon",
        "en-caddon-museum",
        "en-glass-harbour",
        "en-regatta-painting",
        "en-sorrel",
        "en-tallis",
        "en-vallin",
        "ja-asagiri",
        "ja-kirisato",
        "ja-kurose",
        "ja-minato-matsuri",
        "ja-mizuno",
        "ja-museum",
        "ja-shiomi",
        "ja-shiomi-castle",
        "ja-toda",
        "ja-toro",
        "ja-watashi",
    }
)
# A question asked of another set's tenant: the next tenant in this cycle.
OFF_TENANT = {"squad_v2": "hotpotqa", "hotpotqa": "written_org", "written_org": "written_place"}
OFF_TENANT["written_place"] = "squad_v2"

EmbedTexts = Callable[[list[str]], np.ndarray]
Split = Callable[[str], list[str]]
FloatMatrix = np.ndarray[Any, np.dtype[np.float32]]


def _whole(text: str) -> list[str]:
    return [text]


@dataclass(frozen=True, slots=True)
class SourceDocument:
    id: str
    title: str
    text: str


@dataclass
class CorpusTenant:
    """A set's documents ingested as one tenant, searched by cosine like the gateway's store."""

    name: str
    documents: tuple[SourceDocument, ...]
    split: Split = _whole
    _chunks: list[Passage] = field(default_factory=list, repr=False)
    _vectors: FloatMatrix | None = field(default=None, repr=False)

    def _ingest(self, embed: EmbedTexts) -> FloatMatrix:
        if self._vectors is None:
            for doc in self.documents:
                for i, chunk in enumerate(self.split(doc.text)):
                    self._chunks.append(Passage(f"{doc.id}:{i}", doc.id, doc.title, chunk, 0.0))
            texts = [f"{p.title}\n{p.text}" if p.title else p.text for p in self._chunks]
            self._vectors = np.asarray(embed(texts), dtype=np.float32).reshape(len(texts), -1)
        return self._vectors

    def search(self, embed: EmbedTexts, vector: np.ndarray, k: int) -> list[Passage]:
        if not self.documents:
            return []
        scores = self._ingest(embed) @ np.asarray(vector, dtype=np.float32)
        top = np.argsort(-scores)[:k]
        return [_scored(self._chunks[int(i)], float(scores[int(i)])) for i in top]


def _scored(passage: Passage, score: float) -> Passage:
    return Passage(passage.chunk_id, passage.doc_id, passage.title, passage.text, score)


@dataclass(frozen=True, slots=True)
class Case:
    """One labelled question asked of one tenant."""

    text: str
    route: Route
    lang: str
    tenant: str
    sources: frozenset[str]  # the question's source and the tenant's: leave-one-out drops both
    gold: tuple[str, ...] = ()


def load_tenants(split: Split = _whole) -> dict[str, CorpusTenant]:
    """The tenants that ship with the project: SQuAD Normans, HotpotQA and the written KB's two groups."""
    by_source: dict[str, list[SourceDocument]] = {}
    with (resources.files("routes") / "data" / PASSAGES_FILE).open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                by_source.setdefault(row["source"], []).append(SourceDocument(row["id"], row["title"], row["text"]))
    kb = load_written_kb()
    for doc in kb.documents:
        group = "written_place" if doc.id in PLACE_DOCS else "written_org"
        by_source.setdefault(group, []).append(SourceDocument(doc.id, doc.title, doc.text))
    for tenant, raw in _redundant_sets().items():
        by_source[tenant] = [SourceDocument(d["id"], d["title"], d["text"]) for d in raw["documents"]]
    return {name: CorpusTenant(name, tuple(docs), split) for name, docs in by_source.items()}


def _redundant_sets() -> dict[str, Any]:
    return {
        tenant: json.loads((resources.files("routes") / "data" / name).read_text(encoding="utf-8"))
        for tenant, name in REDUNDANT_FILES.items()
    }


def written_group(supporting: Iterable[str]) -> str:
    return "written_place" if any(doc in PLACE_DOCS for doc in supporting) else "written_org"


def _direct_source(example: Example) -> str:
    return f"written_direct_{example.lang}"


def own_cases(examples: Sequence[Example]) -> list[Case]:
    """Each set's questions asked of its own tenant, with their true route."""
    cases = [
        Case(e.text, e.route, e.lang, e.source, frozenset({e.source}))
        for e in examples
        if e.source in ("squad_v2", "hotpotqa")
    ]
    for q in load_written_kb().questions:
        group = written_group(q.supporting)
        cases.append(Case(q.question, q.route, q.lang, group, frozenset({group}), q.supporting))
    for tenant, raw in _redundant_sets().items():
        cases += [
            Case(q["question"], "single_hop", q["lang"], tenant, frozenset({tenant}), tuple(q["supporting"]))
            for q in raw["questions"]
        ]
    return cases


def direct_cases(examples: Sequence[Example], tenants: Iterable[str]) -> list[Case]:
    """Conversation and transforms asked of every tenant, and questions asked of a tenant that holds
    nothing on them: both ``direct``."""
    names = sorted(tenants)
    cases = [
        Case(e.text, "direct", e.lang, tenant, frozenset({_direct_source(e), tenant}))
        for e in examples
        if e.source == "written_examples" and e.route == "direct"
        for tenant in names
    ]
    cases += [
        Case(e.text, "direct", e.lang, tenant, frozenset({"skr_nq", tenant}))
        for e in examples
        if e.source == "skr_nq"
        for tenant in ("squad_v2", "written_org")
    ]
    cases += [
        Case(c.text, "direct", c.lang, OFF_TENANT[c.tenant], c.sources | {OFF_TENANT[c.tenant]})
        for c in own_cases(examples)
        if c.tenant in OFF_TENANT
    ]
    return cases


def all_cases() -> list[Case]:
    examples = load_examples()
    return own_cases(examples) + direct_cases(examples, ("squad_v2", "hotpotqa", "written_org", "written_place"))
