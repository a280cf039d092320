"""The router's labelled examples and their fixed train / held-back split.

Two files, both kept in the project: ``written_examples.jsonl`` (hand-written, English and
Japanese, the only source of ``direct``) and ``dataset_examples.jsonl`` (questions drawn from the
shared SQuAD v2, NQ-style and HotpotQA dev sets by :mod:`routes.offline.training.build_examples`). The split is
decided by a hash of the text so it never moves when examples are added.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from typing import Literal, cast

from routes.types import ROUTES, Route

EXAMPLE_FILES = ("written_examples.jsonl", "dataset_examples.jsonl")
HELD_BACK_PERCENT = 20

Split = Literal["train", "test"]


@dataclass(frozen=True, slots=True)
class Example:
    text: str
    route: Route
    lang: str
    source: str

    @property
    def split(self) -> Split:
        bucket = int(hashlib.sha256(self.text.encode()).hexdigest()[:8], 16) % 100
        return "test" if bucket < HELD_BACK_PERCENT else "train"


def load_examples() -> list[Example]:
    examples: list[Example] = []
    data = resources.files("routes") / "data"
    for name in EXAMPLE_FILES:
        with (data / name).open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                row = json.loads(line)
                if row["route"] not in ROUTES:
                    raise ValueError(f"{name}: unknown route {row['route']!r}")
                examples.append(
                    Example(
                        text=row["text"],
                        route=cast(Route, row["route"]),
                        lang=row.get("lang", "en"),
                        source=row.get("source", name.removesuffix(".jsonl")),
                    )
                )
    return examples


def examples_digest(examples: list[Example]) -> str:
    digest = hashlib.sha256()
    for example in examples:
        digest.update(f"{example.route}\t{example.text}\n".encode())
    return digest.hexdigest()[:16]
