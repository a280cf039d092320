"""Sentences to insert into a real answer, to see whether the sentence gate withholds them.

Two kinds, because they test different things:

- **unrelated**: a sentence of a document on another topic altogether. What a gate must catch, and the easy case:
  it shares almost nothing with the passages.
- **near**: a sentence of a document *beside* the answer's passages (another paragraph of the same article, or one
  of a HotpotQA question's own distractor paragraphs). What a small model really invents looks like this: on
  topic, naming the same people and places, stating something the given passages do not. Sentences that hold a
  gold answer are left out, so an insert never restates the answer.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from pipelines.shared import has_cjk, normalise, split_sentences
from routes.offline.eval.datasets import TITLE_ID_CHARS, Dataset, load

SETS = ("squad_v2_dev_normans.json", "hotpotqa_train.json", "jsquad_valid_sample.json")


def fits(text: str) -> bool:
    """A sentence that reads like one of an answer's: 6-40 words (15-80 characters in Japanese), ending with a stop."""
    japanese = has_cjk(text)
    sized = 15 <= len(text) <= 80 if japanese else 6 <= len(text.split()) <= 40
    return sized and bool(text) and text[-1] in ".。"


def _sentences(text: str) -> list[str]:
    """A document's answer-like sentences; a JSQuAD paragraph's leading "title [SEP] " is not part of its text."""
    return [s.text for s in split_sentences(text.split(" [SEP] ", 1)[-1]) if fits(s.text)]


class Inserts:
    """The shared sets, loaded once, as the two pools inserts are drawn from."""

    def __init__(self, data: Path) -> None:
        self._sets: dict[str, Dataset] = {}
        for name in SETS:
            dataset = load(data / name)
            self._sets[dataset.name] = dataset
        raw = json.loads((data / "hotpotqa_train.json").read_text(encoding="utf-8"))
        self._hotpot_context = {str(item["_id"]): [title for title, _ in item["context"]] for item in raw}

    def unrelated(self) -> dict[str, list[tuple[str, str]]]:
        """(title, sentence) by language; the English ones from both English sets, so an insert into a SQuAD answer
        comes from another topic altogether."""
        pools: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for dataset in self._sets.values():
            for doc in dataset.documents:
                for sentence in _sentences(doc["text"]):
                    pools["ja" if has_cjk(sentence) else "en"].append((doc["title"], sentence))
        return pools

    def near(self, record: dict[str, Any]) -> list[str]:
        """Sentences of the documents beside ``record``'s passages (an answers-file line) that hold no gold answer:
        the same article's other paragraphs (SQuAD, JSQuAD: their ids share the article's slug), or the question's
        own context paragraphs (HotpotQA)."""
        dataset = self._sets[record["set"]]
        given = {p["id"] for p in record["passages"]}
        if record["set"] == "hotpotqa":
            titles = {t[:TITLE_ID_CHARS] for t in self._hotpot_context.get(record["id"], [])}
            beside = [d for d in dataset.documents if d["id"] in titles and d["id"] not in given]
        else:
            slugs = {p["id"].rsplit("-p", 1)[0] for p in record["passages"]}
            beside = [d for d in dataset.documents if d["id"] not in given and d["id"].rsplit("-p", 1)[0] in slugs]
        gold = [normalise(a) for a in record["answers"] if a.strip()]
        return [
            sentence
            for doc in beside
            for sentence in _sentences(doc["text"])
            if not any(answer in normalise(sentence) for answer in gold)
        ]
