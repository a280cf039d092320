"""Derive the calibration set the service fits its scorers and thresholds on (:mod:`routes.calibration`).

    python -m routes.offline.training.build_calibration_set --data-dir ../shared/data/dev

The fit reads the judge's shared rounds (:func:`routes.offline.training.fit_judge.shared_rounds`): each HotpotQA
question with its 10 paragraphs (the 2 supporting ones answer), each answerable SQuAD v2 and JSQuAD question with its
paragraph and the same 3 other paragraphs of the article the offline fit drew. The shared data is not in the image, so
the rounds ship in ``routes/data/calibration_rounds.jsonl`` with their pages referenced by id: HotpotQA's and SQuAD's
are in ``dataset_passages.jsonl`` already (the router's tenants), JSQuAD's go to ``calibration_passages.jsonl`` (126
paragraphs). A page whose text differs from the shipped passage of its id would be fitted on another text than the
offline fit read: the build fails instead. Run it again after the shared data changes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from routes.calibration import DATA, PASSAGES_FILE, ROUNDS_FILE, page_key
from routes.corpus import PASSAGES_FILE as DATASET_PASSAGES
from routes.offline.training.fit_judge import shared_rounds


def _slug(title: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in title).lower()


def _article_ids(path: Path) -> dict[tuple[str, str], str]:
    """(title, paragraph text) -> the paragraph's id as ``routes.offline.eval.datasets.load_squad_v2`` names it."""
    ids: dict[tuple[str, str], str] = {}
    for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
        for index, paragraph in enumerate(article["paragraphs"]):
            ids.setdefault((article["title"], paragraph["context"]), f"{_slug(article['title'])}-p{index}")
    return ids


def build(data_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The rounds (pages by id) and the passages not shipped already."""
    shipped = {
        page_key(row["title"], row["text"]): row["id"]
        for row in map(json.loads, (DATA / DATASET_PASSAGES).read_text(encoding="utf-8").splitlines())
    }
    squad_ids = _article_ids(data_dir / "squad_v2_dev_normans.json")
    jsquad_ids = _article_ids(data_dir / "jsquad_valid_sample.json")
    extra: dict[str, dict[str, str]] = {}
    rounds: list[dict[str, Any]] = []
    for r in shared_rounds(data_dir):
        pages: list[list[Any]] = []
        for page in r.pages:
            title, text, label = page.title, page.text, page.label
            if r.source == "jsquad":
                page_id = f"jsquad:{jsquad_ids[(title, text)]}"
                extra.setdefault(page_id, {"id": page_id, "title": title, "text": text})
            else:
                found = shipped.get(page_key(title, text))
                if found is None:
                    raise SystemExit(f"{r.source} page {title!r} is not in {DATASET_PASSAGES} with this text")
                if r.source == "squad" and found != squad_ids[(title, text)]:
                    raise SystemExit(f"SQuAD page {found} is shipped under another id than {squad_ids[(title, text)]}")
                page_id = found
            pages.append([page_id, label])
        rounds.append({"source": r.source, "kind": r.kind, "question": r.question, "pages": pages})
    return rounds, list(extra.values())


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} rows to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    args = parser.parse_args()
    rounds, passages = build(args.data_dir)
    _write(DATA / ROUNDS_FILE, rounds)
    _write(DATA / PASSAGES_FILE, passages)


if __name__ == "__main__":
    main()
