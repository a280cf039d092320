"""``python -m routes.offline.eval.sentence_answers --out FILE``: real answers to check the sentence gate on.

The sentence gate (:mod:`pipelines.shared.sentence_gate`) is judged on what the embedded model really writes,
not on text written to pass it: this asks the local model plain RAG's prompt (:func:`grounded_messages`) for questions
of the shared sets, English and Japanese, each over the passages single_hop would give it (the gold paragraph
and paragraphs of the same article, or HotpotQA's two supporting paragraphs and one of its distractors), and
writes one JSON line per answer: question, passages, answer, gold. ``python -m routes.offline.eval.sentence_gate``
scores the gate on that file. A run takes about a minute per answer on 2 cores; a rerun resumes where the file ends.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from pathlib import Path
from typing import Any

from gateway.providers import open_llm_client
from gateway.settings import GroundingSettings, LLMEndpointSettings, LLMSettings
from pipelines.shared import Passage, grounded_messages
from routes.offline.eval.datasets import Dataset, load
from routes.offline.local_llm.model import DEFAULT_MODEL, default_model_dir, prepare
from routes.offline.local_llm.server import LocalLLMServer, ServerConfig, is_healthy

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "dev"
# (file, questions): English single-hop, English two-hop, Japanese single-hop.
SETS = (("squad_v2_dev_normans.json", 40), ("hotpotqa_train.json", 20), ("jsquad_valid_sample.json", 40))
PASSAGES = 3
SEED = 7


def cases(data: Path, seed: int = SEED) -> list[dict[str, Any]]:
    """The questions and the passages each is answered from, drawn the same way on every run."""
    rng = random.Random(seed)
    picked: list[dict[str, Any]] = []
    for name, count in SETS:
        dataset = load(data / name)
        by_id = {d["id"]: d for d in dataset.documents}
        answerable = [q for q in dataset.questions if q.answerable and q.gold_doc_ids]
        for question in rng.sample(answerable, count):
            gold = [by_id[i] for i in sorted(question.gold_doc_ids) if i in by_id]
            others = _neighbours(dataset, gold, rng)
            docs = (gold + others)[:PASSAGES] if len(gold) < PASSAGES else gold[:PASSAGES]
            rng.shuffle(docs)
            picked.append(
                {
                    "id": question.id,
                    "set": dataset.name,
                    "question": question.text,
                    "answers": question.answers,
                    "passages": [{"id": d["id"], "title": d["title"], "text": d["text"]} for d in docs],
                }
            )
    return picked


def _neighbours(dataset: Dataset, gold: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """Paragraphs retrieval would put beside the gold: the same article's (SQuAD's ids share the article's slug)."""
    gold_ids = {d["id"] for d in gold}
    slug = gold[0]["id"].rsplit("-p", 1)[0]
    same = [d for d in dataset.documents if d["id"] not in gold_ids and d["id"].startswith(slug + "-p")]
    pool = same or [d for d in dataset.documents if d["id"] not in gold_ids]
    return rng.sample(pool, min(PASSAGES, len(pool)))


def _done(out: Path) -> set[str]:
    return {json.loads(line)["id"] for line in out.read_text(encoding="utf-8").splitlines()} if out.exists() else set()


def first_of_each_set(picked: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The first ``count`` questions of each set (all with 0): a shorter run still measures every language."""
    if count <= 0:
        return picked
    taken: dict[str, int] = {}
    kept = []
    for case in picked:
        if taken.get(case["set"], 0) < count:
            taken[case["set"]] = taken.get(case["set"], 0) + 1
            kept.append(case)
    return kept


async def generate(out: Path, base_url: str, per_set: int = 0, seed: int = SEED) -> None:
    done = _done(out)
    llm = open_llm_client(LLMSettings(), LLMEndpointSettings(base_url=base_url, timeout_s=600, max_retries=0))
    max_tokens = GroundingSettings().answer_max_tokens
    with out.open("a", encoding="utf-8") as sink:
        for case in first_of_each_set(cases(DATA, seed), per_set):
            if case["id"] in done:
                continue
            passages = [Passage(p["id"], p["id"], p["title"], p["text"], 0.5) for p in case["passages"]]
            messages = grounded_messages(case["question"], passages)
            reply = await llm.chat(messages, node="generate_answer", max_tokens=max_tokens)
            # The model's own text: what the gate is measured on is what it would be fed.
            record = {**case, "answer": reply.text, "seconds": round(reply.call.duration_s, 1)}
            sink.write(json.dumps(record, ensure_ascii=False) + "\n")
            sink.flush()
            print(f"{case['set']:9} {reply.call.duration_s:5.1f}s {reply.text[:90]!r}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m routes.offline.eval.sentence_answers")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--per-set", type=int, default=0, help="only the first N questions of each set (0: all)")
    parser.add_argument("--seed", type=int, default=SEED, help="another seed draws other questions: a held-out set")
    args = parser.parse_args()
    config = ServerConfig(prepare(DEFAULT_MODEL, default_model_dir()), port=args.port)
    if is_healthy(config.host, config.port):
        asyncio.run(generate(args.out, config.base_url, args.per_set, args.seed))
        return
    with LocalLLMServer(config):
        asyncio.run(generate(args.out, config.base_url, args.per_set, args.seed))


if __name__ == "__main__":
    main()
