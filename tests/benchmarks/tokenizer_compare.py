"""Which tokenizer should compare words across the project? Measured on the shared dev sets.

    python -m tests.benchmarks.tokenizer_compare [--data-dir ../shared/data/dev]

For each candidate: speed over the JSQuAD sample (paragraphs and questions), lexical retrieval of
the gold paragraph by BM25 (recall@1 / @4 over all paragraphs of the set, with all tokens and with
content terms only), and query-term coverage: the share of a question's content terms found in its
gold paragraph versus in the best-covering other paragraph (the signal a router or relevance
scorer would use). English is measured on SQuAD v2 "Normans" (answerable questions), Japanese on
the JSQuAD sample. Candidates whose package is not installed are listed as missing, not skipped
silently. The BM25 scorer here is for measurement only.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import re
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pipelines.shared import text as chosen
from pipelines.shared.support import terms as current_terms
from routes.offline.eval.datasets import load_squad_v2
from routes.written_kb import load_written_kb

Tokenize = Callable[[str], list[str]]

_NAIVE = re.compile(r"\w+")
_JA_CONTENT_POS = frozenset(["名詞", "動詞", "形容詞", "形状詞", "副詞", "接頭辞", "代名詞"])


@dataclass(frozen=True)
class Candidate:
    name: str
    tokens: Tokenize
    content: Tokenize
    package: str  # what it needs beyond the standard library
    load_seconds: float = 0.0


@dataclass(frozen=True)
class Task:
    lang: str
    paragraphs: list[str]
    questions: list[tuple[str, int]]  # (question, gold paragraph index)


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def naive_words(text: str) -> list[str]:
    """What splitting on word characters does: a Japanese sentence is one or two 'words'."""
    return _NAIVE.findall(_fold(text))


def current_content(text: str) -> list[str]:
    """pipelines.shared.support.terms today: regex words minus stopwords, CJK character bigrams."""
    return sorted(current_terms(text))


def _morph_candidate(name: str, package: str, analyse: Callable[[str], list[tuple[str, str]]]) -> Candidate:
    """A morphological analyser: ``analyse`` returns (normalised form, coarse part of speech) pairs."""

    def tokens(text: str) -> list[str]:
        return [form for form, pos in analyse(_fold(text)) if form.strip() and pos not in {"補助記号", "空白", "記号"}]

    def content(text: str) -> list[str]:
        return [
            form
            for form, pos in analyse(_fold(text))
            if pos in _JA_CONTENT_POS and form.strip() and not (len(form) == 1 and "\u3040" <= form <= "\u309f")
        ] + [w for w in chosen.content_terms(text) if w.isascii()]

    return Candidate(name, tokens, content, package)


def load_candidates() -> tuple[list[Candidate], list[str]]:
    candidates = [
        Candidate("regex \\w+ (naive)", naive_words, naive_words, "-"),
        Candidate("current support.terms", current_content, current_content, "-"),
        Candidate(f"pipelines.shared.text ({chosen.BACKEND})", chosen.tokens, chosen.content_terms, "-"),
    ]
    missing: list[str] = []
    if importlib.util.find_spec("janome"):
        started = time.perf_counter()
        from janome.tokenizer import Tokenizer as JanomeTokenizer

        janome = JanomeTokenizer()
        janome.tokenize("準備")
        loaded = time.perf_counter() - started

        def janome_analyse(text: str) -> list[tuple[str, str]]:
            out = []
            for tok in janome.tokenize(text):
                pos = tok.part_of_speech.split(",")[0]
                base = tok.base_form if tok.base_form != "*" else tok.surface
                out.append((base, "補助記号" if pos == "記号" else pos))
            return out

        cand = _morph_candidate("janome 0.5 (base form)", "janome", janome_analyse)
        candidates.append(Candidate(cand.name, cand.tokens, cand.content, cand.package, loaded))
    else:
        missing.append("janome")
    if importlib.util.find_spec("sudachipy") and importlib.util.find_spec("sudachidict_core"):
        from sudachipy import Dictionary, SplitMode

        for mode_name, mode in (("A", SplitMode.A), ("C", SplitMode.C)):
            started = time.perf_counter()
            sudachi = Dictionary(dict="core").tokenizer(mode)
            sudachi.tokenize("準備")
            loaded = time.perf_counter() - started

            def sudachi_analyse(text: str, tok: Any = sudachi) -> list[tuple[str, str]]:
                return [(m.normalized_form(), m.part_of_speech()[0]) for m in tok.tokenize(text)]

            cand = _morph_candidate(f"sudachi {mode_name} (normalised)", "sudachipy+sudachidict_core", sudachi_analyse)
            candidates.append(Candidate(cand.name, cand.tokens, cand.content, cand.package, loaded))
    else:
        missing.append("sudachipy+sudachidict_core")
    if importlib.util.find_spec("fugashi") and importlib.util.find_spec("unidic_lite"):
        started = time.perf_counter()
        import fugashi

        tagger = fugashi.Tagger()
        tagger("準備")
        loaded = time.perf_counter() - started

        def fugashi_analyse(text: str) -> list[tuple[str, str]]:
            out = []
            for word in tagger(text):
                lemma = word.feature.lemma or word.surface
                # unidic lemmas carry readings for loanwords ("タスク-task"): keep the written part
                out.append((lemma.split("-")[0] if "-" in lemma else lemma, word.feature.pos1))
            return out

        cand = _morph_candidate("fugashi+unidic-lite (lemma)", "fugashi+unidic-lite", fugashi_analyse)
        candidates.append(Candidate(cand.name, cand.tokens, cand.content, cand.package, loaded))
    else:
        missing.append("fugashi+unidic-lite")
    return candidates, missing


def load_squad_format(path: Path, lang: str) -> Task:
    """Answerable questions of a SQuAD-format file, each with the paragraph it was written on."""
    dataset = load_squad_v2(path)
    position = {d["id"]: i for i, d in enumerate(dataset.documents)}
    paragraphs = [d["text"].replace("[SEP]", " ") for d in dataset.documents]
    questions = [(q.text, position[next(iter(q.gold_doc_ids))]) for q in dataset.questions if q.gold_doc_ids]
    return Task(lang, paragraphs, questions)


def load_written(lang: str) -> Task:
    """The written knowledge base's single-hop questions: distractor documents share their words."""
    kb = load_written_kb()
    docs = [d for d in kb.documents if d.lang == lang]
    position = {d.id: i for i, d in enumerate(docs)}
    paragraphs = [f"{d.title} {d.text}" for d in docs]
    questions = [
        (q.question, position[q.supporting[0]]) for q in kb.questions if q.lang == lang and q.route == "single_hop"
    ]
    return Task(f"{lang} (written KB, single-hop)", paragraphs, questions)


