"""``python -m routes.offline.eval.sentence_gate --answers FILE [--judge]``: how the sentence gate does on real answers.

``FILE`` holds the embedded model's answers to questions of the shared sets (``python -m
routes.offline.eval.sentence_answers``). Two numbers decide the support test and its threshold:

- **withheld**: of the answers' own sentences, how many the gate withholds (``--show`` prints them, with the terms
  it found missing, for the hand check of how many were in fact supported: the false withholds);
- **caught**: into each answer one sentence of an unrelated document is inserted (with a citation, as a model writes
  it), at a drawn position: how many of those inserts the gate withholds;
- **near caught**: the same with a sentence of a document beside the answer's passages
  (:mod:`routes.offline.eval.inserts`): on topic, as a small model's inventions are.

Each is reported per language and for a range of ``min_support`` thresholds. ``--judge`` also asks the local model,
once per answer the gate doubts, the groundedness critic's question about the withheld sentences (what the corrective
pipeline does), and reports how many doubts it clears among the answers' own sentences and among the inserts.
``--relevance-judge`` scores every sentence with the round judge instead
(:mod:`routes.offline.eval.judged_support`), alone and as a second check after the lexical one, over a range of
thresholds.
Results: ``routes/offline/eval/README.md``.
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

from gateway.providers import LLMClient, open_llm_client
from gateway.settings import GroundingSettings, LLMEndpointSettings, LLMSettings, Settings
from pipelines.corrective import GROUNDED_SYSTEM, GROUNDED_USER, GroundednessCheck
from pipelines.shared import (
    ABSTAIN_EN,
    ABSTAIN_JA,
    NOT_IN_CONTEXT,
    Passage,
    SentenceGate,
    StructuredOutputError,
    drop_phantom_citations,
    format_context,
    has_cjk,
    split_sentences,
)
from routes.offline.eval.inserts import Inserts
from routes.offline.eval.judged_support import GateReading, JudgedSupport, SupportReading
from routes.offline.eval.metrics import answer_in_prediction
from routes.offline.eval.sentence_answers import DATA
from routes.offline.local_llm.model import DEFAULT_MODEL, default_model_dir, prepare
from routes.offline.local_llm.server import LocalLLMServer, ServerConfig, is_healthy

THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7)
JUDGE_THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5)
SEED = 11


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    lang: str
    question: str
    passages: list[str]
    answer: str  # the model's answer, citations as it wrote them
    gold: list[str]
    insert: str  # an unrelated document's sentence, cited
    at: int  # where the inserts go, in sentences
    titles: list[str]
    near: str | None  # a sentence of a document beside the passages, cited (None: the set has none to draw)


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_cases(path: Path, seed: int = SEED, exclude: Path | None = None) -> list[Case]:
    """The answers that answer (not the model's "not in the passages"), each with its drawn inserts; without the
    questions ``exclude`` (another answers file) holds: a held-out check of a choice made on that file."""
    rng = random.Random(seed)
    near_rng = random.Random(seed + 1)  # its own draws: the unrelated inserts stay those of earlier runs
    seen = {record["id"] for record in _records(exclude)} if exclude is not None else set()
    records = [record for record in _records(path) if record["id"] not in seen]
    inserts = Inserts(DATA)
    pools = inserts.unrelated()
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
        cited = len(record["passages"])
        near = inserts.near(record)
        cases.append(
            Case(
                id=record["id"],
                lang=lang,
                question=record["question"],
                passages=[p["text"] for p in record["passages"]],
                answer=answer,
                gold=record["answers"],
                insert=f"{sentence.rstrip()} [{rng.randint(1, cited)}]",
                at=rng.randint(0, count),
                titles=[p["title"] for p in record["passages"]],
                near=f"{near_rng.choice(near).rstrip()} [{near_rng.randint(1, cited)}]" if near else None,
            )
        )
    return cases


def with_insert(case: Case, insert: str | None = None) -> str:
    """The answer with ``insert`` (the unrelated one by default) at the case's drawn position."""
    added = case.insert if insert is None else insert
    sentences = [s.raw for s in split_sentences(case.answer)]
    sentences.insert(case.at, (" " if case.at else "") + added + ("" if case.at else " "))
    return "".join(sentences).strip()


def _is_insert(case: Case, sentence: str, insert: str | None = None) -> bool:
    """Whether a withheld sentence holds the insert (cleaned as the gate cleans it; a neighbour without a full stop
    before it makes one sentence of both)."""
    added = case.insert if insert is None else insert
    return drop_phantom_citations(added, len(case.passages))[:20] in sentence


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
        if case.near is not None:
            near = gate(case, with_insert(case, case.near), min_support)
            row["near"] += 1
            row["near_caught"] += any(_is_insert(case, w.sentence, case.near) for w in near.withheld)
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


def _of(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / max(whole, 1):.1%})"


@dataclass(frozen=True, slots=True)
class Scored:
    """One sentence the gate judged: the lexical verdict and the judge's support score."""

    lexical: bool  # withheld by the lexical test for want of support
    support: float  # the judge's score
    other: bool  # withheld for another reason than support (a bare citation, a decline): by either test


