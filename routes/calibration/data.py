"""The calibration set, as shipped in ``routes/data`` (the shared dev data is not in the image).

- Shared rounds (``calibration_rounds.jsonl``, built by ``python -m routes.offline.training.build_calibration_set``):
each
  HotpotQA question with its 10 paragraphs (the 2 supporting ones answer), each answerable SQuAD v2 / JSQuAD question
  with its paragraph and 3 other paragraphs of the article. Pages by id: HotpotQA's and SQuAD's from
  ``dataset_passages.jsonl``, JSQuAD's from ``calibration_passages.jsonl``.
- The written near-miss manuals (``near_miss_{en,ja}.json``): each case with its judged pages, ``correct`` answers.
- The semantic pairs (``semantic_pairs.jsonl``): paraphrases (the same question) and contrasts (same topic, another
  question), with the cache's contrast guard's verdict computed by the caller (the guard is the gateway's).

Every file read here goes into the calibration's digest (:func:`data_digest`): a changed page refits.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from routes.corpus import PASSAGES_FILE as DATASET_PASSAGES

DATA: Path = Path(__file__).resolve().parents[1] / "data"
ROUNDS_FILE = "calibration_rounds.jsonl"
PASSAGES_FILE = "calibration_passages.jsonl"
NEAR_MISS_FILES = ("near_miss_en.json", "near_miss_ja.json")
PAIRS_FILE = "semantic_pairs.jsonl"
SHARED_SOURCES = ("hotpotqa", "squad", "jsquad")
# The near-miss pages' labels: ``ambiguous`` (on topic, not the answer) does not answer.
NEAR_MISS_LABELS = {"correct": 1.0, "ambiguous": 0.5, "incorrect": 0.0}


def page_key(title: str, text: str) -> str:
    """How a page is matched to a shipped passage: the passages file keeps texts stripped."""
    return f"{title}\n{text.strip()}"


@dataclass(frozen=True, slots=True)
class Page:
    title: str
    text: str
    label: float  # 1 answers; near-miss ``ambiguous`` pages are 0.5 (neither)


@dataclass(frozen=True, slots=True)
class Round:
    source: str  # hotpotqa, squad, jsquad, near_miss_en, near_miss_ja
    domain: str  # what a leave-one-out split holds out together (the near-miss manual)
    kind: str
    question: str
    pages: tuple[Page, ...]
    answerless: bool = False


@dataclass(frozen=True, slots=True)
class TextPair:
    kind: str  # paraphrase | contrast
    lang: str
    a: str
    b: str


@dataclass(frozen=True, slots=True)
class CalibrationSet:
    rounds: tuple[Round, ...]
    pairs: tuple[TextPair, ...]


def _data() -> Traversable:
    return resources.files("routes") / "data"


def data_files() -> tuple[str, ...]:
    return (ROUNDS_FILE, PASSAGES_FILE, DATASET_PASSAGES, *NEAR_MISS_FILES, PAIRS_FILE)


@functools.cache
def data_digest() -> str:
    """Digest of every file the fit reads, by name and content. The files ship inside the package and never change
    while a process runs, so they are read once (every app's answer namespace includes this digest)."""
    digest = hashlib.sha256()
    for name in data_files():
        digest.update(name.encode() + b"\0")
        digest.update((_data() / name).read_bytes())
    return digest.hexdigest()


def _jsonl(name: str) -> Iterator[dict[str, object]]:
    yield from _lines(_data() / name)


def _lines(source: Traversable | Path) -> Iterator[dict[str, object]]:
    for line in source.read_text(encoding="utf-8").splitlines():
        if line.strip():
            yield json.loads(line)


def shared_rounds() -> list[Round]:
    passages = {str(row["id"]): (str(row["title"]), str(row["text"])) for row in _jsonl(DATASET_PASSAGES)}
    passages.update({str(row["id"]): (str(row["title"]), str(row["text"])) for row in _jsonl(PASSAGES_FILE)})
    rounds = []
    for row in _jsonl(ROUNDS_FILE):
        refs = row["pages"]
        assert isinstance(refs, list)
        pages = tuple(Page(*passages[str(ref)], float(label)) for ref, label in refs)
        source = str(row["source"])
        rounds.append(Round(source, source, str(row["kind"]), str(row["question"]), pages))
    return rounds


def near_miss_rounds() -> list[Round]:
    rounds = []
    for name in NEAR_MISS_FILES:
        lang = name.removeprefix("near_miss_").removesuffix(".json")
        raw = json.loads((_data() / name).read_text(encoding="utf-8"))
        documents = {d["id"]: d for d in raw["documents"]}
        for case in raw["cases"]:
            pages = tuple(
                Page(documents[j["doc"]]["title"], documents[j["doc"]]["text"], NEAR_MISS_LABELS[j["label"]])
                for j in case["judgements"]
            )
            rounds.append(Round(f"near_miss_{lang}", f"{lang}:{case['domain']}", case["kind"], case["question"], pages))
    return rounds


def text_pairs() -> list[TextPair]:
    return read_pairs(_data() / PAIRS_FILE)


def read_pairs(source: Traversable | Path) -> list[TextPair]:
    """A pair file's pairs (JSON lines: kind, lang, a, b): the calibration's, or a set written apart from it."""
    return [TextPair(str(r["kind"]), str(r["lang"]), str(r["a"]), str(r["b"])) for r in _lines(source)]


def load_calibration_set() -> CalibrationSet:
    return CalibrationSet((*shared_rounds(), *near_miss_rounds()), tuple(text_pairs()))
