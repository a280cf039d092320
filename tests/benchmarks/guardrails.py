"""The guardrails measured: the PII matrix, false positives on the dev questions, injection detection on a
held-back labelled set, and what each check adds to a request.

    python -m tests.benchmarks.guardrails [--names-model ja_ginza] [--data-dir /work/shared/data/dev]

1. PII matrix, English and Japanese, each category x each policy (mask, block, off): the gateway runs in
   this process against a recording OpenAI-compatible upstream (``tests/fakes/openai_server.py``, real
   HTTP, answering with what it was told); printed per cell: the status, what the upstream received,
   what the user got back, and whether the raw value appears in any log record or span attribute
   (content tracing on, every logger at DEBUG).
2. False positives: the share of the shared dev questions (HotpotQA, SQuAD, JSQuAD) in which the PII
   detector finds anything, and the injection detector flags anything (questions, and passages too,
   since passages are screened).
3. Injection detection on deepset/prompt-injections: the patterns were written, and the prompt classifier
   is trained, on its train split (``gateway/guardrails/data``); its test split (``tests/data/prompt_injections``)
   is held back, and its figures are the measure.
4. Latency each check adds, p50 and p95 per request (a question; a retrieval of 4 passages).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gateway.guardrails.injection import InjectionDetector, train_classifier
from gateway.guardrails.pii import NameFinder, PiiDetector, SpacyNames
from tests.benchmarks.figures import percentile

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "gateway" / "guardrails" / "data" / "prompt_injections_train.jsonl"
HELD_BACK = ROOT / "tests" / "data" / "prompt_injections" / "prompt_injections_test.jsonl"

MATRIX = [
    ("EN", "EMAIL", "Draft a short reply to taro.yamada@example.co.jp saying thanks", "taro.yamada@example.co.jp"),
    ("JA", "EMAIL", "taro.yamada@example.co.jpに送るお礼のメールを書いて", "taro.yamada@example.co.jp"),
    ("EN", "PHONE", "Remind me to call +81 90-1234-5678 tomorrow", "+81 90-1234-5678"),
    ("JA", "PHONE", "03-1234-5678に明日電話するとリマインドして", "03-1234-5678"),
    ("EN", "CREDIT_CARD", "Is 4111 1111 1111 1111 a test card number?", "4111 1111 1111 1111"),
    ("JA", "CREDIT_CARD", "カード番号5555555555554444は使えますか", "5555555555554444"),
    ("EN", "MY_NUMBER", "Store my My Number 123456789018 for the form", "123456789018"),
    ("JA", "MY_NUMBER", "マイナンバー123456789018を書類に記入して", "123456789018"),
    ("EN", "IP_ADDRESS", "Why can't I ping 192.168.10.24 from home?", "192.168.10.24"),
    ("JA", "IP_ADDRESS", "2001:db8::8a2e:370:7334に接続できない理由は？", "2001:db8::8a2e:370:7334"),
    ("EN", "PERSON", "Write a birthday card for Emily Watson from accounting", "Emily Watson"),
    ("JA", "PERSON", "山田花子さんへの誕生日カードを書いて", "山田花子"),
]


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.getMessage()} {record.__dict__}")


def short(text: str, width: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


async def pii_matrix(names_model: str) -> None:
    # The whole app only here: parts 2-4 need the guardrails alone (and run where only they are installed).
    from litestar.testing import AsyncTestClient
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from gateway.app import create_app
    from gateway.overrides import ProviderOverrides
    from gateway.providers.embeddings import USEEmbeddings
    from gateway.settings import Settings
    from tests.fakes.openai_server import Echo, FakeOpenAI

    embeddings = USEEmbeddings()
    print("\n## 1. PII matrix (recording upstream; content tracing on; logs at DEBUG)")
    print("| lang | category | policy | status | upstream received | user got | value in logs | value in spans |")
    print("|---|---|---|---|---|---|---|---|")
    handler = Captured()
    root = logging.getLogger()
    root.addHandler(handler)
    previous = root.level
    root.setLevel(logging.DEBUG)
    try:
        with tempfile.TemporaryDirectory() as tmp, FakeOpenAI(Echo("")) as upstream:
            for policy in ("mask", "block", "off"):
                settings = Settings().replace(
                    vector_store={"path": Path(tmp) / f"lance-{policy}"},
                    router_artefact={"cache_dir": Path(tmp) / "router"},
                    llm_endpoint={"base_url": upstream.base_url, "max_retries": 0},
                    redis={"url": None},
                    cache={"enabled": False},
                    curation={"enabled": False},
                    guard={"pii_policy": policy, "pii_names_model": names_model},
                    observability={"trace_include_content": True},
                )
                exporter = InMemorySpanExporter()
                app = create_app(settings, ProviderOverrides(embeddings=embeddings, span_exporter=exporter))
                async with AsyncTestClient(app) as client:
                    for lang, category, question, value in MATRIX:
                        if category == "PERSON" and not names_model:
                            continue
                        upstream.seen.clear()
                        exporter.clear()
                        handler.lines.clear()
                        response = await client.post("/v1/query", json={"query": question, "route": "direct"})
                        body = response.json()
                        got = body.get("answer") if response.status_code == 200 else body.get("detail", "")
                        received = upstream.seen[-1].messages[-1] if upstream.seen else "(no call)"
                        attributes = [dict(s.attributes or {}) for s in exporter.get_finished_spans()]
                        in_logs = any(value in line for line in handler.lines)
                        in_spans = value in json.dumps(attributes, ensure_ascii=False)
                        print(
                            f"| {lang} | {category} | {policy} | {response.status_code} | {short(received)} | "
                            f"{short(str(got))} | {'yes' if in_logs else 'no'} | {'yes' if in_spans else 'no'} |"
                        )
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def dev_sets(data_dir: Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    questions = {"hotpotqa": [r["question"] for r in json.loads((data_dir / "hotpotqa_train.json").read_text())]}
    corpus = json.loads((data_dir / "hotpotqa_train_corpus.json").read_text())
    passages = {"hotpotqa": ["".join(sentences) for sentences in corpus.values()]}
    for name, file in (("squad", "squad_v2_dev_normans.json"), ("jsquad", "jsquad_valid_sample.json")):
        questions[name], passages[name] = [], []
        for article in json.loads((data_dir / file).read_text())["data"]:
            for paragraph in article["paragraphs"]:
                passages[name].append(paragraph["context"])
                questions[name].extend(q["question"] for q in paragraph["qas"])
    return questions, passages


def rate(flagged: int, total: int) -> str:
    return f"{flagged}/{total} = {100 * flagged / total:.1f}%"


def false_positives(data_dir: Path, names: NameFinder | None, injection: InjectionDetector) -> None:
    questions, passages = dev_sets(data_dir)
    pii, with_names = PiiDetector(), PiiDetector(names) if names else None
    print("\n## 2. False positives on the shared dev data (every hit there is a false positive)")
    print("Questions are screened as prompts (patterns + classifier), passages as passages (patterns).")
    print("| set | texts | PII (patterns) | PII (patterns + names) | injection |")
    print("|---|---|---|---|---|")
    for kind, sets in (("questions", questions), ("passages", passages)):
        for name, texts in sets.items():
            found = sum(1 for t in texts if pii.find(t))
            named = rate(sum(1 for t in texts if with_names.find(t)), len(texts)) if with_names else "-"
            flagged = sum(1 for t in texts if injection.check(t, prompt=kind == "questions").flagged)
            print(
                f"| {name} {kind} | {len(texts)} | {rate(found, len(texts))} | {named} | {rate(flagged, len(texts))} |"
            )
            examples = [f"{t[f.start : f.end]!r} ({f.category})" for t in texts for f in pii.find(t)][:3]
            if examples:
                print(f"|  | PII examples: {', '.join(examples)} | | | |")


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def injection_detection(injection: InjectionDetector) -> None:
    patterns = InjectionDetector()
    print("\n## 3. Injection detection on deepset/prompt-injections (Apache-2.0; EN and DE), as prompts")
    print("| split | detector | injections caught (recall) | benign flagged (FPR) | precision |")
    print("|---|---|---|---|---|")
    splits = (("train (tuned on, in-sample)", read_rows(TRAIN)), ("test (held back)", read_rows(HELD_BACK)))
    for split, part in splits:
        for label, detector in (("patterns", patterns), ("patterns + classifier", injection)):
            positives = [r for r in part if r["label"] == 1]
            negatives = [r for r in part if r["label"] == 0]
            caught = sum(1 for r in positives if detector.check(r["text"], prompt=True).flagged)
            false = sum(1 for r in negatives if detector.check(r["text"], prompt=True).flagged)
            precision = caught / (caught + false) if caught + false else 0.0
            print(
                f"| {split} | {label} | {rate(caught, len(positives))} | {rate(false, len(negatives))} | "
                f"{precision:.3f} |"
            )


def timed(check: Callable[[str], object], texts: Iterable[str], group: int = 1) -> tuple[float, float]:
    items = list(texts)
    samples: list[float] = []
    for start in range(0, len(items) - group + 1, group):
        began = time.perf_counter()
        for text in items[start : start + group]:
            check(text)
        samples.append((time.perf_counter() - began) * 1000)
    return percentile(samples, 50), percentile(samples, 95)


def latency(data_dir: Path, names: NameFinder | None, injection: InjectionDetector) -> None:
    questions, passages = dev_sets(data_dir)
    every_question = [q for texts in questions.values() for q in texts]
    every_passage = [p for texts in passages.values() for p in texts]
    pii = PiiDetector()
    rows = [
        ("PII patterns, one question", timed(pii.find, every_question)),
        (
            "injection, one question (patterns + classifier)",
            timed(lambda t: injection.check(t, prompt=True), every_question),
        ),
        ("injection, one retrieval (4 passages, patterns)", timed(injection.check, every_passage, group=4)),
    ]
    if names is not None:
        rows.append(("PII patterns + names model, one question", timed(PiiDetector(names).find, every_question)))
    print("\n## 4. Latency each check adds (ms per request, this machine)")
    print("| check | p50 ms | p95 ms |")
    print("|---|---|---|")
    for label, (p50, p95) in rows:
        print(f"| {label} | {p50:.3f} | {p95:.3f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=Path("/work/shared/data/dev"))
    parser.add_argument("--names-model", default="", help="a spaCy name model package, e.g. ja_ginza")
    parser.add_argument("--skip-matrix", action="store_true")
    args = parser.parse_args(argv)
    names: NameFinder | None = None
    if args.names_model:
        began = time.perf_counter()
        names = SpacyNames(args.names_model)
        print(f"names model {args.names_model} loaded in {time.perf_counter() - began:.2f} s")
    if not args.skip_matrix:
        asyncio.run(pii_matrix(args.names_model))
    began = time.perf_counter()
    injection = InjectionDetector(train_classifier())
    print(f"\ninjection classifier trained in {time.perf_counter() - began:.2f} s")
    false_positives(args.data_dir, names, injection)
    injection_detection(injection)
    latency(args.data_dir, names, injection)


if __name__ == "__main__":
    main()
