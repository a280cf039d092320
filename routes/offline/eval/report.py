"""Aggregate outcomes per mode into the JSON report (written whole, or partial while a run goes on, and read back
to resume one) and draw the PNG chart."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from routes.offline.eval.metrics import mean, median, percentile
from routes.offline.eval.runner import Outcome


def quality(outcomes: list[Outcome]) -> dict[str, Any]:
    answerable = [o for o in outcomes if o.answerable]
    return {
        "questions": len(outcomes),
        "f1": mean([o.f1 for o in answerable]),
        "answer_contained": mean([o.answer_contained for o in answerable]),
        "supporting_passage_recall": mean([o.passage_recall for o in outcomes]),
        **cost(outcomes),
    }


def cost(outcomes: list[Outcome]) -> dict[str, Any]:
    """LLM calls (mean and median: the target is on the median) and latency, for any slice of a run."""
    calls = [float(o.llm_calls) for o in outcomes]
    latencies = [o.latency_ms for o in outcomes]
    return {
        "llm_calls_per_query": mean(calls),
        "llm_calls_median": median(calls),
        "latency_ms_p50": percentile(latencies, 50),
        "latency_ms_p95": percentile(latencies, 95),
    }


def calls_by_step(outcomes: list[Outcome]) -> dict[str, float]:
    """Mean LLM calls per question spent on each step (grading, hop planning, ...): where the cost goes."""
    steps = sorted({step for o in outcomes for step in o.calls_by_step})
    return {step: mean([float(o.calls_by_step.get(step, 0)) for o in outcomes]) for step in steps}


def by_route(outcomes: list[Outcome]) -> dict[str, Any]:
    """Per route the router chose (``classified_route``, before any escalation): how much traffic each
    route took and what it cost, so a routing change shows as traffic that stopped paying for a route."""
    routes: dict[str, Any] = {}
    for route in sorted({o.classified_route for o in outcomes}):
        chosen = [o for o in outcomes if o.classified_route == route]
        routes[route] = {
            **quality(chosen),
            "escalated": sum(o.escalated for o in chosen),
            "abstention_rate": mean([float(o.abstained) for o in chosen]),
        }
    return routes


def by_first_retrieval(outcomes: list[Outcome]) -> dict[str, Any]:
    """Split by what plain RAG's top-k held, the same split in every mode, so modes compare per slice.

    "missed" = at least one gold passage absent from the first top-k (retrieval failed);
    "complete" = every gold passage present (retrieval worked).
    """
    judged = [o for o in outcomes if o.first_retrieval_recall is not None]
    return {
        "missed": quality([o for o in judged if (o.first_retrieval_recall or 0.0) < 1.0]),
        "complete": quality([o for o in judged if o.first_retrieval_recall == 1.0]),
    }


def summarise(outcomes: list[Outcome]) -> dict[str, Any]:
    answerable = [o for o in outcomes if o.answerable]
    unanswerable = [o for o in outcomes if not o.answerable]
    judged = [
        o for o in outcomes if o.first_verdict in ("correct", "incorrect") and o.gold_in_first_retrieval is not None
    ]
    agree = [(o.first_verdict == "correct") == o.gold_in_first_retrieval for o in judged]
    return {
        "questions": len(outcomes),
        "exact_match": mean([o.exact_match for o in answerable]),
        "f1": mean([o.f1 for o in answerable]),
        "answer_contained": mean([o.answer_contained for o in answerable]),
        "supporting_passage_recall": mean([o.passage_recall for o in outcomes]),
        "false_abstention_rate": mean([float(o.abstained) for o in answerable]),
        "abstention_rate": mean([float(o.abstained) for o in outcomes]),
        "unanswerable_abstention_rate": mean([float(o.abstained) for o in unanswerable]),
        "evaluator_agreement": {
            "n": len(judged),
            "rate": mean([float(a) for a in agree]),
            "note": "first Correct/Incorrect verdict vs whether a gold passage was in the first top-k",
        },
        "by_first_retrieval": by_first_retrieval(outcomes),
        "routes": dict(Counter(o.route for o in outcomes)),
        "by_route": by_route(outcomes),
        "escalations": sum(o.escalated for o in outcomes),
        "stop_reasons": dict(Counter(o.stop_reason or "-" for o in outcomes)),
        **cost(outcomes),
        "calls_by_step": calls_by_step(outcomes),
        "input_tokens_per_query": mean([float(o.input_tokens) for o in outcomes]),
        "output_tokens_per_query": mean([float(o.output_tokens) for o in outcomes]),
    }


def draw_chart(summaries: dict[str, dict[str, Any]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(summaries)
    quality = ["f1", "answer_contained", "supporting_passage_recall", "unanswerable_abstention_rate"]
    cost = ["llm_calls_per_query", "latency_ms_p50"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    width = 0.8 / max(1, len(modes))
    for i, mode in enumerate(modes):
        values = [summaries[mode].get(metric, float("nan")) for metric in quality]
        axes[0].bar([x + i * width for x in range(len(quality))], values, width, label=mode)
    axes[0].set_xticks([x + width * (len(modes) - 1) / 2 for x in range(len(quality))])
    axes[0].set_xticklabels(["F1", "answer in reply", "passage recall", "abstain (unans.)"], fontsize=8)
    axes[0].set_ylim(0, 1)
    axes[0].set_title("quality")
    axes[0].legend()
    for ax, metric, label in zip(axes[1:], cost, ["LLM calls / query", "p50 latency (ms)"], strict=True):
        ax.bar(modes, [summaries[m][metric] for m in modes], color=["C0", "C1", "C2"][: len(modes)])
        ax.set_title(label)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarised(report: dict[str, Any], per_mode: dict[str, list[Outcome]]) -> None:
    report["summary"] = {mode: summarise(outcomes) for mode, outcomes in per_mode.items()}
    report["outcomes"] = {mode: [o.as_dict() for o in outcomes] for mode, outcomes in per_mode.items()}


def write(report: dict[str, Any], out: Path, *, partial: bool = False) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{report['dataset']}-{'-'.join(report['summary'])}"
    path = out / f"{stem}-{'partial' if partial else 'report'}.json"
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    return path


def resumed(report: Path) -> dict[tuple[str, str], Outcome]:
    """The outcomes a run cut short wrote (its partial report), by mode and question: a resumed run asks only the
    rest, and again those the gateway failed (an HTTP error, most often a timeout on a loaded machine). The questions
    are picked again from the same arguments, so they come in the same order."""
    outcomes = json.loads(report.read_text())["outcomes"]
    return {
        (mode, o["question_id"]): Outcome(**o)
        for mode, listed in outcomes.items()
        for o in listed
        if not str(o.get("stop_reason") or "").startswith("http_")
    }