class BM25:
    """Okapi BM25 (k1 = 1.5, b = 0.75): enough to rank a few hundred paragraphs for a measurement."""

    def __init__(self, docs: Sequence[list[str]], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tf = [Counter(d) for d in docs]
        self.lengths = [len(d) for d in docs]
        self.avg = sum(self.lengths) / max(len(docs), 1)
        df: Counter[str] = Counter()
        for counts in self.tf:
            df.update(counts.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def rank(self, query: list[str]) -> list[int]:
        scores = []
        for i, counts in enumerate(self.tf):
            norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avg)
            s = sum(self.idf[t] * counts[t] * (self.k1 + 1) / (counts[t] + norm) for t in set(query) if t in counts)
            scores.append(s)
        return sorted(range(len(scores)), key=lambda i: -scores[i])


def retrieval(task: Task, tokenize: Tokenize) -> tuple[float, float]:
    index = BM25([tokenize(p) for p in task.paragraphs])
    at1 = at4 = 0
    for question, gold in task.questions:
        ranked = index.rank(tokenize(question))
        at1 += ranked[0] == gold
        at4 += gold in ranked[:4]
    n = len(task.questions)
    return at1 / n, at4 / n


def coverage(task: Task, content: Tokenize) -> tuple[float, float, float]:
    """Mean gold coverage, mean best-distractor coverage, share of questions the gold covers strictly best."""
    paragraph_terms = [set(content(p)) for p in task.paragraphs]
    gold_sum = rival_sum = 0.0
    wins = 0
    for question, gold in task.questions:
        q = set(content(question))
        if not q:
            continue
        cov = [len(q & p) / len(q) for p in paragraph_terms]
        rival = max(c for i, c in enumerate(cov) if i != gold)
        gold_sum += cov[gold]
        rival_sum += rival
        wins += cov[gold] > rival
    n = len(task.questions)
    return gold_sum / n, rival_sum / n, wins / n


def speed(task: Task, tokenize: Tokenize, min_seconds: float = 0.5) -> tuple[float, float]:
    """Throughput over the task's paragraphs and questions, repeated until timing noise is small."""
    texts = task.paragraphs + [q for q, _ in task.questions]
    tokenize(texts[0])
    count = chars = 0
    started = time.perf_counter()
    while (elapsed := time.perf_counter() - started) < min_seconds:
        count += sum(len(tokenize(t)) for t in texts)
        chars += sum(len(t) for t in texts)
    return count / elapsed, chars / elapsed


@cache
def installed_mb(package: str) -> str:
    if package == "-":
        return "0"
    total = 0
    for name in package.replace("-", "_").split("+"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            return "?"
        for location in spec.submodule_search_locations:
            total += sum(f.stat().st_size for f in Path(location).rglob("*") if f.is_file())
    return f"{total / 1e6:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    args = parser.parse_args()
    candidates, missing = load_candidates()
    tasks = [
        load_squad_format(args.data_dir / "jsquad_valid_sample.json", "ja"),
        load_written("ja"),
        load_squad_format(args.data_dir / "squad_v2_dev_normans.json", "en"),
        load_written("en"),
    ]
    for task in tasks:
        print(f"\n## {task.lang}: {len(task.questions)} questions over {len(task.paragraphs)} paragraphs")
        print(
            "| tokenizer | BM25 R@1 | BM25 R@4 | BM25(content) R@1 | R@4 | coverage gold | best distractor "
            "| gold covers best | tokens/s | chars/s | load s | MB |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for cand in candidates:
            if task.lang.startswith("en") and "(" in cand.name and cand.package != "-":
                continue  # the Japanese analysers add nothing to English words; measured on Japanese only
            r1, r4 = retrieval(task, cand.tokens)
            c1, c4 = retrieval(task, cand.content)
            gold, rival, wins = coverage(task, cand.content)
            tps, cps = speed(task, cand.tokens)
            print(
                f"| {cand.name} | {r1:.3f} | {r4:.3f} | {c1:.3f} | {c4:.3f} | {gold:.3f} | {rival:.3f} | {wins:.3f} "
                f"| {tps:,.0f} | {cps:,.0f} | {cand.load_seconds:.2f} | {installed_mb(cand.package)} |"
            )
    if missing:
        print("\nnot installed (not measured):", ", ".join(missing))


if __name__ == "__main__":
    main()
