"""``python -m gateway.eval.sentence_gate --answers FILE [--judge]``: how the sentence gate does on real answers.

``FILE`` holds the embedded model's answers to questions of the shared sets (``python -m
gateway.eval.sentence_answers``). Two numbers decide the support test and its threshold:

- **withheld**: of the answers' own sentences, how many the gate withholds (``--show`` prints them, with the terms
  it found missing, for the hand check of how many were in fact supported: the false withholds);
- **caught**: into each answer one sentence of an unrelated document is inserted (with a citation, as a model writes
  it), at a drawn position: how many of those inserts the gate withholds.

Each is reported per language and for a range of ``min_support`` thresholds. ``--judge`` also asks the local model,
once per answer the gate doubts, the groundedness critic's question about the withheld sentences (what the corrective
pipeline does), and reports how many doubts it clears among the answers' own sentences and among the inserts.
Results: ``gateway/eval/README.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage

from gateway.eval.datasets import load
from gateway.eval.metrics import answer_in_prediction
from gateway.eval.sentence_answers import DATA
from gateway.local_llm.model import DEFAULT_MODEL, default_model_dir, prepare
from gateway.local_llm.server import LocalLLMServer, ServerConfig, is_healthy
from gateway.providers.llm import LLMClient, open_llm_client
from gateway.settings import LLMEndpointSettings, LLMSettings
from pipelines.corrective.critique import GroundednessCheck
from pipelines.corrective.prompts import GROUNDED_SYSTEM, GROUNDED_USER
from pipelines.shared.citations import drop_phantom_citations
from pipelines.shared.deps import Passage, StructuredOutputError
from pipelines.shared.generation import GroundingPolicy, format_context
from pipelines.shared.prompts import ABSTAIN_EN, ABSTAIN_JA, NOT_IN_CONTEXT
from pipelines.shared.sentence_gate import SentenceGate
from pipelines.shared.sentences import split_sentences
from pipelines.shared.text import has_cjk

THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7)
SEED = 11
INSERT = "insert"


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    lang: str
    question: str
    passages: list[str]
    answer: str  # the model's answer, citations as it wrote them
    gold: list[str]
    insert: str  # an unrelated document's sentence, cited
    at: int  # where the insert goes, in sentences


def load_cases(path: Path, seed: int = SEED) -> list[Case]:
    """The answers that answer (not the model's "not in the passages"), each with its drawn insert."""
    rng = random.Random(seed)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    pools = _unrelated_sentences()
    cases = []
    for record in records:
        answer = record["answer"]
        if answer in (ABSTAIN_EN, ABSTAIN_JA) or NOT_IN_CONTEXT in answer or not answer.strip():
            continue
        lang = "ja" if has_cjk(record["question"]) else "en"
        used = {p["title"] for p in record["passages"]}
        candidates = [(title, s) for title, s in pools[lang] if title not in used]
        _, sentence = rng.choice(candidates)
        count = len(split_sentences(answer))
        cases.append(
            Case(
                id=record["id"],
                lang=lang,
                question=record["question"],
                passages=[p["text"] for p in record["passages"]],
                answer=answer,
                gold=record["answers"],
                insert=f"{sentence.rstrip()} [{rng.randint(1, len(record['passages']))}]",
                at=rng.randint(0, count),
            )
        )
    return cases


def _unrelated_sentences() -> dict[str, list[tuple[str, str]]]:
    """Document sentences that read like an answer's (6-40 words, 15-80 characters in Japanese), by language; the
    English ones from both English sets, so an insert into a SQuAD answer comes from another topic altogether."""
    pools: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for name in ("squad_v2_dev_normans.json", "hotpotqa_train.json", "jsquad_valid_sample.json"):
        for doc in load(DATA / name).documents:
            for sentence in split_sentences(doc["text"]):
                text = sentence.text
                japanese = has_cjk(text)
                fits = 15 <= len(text) <= 80 if japanese else 6 <= len(text.split()) <= 40
                if fits and text[-1] in ".。":
                    pools["ja" if japanese else "en"].append((doc["title"], text))
    return pools


def with_insert(case: Case) -> str:
    sentences = [s.raw for s in split_sentences(case.answer)]
    sentences.insert(case.at, (" " if case.at else "") + case.insert + ("" if case.at else " "))
    return "".join(sentences).strip()


def _is_insert(case: Case, sentence: str) -> bool:
    """Whether a withheld sentence holds the insert (cleaned as the gate cleans it; a neighbour without a full stop
    before it makes one sentence of both)."""
    return drop_phantom_citations(case.insert, len(case.passages))[:20] in sentence


def gate(case: Case, text: str, min_support: float) -> SentenceGate:
    checked = SentenceGate(case.question, case.passages, len(case.passages), min_support)
    checked.feed(text)
    checked.close()
    return checked


def measure(cases: list[Case], min_support: float) -> dict[str, dict[str, int]]:
    """Per language: sentences, own sentences withheld, inserts, inserts caught."""
    figures: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for case in cases:
        own = gate(case, case.answer, min_support)
        row = figures[case.lang]
        row["answers"] += 1
        row["sentences"] += len(own.judged)
        row["withheld"] += len(own.withheld)
        row["answers_withheld"] += bool(own.withheld)
        inserted = gate(case, with_insert(case), min_support)
        row["inserts"] += 1
        row["caught"] += any(_is_insert(case, w.sentence) for w in inserted.withheld)
    return {lang: dict(row) for lang, row in figures.items()}


async def judge(llm: LLMClient, case: Case, text: str, min_support: float) -> tuple[list[str], list[str]]:
    """The gate's withheld sentences of ``text``, split into those the critic clears and those it keeps doubting
    (one call per answer, as the corrective pipeline asks it)."""
    checked = gate(case, text, min_support)
    doubted = [w.sentence for w in checked.withheld if w.reason == "unsupported"]
    if not doubted:
        return [], []
    passages = [Passage(str(i), str(i), "", p, 0.5) for i, p in enumerate(case.passages)]
    messages = [
        SystemMessage(GROUNDED_SYSTEM),
        HumanMessage(GROUNDED_USER.format(evidence=format_context(passages), answer=text)),
    ]
    try:
        verdict, _ = await llm.structured(messages, GroundednessCheck, node="check_grounded")
    except StructuredOutputError:
        return [], doubted
    return (doubted, []) if not verdict.unsupported_claims else ([], doubted)


async def judged(cases: list[Case], base_url: str, min_support: float, inserts: int) -> dict[str, dict[str, int]]:
    """Every answer with a doubt of its own, and the first ``inserts`` inserted answers of each language."""
    llm = open_llm_client(LLMSettings(), LLMEndpointSettings(base_url=base_url, timeout_s=600, max_retries=0))
    figures: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for case in cases:
        row = figures[case.lang]
        cleared, kept = await judge(llm, case, case.answer, min_support)
        row["own_doubted"] += len(cleared) + len(kept)
        row["own_cleared"] += len(cleared)
        if row["inserts_judged"] >= inserts:
            continue
        cleared, kept = await judge(llm, case, with_insert(case), min_support)
        row["inserts_judged"] += 1
        row["insert_cleared"] += any(_is_insert(case, c) for c in cleared)
        print(f"{case.id[:12]:12} {dict(row)}", flush=True)
    return {lang: dict(row) for lang, row in figures.items()}


def policies(cases: list[Case], min_support: float) -> dict[str, dict[str, float]]:
    """What a failed sentence does to the answer, on the answers with an insert: the gold answer still in the reply
    when the answer goes on with the later sentences that pass, and when it ends at the first failed one."""
    figures: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for case in cases:
        checked = gate(case, with_insert(case), min_support)
        first_failed = min((w.index for w in checked.withheld), default=len(checked.judged))
        going_on = checked.text
        ending = "".join(j.lead + j.text for j in checked.judged if j.withheld is None and j.index < first_failed)
        row = figures[case.lang]
        row["answers"] += 1
        row["own_answer"] += answer_in_prediction(case.answer, case.gold)
        row["own_gated"] += answer_in_prediction(gate(case, case.answer, min_support).text, case.gold)
        row["goes_on"] += answer_in_prediction(going_on, case.gold)
        row["ends_there"] += answer_in_prediction(ending, case.gold)
    return {lang: dict(row) for lang, row in figures.items()}


def show(cases: list[Case], min_support: float) -> list[dict[str, Any]]:
    """Every withheld sentence of the answers themselves, for the hand check."""
    shown = []
    for case in cases:
        for held in gate(case, case.answer, min_support).withheld:
            shown.append(
                {
                    "id": case.id,
                    "question": case.question,
                    "sentence": held.sentence,
                    "reason": held.reason,
                    "missing": held.missing,
                }
            )
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway.eval.sentence_gate")
    parser.add_argument("--answers", type=Path, required=True)
    parser.add_argument("--show", action="store_true", help="print the withheld sentences for the hand check")
    parser.add_argument("--judge", action="store_true", help="also ask the local model about the doubted sentences")
    parser.add_argument("--inserts", type=int, default=15, help="inserted answers judged per language")
    parser.add_argument("--port", type=int, default=8081)
    args = parser.parse_args()
    cases = load_cases(args.answers)
    default = GroundingPolicy().min_support
    print("| min_support | lang | answers | sentences | withheld (share) | inserts caught |")
    print("|---|---|---:|---:|---:|---:|")
    for threshold in THRESHOLDS:
        for lang, row in sorted(measure(cases, threshold).items()):
            share = row["withheld"] / max(row["sentences"], 1)
            caught = row["caught"] / max(row["inserts"], 1)
            marker = " (default)" if threshold == default else ""
            print(
                f"| {threshold}{marker} | {lang} | {row['answers']} | {row['sentences']} | "
                f"{row['withheld']} ({share:.1%}) | {row['caught']}/{row['inserts']} ({caught:.1%}) |"
            )
    print(
        "\nGold answer in the reply: the model's answers, gated; with an insert, gated, by what a failed sentence does"
    )
    print("| lang | answers | the model's own answer | the same, gated | with insert, gated: goes on | ends there |")
    print("|---|---:|---:|---:|---:|---:|")
    for lang, kept in sorted(policies(cases, default).items()):
        print(
            f"| {lang} | {kept['answers']:.0f} | {kept['own_answer']:.0f} | {kept['own_gated']:.0f} | "
            f"{kept['goes_on']:.0f} | {kept['ends_there']:.0f} |"
        )
    if args.show:
        for item in show(cases, default):
            print(json.dumps(item, ensure_ascii=False))
    if args.judge:
        config = ServerConfig(prepare(DEFAULT_MODEL, default_model_dir()), port=args.port)
        if is_healthy(config.host, config.port):
            print(asyncio.run(judged(cases, config.base_url, default, args.inserts)))
        else:
            with LocalLLMServer(config):
                print(asyncio.run(judged(cases, config.base_url, default, args.inserts)))


if __name__ == "__main__":
    main()
