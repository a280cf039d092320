"""Derive ``routes/data/dataset_examples.jsonl`` and ``dataset_passages.jsonl`` from the shared dev sets.

single_hop: every SQuAD v2 question (answerable or not: both need one passage) and a sample of
the NQ-style open-domain questions of FlashRAG's SKR set, which broadens the topics beyond one
Wikipedia article. multi_hop: every HotpotQA question. The passages are the SQuAD paragraphs and
the HotpotQA corpus: the knowledge-aware router trains on each question probed against its own set's
passages as a tenant, so they ship beside the questions. Run it again after the shared data changes:

    python -m routes.offline.training.build_examples --data-dir ../shared/data/dev
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SKR_SAMPLE = 300
OUT = Path(__file__).parents[2] / "data" / "dataset_examples.jsonl"
PASSAGES_OUT = Path(__file__).parents[2] / "data" / "dataset_passages.jsonl"


def build(data_dir: Path) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    squad = json.loads((data_dir / "squad_v2_dev_normans.json").read_text(encoding="utf-8"))
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                rows.append(
                    {
                        "text": qa["question"].strip(),
                        "route": "single_hop",
                        "lang": "en",
                        "source": "squad_v2",
                    }
                )
    skr = json.loads((data_dir / "skr_training.json").read_text(encoding="utf-8"))
    for item in random.Random(7).sample(skr, min(SKR_SAMPLE, len(skr))):
        rows.append({"text": item["question"].strip(), "route": "single_hop", "lang": "en", "source": "skr_nq"})
    hotpot = json.loads((data_dir / "hotpotqa_train.json").read_text(encoding="utf-8"))
    for item in hotpot:
        rows.append({"text": item["question"].strip(), "route": "multi_hop", "lang": "en", "source": "hotpotqa"})
    seen: set[str] = set()
    unique = []
    for row in rows:
        if row["text"] and row["text"] not in seen:
            seen.add(row["text"])
            unique.append(row)
    return unique


def build_passages(data_dir: Path) -> list[dict[str, str]]:
    from routes.offline.eval.datasets import load_hotpotqa, load_squad_v2  # deferred: a dev script's dependency

    rows: list[dict[str, str]] = []
    for source, dataset in (
        ("squad_v2", load_squad_v2(data_dir / "squad_v2_dev_normans.json")),
        ("hotpotqa", load_hotpotqa(data_dir / "hotpotqa_train.json", data_dir / "hotpotqa_train_corpus.json")),
    ):
        rows.extend(
            {"source": source, "id": d["id"], "title": d["title"], "text": d["text"]} for d in dataset.documents
        )
    return rows


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} rows to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    args = parser.parse_args()
    _write(OUT, build(args.data_dir))
    _write(PASSAGES_OUT, build_passages(args.data_dir))


if __name__ == "__main__":
    main()
