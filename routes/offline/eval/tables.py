"""``python -m routes.offline.eval.tables REPORT.json [REPORT.json ...]``: the reports' summaries as Markdown tables.

Modes run in separate processes (one now, one after a change) are compared only on the same questions:
reports whose question ids differ are refused, so a table never sets two samples side by side. With a ``plain``
mode among them, every other mode is also set against it question by question (:func:`paired`).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The request each harness mode sends (routes.offline.eval.runner.MODE_REQUEST), as the issue notes name them.
MODE_LABEL = {"plain": "`single_hop` (plain RAG)", "corrective": "`multi_hop`", "adaptive": "`auto`"}

Row = dict[str, Any]
FIRST_RETRIEVAL = "By what plain RAG's first retrieval held (complete: every supporting passage in its top-k)"


def fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}" if value == value else "-"  # NaN: nothing to average
    return str(value)


def seconds(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if ms == ms else "-"


def calls(row: Row) -> str:
    return f"{fmt(row['llm_calls_per_query'], 2)} / {fmt(row['llm_calls_median'], 1)}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def overall(summaries: dict[str, Row]) -> str:
    header = ["mode", "n", "answer in reply", "F1", "supporting recall", "abstained", "LLM calls mean / median"]
    rows = [
        [
            MODE_LABEL.get(mode, mode),
            fmt(s["questions"]),
            fmt(s["answer_contained"]),
            fmt(s["f1"]),
            fmt(s["supporting_passage_recall"]),
            fmt(s["abstention_rate"]),
            calls(s),
            seconds(s["latency_ms_p50"]),
            seconds(s["latency_ms_p95"]),
        ]
        for mode, s in summaries.items()
    ]
    return table([*header, "p50", "p95"], rows)


def sliced(summaries: dict[str, Row], part: str, label: str, rows_of: Callable[[Row], dict[str, Row]]) -> str:
    header = [
        "mode",
        label,
        "n",
        "answer in reply",
        "F1",
        "supporting recall",
        "LLM calls mean / median",
        "p50",
        "p95",
    ]
    rows = [
        [
            MODE_LABEL.get(mode, mode),
            name,
            fmt(row["questions"]),
            fmt(row["answer_contained"]),
            fmt(row["f1"]),
            fmt(row["supporting_passage_recall"]),
            calls(row),
            seconds(row["latency_ms_p50"]),
            seconds(row["latency_ms_p95"]),
        ]
        for mode, s in summaries.items()
        for name, row in rows_of(s).items()
        if row["questions"]
    ]
    return f"{part}\n\n" + table(header, rows)


def steps(summaries: dict[str, Row]) -> str:
    names = sorted({step for s in summaries.values() for step in s.get("calls_by_step", {})})
    rows = [
        [MODE_LABEL.get(mode, mode), *(fmt(s["calls_by_step"].get(n, 0.0), 2) for n in names)]
        for mode, s in summaries.items()
    ]
    return "LLM calls per question, by step (mean)\n\n" + table(["mode", *names], rows)


def render(summaries: dict[str, Row]) -> str:
    return "\n\n".join(
        [
            overall(summaries),
            sliced(summaries, FIRST_RETRIEVAL, "first retrieval", lambda s: s["by_first_retrieval"]),
            sliced(summaries, "By the route the router chose", "route", lambda s: s["by_route"]),
            steps(summaries),
        ]
    )


def paired(outcomes: dict[str, list[Row]], baseline: str = "plain") -> str:
    """Every other mode against ``baseline`` on the questions both have answered (a run cut short may hold one
    mode's answer to its last question and not another's): answer in reply and F1 of each, the mode's LLM calls,
    the questions it gets right that the baseline gets wrong and the reverse, and how often it returned plain RAG's
    draft (``keep_plain_answer``) or took it again (``reuse_plain_answer``)."""
    if baseline not in outcomes:
        return ""
    base = {o["question_id"]: o for o in outcomes[baseline]}
    header = [
        "mode",
        "n",
        f"{baseline}: in reply / F1",
        "mode: in reply / F1",
        "LLM calls mean / median",
        "questions better / worse",
        "kept plain's draft / took it again",
    ]
    rows = []
    for mode, answered in outcomes.items():
        pairs = [(base[o["question_id"]], o) for o in answered if mode != baseline and o["question_id"] in base]
        if not pairs:
            continue
        before, after = [b for b, _ in pairs], [a for _, a in pairs]
        calls_made = sorted(a["llm_calls"] for a in after)
        rows.append(
            [
                MODE_LABEL.get(mode, mode),
                str(len(pairs)),
                f"{fmt(_mean(before, 'answer_contained'))} / {fmt(_mean(before, 'f1'))}",
                f"{fmt(_mean(after, 'answer_contained'))} / {fmt(_mean(after, 'f1'))}",
                f"{fmt(_mean(after, 'llm_calls'), 2)} / {fmt(float(statistics.median(calls_made)), 1)}",
                f"{sum(a['answer_contained'] > b['answer_contained'] for b, a in pairs)} / "
                f"{sum(a['answer_contained'] < b['answer_contained'] for b, a in pairs)}",
                f"{_with_step(after, 'keep_plain_answer')} / {_with_step(after, 'reuse_plain_answer')}",
            ]
        )
    return f"Against {baseline}, on the same questions\n\n" + table(header, rows)


def _mean(outcomes: list[Row], key: str) -> float:
    return sum(float(o[key]) for o in outcomes) / len(outcomes)


def _with_step(outcomes: list[Row], step: str) -> int:
    return sum(any(s.startswith(step) for s in o["steps"]) for o in outcomes)


def merged(reports: list[Row]) -> dict[str, Row]:
    """Every report's summaries, in order; refused unless all ran on the same questions."""
    ids = [tuple(o["question_id"] for o in next(iter(r["outcomes"].values()))) for r in reports]
    if len(set(ids)) > 1:
        raise ValueError("the reports ran on different questions: compare runs with the same --seed and --limit")
    summaries: dict[str, Row] = {}
    for report in reports:
        if repeated := summaries.keys() & report["summary"].keys():
            raise ValueError(f"two reports hold the mode {sorted(repeated)[0]!r}: compare such runs table by table")
        summaries |= report["summary"]
    return summaries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", type=Path, nargs="+")
    args = parser.parse_args()
    reports = [json.loads(path.read_text(encoding="utf-8")) for path in args.reports]
    print(render(merged(reports)))
    outcomes = {mode: answered for report in reports for mode, answered in report["outcomes"].items()}
    if against := paired(outcomes):
        print(f"\n{against}")


if __name__ == "__main__":
    main()