def judge_scores(case: Case, text: str, min_support: float, support: SupportReading) -> list[tuple[str, Scored]]:
    """Every sentence of ``text`` as the gate cut and cleaned it, with both tests' readings."""
    scored = []
    for judged in gate(case, text, min_support).judged:
        reason = judged.withheld.reason if judged.withheld else None
        other = reason not in (None, "unsupported")
        score = 0.0 if other else support.score(judged.text, case.titles, case.passages)
        scored.append((judged.text, Scored(lexical=reason == "unsupported", support=score, other=other)))
    return scored


def relevance_table(cases: list[Case], min_support: float, readings: dict[str, SupportReading] | None = None) -> str:
    """The judge as the support test, alone and after the lexical one, per language, reading and threshold: the
    answers' own sentences withheld and the inserts (unrelated, near) caught."""
    if readings is None:
        from gateway.providers import USEEmbeddings  # deferred: loads the model's weights
        from gateway.query import load_calibration  # deferred: loads (or fits) the USE calibration

        embeddings = USEEmbeddings()
        judge = load_calibration(Settings(), embeddings).judge
        readings = {
            "gate's (same cosine)": GateReading(judge),
            "cosine to the sentence": JudgedSupport(embeddings.embed_array, judge),
        }
    rows: dict[tuple[str, str, str, float], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for case in cases:
        for name, support in readings.items():
            _count(rows, case, name, support, min_support)
    lines = [
        "| lang | judge's reading | test | threshold | own sentences withheld | inserts caught | near inserts caught |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for (lang, name, test, threshold), row in sorted(rows.items()):
        lines.append(
            f"| {lang} | {name} | {test} | {threshold} | {_of(row['withheld'], row['sentences'])} | "
            f"{_of(row['insert_caught'], row['insert'])} | {_of(row['near_caught'], row['near'])} |"
        )
    return "\n".join(lines)


def _count(
    rows: dict[tuple[str, str, str, float], dict[str, int]],
    case: Case,
    name: str,
    support: SupportReading,
    min_support: float,
) -> None:
    own = [scored for _, scored in judge_scores(case, case.answer, min_support, support)]
    inserts = {"insert": case.insert, "near": case.near}
    found = {
        kind: [
            s
            for text, s in judge_scores(case, with_insert(case, added), min_support, support)
            if _is_insert(case, text, added)
        ]
        for kind, added in inserts.items()
        if added is not None
    }
    for threshold in JUDGE_THRESHOLDS:
        for test in ("judge", "lexical + judge"):
            row = rows[(case.lang, name, test, threshold)]

            def withheld(s: Scored, test: str = test, threshold: float = threshold) -> bool:
                return s.other or s.support < threshold or (test != "judge" and s.lexical)

            row["sentences"] += len(own)
            row["withheld"] += sum(withheld(s) for s in own)
            for kind, held in found.items():
                row[kind] += 1
                row[f"{kind}_caught"] += any(withheld(s) for s in held)


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
    parser = argparse.ArgumentParser(prog="python -m routes.offline.eval.sentence_gate")
    parser.add_argument("--answers", type=Path, required=True)
    parser.add_argument("--exclude", type=Path, help="leave out the questions of this answers file (held out)")
    parser.add_argument("--show", action="store_true", help="print the withheld sentences for the hand check")
    parser.add_argument("--judge", action="store_true", help="also ask the local model about the doubted sentences")
    parser.add_argument(
        "--relevance-judge", action="store_true", help="also score the sentences with the round judge (no LLM)"
    )
    parser.add_argument("--inserts", type=int, default=15, help="inserted answers judged per language")
    parser.add_argument("--port", type=int, default=8081)
    args = parser.parse_args()
    cases = load_cases(args.answers, exclude=args.exclude)
    default = GroundingSettings().min_answer_support
    print("| min_support | lang | answers | sentences | withheld (share) | inserts caught | near inserts caught |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for threshold in THRESHOLDS:
        for lang, row in sorted(measure(cases, threshold).items()):
            share = row["withheld"] / max(row["sentences"], 1)
            marker = " (default)" if threshold == default else ""
            print(
                f"| {threshold}{marker} | {lang} | {row['answers']} | {row['sentences']} | "
                f"{row['withheld']} ({share:.1%}) | {_of(row['caught'], row['inserts'])} | "
                f"{_of(row['near_caught'], row['near'])} |"
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
    if args.relevance_judge:
        print(relevance_table(cases, default))
    if args.judge:
        config = ServerConfig(prepare(DEFAULT_MODEL, default_model_dir()), port=args.port)
        if is_healthy(config.host, config.port):
            print(asyncio.run(judged(cases, config.base_url, default, args.inserts)))
        else:
            with LocalLLMServer(config):
                print(asyncio.run(judged(cases, config.base_url, default, args.inserts)))


if __name__ == "__main__":
    main()
